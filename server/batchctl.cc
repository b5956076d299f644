// batchctl: the operator's command line for a batchd daemon.
//
//   batchctl status     streams, ranks and the server's threads and memory
//   batchctl shutdown   asks the daemon to close every stream and exit
//   batchctl bench      W consumer processes with the real batchd::Loader
//
// `bench` forks its consumers before this process creates any gRPC channel:
// gRPC's threads and locks do not survive fork().
#include <grpcpp/grpcpp.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "batchd/loader.h"
#include "batchd/v1/batchd.grpc.pb.h"
#include "client/process.h"

namespace batchd {
namespace {

// Exit codes, as every --help states them.
constexpr int kExitOk = 0;
constexpr int kExitServer = 1;
constexpr int kExitUsage = 2;

constexpr char kDefaultServer[] = "unix:///run/batchd/batchd.sock";

constexpr char kMainHelp[] = R"(batchctl - operate a batchd daemon

Usage: batchctl <command> [flags]

Commands:
  status     print the streams, ranks and the server's threads and memory
  shutdown   close every stream and stop the daemon
  bench      measure delivery with W consumer processes (batchd::Loader)
  help CMD   print the help of CMD (also: batchctl CMD --help)

Every command takes --server ADDR: unix:///path/to/socket or
tcp://host:port. Default: $BATCHD_SERVER, else
unix:///run/batchd/batchd.sock.

Exit codes: 0 ok, 1 the server failed or could not be reached,
2 usage error.
)";

constexpr char kStatusHelp[] =
    R"(Usage: batchctl status [--server ADDR] [--json] [--timeout S]

Prints the daemon's pid, version, uptime, threads (all, and workers),
resident memory (without the rings) and ring bytes, then for every stream
its spec, examples/s and bytes/s (averages since the stream opened), and a
row per rank: attached, client pid, produced and consumed step, ring fill
of slots, examples and bytes delivered, seconds the client waited for data
and the server waited for the client (ring full), re-attaches.

  --server ADDR  unix:///path or tcp://host:port
                 (default: $BATCHD_SERVER, else unix:///run/batchd/batchd.sock)
  --json         print the GetStatus response as one JSON object
                 (proto field names; 64-bit numbers as numbers)
  --timeout S    deadline of the call in seconds (default 10)

Exit codes: 0 ok, 1 the server failed or could not be reached,
2 usage error.
)";

constexpr char kShutdownHelp[] =
    R"(Usage: batchctl shutdown [--server ADDR] [--timeout S]

Asks the daemon to close every stream (clients see "stream closed"),
unlink every shared-memory segment and exit; then waits up to S seconds
until it no longer answers and, when its process is visible from here,
until that process has exited.

  --server ADDR  unix:///path or tcp://host:port
                 (default: $BATCHD_SERVER, else unix:///run/batchd/batchd.sock)
  --timeout S    seconds to wait for the call and for the exit (default 10)

Exit codes: 0 the daemon stopped, 1 the server failed, could not be
reached or did not stop in time, 2 usage error.
)";

constexpr char kBenchHelp[] =
    R"(Usage: batchctl bench [--server ADDR] --global-batch-size G [flags]

Opens a stream and forks W consumer processes, one per rank, each with the
real batchd::Loader. Each rank first takes --warmup-steps batches (this
maps every slot of its ring), waits until all ranks are ready, takes the
batches its ring filled with meanwhile, then times --steps batches and
touches each tensor while it holds it (one byte per 4 KiB page, or every
word with --touch all). Evaluation splits (one pass) skip both by default
and time the pass from its start, up to --steps batches. The stream is
closed at the end: do not name a stream a job uses.

Stream spec (names mirror StreamSpec):
  --workload NAME           default: synthetic
  --data PATH               relative to the server's --data-root (default "")
  --split NAME              default: train
  --global-batch-size G     required; divisible by --world-size
  --world-size W            consumer processes (default 1)
  --seed S                  default 0
  --start-step S            default 0
  --slots K                 ring slots per rank (default 0: server default)
  --option KEY=VALUE        workload option, repeatable; synthetic knows
                            examples and payload_bytes
  --stream NAME             default: bench-<pid of batchctl>

Run:
  --steps S                 timed batches per rank (default 100)
  --warmup-steps N          untimed batches per rank first (default:
                            twice the ring's slots; 0 for eval splits)
  --touch page|all          what a rank reads of each tensor (default page)
  --timeout S               longest wait for one batch or for OpenStream,
                            seconds (default 60)
  --server ADDR             unix:///path or tcp://host:port
                            (default: $BATCHD_SERVER, else
                            unix:///run/batchd/batchd.sock)
  --json                    print one JSON object

Figures: examples/s, bytes/s and batches/s over the span from the first
rank's start to the last rank's end (batches/s counts global batches,
rank_batches/s each rank's slice); wait fraction is the mean over ranks of
the time Next() waited divided by that rank's wall time; server threads and
RSS (without the rings) are the largest GetStatus reported during the run.

Exit codes: 0 ok, 1 the server failed, could not be reached or a rank
failed, 2 usage error.
)";

// ---------------------------------------------------------------- flags

// A subcommand's arguments: "--name value", "--name=value" and bare
// "--switch"; repeated flags keep every value.
class Args {
 public:
  // `switches` take no value.
  static absl::StatusOr<Args> Parse(int argc, char** argv,
                                    const std::vector<std::string>& known,
                                    const std::vector<std::string>& switches) {
    Args a;
    for (int i = 0; i < argc; ++i) {
      std::string arg = argv[i];
      if (arg.rfind("--", 0) != 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("unexpected argument '", arg, "'"));
      }
      std::string value;
      bool has_value = false;
      if (const size_t eq = arg.find('='); eq != std::string::npos) {
        value = arg.substr(eq + 1);
        arg = arg.substr(0, eq);
        has_value = true;
      }
      const std::string name = arg.substr(2);
      const bool is_switch =
          std::find(switches.begin(), switches.end(), name) != switches.end();
      if (!is_switch &&
          std::find(known.begin(), known.end(), name) == known.end()) {
        return absl::InvalidArgumentError(
            absl::StrCat("unknown flag '", arg, "'"));
      }
      if (is_switch) {
        if (has_value) {
          return absl::InvalidArgumentError(
              absl::StrCat(arg, " takes no value"));
        }
        value = "true";
      } else if (!has_value) {
        if (i + 1 >= argc) {
          return absl::InvalidArgumentError(
              absl::StrCat(arg, " needs a value"));
        }
        value = argv[++i];
      }
      a.values_[name].push_back(value);
    }
    return a;
  }

  bool Has(const std::string& name) const { return values_.count(name) > 0; }
  std::string Get(const std::string& name, const std::string& def) const {
    auto it = values_.find(name);
    return it == values_.end() ? def : it->second.back();
  }
  std::vector<std::string> All(const std::string& name) const {
    auto it = values_.find(name);
    return it == values_.end() ? std::vector<std::string>() : it->second;
  }
  template <typename T>
  absl::Status GetNumber(const std::string& name, T* out) const {
    if (!Has(name)) return absl::OkStatus();
    const std::string v = Get(name, "");
    bool ok;
    if constexpr (std::is_floating_point_v<T>) {
      ok = absl::SimpleAtod(v, out);
    } else {
      ok = !v.empty() && v[0] != '-' && absl::SimpleAtoi(v, out);
    }
    if (!ok) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", name, " wants a number, not '", v, "'"));
    }
    return absl::OkStatus();
  }

 private:
  std::map<std::string, std::vector<std::string>> values_;
};

// The --server value, or $BATCHD_SERVER, or the default socket.
std::string ServerAddress(const Args& args) {
  if (args.Has("server")) return args.Get("server", "");
  const char* env = getenv("BATCHD_SERVER");
  return env != nullptr && *env != '\0' ? env : kDefaultServer;
}

// "unix:///path" → "unix:/path", "tcp://host:port" → "host:port"; gRPC's own
// "unix:path" and "host:port" forms pass through.
absl::StatusOr<std::string> GrpcTarget(const std::string& address) {
  if (address.rfind("unix://", 0) == 0) {
    const std::string path = address.substr(7);
    if (path.empty() || path[0] != '/') {
      return absl::InvalidArgumentError(
          absl::StrCat("server address '", address,
                       "': unix:// wants an absolute path, e.g. "
                       "unix:///run/batchd/batchd.sock"));
    }
    return "unix:" + path;
  }
  if (address.rfind("tcp://", 0) == 0) {
    const std::string hostport = address.substr(6);
    const size_t colon = hostport.rfind(':');
    uint32_t port;
    if (colon == std::string::npos || colon == 0 ||
        !absl::SimpleAtoi(hostport.substr(colon + 1), &port) || port == 0 ||
        port > 65535) {
      return absl::InvalidArgumentError(
          absl::StrCat("server address '", address,
                       "': tcp:// wants host:port, e.g. tcp://127.0.0.1:7070"));
    }
    return hostport;
  }
  if (address.rfind("unix:", 0) == 0) return address;
  if (address.find("://") == std::string::npos &&
      address.find(':') != std::string::npos) {
    return address;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("server address '", address,
                   "': use unix:///path/to/socket or tcp://host:port"));
}

// ---------------------------------------------------------------- output

std::string HumanBytes(double n) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (std::fabs(n) >= 1024 && u < 4) {
    n /= 1024;
    ++u;
  }
  return u == 0 ? absl::StrFormat("%.0f B", n)
                : absl::StrFormat("%.1f %s", n, units[u]);
}

// A compact JSON writer: commas and escapes are its business, the layout
// its caller's.
class JsonWriter {
 public:
  void BeginObject() { Open('{'); }
  void EndObject() { Close('}'); }
  void BeginArray() { Open('['); }
  void EndArray() { Close(']'); }
  void Key(const std::string& k) {
    Comma();
    AppendString(k);
    out_ += ':';
    after_key_ = true;
  }
  void String(const std::string& s) {
    Comma();
    AppendString(s);
  }
  void Number(double v) {
    Comma();
    // JSON has no NaN or infinity.
    out_ += std::isfinite(v) ? absl::StrFormat("%.10g", v) : "null";
  }
  void Number(uint64_t v) {
    Comma();
    absl::StrAppend(&out_, v);
  }
  void Number(int64_t v) {
    Comma();
    absl::StrAppend(&out_, v);
  }
  void Bool(bool v) {
    Comma();
    out_ += v ? "true" : "false";
  }
  void Null() {
    Comma();
    out_ += "null";
  }
  const std::string& str() const { return out_; }

 private:
  void Open(char c) {
    Comma();
    out_ += c;
    first_ = true;
  }
  void Close(char c) {
    out_ += c;
    first_ = false;
  }
  void Comma() {
    if (after_key_) {
      after_key_ = false;
      return;
    }
    if (!first_) out_ += ',';
    first_ = false;
  }
  void AppendString(const std::string& s) {
    out_ += '"';
    for (unsigned char c : s) {
      switch (c) {
        case '"':
          out_ += "\\\"";
          break;
        case '\\':
          out_ += "\\\\";
          break;
        case '\n':
          out_ += "\\n";
          break;
        case '\r':
          out_ += "\\r";
          break;
        case '\t':
          out_ += "\\t";
          break;
        default:
          if (c < 0x20) {
            out_ += absl::StrFormat("\\u%04x", c);
          } else {
            out_ += char(c);
          }
      }
    }
    out_ += '"';
  }

  std::string out_;
  bool first_ = true;
  bool after_key_ = false;
};

namespace pb = google::protobuf;

void WriteProto(const pb::Message& m, JsonWriter* w);

// One value of field `f` (element `index` when repeated) of `m`.
void WriteProtoValue(const pb::Message& m, const pb::FieldDescriptor* f,
                     int index, JsonWriter* w) {
  const pb::Reflection* r = m.GetReflection();
  const bool rep = f->is_repeated();
  switch (f->cpp_type()) {
    case pb::FieldDescriptor::CPPTYPE_INT32:
      w->Number(
          int64_t(rep ? r->GetRepeatedInt32(m, f, index) : r->GetInt32(m, f)));
      break;
    case pb::FieldDescriptor::CPPTYPE_INT64:
      w->Number(
          int64_t(rep ? r->GetRepeatedInt64(m, f, index) : r->GetInt64(m, f)));
      break;
    case pb::FieldDescriptor::CPPTYPE_UINT32:
      w->Number(uint64_t(rep ? r->GetRepeatedUInt32(m, f, index)
                             : r->GetUInt32(m, f)));
      break;
    case pb::FieldDescriptor::CPPTYPE_UINT64:
      w->Number(uint64_t(rep ? r->GetRepeatedUInt64(m, f, index)
                             : r->GetUInt64(m, f)));
      break;
    case pb::FieldDescriptor::CPPTYPE_DOUBLE:
      w->Number(rep ? r->GetRepeatedDouble(m, f, index) : r->GetDouble(m, f));
      break;
    case pb::FieldDescriptor::CPPTYPE_FLOAT:
      w->Number(
          double(rep ? r->GetRepeatedFloat(m, f, index) : r->GetFloat(m, f)));
      break;
    case pb::FieldDescriptor::CPPTYPE_BOOL:
      w->Bool(rep ? r->GetRepeatedBool(m, f, index) : r->GetBool(m, f));
      break;
    case pb::FieldDescriptor::CPPTYPE_ENUM:
      w->String(rep ? r->GetRepeatedEnum(m, f, index)->name()
                    : r->GetEnum(m, f)->name());
      break;
    case pb::FieldDescriptor::CPPTYPE_STRING:
      w->String(rep ? r->GetRepeatedString(m, f, index) : r->GetString(m, f));
      break;
    case pb::FieldDescriptor::CPPTYPE_MESSAGE:
      WriteProto(rep ? r->GetRepeatedMessage(m, f, index) : r->GetMessage(m, f),
                 w);
      break;
  }
}

// Every field of `m`, set or not, under its proto name; maps become objects
// with sorted keys. Unlike protobuf's JSON mapping, 64-bit integers are
// numbers, so that jq and Python read them as such.
void WriteProto(const pb::Message& m, JsonWriter* w) {
  const pb::Descriptor* d = m.GetDescriptor();
  const pb::Reflection* r = m.GetReflection();
  w->BeginObject();
  for (int i = 0; i < d->field_count(); ++i) {
    const pb::FieldDescriptor* f = d->field(i);
    w->Key(f->name());
    if (f->is_map()) {
      const pb::FieldDescriptor* key = f->message_type()->map_key();
      const pb::FieldDescriptor* value = f->message_type()->map_value();
      std::vector<std::pair<std::string, const pb::Message*>> entries;
      for (int j = 0; j < r->FieldSize(m, f); ++j) {
        const pb::Message& e = r->GetRepeatedMessage(m, f, j);
        const pb::Reflection* er = e.GetReflection();
        std::string k;
        if (key->cpp_type() == pb::FieldDescriptor::CPPTYPE_STRING) {
          k = er->GetString(e, key);
        } else {
          JsonWriter kw;
          WriteProtoValue(e, key, 0, &kw);
          k = kw.str();
        }
        entries.emplace_back(std::move(k), &e);
      }
      std::sort(entries.begin(), entries.end(),
                [](const auto& a, const auto& b) { return a.first < b.first; });
      w->BeginObject();
      for (const auto& [k, e] : entries) {
        w->Key(k);
        WriteProtoValue(*e, value, 0, w);
      }
      w->EndObject();
    } else if (f->is_repeated()) {
      w->BeginArray();
      for (int j = 0; j < r->FieldSize(m, f); ++j) {
        WriteProtoValue(m, f, j, w);
      }
      w->EndArray();
    } else {
      WriteProtoValue(m, f, 0, w);
    }
  }
  w->EndObject();
}

// Aligned text columns; numbers (cells flagged right) align right.
class Table {
 public:
  explicit Table(std::vector<std::string> header) {
    rows_.push_back(std::move(header));
  }
  void Add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }
  // Columns whose cells are right-aligned.
  void AlignRight(std::vector<size_t> columns) { right_ = std::move(columns); }
  std::string Render(const std::string& indent) const {
    std::vector<size_t> width;
    for (const auto& row : rows_) {
      if (width.size() < row.size()) width.resize(row.size(), 0);
      for (size_t c = 0; c < row.size(); ++c) {
        width[c] = std::max(width[c], row[c].size());
      }
    }
    std::string out;
    for (const auto& row : rows_) {
      std::string line = indent;
      for (size_t c = 0; c < row.size(); ++c) {
        const bool right =
            std::find(right_.begin(), right_.end(), c) != right_.end();
        const std::string pad(width[c] - row[c].size(), ' ');
        if (c > 0) line += "  ";
        line += right ? pad + row[c] : row[c] + pad;
      }
      while (!line.empty() && line.back() == ' ') line.pop_back();
      out += line + "\n";
    }
    return out;
  }

 private:
  std::vector<std::vector<std::string>> rows_;
  std::vector<size_t> right_;
};

// ---------------------------------------------------------------- gRPC

// The daemon's control plane, with each failure turned into an absl::Status
// that names the call and the address.
class Control {
 public:
  // `address` as the user wrote it; `target` in gRPC's terms.
  Control(std::string address, const std::string& target,
          double timeout_seconds)
      : address_(std::move(address)),
        timeout_seconds_(timeout_seconds),
        stub_(v1::Batchd::NewStub(
            grpc::CreateChannel(target, grpc::InsecureChannelCredentials()))) {}

  absl::StatusOr<v1::GetStatusResponse> GetStatus() {
    v1::GetStatusResponse resp;
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    return Check("GetStatus",
                 stub_->GetStatus(&ctx, v1::GetStatusRequest(), &resp), resp);
  }

  absl::Status Shutdown() {
    v1::ShutdownResponse resp;
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    return Check("Shutdown",
                 stub_->Shutdown(&ctx, v1::ShutdownRequest(), &resp), resp)
        .status();
  }

  absl::Status CloseStream(const std::string& name) {
    v1::CloseStreamRequest req;
    req.set_name(name);
    v1::CloseStreamResponse resp;
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    return Check(absl::StrCat("CloseStream ", name),
                 stub_->CloseStream(&ctx, req, &resp), resp)
        .status();
  }

  // True while the daemon answers a GetStatus within `seconds`.
  bool Answers(double seconds) {
    v1::GetStatusResponse resp;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() +
                     std::chrono::milliseconds(int64_t(seconds * 1000)));
    return stub_->GetStatus(&ctx, v1::GetStatusRequest(), &resp).ok();
  }

 private:
  void SetDeadline(grpc::ClientContext* ctx) const {
    ctx->set_deadline(
        std::chrono::system_clock::now() +
        std::chrono::milliseconds(int64_t(timeout_seconds_ * 1000)));
  }

  template <typename T>
  absl::StatusOr<T> Check(const std::string& call, const grpc::Status& s,
                          const T& resp) const {
    if (s.ok()) return resp;
    const bool unreachable =
        s.error_code() == grpc::StatusCode::UNAVAILABLE ||
        s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
    return absl::Status(
        static_cast<absl::StatusCode>(s.error_code()),
        absl::StrCat(call, " at ", address_, ": ", s.error_message(),
                     unreachable ? " (is batchd running there?)" : ""));
  }

  const std::string address_;
  const double timeout_seconds_;
  std::unique_ptr<v1::Batchd::Stub> stub_;
};

int UsageError(const std::string& command, const std::string& message) {
  fprintf(stderr, "batchctl%s%s: %s\n(see batchctl %s--help)\n",
          command.empty() ? "" : " ", command.c_str(), message.c_str(),
          command.empty() ? "" : (command + " ").c_str());
  return kExitUsage;
}

int ServerError(const std::string& command, const absl::Status& s) {
  fprintf(stderr, "batchctl %s: %s\n", command.c_str(),
          std::string(s.message()).c_str());
  return kExitServer;
}

bool WantsHelp(int argc, char** argv) {
  for (int i = 0; i < argc; ++i) {
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      return true;
    }
  }
  return false;
}

// Parses the flags every command shares; `command` names it in errors.
struct Common {
  Args args;
  std::string address;
  std::string target;
  double timeout = 10;
};

absl::StatusOr<Common> ParseCommon(int argc, char** argv,
                                   std::vector<std::string> known,
                                   std::vector<std::string> switches,
                                   double default_timeout) {
  known.push_back("server");
  known.push_back("timeout");
  absl::StatusOr<Args> args = Args::Parse(argc, argv, known, switches);
  if (!args.ok()) return args.status();
  Common c;
  c.args = std::move(*args);
  c.address = ServerAddress(c.args);
  absl::StatusOr<std::string> target = GrpcTarget(c.address);
  if (!target.ok()) return target.status();
  c.target = *target;
  c.timeout = default_timeout;
  if (absl::Status s = c.args.GetNumber("timeout", &c.timeout); !s.ok()) {
    return s;
  }
  if (!(c.timeout > 0)) {
    return absl::InvalidArgumentError("--timeout must be positive");
  }
  return c;
}

// ---------------------------------------------------------------- status

std::string FormatSeconds(double s) {
  if (s < 60) return absl::StrFormat("%.1f s", s);
  const int64_t t = int64_t(s);
  if (t < 3600) return absl::StrFormat("%dm%02ds", t / 60, t % 60);
  if (t < 86400) {
    return absl::StrFormat("%dh%02dm", t / 3600, (t % 3600) / 60);
  }
  return absl::StrFormat("%dd%02dh", t / 86400, (t % 86400) / 3600);
}

std::string FormatStatus(const v1::GetStatusResponse& st) {
  std::string out = absl::StrFormat(
      "batchd %s  pid %u  up %s  threads %u (%u workers)  rss %s  rings %s  "
      "streams %d\n",
      st.version(), st.pid(), FormatSeconds(st.uptime_seconds()), st.threads(),
      st.worker_threads(), HumanBytes(double(st.rss_bytes())),
      HumanBytes(double(st.ring_bytes())), st.streams_size());
  for (const v1::StreamStatus& s : st.streams()) {
    const v1::StreamSpec& spec = s.spec();
    std::string options;
    std::vector<std::pair<std::string, std::string>> sorted(
        spec.options().begin(), spec.options().end());
    std::sort(sorted.begin(), sorted.end());
    for (const auto& [k, v] : sorted) absl::StrAppend(&options, " ", k, "=", v);
    absl::StrAppendFormat(
        &out,
        "\nstream %s  workload %s  data '%s'  split %s  global batch %u  "
        "world %u  seed %u  start step %u  steps/epoch %u%s%s\n",
        spec.name(), spec.workload(), spec.data(), spec.split(),
        spec.global_batch_size(), spec.world_size(), spec.seed(),
        spec.start_step(), s.steps_per_epoch(),
        options.empty() ? "" : "  options", options);
    absl::StrAppendFormat(&out,
                          "  %.1f examples/s  %s/s  decode errors %u  "
                          "skipped %u\n",
                          s.examples_per_second(),
                          HumanBytes(s.bytes_per_second()), s.decode_errors(),
                          s.skipped_examples());
    Table t({"RANK", "ATTACHED", "PID", "PRODUCED", "CONSUMED", "RING",
             "EXAMPLES", "BYTES", "CLIENT_WAIT_S", "SERVER_WAIT_S",
             "REATTACHES"});
    t.AlignRight({0, 2, 3, 4, 5, 6, 7, 8, 9, 10});
    for (const v1::RankStatus& r : s.ranks()) {
      t.Add({absl::StrCat(r.rank()), r.attached() ? "yes" : "no",
             r.client_pid() != 0 ? absl::StrCat(r.client_pid()) : "-",
             absl::StrCat(r.produced_step()), absl::StrCat(r.consumed_step()),
             absl::StrCat(r.ring_fill(), "/", r.ring_slots()),
             absl::StrCat(r.examples()), HumanBytes(double(r.bytes())),
             absl::StrFormat("%.2f", r.client_wait_seconds()),
             absl::StrFormat("%.2f", r.server_wait_seconds()),
             absl::StrCat(r.reattaches())});
    }
    out += t.Render("  ");
  }
  return out;
}

int StatusCommand(int argc, char** argv) {
  if (WantsHelp(argc, argv)) {
    fputs(kStatusHelp, stdout);
    return kExitOk;
  }
  absl::StatusOr<Common> c = ParseCommon(argc, argv, {}, {"json"}, 10);
  if (!c.ok()) return UsageError("status", std::string(c.status().message()));
  Control control(c->address, c->target, c->timeout);
  absl::StatusOr<v1::GetStatusResponse> st = control.GetStatus();
  if (!st.ok()) return ServerError("status", st.status());
  if (c->args.Has("json")) {
    JsonWriter w;
    WriteProto(*st, &w);
    printf("%s\n", w.str().c_str());
  } else {
    fputs(FormatStatus(*st).c_str(), stdout);
  }
  return kExitOk;
}

// ---------------------------------------------------------------- shutdown

// True while a process `pid` that looks like a batchd daemon is visible
// here (a daemon in another pid namespace is not, and its pid may name some
// other process of ours: the command name tells).
bool DaemonProcessVisible(uint32_t pid) {
  if (pid == 0 || !ProcessAlive(pid, 0, 0)) return false;
  FILE* f = fopen(absl::StrCat("/proc/", pid, "/comm").c_str(), "re");
  if (f == nullptr) return false;
  char comm[64] = {0};
  const bool read = fgets(comm, sizeof(comm), f) != nullptr;
  fclose(f);
  return read && strncmp(comm, "batchd", 6) == 0;
}

int ShutdownCommand(int argc, char** argv) {
  if (WantsHelp(argc, argv)) {
    fputs(kShutdownHelp, stdout);
    return kExitOk;
  }
  absl::StatusOr<Common> c = ParseCommon(argc, argv, {}, {}, 10);
  if (!c.ok()) return UsageError("shutdown", std::string(c.status().message()));
  Control control(c->address, c->target, c->timeout);
  // The pid, to wait for the process; the call also proves it answers.
  absl::StatusOr<v1::GetStatusResponse> st = control.GetStatus();
  if (!st.ok()) return ServerError("shutdown", st.status());
  if (absl::Status s = control.Shutdown(); !s.ok()) {
    return ServerError("shutdown", s);
  }
  const uint32_t pid = st->pid();
  const uint64_t deadline = MonotonicNanos() + uint64_t(c->timeout * 1e9);
  bool answers = true;
  bool visible = DaemonProcessVisible(pid);
  while (MonotonicNanos() < deadline && (answers || visible)) {
    if (answers) answers = control.Answers(0.5);
    visible = DaemonProcessVisible(pid);
    if (answers || visible) usleep(50 * 1000);
  }
  if (answers || visible) {
    return ServerError(
        "shutdown",
        absl::DeadlineExceededError(absl::StrFormat(
            "batchd (pid %u) at %s accepted Shutdown but %s after %.0f s", pid,
            c->address, answers ? "still answers" : "has not exited",
            c->timeout)));
  }
  fprintf(stderr, "batchctl shutdown: batchd (pid %u) at %s stopped\n", pid,
          c->address.c_str());
  return kExitOk;
}

// ---------------------------------------------------------------- bench

enum class Touch { kPage, kAll };

struct BenchConfig {
  LoaderOptions loader;  // the spec; rank is set in each child
  uint64_t steps = 100;
  int64_t warmup_steps = -1;  // -1: twice the ring's slots
  Touch touch = Touch::kPage;
  double timeout = 60;
  bool json = false;
};

// What a rank sends its parent: first kReady (or kError), then kReport (or
// kError). Plain bytes through a pipe.
struct RankMessage {
  enum Kind : uint32_t { kReady = 1, kReport = 2, kError = 3 };
  uint32_t kind = 0;
  uint32_t rank = 0;
  uint32_t slots = 0;
  uint32_t ended = 0;  // the stream ended before `steps` batches
  uint64_t slot_bytes = 0;
  uint64_t steps = 0;
  uint64_t examples = 0;
  uint64_t bytes = 0;
  uint64_t start_ns = 0;
  uint64_t end_ns = 0;
  double wait_seconds = 0;
  uint64_t checksum = 0;
  char error[512] = {0};
};

bool WriteAll(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    const ssize_t w = write(fd, c, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    c += w;
    n -= size_t(w);
  }
  return true;
}

// Reads exactly n bytes; false on EOF or error.
bool ReadAll(int fd, void* p, size_t n) {
  char* c = static_cast<char*>(p);
  while (n > 0) {
    const ssize_t r = read(fd, c, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    c += r;
    n -= size_t(r);
  }
  return true;
}

// Reads what a consumer is given: one byte per page (the mapping is there
// and delivers), or every 8-byte word (what a host-to-device copy reads).
uint64_t TouchTensor(const Tensor& t, Touch touch) {
  const uint8_t* p = static_cast<const uint8_t*>(t.data);
  const size_t n = t.nbytes;
  if (n == 0) return 0;
  uint64_t sum = 0;
  if (touch == Touch::kPage) {
    for (size_t i = 0; i < n; i += 4096) sum += p[i];
    return sum + p[n - 1];
  }
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    memcpy(&w, p + i, 8);
    sum += w;
  }
  for (; i < n; ++i) sum += p[i];
  return sum;
}

// One rank's consumer process. Never returns.
[[noreturn]] void RunRank(const BenchConfig& cfg, uint32_t rank, int out_fd,
                          int go_fd) {
  RankMessage msg;
  msg.rank = rank;
  auto fail = [&](const std::string& what) {
    msg.kind = RankMessage::kError;
    snprintf(msg.error, sizeof(msg.error), "rank %u: %s", rank, what.c_str());
    WriteAll(out_fd, &msg, sizeof(msg));
    _exit(1);
  };
  LoaderOptions o = cfg.loader;
  o.rank = int(rank);
  o.timeout_seconds = cfg.timeout;
  o.connect_timeout_seconds = cfg.timeout;
  absl::StatusOr<std::unique_ptr<Loader>> opened = Loader::Open(o);
  if (!opened.ok()) fail(opened.status().ToString());
  Loader& loader = **opened;
  msg.slots = loader.info().slots;
  msg.slot_bytes = loader.info().slot_bytes;

  uint64_t expected_step = loader.info().start_step;
  uint64_t checksum = 0;
  // Takes up to `n` batches; counts them into msg when `timed`. False when
  // the stream ended first.
  auto take = [&](uint64_t n, bool timed) {
    for (uint64_t k = 0; k < n; ++k) {
      absl::StatusOr<Batch> b = loader.Next();
      if (absl::IsOutOfRange(b.status())) return false;
      if (!b.ok()) fail(b.status().ToString());
      if (b->step() != expected_step) {
        fail(absl::StrCat("expected step ", expected_step, ", got step ",
                          b->step()));
      }
      ++expected_step;
      uint64_t bytes = 0;
      for (const Tensor& t : b->tensors()) {
        checksum += TouchTensor(t, cfg.touch);
        bytes += t.nbytes;
      }
      if (timed) {
        const std::vector<Tensor>& ts = b->tensors();
        const uint64_t rows =
            !ts.empty() && !ts[0].shape.empty() ? uint64_t(ts[0].shape[0]) : 0;
        msg.examples += b->valid_count() != 0 ? b->valid_count() : rows;
        msg.bytes += bytes;
        ++msg.steps;
      }
    }
    return true;
  };

  // An evaluation stream is one pass: time all of it unless told otherwise.
  const bool train = cfg.loader.split == "train";
  const uint64_t default_warmup = train ? 2 * uint64_t(msg.slots) : 0;
  const uint64_t warmup =
      cfg.warmup_steps >= 0 ? uint64_t(cfg.warmup_steps) : default_warmup;
  bool more = take(warmup, false);
  msg.kind = RankMessage::kReady;
  if (!WriteAll(out_fd, &msg, sizeof(msg))) _exit(1);
  char go;
  if (!ReadAll(go_fd, &go, 1)) _exit(1);  // the parent gave up
  // The ring filled while this rank waited for the others.
  if (more && train) more = take(msg.slots, false);
  msg.start_ns = MonotonicNanos();
  const double wait0 = loader.wait_seconds();
  if (more) more = take(cfg.steps, true);
  msg.end_ns = MonotonicNanos();
  msg.wait_seconds = loader.wait_seconds() - wait0;
  msg.ended = more ? 0 : 1;
  msg.checksum = checksum;
  msg.kind = RankMessage::kReport;
  WriteAll(out_fd, &msg, sizeof(msg));
  opened->reset();  // joins the heartbeat thread, unmaps the ring
  _exit(0);
}

// Set by SIGINT / SIGTERM during a bench, so that the stream is still closed.
volatile sig_atomic_t g_interrupted = 0;
void OnInterrupt(int) { g_interrupted = 1; }

struct Child {
  pid_t pid = -1;
  int out_fd = -1;  // rank → parent
  int go_fd = -1;   // parent → rank
  bool ready = false;
  bool reported = false;
  RankMessage report;
};

void KillAll(std::vector<Child>* children) {
  for (Child& c : *children) {
    if (c.pid > 0) kill(c.pid, SIGTERM);
  }
  for (Child& c : *children) {
    if (c.pid > 0) waitpid(c.pid, nullptr, 0);
    c.pid = -1;
  }
}

// Waits for one message from every child in `children` whose `done` says
// it has not sent it yet; `tick` runs about every 200 ms meanwhile. Fails
// with the first error a rank reports, or when one dies or the deadline
// passes.
template <typename Done, typename Tick>
absl::Status Gather(std::vector<Child>& children, Done done, uint64_t deadline,
                    Tick tick) {
  for (;;) {
    std::vector<pollfd> fds;
    std::vector<size_t> who;
    for (size_t i = 0; i < children.size(); ++i) {
      if (!done(children[i])) {
        fds.push_back({children[i].out_fd, POLLIN, 0});
        who.push_back(i);
      }
    }
    if (fds.empty()) return absl::OkStatus();
    if (g_interrupted) return absl::CancelledError("interrupted");
    if (MonotonicNanos() > deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat(fds.size(), " rank(s) did not finish in time"));
    }
    const int n = poll(fds.data(), fds.size(), 200);
    if (n < 0 && errno != EINTR) {
      return absl::InternalError(absl::StrCat("poll: ", strerror(errno)));
    }
    for (size_t k = 0; n > 0 && k < fds.size(); ++k) {
      if (fds[k].revents == 0) continue;
      Child& c = children[who[k]];
      RankMessage m;
      if (!ReadAll(c.out_fd, &m, sizeof(m))) {
        if (g_interrupted) return absl::CancelledError("interrupted");
        return absl::InternalError(absl::StrCat(
            "rank ", who[k], " (pid ", c.pid, ") exited without a report"));
      }
      if (m.kind == RankMessage::kError) {
        return absl::UnavailableError(m.error);
      }
      if (m.kind == RankMessage::kReady) {
        c.ready = true;
        c.report = m;
      } else if (m.kind == RankMessage::kReport) {
        c.reported = true;
        c.report = m;
      }
    }
    tick();
  }
}

absl::StatusOr<BenchConfig> ParseBench(const Common& c) {
  const Args& a = c.args;
  BenchConfig cfg;
  LoaderOptions& o = cfg.loader;
  o.server = c.address;
  o.stream = a.Get("stream", absl::StrCat("bench-", getpid()));
  o.workload = a.Get("workload", "synthetic");
  o.data = a.Get("data", "");
  o.split = a.Get("split", "train");
  o.world_size = 1;
  o.rank = 0;
  int64_t world = 1;
  for (absl::Status s :
       {a.GetNumber("global-batch-size", &o.global_batch_size),
        a.GetNumber("world-size", &world), a.GetNumber("seed", &o.seed),
        a.GetNumber("start-step", &o.start_step),
        a.GetNumber("slots", &o.slots), a.GetNumber("steps", &cfg.steps),
        a.GetNumber("warmup-steps", &cfg.warmup_steps)}) {
    if (!s.ok()) return s;
  }
  if (!a.Has("global-batch-size") || o.global_batch_size == 0) {
    return absl::InvalidArgumentError("--global-batch-size G is required");
  }
  if (world < 1 || world > 1024) {
    return absl::InvalidArgumentError("--world-size must be 1..1024");
  }
  o.world_size = int(world);
  if (o.global_batch_size % uint64_t(world) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--global-batch-size ", o.global_batch_size,
                     " is not divisible by --world-size ", world));
  }
  if (cfg.steps == 0) return absl::InvalidArgumentError("--steps must be >= 1");
  for (const std::string& kv : a.All("option")) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--option wants KEY=VALUE, not '", kv, "'"));
    }
    o.options[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  const std::string touch = a.Get("touch", "page");
  if (touch == "page") {
    cfg.touch = Touch::kPage;
  } else if (touch == "all") {
    cfg.touch = Touch::kAll;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--touch wants page or all, not '", touch, "'"));
  }
  cfg.timeout = c.timeout;
  cfg.json = a.Has("json");
  return cfg;
}

// The figures of one run.
struct BenchResult {
  double seconds = 0;
  uint64_t examples = 0, bytes = 0, rank_batches = 0;
  double wait_fraction = 0;
  uint32_t server_threads = 0, server_worker_threads = 0;
  uint64_t server_rss_bytes = 0, server_ring_bytes = 0;
  uint32_t server_pid = 0;
  bool ended_early = false;
};

void PrintBench(const BenchConfig& cfg, const std::vector<Child>& children,
                const BenchResult& r) {
  const LoaderOptions& o = cfg.loader;
  const RankMessage& first = children[0].report;
  const double span = r.seconds > 0 ? r.seconds : 1e-9;
  const double batches_per_s =
      double(r.rank_batches) / double(o.world_size) / span;
  if (cfg.json) {
    JsonWriter w;
    w.BeginObject();
    w.Key("stream");
    w.String(o.stream);
    w.Key("workload");
    w.String(o.workload);
    w.Key("split");
    w.String(o.split);
    w.Key("world_size");
    w.Number(uint64_t(o.world_size));
    w.Key("global_batch_size");
    w.Number(o.global_batch_size);
    w.Key("per_rank_batch");
    w.Number(o.global_batch_size / uint64_t(o.world_size));
    w.Key("slots");
    w.Number(uint64_t(first.slots));
    w.Key("slot_bytes");
    w.Number(first.slot_bytes);
    w.Key("steps");
    w.Number(cfg.steps);
    w.Key("touch");
    w.String(cfg.touch == Touch::kPage ? "page" : "all");
    w.Key("ended_early");
    w.Bool(r.ended_early);
    w.Key("seconds");
    w.Number(r.seconds);
    w.Key("examples");
    w.Number(r.examples);
    w.Key("bytes");
    w.Number(r.bytes);
    w.Key("examples_per_s");
    w.Number(double(r.examples) / span);
    w.Key("bytes_per_s");
    w.Number(double(r.bytes) / span);
    w.Key("batches_per_s");
    w.Number(batches_per_s);
    w.Key("rank_batches_per_s");
    w.Number(double(r.rank_batches) / span);
    w.Key("wait_fraction");
    w.Number(r.wait_fraction);
    w.Key("server_pid");
    w.Number(uint64_t(r.server_pid));
    w.Key("server_threads");
    w.Number(uint64_t(r.server_threads));
    w.Key("server_worker_threads");
    w.Number(uint64_t(r.server_worker_threads));
    w.Key("server_rss_bytes");
    w.Number(r.server_rss_bytes);
    w.Key("server_ring_bytes");
    w.Number(r.server_ring_bytes);
    w.Key("ranks");
    w.BeginArray();
    for (const Child& c : children) {
      const RankMessage& m = c.report;
      const double s = double(m.end_ns - m.start_ns) / 1e9;
      w.BeginObject();
      w.Key("rank");
      w.Number(uint64_t(m.rank));
      w.Key("steps");
      w.Number(m.steps);
      w.Key("examples");
      w.Number(m.examples);
      w.Key("bytes");
      w.Number(m.bytes);
      w.Key("seconds");
      w.Number(s);
      w.Key("wait_seconds");
      w.Number(m.wait_seconds);
      w.Key("wait_fraction");
      w.Number(s > 0 ? m.wait_seconds / s : 0.0);
      w.Key("examples_per_s");
      w.Number(s > 0 ? double(m.examples) / s : 0.0);
      w.EndObject();
    }
    w.EndArray();
    w.EndObject();
    printf("%s\n", w.str().c_str());
    return;
  }
  std::string options;
  for (const auto& [k, v] : o.options)
    absl::StrAppend(&options, " ", k, "=", v);
  printf(
      "stream %s  workload %s  split %s  global batch %llu  world %d  "
      "slots %u x %s%s%s\n",
      o.stream.c_str(), o.workload.c_str(), o.split.c_str(),
      static_cast<unsigned long long>(o.global_batch_size), o.world_size,
      first.slots, HumanBytes(double(first.slot_bytes)).c_str(),
      options.empty() ? "" : "  options", options.c_str());
  Table t({"RANK", "STEPS", "EXAMPLES", "BYTES", "SECONDS", "EXAMPLES/S",
           "WAIT_S", "WAIT"});
  t.AlignRight({0, 1, 2, 3, 4, 5, 6, 7});
  for (const Child& c : children) {
    const RankMessage& m = c.report;
    const double s = double(m.end_ns - m.start_ns) / 1e9;
    t.Add({absl::StrCat(m.rank), absl::StrCat(m.steps),
           absl::StrCat(m.examples), HumanBytes(double(m.bytes)),
           absl::StrFormat("%.3f", s),
           absl::StrFormat("%.1f", s > 0 ? double(m.examples) / s : 0.0),
           absl::StrFormat("%.3f", m.wait_seconds),
           absl::StrFormat("%.1f%%", s > 0 ? 100 * m.wait_seconds / s : 0.0)});
  }
  fputs(t.Render("  ").c_str(), stdout);
  printf(
      "\n%.1f examples/s  %.3f GB/s  %.2f batches/s (%.2f rank batches/s)  "
      "wait fraction %.3f  over %.3f s%s\n",
      double(r.examples) / span, double(r.bytes) / span / 1e9, batches_per_s,
      double(r.rank_batches) / span, r.wait_fraction, r.seconds,
      r.ended_early ? "  (the stream ended early)" : "");
  printf("server: pid %u  threads %u (%u workers)  rss %s  rings %s\n",
         r.server_pid, r.server_threads, r.server_worker_threads,
         HumanBytes(double(r.server_rss_bytes)).c_str(),
         HumanBytes(double(r.server_ring_bytes)).c_str());
}

int BenchCommand(int argc, char** argv) {
  if (WantsHelp(argc, argv)) {
    fputs(kBenchHelp, stdout);
    return kExitOk;
  }
  absl::StatusOr<Common> common =
      ParseCommon(argc, argv,
                  {"workload", "data", "split", "global-batch-size",
                   "world-size", "seed", "start-step", "slots", "option",
                   "stream", "steps", "warmup-steps", "touch"},
                  {"json"}, 60);
  if (!common.ok()) {
    return UsageError("bench", std::string(common.status().message()));
  }
  absl::StatusOr<BenchConfig> parsed = ParseBench(*common);
  if (!parsed.ok()) {
    return UsageError("bench", std::string(parsed.status().message()));
  }
  const BenchConfig& cfg = *parsed;
  const uint32_t world = uint32_t(cfg.loader.world_size);

  // A rank that dies must not kill us through a pipe write; an interrupt
  // ends the run but still closes the stream.
  signal(SIGPIPE, SIG_IGN);
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = OnInterrupt;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  fflush(nullptr);
  // Fork every rank before this process touches gRPC.
  std::vector<Child> children(world);
  for (uint32_t r = 0; r < world; ++r) {
    int out[2], go[2];
    if (pipe(out) != 0 || pipe(go) != 0) {
      KillAll(&children);
      return ServerError("bench", absl::InternalError(
                                      absl::StrCat("pipe: ", strerror(errno))));
    }
    const pid_t pid = fork();
    if (pid < 0) {
      KillAll(&children);
      return ServerError("bench", absl::InternalError(
                                      absl::StrCat("fork: ", strerror(errno))));
    }
    if (pid == 0) {
      signal(SIGINT, SIG_DFL);
      signal(SIGTERM, SIG_DFL);
      close(out[0]);
      close(go[1]);
      for (uint32_t k = 0; k < r; ++k) {
        close(children[k].out_fd);
        close(children[k].go_fd);
      }
      RunRank(cfg, r, out[1], go[0]);
    }
    close(out[1]);
    close(go[0]);
    children[r].pid = pid;
    children[r].out_fd = out[0];
    children[r].go_fd = go[1];
  }

  // Only now: gRPC in this process.
  Control control(cfg.loader.server, common->target, 10);
  BenchResult result;
  auto sample = [&](const v1::GetStatusResponse& st) {
    result.server_pid = st.pid();
    result.server_threads = std::max(result.server_threads, st.threads());
    result.server_worker_threads = st.worker_threads();
    result.server_rss_bytes = std::max(result.server_rss_bytes, st.rss_bytes());
    result.server_ring_bytes =
        std::max(result.server_ring_bytes, st.ring_bytes());
  };
  auto finish = [&](int code, const absl::Status& why) {
    KillAll(&children);
    for (Child& c : children) {
      close(c.out_fd);
      close(c.go_fd);
    }
    // Best effort: the stream may not exist when OpenStream failed.
    absl::Status closed = control.CloseStream(cfg.loader.stream);
    if (!why.ok()) return ServerError("bench", why);
    if (!closed.ok()) return ServerError("bench", closed);
    return code;
  };

  // Ready: every rank opened the stream and warmed up.
  const uint64_t ready_deadline =
      MonotonicNanos() + uint64_t((2 * cfg.timeout + 30) * 1e9);
  absl::Status s = Gather(
      children, [](const Child& c) { return c.ready; }, ready_deadline, [] {});
  if (!s.ok()) return finish(kExitServer, s);
  for (Child& c : children) {
    if (!WriteAll(c.go_fd, "g", 1)) {
      return finish(kExitServer,
                    absl::InternalError(absl::StrCat(
                        "rank ", c.report.rank, " exited before the start")));
    }
  }

  // Timed run; GetStatus every ~200 ms catches the server's largest thread
  // count and RSS while every rank is attached.
  uint64_t last_sample = 0;
  absl::Status sample_error;
  auto tick = [&] {
    const uint64_t now = MonotonicNanos();
    if (now - last_sample < 200'000'000) return;
    last_sample = now;
    absl::StatusOr<v1::GetStatusResponse> st = control.GetStatus();
    if (st.ok()) {
      sample(*st);
    } else {
      sample_error = st.status();
    }
  };
  tick();
  // A rank may wait cfg.timeout for each batch; allow for slow runs.
  const uint64_t run_deadline =
      MonotonicNanos() +
      uint64_t(
          std::min(1e18, (cfg.timeout * double(cfg.steps + 2) + 60) * 1e9));
  s = Gather(
      children, [](const Child& c) { return c.reported; }, run_deadline, tick);
  if (!s.ok()) return finish(kExitServer, s);
  absl::StatusOr<v1::GetStatusResponse> st = control.GetStatus();
  if (!st.ok()) return finish(kExitServer, st.status());
  sample(*st);
  for (Child& c : children) {
    waitpid(c.pid, nullptr, 0);
    c.pid = -1;
  }

  uint64_t start = UINT64_MAX, end = 0;
  double wait_sum = 0;
  for (const Child& c : children) {
    const RankMessage& m = c.report;
    start = std::min(start, m.start_ns);
    end = std::max(end, m.end_ns);
    result.examples += m.examples;
    result.bytes += m.bytes;
    result.rank_batches += m.steps;
    result.ended_early = result.ended_early || m.ended != 0;
    const double secs = double(m.end_ns - m.start_ns) / 1e9;
    wait_sum += secs > 0 ? m.wait_seconds / secs : 0;
  }
  result.seconds = double(end - start) / 1e9;
  result.wait_fraction = wait_sum / double(world);
  PrintBench(cfg, children, result);
  return finish(kExitOk, absl::OkStatus());
}

int Main(int argc, char** argv) {
  if (argc < 2) {
    fputs(kMainHelp, stderr);
    return kExitUsage;
  }
  const std::string command = argv[1];
  if (command == "--help" || command == "-h") {
    fputs(kMainHelp, stdout);
    return kExitOk;
  }
  if (command == "help") {
    const std::string topic = argc > 2 ? argv[2] : "";
    if (topic.empty()) {
      fputs(kMainHelp, stdout);
    } else if (topic == "status") {
      fputs(kStatusHelp, stdout);
    } else if (topic == "shutdown") {
      fputs(kShutdownHelp, stdout);
    } else if (topic == "bench") {
      fputs(kBenchHelp, stdout);
    } else {
      return UsageError("", absl::StrCat("no command '", topic, "'"));
    }
    return kExitOk;
  }
  if (command == "status") return StatusCommand(argc - 2, argv + 2);
  if (command == "shutdown") return ShutdownCommand(argc - 2, argv + 2);
  if (command == "bench") return BenchCommand(argc - 2, argv + 2);
  return UsageError("", absl::StrCat("no command '", command, "'"));
}

}  // namespace
}  // namespace batchd

int main(int argc, char** argv) { return batchd::Main(argc, argv); }
