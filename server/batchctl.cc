// batchctl: the operator's command line for a batchd daemon.
//
//   batchctl status     streams, ranks and the server's threads and memory;
//                       --watch redraws with the current rates
//   batchctl close      closes one stream and frees its rings
//   batchctl drain      refuses new streams; the daemon exits once no rank
//                       is attached
//   batchctl shutdown   asks the daemon to close every stream and exit
//   batchctl plan       the /dev/shm a stream needs (--shm-size, sizeLimit)
//   batchctl version    batchctl's version and the daemon's
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
#include <ctime>
#include <map>
#include <memory>
#include <optional>
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
#include "client/shm_layout.h"

namespace batchd {
namespace {

// Exit codes, as every --help states them.
constexpr int kExitOk = 0;
constexpr int kExitServer = 1;
constexpr int kExitUsage = 2;
constexpr int kExitNoShm = 3;  // plan: /dev/shm has too little free now

#ifndef BATCHD_VERSION
#define BATCHD_VERSION "unknown"
#endif
constexpr char kVersion[] = BATCHD_VERSION;

constexpr char kDefaultServer[] = "unix:///run/batchd/batchd.sock";

constexpr char kMainHelp[] = R"(batchctl - operate a batchd daemon

Usage: batchctl <command> [flags]

Commands:
  status     print the streams, ranks and the server's threads and memory
             (--watch: redraw every few seconds with the current rates)
  close      close one stream and free its rings
  drain      refuse new streams; the daemon exits once no rank is attached
  shutdown   close every stream and stop the daemon
  plan       the /dev/shm a stream needs: ring bytes, --shm-size, sizeLimit
  version    print batchctl's version and the daemon's
  bench      measure delivery with W consumer processes (batchd::Loader)
  help CMD   print the help of CMD (also: batchctl CMD --help)
  --version  print batchctl's version (without asking the daemon)

Every command takes --server ADDR: unix:///path/to/socket or
tcp://host:port. Default: $BATCHD_SERVER, else
unix:///run/batchd/batchd.sock.

A daemon that serves TCP with TLS (batchd --tls-cert) is reached with
--tls-ca FILE (PEM roots that sign its certificate) and, when it asks for
client certificates (--tls-client-ca), --tls-cert FILE --tls-key FILE;
defaults: $BATCHD_TLS_CA, $BATCHD_TLS_CERT, $BATCHD_TLS_KEY (unix sockets
ignore them). bench takes none: its ranks map rings on this node.

Exit codes: 0 ok, 1 the server failed or could not be reached,
2 usage error, 3 (plan only) /dev/shm has too little free space.
)";

constexpr char kStatusHelp[] =
    R"(Usage: batchctl status [--server ADDR] [--json] [--timeout S]
                       [--watch [SECONDS]]

Prints the daemon's pid, version, uptime, threads (all, and workers),
resident memory (without the rings), ring bytes and whether it is
draining, then for every stream its spec, examples/s and bytes/s (averages
since the stream opened), and a row per rank: attached, client pid,
produced and consumed step, ring fill of slots, examples and bytes
delivered, seconds the client waited for data and the server waited for
the client (ring full), re-attaches.

  --server ADDR      unix:///path or tcp://host:port
                     (default: $BATCHD_SERVER, else
                     unix:///run/batchd/batchd.sock)
  --json             print the GetStatus response as one JSON object
                     (proto field names; 64-bit numbers as numbers)
  --timeout S        deadline of each call in seconds (default 10)
  --watch [SECONDS]  ask again every SECONDS (default 2) until Ctrl-C and
                     redraw (the screen is cleared when the output is a
                     terminal). Rates are then the current ones: the change
                     of the examples and bytes counters between two
                     consecutive answers over the daemon's time between
                     them, per stream and per rank. A failed call is shown
                     and retried. With --json: one JSON object per line,
                     {"time", "interval_seconds", "status", "rates"}.

Exit codes: 0 ok (with --watch: stopped by Ctrl-C or SIGTERM), 1 the
server failed or could not be reached (with --watch: at the first call),
2 usage error.
)";

constexpr char kCloseHelp[] =
    R"(Usage: batchctl close STREAM [--server ADDR] [--timeout S]

Closes the stream named STREAM: every rank's ring is unlinked from
/dev/shm, its clients see "stream closed" at their next batch, and the
name is free for a new stream.

  --server ADDR  unix:///path or tcp://host:port
                 (default: $BATCHD_SERVER, else unix:///run/batchd/batchd.sock)
  --timeout S    deadline of the call in seconds (default 10)

Exit codes: 0 closed, 1 no such stream, or the server failed or could not
be reached, 2 usage error.
)";

constexpr char kDrainHelp[] =
    R"(Usage: batchctl drain [--server ADDR] [--timeout S] [--wait [SECONDS]]

Puts the daemon into draining: it refuses every new stream (OpenStream
fails with "batchd is draining"), keeps serving the ranks attached now,
and exits once none is attached (a clean exit: status 0, so a service
manager does not restart it). Prints the ranks attached when the call
returned. Draining cannot be undone; `batchctl shutdown` stops at once.

  --server ADDR      unix:///path or tcp://host:port
                     (default: $BATCHD_SERVER, else
                     unix:///run/batchd/batchd.sock)
  --timeout S        deadline of each call in seconds (default 10)
  --wait [SECONDS]   then wait until the daemon has exited, at most
                     SECONDS (default: for ever), printing the attached
                     ranks whenever their number changes

Exit codes: 0 draining (with --wait: the daemon exited), 1 the server
failed or could not be reached (with --wait: or did not exit in time, or
the wait was interrupted), 2 usage error.
)";

constexpr char kPlanHelp[] =
    R"(Usage: batchctl plan [--server ADDR] --global-batch-size G [flags]

Asks the daemon what a stream with this spec would need, without opening
it: one rank's ring (slots x slot bytes plus the header), the total of the
node's rings, the space free in the daemon's /dev/shm now, and the sizes
to give a container's /dev/shm: the total plus 10% plus 64 MiB, rounded up
to a MiB, as `docker run --shm-size` and as the `sizeLimit` of a
Kubernetes emptyDir (medium: Memory) mounted at /dev/shm. When a node
runs several streams (train and eval, several jobs), add their totals.

Stream spec (names mirror StreamSpec; use the job's values):
  --workload NAME           default: synthetic
  --data PATH               relative to the server's --data-root (default "")
  --split NAME              default: train
  --global-batch-size G     required; divisible by --world-size
  --world-size W            default 1
  --seed S                  default 0
  --slots K                 ring slots per rank (default 0: server default)
  --option KEY=VALUE        workload option, repeatable
  --stream NAME             checked as a stream name (default: plan)

  --local-ranks N           ranks of this node, whose rings the node holds
                            (default: W, a single node)
  --server ADDR             unix:///path or tcp://host:port
                            (default: $BATCHD_SERVER, else
                            unix:///run/batchd/batchd.sock)
  --timeout S               deadline of the call in seconds (default 30)
  --json                    print one JSON object

Exit codes: 0 ok, 1 the server failed, refused the spec or could not be
reached, 2 usage error, 3 the daemon's /dev/shm has less free space than
the node's rings need (the figures are printed all the same).
)";

constexpr char kVersionHelp[] =
    R"(Usage: batchctl version [--server ADDR] [--timeout S] [--json]

Prints batchctl's version and shared-memory layout version, then the
version, pid and uptime of the daemon at ADDR (from GetStatus).

  --server ADDR  unix:///path or tcp://host:port
                 (default: $BATCHD_SERVER, else unix:///run/batchd/batchd.sock)
  --timeout S    deadline of the call in seconds (default 5)
  --json         print one JSON object; "server" is null when the daemon
                 could not be reached, and "server_error" says why

Exit codes: 0 both versions printed, 1 the daemon could not be reached or
failed (batchctl's version is printed all the same), 2 usage error.
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

// A subcommand's arguments: "--name value", "--name=value", bare
// "--switch", "--optional [value]" (the next argument is its value unless it
// starts with "--"; "" when absent) and up to `max_positional` arguments
// that are not flags; repeated flags keep every value.
class Args {
 public:
  static absl::StatusOr<Args> Parse(
      int argc, char** argv, const std::vector<std::string>& known,
      const std::vector<std::string>& switches,
      const std::vector<std::string>& optional = {},
      size_t max_positional = 0) {
    auto contains = [](const std::vector<std::string>& v,
                       const std::string& x) {
      return std::find(v.begin(), v.end(), x) != v.end();
    };
    Args a;
    for (int i = 0; i < argc; ++i) {
      std::string arg = argv[i];
      if (arg.rfind("--", 0) != 0) {
        if (a.positional_.size() < max_positional) {
          a.positional_.push_back(arg);
          continue;
        }
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
      const bool is_switch = contains(switches, name);
      const bool is_optional = contains(optional, name);
      if (!is_switch && !is_optional && !contains(known, name)) {
        return absl::InvalidArgumentError(
            absl::StrCat("unknown flag '", arg, "'"));
      }
      if (is_switch) {
        if (has_value) {
          return absl::InvalidArgumentError(
              absl::StrCat(arg, " takes no value"));
        }
        value = "true";
      } else if (is_optional) {
        if (!has_value && i + 1 < argc &&
            std::string(argv[i + 1]).rfind("--", 0) != 0) {
          value = argv[++i];
        }
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

  const std::vector<std::string>& positional() const { return positional_; }
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
  std::vector<std::string> positional_;
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
  // `address` as the user wrote it; `target` in gRPC's terms; `credentials`
  // TLS or, when null, none.
  Control(std::string address, const std::string& target,
          double timeout_seconds,
          std::shared_ptr<grpc::ChannelCredentials> credentials = nullptr)
      : address_(std::move(address)),
        timeout_seconds_(timeout_seconds),
        tls_(credentials != nullptr),
        stub_(v1::Batchd::NewStub(grpc::CreateChannel(
            target, credentials != nullptr
                        ? credentials
                        : grpc::InsecureChannelCredentials()))) {}

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

  absl::StatusOr<v1::DrainResponse> Drain() {
    v1::DrainResponse resp;
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    return Check("Drain", stub_->Drain(&ctx, v1::DrainRequest(), &resp), resp);
  }

  absl::StatusOr<v1::PlanResponse> Plan(const v1::StreamSpec& spec) {
    v1::PlanRequest req;
    *req.mutable_spec() = spec;
    v1::PlanResponse resp;
    grpc::ClientContext ctx;
    SetDeadline(&ctx);
    return Check("Plan", stub_->Plan(&ctx, req, &resp), resp);
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
    const char* hint = "";
    if (unreachable && !tls_ && address_.rfind("tcp://", 0) == 0) {
      hint = " (is batchd running there? does it serve TLS: --tls-ca?)";
    } else if (unreachable) {
      hint = " (is batchd running there?)";
    } else if (s.error_code() == grpc::StatusCode::UNIMPLEMENTED) {
      hint = " (the daemon is older than this batchctl)";
    }
    return absl::Status(
        static_cast<absl::StatusCode>(s.error_code()),
        absl::StrCat(call, " at ", address_, ": ", s.error_message(), hint));
  }

  const std::string address_;
  const double timeout_seconds_;
  const bool tls_;
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
  // TLS credentials when --tls-ca (or $BATCHD_TLS_CA) is given, else null.
  std::shared_ptr<grpc::ChannelCredentials> credentials;
};

// The flag's value, else the environment variable's, else "".
std::string FlagOrEnv(const Args& args, const std::string& flag,
                      const char* env) {
  if (args.Has(flag)) return args.Get(flag, "");
  const char* v = getenv(env);
  return v != nullptr ? v : "";
}

absl::StatusOr<std::string> ReadFileContents(const std::string& flag,
                                             const std::string& path) {
  FILE* f = fopen(path.c_str(), "re");
  if (f == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, " ", path, ": ", strerror(errno)));
  }
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
  const bool failed = ferror(f) != 0;
  fclose(f);
  if (failed) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, " ", path, ": read error"));
  }
  return out;
}

// TLS towards a daemon that serves TCP with --tls-cert: --tls-ca verifies
// it; --tls-cert and --tls-key answer its --tls-client-ca.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> TlsCredentials(
    const Args& args) {
  const std::string ca = FlagOrEnv(args, "tls-ca", "BATCHD_TLS_CA");
  const std::string cert = FlagOrEnv(args, "tls-cert", "BATCHD_TLS_CERT");
  const std::string key = FlagOrEnv(args, "tls-key", "BATCHD_TLS_KEY");
  if (ca.empty()) {
    if (!cert.empty() || !key.empty()) {
      return absl::InvalidArgumentError(
          "--tls-cert and --tls-key need --tls-ca (the roots that sign the "
          "daemon's certificate)");
    }
    return std::shared_ptr<grpc::ChannelCredentials>();
  }
  if (cert.empty() != key.empty()) {
    return absl::InvalidArgumentError("--tls-cert and --tls-key go together");
  }
  grpc::SslCredentialsOptions ssl;
  absl::StatusOr<std::string> roots = ReadFileContents("tls-ca", ca);
  if (!roots.ok()) return roots.status();
  ssl.pem_root_certs = *roots;
  if (!cert.empty()) {
    absl::StatusOr<std::string> chain = ReadFileContents("tls-cert", cert);
    if (!chain.ok()) return chain.status();
    absl::StatusOr<std::string> pkey = ReadFileContents("tls-key", key);
    if (!pkey.ok()) return pkey.status();
    ssl.pem_cert_chain = *chain;
    ssl.pem_private_key = *pkey;
  }
  return grpc::SslCredentials(ssl);
}

absl::StatusOr<Common> ParseCommon(
    int argc, char** argv, std::vector<std::string> known,
    std::vector<std::string> switches, double default_timeout,
    const std::vector<std::string>& optional = {}, size_t max_positional = 0) {
  for (const char* flag :
       {"server", "timeout", "tls-ca", "tls-cert", "tls-key"}) {
    known.push_back(flag);
  }
  absl::StatusOr<Args> args =
      Args::Parse(argc, argv, known, switches, optional, max_positional);
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
  if (c.target.rfind("unix:", 0) == 0) {
    // A unix socket is guarded by its file mode; $BATCHD_TLS_* are for
    // tcp:// addresses and do not apply.
    if (c.args.Has("tls-ca") || c.args.Has("tls-cert") ||
        c.args.Has("tls-key")) {
      return absl::InvalidArgumentError(
          "--tls-ca, --tls-cert and --tls-key are for tcp:// addresses");
    }
    return c;
  }
  absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> tls =
      TlsCredentials(c.args);
  if (!tls.ok()) return tls.status();
  c.credentials = *std::move(tls);
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

// Examples/s and bytes/s between two GetStatus answers of one daemon.
struct Rate {
  double examples_per_second = 0;
  double bytes_per_second = 0;
};
struct StreamRates {
  Rate stream;  // the sum over its ranks
  std::map<uint32_t, Rate> ranks;
};
struct Rates {
  double interval_seconds = 0;  // the daemon's time between the answers
  // Streams in both answers whose counters did not go back (a stream closed
  // and opened again in between starts over and has no rate yet).
  std::map<std::string, StreamRates> streams;
};

// The current rates from two consecutive answers; nullopt when they are not
// of the same daemon process or no time passed. The interval is the
// difference of the daemon's uptimes, so gRPC latency does not skew it.
std::optional<Rates> CurrentRates(const v1::GetStatusResponse& prev,
                                  const v1::GetStatusResponse& cur) {
  const double dt = cur.uptime_seconds() - prev.uptime_seconds();
  if (prev.pid() != cur.pid() || !(dt > 0)) return std::nullopt;
  Rates rates;
  rates.interval_seconds = dt;
  std::map<std::string, const v1::StreamStatus*> before;
  for (const v1::StreamStatus& s : prev.streams()) {
    before[s.spec().name()] = &s;
  }
  for (const v1::StreamStatus& s : cur.streams()) {
    auto it = before.find(s.spec().name());
    if (it == before.end()) continue;
    std::map<uint32_t, const v1::RankStatus*> ranks_before;
    for (const v1::RankStatus& r : it->second->ranks()) {
      ranks_before[r.rank()] = &r;
    }
    StreamRates sr;
    uint64_t examples = 0, bytes = 0;
    bool went_back = false;
    for (const v1::RankStatus& r : s.ranks()) {
      auto rb = ranks_before.find(r.rank());
      const uint64_t e0 = rb == ranks_before.end() ? 0 : rb->second->examples();
      const uint64_t b0 = rb == ranks_before.end() ? 0 : rb->second->bytes();
      if (r.examples() < e0 || r.bytes() < b0) {
        went_back = true;
        break;
      }
      examples += r.examples() - e0;
      bytes += r.bytes() - b0;
      sr.ranks[r.rank()] = {double(r.examples() - e0) / dt,
                            double(r.bytes() - b0) / dt};
    }
    if (went_back) continue;
    sr.stream = {double(examples) / dt, double(bytes) / dt};
    rates.streams[s.spec().name()] = std::move(sr);
  }
  return rates;
}

// The status as a table per stream. With `rates`, the stream's examples/s
// and bytes/s are the current ones, and each rank's are shown too.
std::string FormatStatus(const v1::GetStatusResponse& st,
                         const Rates* rates = nullptr) {
  std::string out = absl::StrFormat(
      "batchd %s  pid %u  up %s  threads %u (%u workers)  rss %s  rings %s  "
      "streams %d%s\n",
      st.version(), st.pid(), FormatSeconds(st.uptime_seconds()), st.threads(),
      st.worker_threads(), HumanBytes(double(st.rss_bytes())),
      HumanBytes(double(st.ring_bytes())), st.streams_size(),
      st.draining() ? "  DRAINING (no new streams; exits when no rank is "
                      "attached)"
                    : "");
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
    const StreamRates* sr = nullptr;
    if (rates != nullptr) {
      auto it = rates->streams.find(spec.name());
      if (it != rates->streams.end()) sr = &it->second;
    }
    if (sr != nullptr) {
      absl::StrAppendFormat(
          &out,
          "  %.1f examples/s  %s/s over the last %.1f s  (since open: %.1f "
          "examples/s)  decode errors %u  skipped %u\n",
          sr->stream.examples_per_second,
          HumanBytes(sr->stream.bytes_per_second), rates->interval_seconds,
          s.examples_per_second(), s.decode_errors(), s.skipped_examples());
    } else {
      absl::StrAppendFormat(&out,
                            "  %.1f examples/s  %s/s%s  decode errors %u  "
                            "skipped %u\n",
                            s.examples_per_second(),
                            HumanBytes(s.bytes_per_second()),
                            rates != nullptr ? " since open" : "",
                            s.decode_errors(), s.skipped_examples());
    }
    std::vector<std::string> header = {
        "RANK",          "ATTACHED",      "PID",       "PRODUCED",
        "CONSUMED",      "RING",          "EXAMPLES",  "BYTES",
        "CLIENT_WAIT_S", "SERVER_WAIT_S", "REATTACHES"};
    if (rates != nullptr) header.push_back("EXAMPLES/S");
    Table t(header);
    t.AlignRight({0, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11});
    for (const v1::RankStatus& r : s.ranks()) {
      std::vector<std::string> row = {
          absl::StrCat(r.rank()),
          r.attached() ? "yes" : "no",
          r.client_pid() != 0 ? absl::StrCat(r.client_pid()) : "-",
          absl::StrCat(r.produced_step()),
          absl::StrCat(r.consumed_step()),
          absl::StrCat(r.ring_fill(), "/", r.ring_slots()),
          absl::StrCat(r.examples()),
          HumanBytes(double(r.bytes())),
          absl::StrFormat("%.2f", r.client_wait_seconds()),
          absl::StrFormat("%.2f", r.server_wait_seconds()),
          absl::StrCat(r.reattaches())};
      if (rates != nullptr) {
        auto it = sr != nullptr ? sr->ranks.find(r.rank())
                                : std::map<uint32_t, Rate>::const_iterator();
        row.push_back(
            sr != nullptr && it != sr->ranks.end()
                ? absl::StrFormat("%.1f", it->second.examples_per_second)
                : "-");
      }
      t.Add(std::move(row));
    }
    out += t.Render("  ");
  }
  return out;
}

// Ctrl-C and SIGTERM end a watch, a wait or a bench through this flag, so
// that each can still clean up and say what it left.
volatile sig_atomic_t g_interrupted = 0;
void OnInterrupt(int) { g_interrupted = 1; }

void CatchInterrupts() {
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = OnInterrupt;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

// Sleeps `seconds` unless interrupted first; false when interrupted.
bool SleepUnlessInterrupted(double seconds) {
  const uint64_t end = MonotonicNanos() + uint64_t(seconds * 1e9);
  while (!g_interrupted) {
    const uint64_t now = MonotonicNanos();
    if (now >= end) return true;
    const uint64_t step = std::min<uint64_t>(end - now, 50'000'000);
    struct timespec ts = {time_t(step / 1'000'000'000),
                          long(step % 1'000'000'000)};
    nanosleep(&ts, nullptr);
  }
  return false;
}

// "2026-12-02 09:30:05 UTC"
std::string UtcNow() {
  const time_t now = time(nullptr);
  struct tm tm;
  gmtime_r(&now, &tm);
  char buf[64];
  strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

void WriteRatesJson(const Rates& rates, JsonWriter* w) {
  w->BeginArray();
  for (const auto& [name, sr] : rates.streams) {
    w->BeginObject();
    w->Key("stream");
    w->String(name);
    w->Key("examples_per_second");
    w->Number(sr.stream.examples_per_second);
    w->Key("bytes_per_second");
    w->Number(sr.stream.bytes_per_second);
    w->Key("ranks");
    w->BeginArray();
    for (const auto& [rank, r] : sr.ranks) {
      w->BeginObject();
      w->Key("rank");
      w->Number(uint64_t(rank));
      w->Key("examples_per_second");
      w->Number(r.examples_per_second);
      w->Key("bytes_per_second");
      w->Number(r.bytes_per_second);
      w->EndObject();
    }
    w->EndArray();
    w->EndObject();
  }
  w->EndArray();
}

// `status --watch`: one frame every `interval` seconds until interrupted.
int WatchStatus(const Common& c, double interval) {
  const bool json = c.args.Has("json");
  const bool tty = isatty(STDOUT_FILENO) != 0;
  Control control(c.address, c.target, c.timeout, c.credentials);
  CatchInterrupts();
  std::optional<v1::GetStatusResponse> prev;
  for (int frame = 0; !g_interrupted; ++frame) {
    absl::StatusOr<v1::GetStatusResponse> st = control.GetStatus();
    // A daemon that is not there at all is an error; one that goes away
    // while watched (a restart) is shown until it answers again.
    if (!st.ok() && frame == 0) return ServerError("status", st.status());
    if (g_interrupted) break;
    std::optional<Rates> rates;
    if (st.ok() && prev.has_value()) rates = CurrentRates(*prev, *st);
    if (json) {
      JsonWriter w;
      w.BeginObject();
      w.Key("time");
      w.Number(double(time(nullptr)));
      w.Key("interval_seconds");
      if (rates.has_value()) {
        w.Number(rates->interval_seconds);
      } else {
        w.Null();
      }
      w.Key("status");
      if (st.ok()) {
        WriteProto(*st, &w);
      } else {
        w.Null();
      }
      if (!st.ok()) {
        w.Key("error");
        w.String(std::string(st.status().message()));
      }
      w.Key("rates");
      if (rates.has_value()) {
        WriteRatesJson(*rates, &w);
      } else {
        w.BeginArray();
        w.EndArray();
      }
      w.EndObject();
      printf("%s\n", w.str().c_str());
    } else {
      std::string out = tty ? "\033[H\033[2J" : (frame > 0 ? "\n" : "");
      absl::StrAppendFormat(&out, "Every %.1f s: batchd at %s  %s\n\n",
                            interval, c.address, UtcNow());
      if (st.ok()) {
        out += FormatStatus(*st, rates.has_value() ? &*rates : nullptr);
        if (!rates.has_value()) {
          out += "\n(current rates from the next frame on)\n";
        }
      } else {
        absl::StrAppend(&out, "error: ", st.status().message(), "\n");
      }
      fputs(out.c_str(), stdout);
    }
    fflush(stdout);
    if (st.ok()) {
      prev = *std::move(st);
    } else {
      prev.reset();
    }
    if (!SleepUnlessInterrupted(interval)) break;
  }
  return kExitOk;
}

int StatusCommand(int argc, char** argv) {
  if (WantsHelp(argc, argv)) {
    fputs(kStatusHelp, stdout);
    return kExitOk;
  }
  absl::StatusOr<Common> c =
      ParseCommon(argc, argv, {}, {"json"}, 10, {"watch"});
  if (!c.ok()) return UsageError("status", std::string(c.status().message()));
  if (c->args.Has("watch")) {
    double interval = 2;
    const std::string v = c->args.Get("watch", "");
    if (!v.empty() && (!absl::SimpleAtod(v, &interval) || !(interval > 0) ||
                       interval > 86400)) {
      return UsageError("status",
                        absl::StrCat("--watch wants seconds between 0 and "
                                     "86400, not '",
                                     v, "'"));
    }
    // Below ~0.1 s the daemon's uptime resolution and gRPC make rates noise.
    return WatchStatus(*c, std::max(interval, 0.1));
  }
  Control control(c->address, c->target, c->timeout, c->credentials);
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

// ---------------------------------------------------------------- close

int CloseCommand(int argc, char** argv) {
  if (WantsHelp(argc, argv)) {
    fputs(kCloseHelp, stdout);
    return kExitOk;
  }
  absl::StatusOr<Common> c = ParseCommon(argc, argv, {}, {}, 10, {}, 1);
  if (!c.ok()) return UsageError("close", std::string(c.status().message()));
  if (c->args.positional().empty()) {
    return UsageError("close", "which stream? batchctl close STREAM");
  }
  const std::string& name = c->args.positional()[0];
  Control control(c->address, c->target, c->timeout, c->credentials);
  if (absl::Status s = control.CloseStream(name); !s.ok()) {
    return ServerError("close", s);
  }
  printf("closed stream %s at %s\n", name.c_str(), c->address.c_str());
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
  Control control(c->address, c->target, c->timeout, c->credentials);
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

// ---------------------------------------------------------------- drain

// Counts the ranks attached in `st`.
uint32_t AttachedRanks(const v1::GetStatusResponse& st) {
  uint32_t n = 0;
  for (const v1::StreamStatus& s : st.streams()) {
    for (const v1::RankStatus& r : s.ranks()) n += r.attached() ? 1 : 0;
  }
  return n;
}

int DrainCommand(int argc, char** argv) {
  if (WantsHelp(argc, argv)) {
    fputs(kDrainHelp, stdout);
    return kExitOk;
  }
  absl::StatusOr<Common> c = ParseCommon(argc, argv, {}, {}, 10, {"wait"});
  if (!c.ok()) return UsageError("drain", std::string(c.status().message()));
  const bool wait = c->args.Has("wait");
  double wait_seconds = 0;  // 0: for ever
  if (const std::string v = c->args.Get("wait", ""); !v.empty()) {
    if (!absl::SimpleAtod(v, &wait_seconds) || !(wait_seconds > 0)) {
      return UsageError(
          "drain",
          absl::StrCat("--wait wants positive seconds, not '", v, "'"));
    }
  }
  Control control(c->address, c->target, c->timeout, c->credentials);
  // The pid, to wait for the process.
  absl::StatusOr<v1::GetStatusResponse> st = control.GetStatus();
  if (!st.ok()) return ServerError("drain", st.status());
  const uint32_t pid = st->pid();
  absl::StatusOr<v1::DrainResponse> drained = control.Drain();
  if (!drained.ok()) return ServerError("drain", drained.status());
  uint32_t attached = drained->attached_ranks();
  printf(
      "batchd (pid %u) at %s is draining: %u rank(s) attached; it takes no "
      "new stream and exits once none is attached\n",
      pid, c->address.c_str(), attached);
  fflush(stdout);
  if (!wait) return kExitOk;

  CatchInterrupts();
  const uint64_t deadline =
      wait_seconds > 0 ? MonotonicNanos() + uint64_t(wait_seconds * 1e9)
                       : UINT64_MAX;
  // First until it stops answering, then until its process is gone (when
  // visible from here).
  bool answers = true;
  while (!g_interrupted && MonotonicNanos() < deadline) {
    if (answers) {
      absl::StatusOr<v1::GetStatusResponse> now = control.GetStatus();
      if (now.ok() && now->pid() == pid) {
        const uint32_t n = AttachedRanks(*now);
        if (n != attached) {
          attached = n;
          printf("%s  %u rank(s) attached\n", UtcNow().c_str(), attached);
          fflush(stdout);
        }
      } else if (now.ok() || !absl::IsDeadlineExceeded(now.status())) {
        answers = false;  // gone, or another daemon took the address
      }                   // else slow to answer: ask again
    }
    if (!answers && !DaemonProcessVisible(pid)) {
      printf("batchd (pid %u) exited\n", pid);
      return kExitOk;
    }
    SleepUnlessInterrupted(answers ? 0.5 : 0.05);
  }
  return ServerError(
      "drain",
      absl::DeadlineExceededError(absl::StrFormat(
          "%s; batchd (pid %u) is still draining with %u rank(s) attached",
          g_interrupted
              ? "interrupted"
              : absl::StrFormat("not exited after %.0f s", wait_seconds),
          pid, attached)));
}

// ---------------------------------------------------------------- plan

constexpr uint64_t kMiB = uint64_t(1) << 20;

// What a container's /dev/shm should hold for rings of `total` bytes: the
// total plus 10% plus 64 MiB (other users of /dev/shm: NCCL, the trainer's
// DataLoader, Python's multiprocessing), rounded up to a MiB.
uint64_t ShmSizeFor(uint64_t total) {
  const uint64_t with_headroom = total + (total + 9) / 10 + 64 * kMiB;
  return (with_headroom + kMiB - 1) / kMiB * kMiB;
}

std::string ShapeString(const v1::TensorInfo& t) {
  std::string out = "[";
  for (int i = 0; i < t.shape_size(); ++i) {
    absl::StrAppend(&out, i > 0 ? ", " : "", t.shape(i));
  }
  return out + "]";
}

int PlanCommand(int argc, char** argv) {
  if (WantsHelp(argc, argv)) {
    fputs(kPlanHelp, stdout);
    return kExitOk;
  }
  absl::StatusOr<Common> c = ParseCommon(
      argc, argv,
      {"workload", "data", "split", "global-batch-size", "world-size", "seed",
       "slots", "option", "stream", "local-ranks"},
      {"json"}, 30);
  if (!c.ok()) return UsageError("plan", std::string(c.status().message()));
  const Args& a = c->args;
  v1::StreamSpec spec;
  spec.set_name(a.Get("stream", "plan"));
  spec.set_workload(a.Get("workload", "synthetic"));
  spec.set_data(a.Get("data", ""));
  spec.set_split(a.Get("split", "train"));
  uint64_t global = 0, seed = 0, world = 1, slots = 0, local = 0;
  for (absl::Status s :
       {a.GetNumber("global-batch-size", &global),
        a.GetNumber("world-size", &world), a.GetNumber("seed", &seed),
        a.GetNumber("slots", &slots), a.GetNumber("local-ranks", &local)}) {
    if (!s.ok()) return UsageError("plan", std::string(s.message()));
  }
  if (global == 0) {
    return UsageError("plan", "--global-batch-size G is required");
  }
  if (world < 1 || world > 65536) {
    return UsageError("plan", "--world-size must be 1..65536");
  }
  if (global % world != 0) {
    return UsageError(
        "plan", absl::StrCat("--global-batch-size ", global,
                             " is not divisible by --world-size ", world));
  }
  if (slots > 1024) return UsageError("plan", "--slots must be 0..1024");
  if (a.Has("local-ranks") && (local < 1 || local > world)) {
    return UsageError("plan", absl::StrCat("--local-ranks must be 1..", world,
                                           " (the world size)"));
  }
  spec.set_global_batch_size(global);
  spec.set_world_size(uint32_t(world));
  spec.set_seed(seed);
  spec.set_slots(uint32_t(slots));
  for (const std::string& kv : a.All("option")) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) {
      return UsageError(
          "plan", absl::StrCat("--option wants KEY=VALUE, not '", kv, "'"));
    }
    (*spec.mutable_options())[kv.substr(0, eq)] = kv.substr(eq + 1);
  }

  Control control(c->address, c->target, c->timeout, c->credentials);
  absl::StatusOr<v1::PlanResponse> plan = control.Plan(spec);
  if (!plan.ok()) return ServerError("plan", plan.status());
  const uint64_t ranks = a.Has("local-ranks") ? local : plan->ranks();
  const uint64_t total = plan->segment_bytes() * ranks;
  const uint64_t size = ShmSizeFor(total);
  const uint64_t size_mib = size / kMiB;
  const bool fits = plan->shm_free_bytes() >= total;
  const std::string docker = absl::StrCat("--shm-size=", size_mib, "m");
  const std::string k8s = absl::StrCat(size_mib, "Mi");

  if (a.Has("json")) {
    JsonWriter w;
    w.BeginObject();
    w.Key("spec");
    WriteProto(spec, &w);
    w.Key("slots");
    w.Number(uint64_t(plan->slots()));
    w.Key("slot_bytes");
    w.Number(plan->slot_bytes());
    w.Key("segment_bytes");
    w.Number(plan->segment_bytes());
    w.Key("ranks");
    w.Number(ranks);
    w.Key("total_bytes");
    w.Number(total);
    w.Key("shm_free_bytes");
    w.Number(plan->shm_free_bytes());
    w.Key("fits");
    w.Bool(fits);
    w.Key("shm_size_bytes");
    w.Number(size);
    w.Key("docker_shm_size");
    w.String(absl::StrCat(size_mib, "m"));
    w.Key("kubernetes_size_limit");
    w.String(k8s);
    w.Key("tensors");
    w.BeginArray();
    for (const v1::TensorInfo& t : plan->tensors()) WriteProto(t, &w);
    w.EndArray();
    w.EndObject();
    printf("%s\n", w.str().c_str());
  } else {
    std::string options;
    std::vector<std::pair<std::string, std::string>> sorted(
        spec.options().begin(), spec.options().end());
    std::sort(sorted.begin(), sorted.end());
    for (const auto& [k, v] : sorted) absl::StrAppend(&options, " ", k, "=", v);
    printf(
        "spec: workload %s  data '%s'  split %s  global batch %llu  world %llu"
        "%s%s\n",
        spec.workload().c_str(), spec.data().c_str(), spec.split().c_str(),
        static_cast<unsigned long long>(global),
        static_cast<unsigned long long>(world),
        options.empty() ? "" : "  options", options.c_str());
    Table t({"TENSOR", "DTYPE", "SHAPE (one rank)"});
    for (const v1::TensorInfo& ti : plan->tensors()) {
      t.Add({ti.name(), ti.dtype(), ShapeString(ti)});
    }
    fputs(t.Render("  ").c_str(), stdout);
    printf(
        "one rank's ring:  %llu bytes (%s): %u slots x %llu bytes, and the "
        "header\n",
        static_cast<unsigned long long>(plan->segment_bytes()),
        HumanBytes(double(plan->segment_bytes())).c_str(), plan->slots(),
        static_cast<unsigned long long>(plan->slot_bytes()));
    printf("this node's rings: %llu bytes (%s) for %llu rank(s)\n",
           static_cast<unsigned long long>(total),
           HumanBytes(double(total)).c_str(),
           static_cast<unsigned long long>(ranks));
    printf("/dev/shm free now: %llu bytes (%s) at %s%s\n",
           static_cast<unsigned long long>(plan->shm_free_bytes()),
           HumanBytes(double(plan->shm_free_bytes())).c_str(),
           c->address.c_str(), fits ? "" : "  NOT ENOUGH");
    printf(
        "\n/dev/shm to give a container (rings + 10%% + 64 MiB): %llu MiB\n"
        "  docker run %s ...\n"
        "  Kubernetes: emptyDir {medium: Memory, sizeLimit: %s} at /dev/shm\n",
        static_cast<unsigned long long>(size_mib), docker.c_str(), k8s.c_str());
  }
  if (!fits) {
    fprintf(stderr,
            "batchctl plan: /dev/shm at %s has %s free; this node's rings "
            "need %s\n",
            c->address.c_str(),
            HumanBytes(double(plan->shm_free_bytes())).c_str(),
            HumanBytes(double(total)).c_str());
    return kExitNoShm;
  }
  return kExitOk;
}

// ---------------------------------------------------------------- version

int VersionCommand(int argc, char** argv) {
  if (WantsHelp(argc, argv)) {
    fputs(kVersionHelp, stdout);
    return kExitOk;
  }
  absl::StatusOr<Common> c = ParseCommon(argc, argv, {}, {"json"}, 5);
  if (!c.ok()) return UsageError("version", std::string(c.status().message()));
  Control control(c->address, c->target, c->timeout, c->credentials);
  absl::StatusOr<v1::GetStatusResponse> st = control.GetStatus();
  if (c->args.Has("json")) {
    JsonWriter w;
    w.BeginObject();
    w.Key("batchctl");
    w.BeginObject();
    w.Key("version");
    w.String(kVersion);
    w.Key("layout_version");
    w.Number(uint64_t(shm::kLayoutVersion));
    w.EndObject();
    w.Key("server");
    if (st.ok()) {
      w.BeginObject();
      w.Key("address");
      w.String(c->address);
      w.Key("version");
      w.String(st->version());
      w.Key("pid");
      w.Number(uint64_t(st->pid()));
      w.Key("uptime_seconds");
      w.Number(st->uptime_seconds());
      w.EndObject();
    } else {
      w.Null();
      w.Key("server_error");
      w.String(std::string(st.status().message()));
    }
    w.EndObject();
    printf("%s\n", w.str().c_str());
  } else {
    printf("batchctl %s (shared-memory layout version %u)\n", kVersion,
           shm::kLayoutVersion);
    if (st.ok()) {
      printf("batchd %s at %s (pid %u, up %s)\n", st->version().c_str(),
             c->address.c_str(), st->pid(),
             FormatSeconds(st->uptime_seconds()).c_str());
    }
  }
  fflush(stdout);
  if (!st.ok()) return ServerError("version", st.status());
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
  if (common->credentials != nullptr) {
    return UsageError("bench",
                      "bench's ranks connect without TLS: run it on the "
                      "daemon's node, against its unix socket");
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
  CatchInterrupts();
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
  if (command == "--version") {  // this program's alone; `version` asks
    printf("batchctl %s (shared-memory layout version %u)\n", kVersion,
           shm::kLayoutVersion);
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
    } else if (topic == "close") {
      fputs(kCloseHelp, stdout);
    } else if (topic == "drain") {
      fputs(kDrainHelp, stdout);
    } else if (topic == "plan") {
      fputs(kPlanHelp, stdout);
    } else if (topic == "version") {
      fputs(kVersionHelp, stdout);
    } else {
      return UsageError("", absl::StrCat("no command '", topic, "'"));
    }
    return kExitOk;
  }
  if (command == "status") return StatusCommand(argc - 2, argv + 2);
  if (command == "shutdown") return ShutdownCommand(argc - 2, argv + 2);
  if (command == "bench") return BenchCommand(argc - 2, argv + 2);
  if (command == "close") return CloseCommand(argc - 2, argv + 2);
  if (command == "drain") return DrainCommand(argc - 2, argv + 2);
  if (command == "plan") return PlanCommand(argc - 2, argv + 2);
  if (command == "version") return VersionCommand(argc - 2, argv + 2);
  return UsageError("", absl::StrCat("no command '", command, "'"));
}

}  // namespace
}  // namespace batchd

int main(int argc, char** argv) { return batchd::Main(argc, argv); }
