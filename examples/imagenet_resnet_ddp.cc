// A DDP job that trains ResNet-50's shape (bottleneck stages of 3, 4, 6, 3
// blocks; widths scaled by --width so that it fits a CPU demo) on batchd's
// imagenet stream through the C++ client and the libtorch adapter only.
//
//   imagenet_resnet_ddp --nproc 2 --server unix:///run/batchd/batchd.sock
//       --data imagenet --global-batch-size 16 --steps 20
//
// Without RANK in the environment it starts --nproc local ranks itself;
// under torchrun or Slurm it is one rank. Every step it all_gathers the
// ranks' example ids and checks that they are disjoint and tile the global
// batch (--check, on by default).
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>

#include "batchd/torch.h"
#include "examples/ddp.h"

namespace {

struct BottleneckImpl : torch::nn::Module {
  BottleneckImpl(int64_t in, int64_t mid, int64_t stride) {
    const int64_t out = mid * 4;
    conv1 = register_module("conv1", torch::nn::Conv2d(
        torch::nn::Conv2dOptions(in, mid, 1).bias(false)));
    bn1 = register_module("bn1", torch::nn::BatchNorm2d(mid));
    conv2 = register_module("conv2", torch::nn::Conv2d(
        torch::nn::Conv2dOptions(mid, mid, 3).stride(stride).padding(1).bias(false)));
    bn2 = register_module("bn2", torch::nn::BatchNorm2d(mid));
    conv3 = register_module("conv3", torch::nn::Conv2d(
        torch::nn::Conv2dOptions(mid, out, 1).bias(false)));
    bn3 = register_module("bn3", torch::nn::BatchNorm2d(out));
    if (stride != 1 || in != out) {
      down = register_module("down", torch::nn::Sequential(
          torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, 1).stride(stride).bias(false)),
          torch::nn::BatchNorm2d(out)));
    }
  }
  torch::Tensor forward(torch::Tensor x) {
    torch::Tensor y = torch::relu(bn1(conv1(x)));
    y = torch::relu(bn2(conv2(y)));
    y = bn3(conv3(y));
    return torch::relu(y + (down ? down->forward(x) : x));
  }
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr}, conv3{nullptr};
  torch::nn::BatchNorm2d bn1{nullptr}, bn2{nullptr}, bn3{nullptr};
  torch::nn::Sequential down{nullptr};
};
TORCH_MODULE(Bottleneck);

struct ResNetImpl : torch::nn::Module {
  ResNetImpl(int64_t width, int64_t classes) {
    stem = register_module("stem", torch::nn::Sequential(
        torch::nn::Conv2d(torch::nn::Conv2dOptions(3, width, 7).stride(2).padding(3).bias(false)),
        torch::nn::BatchNorm2d(width), torch::nn::ReLU(),
        torch::nn::MaxPool2d(torch::nn::MaxPool2dOptions(3).stride(2).padding(1))));
    const int blocks[4] = {3, 4, 6, 3};
    int64_t in = width;
    for (int stage = 0; stage < 4; ++stage) {
      const int64_t mid = width << stage;
      for (int b = 0; b < blocks[stage]; ++b) {
        body->push_back(Bottleneck(in, mid, b == 0 && stage > 0 ? 2 : 1));
        in = mid * 4;
      }
    }
    register_module("body", body);
    fc = register_module("fc", torch::nn::Linear(in, classes));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = body->forward(stem->forward(x));
    return fc(torch::adaptive_avg_pool2d(x, {1, 1}).flatten(1));
  }
  torch::nn::Sequential stem{nullptr}, body;
  torch::nn::Linear fc{nullptr};
};
TORCH_MODULE(ResNet);

// The trainer's own flags besides the common ones (ddp.h).
struct ResNetFlags {
  int64_t width = 8, classes = 1000, image_size = 224;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app(
      "imagenet_resnet_ddp: trains a ResNet-50-shaped model with DDP over "
      "batchd's imagenet stream.",
      "imagenet_resnet_ddp");
  batchd::examples::TrainerFlags a;
  a.data = "imagenet";
  a.global_batch = 16;
  a.lr = 0.1;
  batchd::examples::AddTrainerFlags(app, &a);
  ResNetFlags m;
  batchd::examples::AddCountFlag(app, "width", &m.width,
                                 "stem width; ResNet-50 is 64");
  batchd::examples::AddCountFlag(app, "classes", &m.classes,
                                 "classes of the output layer");
  batchd::examples::AddCountFlag(app, "image-size", &m.image_size,
                                 "side of the square crops");
  batchd::examples::Rank rank;
  if (int done = batchd::examples::StartTrainer(app, argc, argv, "resnet", &a,
                                                &rank);
      done >= 0) {
    return done;
  }
  const batchd::examples::DistEnv& env = rank.env;
  const torch::Device device = rank.device;
  auto& pg = rank.pg;

  batchd::LoaderOptions o =
      batchd::examples::TrainLoaderOptions(a, "imagenet");
  o.options = {{"layout", "nchw"}, {"image_size", std::to_string(m.image_size)},
               {"with_ids", "1"}};
  o.timeout_seconds = 120;
  auto loader = batchd::Loader::Open(o);
  if (!loader.ok()) {
    fprintf(stderr, "rank %d: %s\n", env.rank, loader.status().ToString().c_str());
    return 1;
  }
  ResNet model(m.width, m.classes);
  model->to(device);
  batchd::examples::BroadcastParameters(*pg, *model);
  torch::optim::SGD opt(model->parameters(),
                        torch::optim::SGDOptions(a.lr).momentum(0.9));

  batchd::examples::TrainingProgress progress(a.steps, a.log_every);
  const int64_t per_rank = a.global_batch / env.world_size;
  for (int64_t step = 0; step < a.steps; ++step) {
    absl::StatusOr<batchd::Batch> batch = progress.Next(**loader);
    if (!batch.ok()) {
      fprintf(stderr, "rank %d: %s\n", env.rank, batch.status().ToString().c_str());
      return 1;
    }
    const int64_t position = int64_t(batch->position());
    auto t = batchd::ToTorch(std::move(*batch));
    if (a.check) {
      std::string why;
      if (!batchd::examples::DisjointAndComplete(*pg, t.at("ids"), position,
                                                 per_rank, env.world_size, &why)) {
        fprintf(stderr, "rank %d step %lld: %s\n", env.rank, (long long)step, why.c_str());
        return 3;
      }
    }
    torch::Tensor x = batchd::NormalizeImages(t.at("inputs"), /*nchw=*/true, device);
    torch::Tensor y = t.at("targets").to(device) % m.classes;
    t.clear();  // the slot goes back to the server now
    torch::Tensor loss = torch::nn::functional::cross_entropy(model->forward(x), y);
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
      printf("resnet step %4lld  loss %.4f  %.2f steps/s  %.1f images/s  data wait %.1f%%\n",
             (long long)(step + 1), window_loss, (step + 1) / el,
             (step + 1) * a.global_batch / el, 100 * progress.wait_seconds() / el);
      fflush(stdout);
    }
  }
  const double el = progress.seconds();
  const double wait_share =
      batchd::examples::AllReduceSum(*pg, progress.wait_seconds() / el) / env.world_size;
  const double first_loss = progress.first_loss(), last_loss = progress.last_loss();
  if (env.rank == 0) {
    printf("resnet done: %lld steps on %d ranks, %.1f images/s, mean loss of the first %lld steps %.4f, of the last %.4f, "
           "data wait %.1f%% of step time, every step disjoint and complete%s\n",
           (long long)a.steps, env.world_size, a.steps * a.global_batch / el,
           (long long)a.log_every, first_loss, last_loss, 100 * wait_share, a.check ? "" : " (not checked)");
  }
  return 0;
}
