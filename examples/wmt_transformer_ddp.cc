// A DDP job that trains a small encoder-decoder Transformer on batchd's
// packed wmt stream through the C++ client and the libtorch adapter only.
// Packed rows hold several examples. AlgoPerf's model keeps attention within
// a segment; libtorch 1.13's C++ MultiheadAttention takes only 2-D masks,
// so this small model masks padding and the future but not other segments.
//
//   wmt_transformer_ddp --nproc 2 --server unix:///run/batchd/batchd.sock
//       --data wmt --vocab-size 2000 --global-batch-size 8 --steps 20
//
// Without RANK in the environment it starts --nproc local ranks itself.
// Every step it all_gathers the ranks' cursors and first rows and checks
// that the slices are disjoint and tile the global batch (--check).
#include <chrono>
#include <cmath>
#include <cstdio>
#include <string>

#include "batchd/torch.h"
#include "examples/ddp.h"

namespace {

struct Seq2SeqImpl : torch::nn::Module {
  Seq2SeqImpl(int64_t vocab, int64_t d_model, int64_t heads, int64_t layers,
              int64_t length)
      : heads(heads) {
    embed = register_module("embed", torch::nn::Embedding(vocab, d_model));
    pos = register_module("pos", torch::nn::Embedding(length, d_model));
    transformer = register_module(
        "transformer",
        torch::nn::Transformer(torch::nn::TransformerOptions(d_model, heads)
                                   .num_encoder_layers(layers)
                                   .num_decoder_layers(layers)
                                   .dim_feedforward(4 * d_model)
                                   .dropout(0.0)));
    out = register_module("out", torch::nn::Linear(d_model, vocab));
  }

  torch::Tensor forward(const torch::Tensor& src, const torch::Tensor& src_pos,
                        const torch::Tensor& tgt_in, const torch::Tensor& tgt_pos) {
    const int64_t L = tgt_in.size(1);
    torch::Tensor causal =
        torch::zeros({L, L}).masked_fill(torch::ones({L, L}, torch::kBool).triu(1), -1e9);
    torch::Tensor s = (embed(src) + pos(src_pos)).transpose(0, 1);
    torch::Tensor t = (embed(tgt_in) + pos(tgt_pos)).transpose(0, 1);
    // Padding is masked as keys; a row of padding only (the row's tail)
    // would then attend to nothing, so its first key stays open.
    torch::Tensor src_pad = src.eq(0), tgt_pad = tgt_in.eq(0);
    src_pad.select(1, 0).fill_(false);
    tgt_pad.select(1, 0).fill_(false);
    torch::Tensor y = transformer->forward(s, t, {}, causal, {}, src_pad, tgt_pad,
                                           src_pad);
    return out(y.transpose(0, 1));
  }

  int64_t heads;
  torch::nn::Embedding embed{nullptr}, pos{nullptr};
  torch::nn::Transformer transformer{nullptr};
  torch::nn::Linear out{nullptr};
};
TORCH_MODULE(Seq2Seq);

// The trainer's own flags besides the common ones (ddp.h).
struct TransformerFlags {
  int64_t vocab = 32000, d_model = 64, layers = 2, heads = 4;
};

// The teacher-forced cross entropy of one batch, over its target tokens
// (padding weighs 0); adds their count to *tokens.
torch::Tensor TrainLoss(Seq2Seq& model, int64_t vocab, const torch::Tensor& src,
                        const torch::Tensor& src_pos, const torch::Tensor& tgt,
                        const torch::Tensor& tgt_pos, double* tokens) {
  // Teacher forcing: the decoder sees the previous token of its segment.
  torch::Tensor tgt_in = torch::roll(tgt, 1, 1);
  tgt_in.masked_fill_(tgt_pos.eq(0), 0);
  torch::Tensor logits = model->forward(src, src_pos, tgt_in, tgt_pos);
  torch::Tensor weights = tgt.gt(0).to(torch::kFloat32);
  *tokens += weights.sum().item<double>();
  return (torch::nn::functional::cross_entropy(
              logits.reshape({-1, vocab}), tgt.reshape(-1),
              torch::nn::functional::CrossEntropyFuncOptions().reduction(
                  torch::kNone)) *
          weights.reshape(-1))
             .sum() /
         weights.sum().clamp_min(1);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("wmt_transformer_ddp: DDP Transformer over batchd's wmt stream.",
               "wmt_transformer_ddp");
  batchd::examples::TrainerFlags a;
  a.data = "wmt";
  a.global_batch = 8;
  a.lr = 1e-3;
  batchd::examples::AddTrainerFlags(app, &a);
  TransformerFlags m;
  batchd::examples::AddCountFlag(app, "vocab-size", &m.vocab,
                                 "the SentencePiece model's");
  batchd::examples::AddCountFlag(app, "d-model", &m.d_model,
                                 "model width");
  batchd::examples::AddCountFlag(app, "layers", &m.layers,
                                 "encoder and decoder layers");
  batchd::examples::AddCountFlag(app, "heads", &m.heads,
                                 "attention heads");
  batchd::examples::Rank rank;
  if (int done = batchd::examples::StartTrainer(app, argc, argv, "transformer", &a,
                                                &rank);
      done >= 0) {
    return done;
  }
  const batchd::examples::DistEnv& env = rank.env;
  const torch::Device device = rank.device;
  auto& pg = rank.pg;

  batchd::LoaderOptions o =
      batchd::examples::TrainLoaderOptions(a, "wmt");
  o.options = {{"dtype", "int64"}};
  o.timeout_seconds = 300;  // the first batch waits for the length pass
  auto loader = batchd::Loader::Open(o);
  if (!loader.ok()) {
    fprintf(stderr, "rank %d: %s\n", env.rank, loader.status().ToString().c_str());
    return 1;
  }
  Seq2Seq model(m.vocab, m.d_model, m.heads, m.layers, 256);
  model->to(device);
  batchd::examples::BroadcastParameters(*pg, *model);
  torch::optim::Adam opt(model->parameters(), torch::optim::AdamOptions(a.lr));

  batchd::examples::TrainingProgress progress(a.steps, a.log_every);
  double tokens = 0;
  const int64_t per_rank = a.global_batch / env.world_size;
  for (int64_t step = 0; step < a.steps; ++step) {
    absl::StatusOr<batchd::Batch> batch = progress.Next(**loader);
    if (!batch.ok()) {
      fprintf(stderr, "rank %d: %s\n", env.rank, batch.status().ToString().c_str());
      return 1;
    }
    const int64_t position = int64_t(batch->position());
    torch::Tensor cursor = torch::tensor(
        {int64_t(batch->cursor_epoch()), int64_t(batch->cursor_window()),
         int64_t(batch->cursor_row())}, torch::kInt64).view({1, 3});
    auto t = batchd::ToTorch(std::move(*batch));
    if (a.check) {
      std::string why;
      if (!batchd::examples::DisjointAndComplete(*pg, cursor, position, per_rank,
                                                 env.world_size, &why)) {
        fprintf(stderr, "rank %d step %lld: %s\n", env.rank, (long long)step, why.c_str());
        return 3;
      }
    }
    auto on = [&](const char* k) { return t.at(k).to(device).clone(); };
    torch::Tensor src = on("inputs"), tgt = on("targets");
    torch::Tensor src_pos = on("inputs_position"), tgt_pos = on("targets_position");
    t.clear();  // the slot goes back to the server now
    torch::Tensor loss =
        TrainLoss(model, m.vocab, src, src_pos, tgt, tgt_pos, &tokens);
    opt.zero_grad();
    loss.backward();
    batchd::examples::AverageGradients(*pg, *model, env.world_size);
    opt.step();
    const double loss_value =
        batchd::examples::AllReduceSum(*pg, loss.item<double>()) / env.world_size;
    if (!std::isfinite(loss_value)) {
      fprintf(stderr, "rank %d: loss is %f at step %lld\n", env.rank, loss_value, (long long)step);
      return 4;
    }
    double window_loss;
    if (progress.AddLoss(step, loss_value, &window_loss) && env.rank == 0) {
      const double el = progress.seconds();
      printf("transformer step %4lld  loss %.4f  %.2f steps/s  %.0f target tokens/s (rank 0)  data wait %.1f%%\n",
             (long long)(step + 1), window_loss, (step + 1) / el, tokens / el,
             100 * progress.wait_seconds() / el);
      fflush(stdout);
    }
  }
  const double el = progress.seconds();
  const double first_loss = progress.first_loss(), last_loss = progress.last_loss();
  const double all_tokens = batchd::examples::AllReduceSum(*pg, tokens);
  const double wait_share =
      batchd::examples::AllReduceSum(*pg, progress.wait_seconds() / el) / env.world_size;
  if (env.rank == 0) {
    printf("transformer done: %lld steps on %d ranks, %.0f target tokens/s, mean loss of the first %lld steps %.4f, of the last %.4f, "
           "data wait %.1f%% of step time, every step disjoint and complete%s\n",
           (long long)a.steps, env.world_size, all_tokens / el, (long long)a.log_every, first_loss, last_loss,
           100 * wait_share, a.check ? "" : " (not checked)");
  }
  return 0;
}
