// Launcher, process groups and gradient averaging; see ddp.h.
#include "examples/ddp.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cstdlib>
#include <set>

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#ifdef BATCHD_WITH_NCCL
#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>
#endif

#include "base/address.h"

namespace batchd {
namespace examples {

namespace {

int EnvInt(const char* name, int def) {
  const char* v = getenv(name);
  return v == nullptr ? def : atoi(v);
}

// A flag's value must be a number above (or, with `or_equal`, at least)
// `min`; the message names the value and the bound (CLI11's own range
// checks print DBL_MAX in full).
CLI::Validator NumberAbove(double min, bool or_equal) {
  const std::string bound =
      std::string(or_equal ? ">= " : "> ") + CLI::detail::to_string(min);
  return CLI::Validator(
      [min, or_equal, bound](std::string& in) -> std::string {
        double v = 0;
        const bool number = CLI::detail::lexical_cast(in, v);
        if (number && (or_equal ? v >= min : v > min)) return "";
        return "wants a number " + bound + ", not '" + in + "'";
      },
      bound);
}

}  // namespace

void AddCountFlag(CLI::App& app, const std::string& name, int64_t* value,
                  const std::string& help) {
  app.add_option("--" + name, *value, help)
      ->check(NumberAbove(0, false))
      ->capture_default_str();
}

void AddTrainerFlags(CLI::App& app, TrainerFlags* f) {
  app.add_option("--server", f->server,
                 "batchd address (default $BATCHD_SERVER, else " +
                     std::string(kDefaultServerAddress) + ")");
  app.add_option("--data", f->data,
                 "data set under the server's --data-root")
      ->capture_default_str();
  app.add_option("--stream", f->stream, "stream name (default <model>-<data>)");
  AddCountFlag(app, "global-batch-size", &f->global_batch,
               "examples per step over all ranks");
  AddCountFlag(app, "steps", &f->steps, "steps to train");
  app.add_option("--lr", f->lr, "learning rate")
      ->check(NumberAbove(0, false))
      ->capture_default_str();
  app.add_option("--seed", f->seed, "the stream's seed")
      ->check(NumberAbove(0, true))
      ->capture_default_str();
  AddCountFlag(app, "nproc", &f->nproc,
               "local ranks to start when RANK is unset");
  AddCountFlag(app, "log-every", &f->log_every, "steps between progress lines");
  app.add_flag_callback(
      "--no-check", [f] { f->check = false; },
      "skip the per-step disjointness check");
}

int ParseTrainerFlags(CLI::App& app, int argc, char** argv,
                      const std::string& stream_prefix, TrainerFlags* f) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);  // help on stdout, 0
  } catch (const CLI::ParseError& e) {
    fprintf(stderr, "%s: %s (see --help)\n", app.get_name().c_str(),
            e.what());
    return 2;
  }
  if (f->stream.empty()) f->stream = stream_prefix + "-" + f->data;
  for (char& c : f->stream) {
    if (!isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_') {
      c = '-';
    }
  }
  return -1;
}

bool DistEnvFromEnvironment(DistEnv* env) {
  if (getenv("RANK") == nullptr) return false;
  env->rank = EnvInt("RANK", 0);
  env->world_size = EnvInt("WORLD_SIZE", 1);
  env->local_rank = EnvInt("LOCAL_RANK", env->rank);
  if (const char* a = getenv("MASTER_ADDR")) env->master_addr = a;
  env->master_port = EnvInt("MASTER_PORT", 29500);
  return true;
}

int LaunchLocalRanks(int argc, char** argv, int nproc) {
  if (getenv("RANK") != nullptr) return -1;
  const std::string port = std::to_string(FreeLoopbackPort());
  std::vector<pid_t> pids;
  for (int r = 0; r < nproc; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      const std::string rank = std::to_string(r), world = std::to_string(nproc);
      setenv("RANK", rank.c_str(), 1);
      setenv("LOCAL_RANK", rank.c_str(), 1);
      setenv("WORLD_SIZE", world.c_str(), 1);
      setenv("LOCAL_WORLD_SIZE", world.c_str(), 1);
      setenv("MASTER_ADDR", "127.0.0.1", 1);
      setenv("MASTER_PORT", port.c_str(), 1);
      execv("/proc/self/exe", argv);
      _exit(127);
    }
    pids.push_back(pid);
  }
  int code = 0;
  for (size_t done = 0; done < pids.size(); ++done) {
    int status = 0;
    const pid_t pid = wait(&status);
    const int rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    if (rc != 0 && code == 0) {
      code = rc;
      for (pid_t p : pids) {
        if (p != pid) kill(p, SIGTERM);  // a lost rank would hang the others
      }
    }
  }
  return code;
}

c10::intrusive_ptr<ProcessGroup> MakeProcessGroup(
    const DistEnv& env, const torch::Device& device) {
  c10d::TCPStoreOptions so;
  so.port = uint16_t(env.master_port);
  so.isServer = env.rank == 0;
  so.numWorkers = env.world_size;
  auto store = c10::make_intrusive<c10d::TCPStore>(env.master_addr, so);
#ifdef BATCHD_WITH_NCCL
  if (device.is_cuda()) {
    return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, env.rank,
                                                       env.world_size);
  }
#endif
  auto opts = c10d::ProcessGroupGloo::Options::create();
  opts->devices.push_back(
      c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  return c10::make_intrusive<c10d::ProcessGroupGloo>(store, env.rank,
                                                     env.world_size, opts);
}

int StartTrainer(CLI::App& app, int argc, char** argv,
                 const std::string& stream_prefix, TrainerFlags* flags,
                 Rank* rank) {
  const int done = ParseTrainerFlags(app, argc, argv, stream_prefix, flags);
  if (done >= 0) return done;
  const int launched = LaunchLocalRanks(argc, argv, int(flags->nproc));
  if (launched >= 0) return launched;
  *rank = JoinJob();
  return -1;
}

LoaderOptions TrainLoaderOptions(const TrainerFlags& flags,
                                 const std::string& workload) {
  LoaderOptions o;
  o.server = flags.server;
  o.stream = flags.stream;
  o.workload = workload;
  o.data = flags.data;
  o.split = "train";
  o.global_batch_size = uint64_t(flags.global_batch);
  o.seed = uint64_t(flags.seed);
  return o;
}

Rank JoinJob() {
  Rank r;
  DistEnvFromEnvironment(&r.env);
  torch::set_num_threads(1);
  torch::manual_seed(0);
  if (torch::cuda::is_available()) {
    r.device = torch::Device(torch::kCUDA, r.env.local_rank);
  }
  r.pg = MakeProcessGroup(r.env, r.device);
  return r;
}

void BroadcastParameters(ProcessGroup& pg, torch::nn::Module& model) {
  torch::NoGradGuard no_grad;
  for (torch::Tensor p : model.parameters()) {
    std::vector<at::Tensor> t{p.data()};
    pg.broadcast(t)->wait();
  }
  for (torch::Tensor b : model.buffers()) {
    std::vector<at::Tensor> t{b.data()};
    pg.broadcast(t)->wait();
  }
}

void AverageGradients(ProcessGroup& pg, torch::nn::Module& model,
                      int world_size) {
  // One flat buffer, one allreduce, as DDP's buckets do.
  std::vector<torch::Tensor> grads;
  for (torch::Tensor p : model.parameters()) {
    if (p.grad().defined()) grads.push_back(p.grad());
  }
  if (grads.empty()) return;
  std::vector<at::Tensor> flat{torch::cat(
      [&] {
        std::vector<torch::Tensor> v;
        for (auto& g : grads) v.push_back(g.reshape(-1));
        return v;
      }())};
  pg.allreduce(flat)->wait();
  flat[0].div_(world_size);
  int64_t offset = 0;
  for (auto& g : grads) {
    g.copy_(flat[0].narrow(0, offset, g.numel()).view_as(g));
    offset += g.numel();
  }
}

bool DisjointAndComplete(ProcessGroup& pg, const torch::Tensor& keys,
                         int64_t first_position, int64_t per_rank,
                         int world_size, std::string* why) {
  torch::Tensor mine = keys.to(torch::kCPU, torch::kInt64).contiguous();
  std::vector<std::vector<at::Tensor>> out(1);
  for (int r = 0; r < world_size; ++r) out[0].push_back(torch::empty_like(mine));
  std::vector<at::Tensor> in{mine};
  pg.allgather(out, in)->wait();
  std::vector<std::vector<at::Tensor>> pos_out(1);
  for (int r = 0; r < world_size; ++r) {
    pos_out[0].push_back(torch::empty({1}, torch::kInt64));
  }
  std::vector<at::Tensor> pos_in{torch::full({1}, first_position, torch::kInt64)};
  pg.allgather(pos_out, pos_in)->wait();
  std::set<std::vector<int64_t>> seen;
  const int64_t width = mine.dim() == 1 ? 1 : mine.size(1);
  for (int r = 0; r < world_size; ++r) {
    const int64_t pos = pos_out[0][r].item<int64_t>();
    const int64_t want = pos_out[0][0].item<int64_t>() + r * per_rank;
    if (pos != want) {
      *why = "rank " + std::to_string(r) + " starts at position " +
             std::to_string(pos) + ", not " + std::to_string(want);
      return false;
    }
    torch::Tensor k = out[0][r].reshape({-1, width});
    for (int64_t i = 0; i < k.size(0); ++i) {
      std::vector<int64_t> key(k[i].data_ptr<int64_t>(),
                               k[i].data_ptr<int64_t>() + width);
      if (!seen.insert(key).second) {
        *why = "an example appears twice in one global batch";
        return false;
      }
    }
  }
  return true;
}

double AllReduceSum(ProcessGroup& pg, double value) {
  std::vector<at::Tensor> t{torch::full({1}, value, torch::kFloat64)};
  pg.allreduce(t)->wait();
  return t[0].item<double>();
}

TrainingProgress::TrainingProgress(int64_t steps, int64_t log_every)
    : steps_(steps), log_every_(log_every) {}

absl::StatusOr<Batch> TrainingProgress::Next(Loader& loader) {
  const Clock::time_point t = Clock::now();
  absl::StatusOr<Batch> batch = loader.Next();
  wait_ += std::chrono::duration<double>(Clock::now() - t).count();
  return batch;
}

bool TrainingProgress::AddLoss(int64_t step, double loss,
                               double* window_mean) {
  window_loss_ += loss;
  ++window_steps_;
  if ((step + 1) % log_every_ != 0 && step + 1 != steps_) return false;
  last_loss_ = window_loss_ / double(window_steps_);
  if (std::isnan(first_loss_)) first_loss_ = last_loss_;
  window_loss_ = 0;
  window_steps_ = 0;
  *window_mean = last_loss_;
  return true;
}

double TrainingProgress::seconds() const {
  return std::chrono::duration<double>(Clock::now() - start_).count();
}

}  // namespace examples
}  // namespace batchd
