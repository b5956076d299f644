// Flags and the TOML config file; see config.h.
#include "server/config.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <toml++/toml.h>

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <limits>
#include <sstream>
#include <toml++/toml.h>
#include <type_traits>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/groups.h"
#include "ring/shm_layout.h"
#include "server/config_check.h"
#include "workloads/registry.h"

namespace batchd {

namespace {

enum class Kind { kString, kInt, kDouble, kBool };

struct Flag {
  const char* name;
  Kind kind;
  const char* value;  // placeholder in --help
  const char* help;
  std::function<absl::Status(DaemonConfig*, const std::string&)> set;
  std::function<std::string(const DaemonConfig&)> get;
};

// `hi` is the largest value the field holds, and at most INT64_MAX: TOML
// integers are signed 64-bit, and --print-config must write a file that
// loads back.
absl::Status ParseU64(const std::string& flag, const std::string& v,
                      uint64_t lo, uint64_t hi, uint64_t* out) {
  hi = std::min<uint64_t>(hi, std::numeric_limits<int64_t>::max());
  if (!absl::SimpleAtoi(v, out) || *out < lo || *out > hi) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, " wants an integer from ", lo, " to ", hi,
                     ", not '", v, "'"));
  }
  return absl::OkStatus();
}

// Durations in seconds; finite and at most ~31 years, so that the core's
// conversions to nanoseconds cannot overflow.
absl::Status ParseDouble(const std::string& flag, const std::string& v,
                         double* out) {
  if (!absl::SimpleAtod(v, out) || !(*out >= 0 && *out <= 1e9)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--", flag, " wants a number of seconds from 0 to 1e9, not '", v, "'"));
  }
  return absl::OkStatus();
}

absl::Status ParseBool(const std::string& flag, const std::string& v,
                       bool* out) {
  if (v == "true" || v == "1" || v == "yes") {
    *out = true;
  } else if (v == "false" || v == "0" || v == "no") {
    *out = false;
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, " wants true or false, not '", v, "'"));
  }
  return absl::OkStatus();
}

#define U64_FLAG(NAME, FIELD, LO, VALUE, HELP)                                \
  Flag {                                                                      \
    NAME, Kind::kInt, VALUE, HELP,                                            \
        [](DaemonConfig* c, const std::string& v) {                           \
          uint64_t n;                                                         \
          absl::Status s = ParseU64(                                          \
              NAME, v, LO,                                                    \
              uint64_t(std::numeric_limits<                                   \
                       std::remove_reference_t<decltype(c->FIELD)>>::max()),  \
              &n);                                                            \
          if (s.ok()) c->FIELD = decltype(c->FIELD)(n);                       \
          return s;                                                           \
        },                                                                    \
        [](const DaemonConfig& c) { return absl::StrCat(uint64_t(c.FIELD)); } \
  }
// An integer flag that sizes threads or other resources: values above `HI`
// are refused, naming the flag and the bound.
#define BOUNDED_FLAG(NAME, FIELD, LO, HI, VALUE, HELP)                        \
  Flag {                                                                      \
    NAME, Kind::kInt, VALUE, HELP,                                            \
        [](DaemonConfig* c, const std::string& v) {                           \
          uint64_t n;                                                         \
          absl::Status s = ParseU64(NAME, v, LO, HI, &n);                     \
          if (s.ok()) c->FIELD = decltype(c->FIELD)(n);                       \
          return s;                                                           \
        },                                                                    \
        [](const DaemonConfig& c) { return absl::StrCat(uint64_t(c.FIELD)); } \
  }
#define DOUBLE_FLAG(NAME, FIELD, VALUE, HELP)                             \
  Flag {                                                                  \
    NAME, Kind::kDouble, VALUE, HELP,                                     \
        [](DaemonConfig* c, const std::string& v) {                       \
          return ParseDouble(NAME, v, &c->FIELD);                         \
        },                                                                \
        [](const DaemonConfig& c) { return absl::StrCat(c.FIELD); }       \
  }
#define STRING_FLAG(NAME, FIELD, VALUE, HELP)                             \
  Flag {                                                                  \
    NAME, Kind::kString, VALUE, HELP,                                     \
        [](DaemonConfig* c, const std::string& v) {                       \
          c->FIELD = v;                                                   \
          return absl::OkStatus();                                        \
        },                                                                \
        [](const DaemonConfig& c) { return c.FIELD; }                     \
  }

// A flag of a byte count or auto: CoreOptions::kAutoRingBytes, a bound the
// core works out when it starts (no count may spell it).
Flag AutoBytesFlag(const char* name, uint64_t CoreOptions::*field,
                   const char* help) {
  return Flag{
      name,
      Kind::kString,
      "BYTES",
      help,
      [name, field](DaemonConfig* c, const std::string& v) {
        uint64_t n = CoreOptions::kAutoRingBytes;
        if (v != "auto" &&
            (!absl::SimpleAtoi(v, &n) || n == CoreOptions::kAutoRingBytes)) {
          return absl::InvalidArgumentError(absl::StrCat(
              "--", name, " wants a byte count or auto, not '", v, "'"));
        }
        c->core.*field = n;
        return absl::OkStatus();
      },
      [field](const DaemonConfig& c) {
        return c.core.*field == CoreOptions::kAutoRingBytes
                   ? std::string("auto")
                   : absl::StrCat(c.core.*field);
      }};
}

// The most threads --threads and --readahead-threads may ask for.
constexpr uint64_t kMaxThreadsFlag = 1024;

// Where the daemon listens, what it reads and how many threads it uses.
std::vector<Flag> ServingFlags() {
  return {
      STRING_FLAG("listen", listen, "ADDR",
                  "where the gRPC control plane listens: unix:///path or "
                  "tcp://127.0.0.1:PORT (TCP binds loopback only unless "
                  "--allow-remote). Default: unix:///run/batchd/batchd.sock"),
      STRING_FLAG("data-root", core.data_root, "DIR",
                  "data paths of stream specs are confined to DIR ('..' "
                  "and symlinks out of it are refused); a caller reads "
                  "through batchd only what its own uid and groups could "
                  "read (TCP callers: what any local user could). "
                  "Default: the current directory"),
      U64_FLAG("max-data-file-bytes", core.max_data_file_bytes, 1, "BYTES",
               "no data file larger than BYTES is read: a stream that needs "
               "one is refused at OpenStream, naming the file, its size "
               "and this flag, before any pass over it (a sparse file made "
               "with truncate claims terabytes at no cost). Default: "
               "274877906944 (256 GiB, five times a Criteo 1TB day file)"),
      Flag{"cache-dir", Kind::kString, "DIR",
           "persistent cache of what batchd learns about a data set "
           "(its indexes, such as text line offsets, and WMT token "
           "lengths), keyed by the files' identity and the options, so that a "
           "restart does not index or tokenize again. Created mode 0700; "
           "refused when it is a symlink or another user could write into "
           "it. '': no cache. Default: /var/cache/batchd for root, else "
           "$XDG_CACHE_HOME/batchd or ~/.cache/batchd ($CACHE_DIRECTORY "
           "under systemd)",
           [](DaemonConfig* c, const std::string& v) {
             c->cache_dir = v;
             c->cache_dir_given = true;
             return absl::OkStatus();
           },
           [](const DaemonConfig& c) { return c.cache_dir; }},
      BOUNDED_FLAG("threads", core.threads, 0, kMaxThreadsFlag, "N",
                   "worker threads shared by every stream and rank; 0: the "
                   "cores this process may use; at most 1024. Default: 0"),
      Flag{"index-threads", Kind::kInt, "N",
           "threads that index data and count epochs for every stream (WMT's "
           "length pass, an epoch's first windows, ImageFolder listings, "
           "TFRecord shard opens, model loads), started once, in each of two "
           "classes: serving work and background passes (nice +10); no "
           "stream option starts more (WMT's index_threads only bounds a "
           "stream's share); 0: the cores this process may use; at most "
           "256. Default: 0",
           [](DaemonConfig* c, const std::string& v) {
             uint64_t n;
             absl::Status s = ParseU64("index-threads", v, 0, 256, &n);
             if (s.ok()) c->core.index_threads = int(n);
             return s;
           },
           [](const DaemonConfig& c) {
             return absl::StrCat(c.core.index_threads);
           }},
      U64_FLAG("max-model-bytes", core.max_model_bytes, 1, "BYTES",
               "memory that loaded SentencePiece models may take, over all "
               "streams (a model shared by streams counts once; its share is "
               "estimated from its pieces and bytes); a stream whose model "
               "would exceed it is refused. Default: 1073741824 (1 GiB)")};
}

// Rings, streams and what one user may hold.
std::vector<Flag> StreamFlags() {
  return {
      STRING_FLAG("shm-prefix", core.shm_prefix, "NAME",
                  "first part of segment names "
                  "(/dev/shm/NAME.<uid>.<owner>.<stream>.<rank>.<random>): "
                  "1 to 128 characters of A-Z a-z 0-9 _ -. Default: "
                  "batchd"),
      STRING_FLAG("shm-group", shm_group, "GROUP",
                  "ignored (a warning): a ring is its client's uid's alone "
                  "(mode 0600 and a POSIX ACL entry for that uid), never a "
                  "group's. Default: none"),
      BOUNDED_FLAG("slots", core.default_slots, 1, shm::kMaxSlots, "N",
                   "ring slots per rank when a spec asks for 0; at most "
                   "1024, what a ring holds. Default: 4"),
      DOUBLE_FLAG("client-stale-seconds", core.client_stale_seconds, "S",
                  "a client whose process the daemon cannot see (TCP, "
                  "another pid namespace) whose heartbeat is older than S "
                  "(or from the future) is taken as dead. Default: 10"),
      DOUBLE_FLAG("idle-stream-seconds", core.idle_stream_seconds, "S",
                  "forget a stream none of whose ranks has been attached "
                  "for S seconds. Default: 300"),
      U64_FLAG("max-streams", core.max_streams, 1, "N",
               "streams served at once. Default: 64"),
      U64_FLAG("max-stream-bytes", core.max_stream_bytes, 0, "BYTES",
               "ring bytes one stream may hold on this node; 0: no limit. "
               "Default: 0"),
      AutoBytesFlag("max-ring-bytes", &CoreOptions::max_total_bytes,
                    "ring bytes of all streams together; auto: half of "
                    "/dev/shm's size when batchd starts, so that no client "
                    "can fill the node's shared memory; 0: no limit but "
                    "/dev/shm's size. Default: auto"),
      DOUBLE_FLAG("attach-timeout-seconds", core.attach_timeout_seconds, "S",
                  "free a ring that no client has mapped S seconds after "
                  "OpenStream asked for it, so that requests for rings "
                  "nobody maps cannot hold --max-streams or a drain. "
                  "Default: 60"),
      DOUBLE_FLAG("drain-timeout-seconds", core.drain_timeout_seconds, "S",
                  "a drain that still has ranks attached S seconds after it "
                  "began stops the daemon as SIGTERM does (their clients "
                  "reconnect to the daemon that follows); 0: wait for "
                  "ever. Default: 3600"),
      // Quotas per uid and the socket directory rule.
      Flag{"max-streams-per-uid", Kind::kString, "N",
           "streams one uid may own at once (TCP callers share one quota; "
           "administrators are exempt); auto: a quarter of --max-streams "
           "(at least 1); 0: no limit. Default: auto",
           [](DaemonConfig* c, const std::string& v) {
             if (v == "auto") {
               c->core.max_streams_per_uid = CoreOptions::kAutoStreams;
               return absl::OkStatus();
             }
             uint64_t n;
             absl::Status s = ParseU64("max-streams-per-uid", v, 0,
                                       CoreOptions::kAutoStreams - 1, &n);
             if (s.ok()) c->core.max_streams_per_uid = uint32_t(n);
             return s;
           },
           [](const DaemonConfig& c) {
             return c.core.max_streams_per_uid == CoreOptions::kAutoStreams
                        ? std::string("auto")
                        : absl::StrCat(c.core.max_streams_per_uid);
           }},
      AutoBytesFlag("max-ring-bytes-per-uid",
                    &CoreOptions::max_ring_bytes_per_uid,
                    "ring bytes of one uid's streams (TCP callers share one "
                    "quota; administrators are exempt); auto: a quarter of "
                    "--max-ring-bytes (of /dev/shm's size when that is 0); "
                    "0: no limit. Default: auto"),
      U64_FLAG("max-model-bytes-per-uid", core.max_model_bytes_per_uid, 0,
               "BYTES",
               "resident bytes of the models (SentencePiece) of one uid's "
               "streams (TCP callers share one quota; administrators are "
               "exempt); 0: no limit. Default: 1073741824 (1 GiB)")};
}

// Who may connect, TLS, metrics and logs.
std::vector<Flag> AccessFlags() {
  return {
      Flag{"allow-shared-socket-dir", Kind::kBool, "BOOL",
           "accept a socket directory that others may write with the "
           "sticky bit set (/tmp): refused by default, since another user "
           "can bind the socket's name there first and pass for batchd to "
           "every trainer. Default: false",
           [](DaemonConfig* c, const std::string& v) {
             return ParseBool("allow-shared-socket-dir", v,
                              &c->allow_shared_socket_dir);
           },
           [](const DaemonConfig& c) {
             return std::string(c.allow_shared_socket_dir ? "true" : "false");
           }},
      STRING_FLAG("admin-group", admin_group, "GROUP",
                  "members of this group (name or gid) may drain, shut "
                  "down, and join or close another uid's stream by naming "
                  "its owner, as root and the daemon's own user may. "
                  "Default: none"),
      Flag{"tcp-admin", Kind::kBool, "BOOL",
           "let TCP callers (who have no kernel identity; with "
           "--tls-client-ca, those with a client certificate) drain, shut "
           "down, join or close any uid's stream by naming its owner, "
           "and read any data the daemon can (without it they read only "
           "what any local user could). Default: false",
           [](DaemonConfig* c, const std::string& v) {
             return ParseBool("tcp-admin", v, &c->core.anonymous_admin);
           },
           [](const DaemonConfig& c) {
             return std::string(c.core.anonymous_admin ? "true" : "false");
           }},
      Flag{"socket-mode", Kind::kString, "OCTAL",
           "mode of the unix socket. Default: 0660",
           [](DaemonConfig* c, const std::string& v) {
             char* end = nullptr;
             const unsigned long m = strtoul(v.c_str(), &end, 8);
             if (v.empty() || *end != '\0' || m > 0777) {
               return absl::InvalidArgumentError(absl::StrCat(
                   "--socket-mode wants an octal mode such as 0660, not '",
                   v, "'"));
             }
             c->socket_mode = unsigned(m);
             return absl::OkStatus();
           },
           [](const DaemonConfig& c) {
             return absl::StrFormat("0%o", c.socket_mode);
           }},
      STRING_FLAG("socket-group", socket_group, "GROUP",
                  "group of the unix socket (name or gid). Default: the "
                  "daemon's"),
      Flag{"allow-remote", Kind::kBool, "BOOL",
           "let tcp:// listen on other than loopback; requires --tls-cert "
           "and --tls-key. Default: false",
           [](DaemonConfig* c, const std::string& v) {
             return ParseBool("allow-remote", v, &c->allow_remote);
           },
           [](const DaemonConfig& c) {
             return std::string(c.allow_remote ? "true" : "false");
           }},
      STRING_FLAG("tls-cert", tls_cert, "FILE",
                  "PEM certificate chain for TCP (with --tls-key)"),
      STRING_FLAG("tls-key", tls_key, "FILE", "PEM private key for TCP"),
      STRING_FLAG("tls-client-ca", tls_client_ca, "FILE",
                  "PEM roots: clients must present a certificate they sign"),
      STRING_FLAG("metrics-listen", metrics_listen, "HOST:PORT",
                  "serve Prometheus metrics at http://HOST:PORT/metrics "
                  "(loopback unless --allow-remote). Default: off"),
      Flag{"log-level", Kind::kString, "LEVEL",
           "debug, info, warn or error. Default: info",
           [](DaemonConfig* c, const std::string& v) {
             if (v != "debug" && v != "info" && v != "warn" && v != "error") {
               return absl::InvalidArgumentError(absl::StrCat(
                   "--log-level wants debug, info, warn or error, not '", v,
                   "'"));
             }
             c->log_level = v;
             return absl::OkStatus();
           },
           [](const DaemonConfig& c) { return c.log_level; }},
      DOUBLE_FLAG("throughput-log-seconds", core.throughput_log_seconds, "S",
                  "log a throughput line per stream every S seconds; 0: "
                  "never. Default: 60")};
}

// Read-ahead and the unix socket's connections.
std::vector<Flag> IoFlags() {
  return {
      U64_FLAG("readahead-bytes", core.readahead_bytes, 0, "BYTES",
               "bytes read ahead of decoding (buffered and in flight), "
               "shared evenly between streams, then ranks; 0: no "
               "read-ahead. Default: 268435456 (256 MiB)"),
      BOUNDED_FLAG("readahead-threads", core.readahead_threads, 1,
                   kMaxThreadsFlag, "N",
                   "I/O threads of the read-ahead: reads in flight at most, "
                   "whatever the number of streams; started when reads wait "
                   "and ended when idle; at most 1024. Default: 32"),
      U64_FLAG("share-window-bytes", core.share_window_bytes, 0, "BYTES",
               "fills kept for other streams of the same content (jobs "
               "of one spec and seed: a sweep), shared evenly between "
               "the groups that share; a job further behind than the "
               "window fills for itself. 0: no sharing. Default: "
               "536870912 (512 MiB)"),
      // Stalled storage, connections and file descriptors.
      DOUBLE_FLAG("read-stall-seconds", core.read_stall_seconds, "S",
                  "a batch that has waited S seconds for a read that has "
                  "not returned (a stalled mount) fails its stream's rank; "
                  "its client sees which file and for how long. The "
                  "stream's own reads wait; no other stream does. 0: "
                  "never. Default: 60"),
      BOUNDED_FLAG("max-connections", max_connections, 0, 1 << 20, "N",
                   "connections to the unix socket at once, over all users; "
                   "one more is closed at once. 0: auto, half of the file "
                   "descriptors (RLIMIT_NOFILE, whose soft limit batchd "
                   "raises to the hard one) up to 4096; never more than "
                   "half, so that rings and data files keep the rest. "
                   "Default: 0"),
      BOUNDED_FLAG("max-connections-per-uid", max_connections_per_uid, 1,
                   1 << 20, "N",
                   "connections to the unix socket at once of one user. "
                   "Default: 128"),
      DOUBLE_FLAG("connection-idle-seconds", connection_idle_seconds, "S",
                  "close a connection to the unix socket that has sent "
                  "nothing for S seconds (every gRPC client sends at once; "
                  "a call that waits, or a quiet client between calls, is "
                  "never cut). 0: never. Default: 30")
  };
}

// Every flag, in the order --help lists them.
const std::vector<Flag>& Flags() {
  static const std::vector<Flag>* flags = [] {
    auto* all = new std::vector<Flag>;
    for (std::vector<Flag> (*group)() :
         {ServingFlags, StreamFlags, AccessFlags, IoFlags}) {
      for (Flag& f : group()) all->push_back(std::move(f));
    }
    return all;
  }();
  return *flags;
}

}  // namespace

std::string DefaultCacheDir() {
  auto absolute = [](const char* v) { return v != nullptr && v[0] == '/'; };
  // systemd's CacheDirectory= (a list separated by ':' when it names more).
  const char* systemd = getenv("CACHE_DIRECTORY");
  if (absolute(systemd)) {
    const std::string dirs = systemd;
    return dirs.substr(0, dirs.find(':'));
  }
  if (geteuid() == 0) return "/var/cache/batchd";
  const char* xdg = getenv("XDG_CACHE_HOME");
  if (absolute(xdg)) return absl::StrCat(xdg, "/batchd");
  const char* home = getenv("HOME");
  if (absolute(home)) return absl::StrCat(home, "/.cache/batchd");
  return "";
}

namespace {

const Flag* FindFlag(const std::string& name) {
  for (const Flag& f : Flags()) {
    if (name == f.name) return &f;
  }
  return nullptr;
}

// Sets `flag` from the command line or the file; a string that cannot work
// (config_check.h) is refused first, naming the flag.
absl::Status SetFlag(const Flag& flag, const std::string& value,
                     DaemonConfig* config) {
  if (flag.kind == Kind::kString) {
    if (absl::Status s = CheckStringSetting(flag.name, value); !s.ok()) {
      return s;
    }
  }
  return flag.set(config, value);
}

}  // namespace

std::string Usage() {
  std::string out =
      "batchd - one input-pipeline server per node for data-parallel "
      "training\n\n"
      "Usage: batchd [--config FILE] [flags]\n\n"
      "batchd reads, shuffles and prepares a data set once and writes every\n"
      "local rank's slice of every global batch into a shared-memory ring of\n"
      "that rank. Trainers attach with the batchd client (C++ "
      "batchd::Loader,\n"
      "Python batchd.Loader); operators use batchctl.\n\nFlags:\n";
  for (const Flag& f : Flags()) {
    out += absl::StrFormat("  --%s %s\n", f.name, f.value);
    // Wrap the help at ~72 columns, indented.
    std::istringstream words(f.help);
    std::string word, line = "      ";
    while (words >> word) {
      if (line.size() + word.size() > 76) {
        out += line + "\n";
        line = "      ";
      }
      line += (line.size() > 6 ? " " : "") + word;
    }
    out += line + "\n";
  }
  out +=
      "  --config FILE\n"
      "      TOML file whose keys are the flag names above (data-root = "
      "\"/data\");\n"
      "      flags on the command line win\n"
      "  --print-config\n"
      "      print the merged settings as a config file and exit\n"
      "  --version, --help\n\n"
      "Workloads (a stream's workload, its splits, and its options as\n"
      "key=default (bounds)):\n" +
      WorkloadHelp() +
      "\nSignals: SIGTERM and SIGINT close every stream, unlink every "
      "segment\nand exit 0. At start, segments left by dead batchd "
      "processes are removed.\nUnder systemd (Type=notify) READY=1 is sent "
      "once the socket accepts.\nA stop held up by storage that does not "
      "answer ends 10 s after the signal,\nsegments unlinked, with exit "
      "code 1.\n\n"
      "Exit codes: 0 clean shutdown, 1 could not start (or a stop past its "
      "deadline),\n2 bad flags or config.\n";
  return out;
}

absl::Status LoadConfigFile(const std::string& path, DaemonConfig* config) {
  absl::StatusOr<std::string> text = ReadConfigFile(path);
  if (!text.ok()) return text.status();
  // Before the parser: it recurses per level of nesting.
  if (absl::Status s = CheckConfigNesting(*text, path); !s.ok()) return s;
  toml::table table;
  try {
    table = toml::parse(*text, path);
  } catch (const toml::parse_error& e) {
    return absl::InvalidArgumentError(absl::StrFormat(
        "config %s line %d: %s", path, int(e.source().begin.line),
        std::string(e.description())));
  }
  for (const auto& [key, node] : table) {
    const std::string name(key.str());
    const Flag* flag = FindFlag(name);
    if (flag == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrFormat("config %s line %d: unknown key '%s'", path,
                          int(key.source().begin.line), name));
    }
    std::string value;
    if (auto s = node.value<std::string>(); s && node.is_string()) {
      value = *s;
    } else if (node.is_integer()) {
      value = absl::StrCat(*node.value<int64_t>());
    } else if (node.is_floating_point()) {
      value = absl::StrCat(*node.value<double>());
    } else if (node.is_boolean()) {
      value = *node.value<bool>() ? "true" : "false";
    } else {
      return absl::InvalidArgumentError(absl::StrFormat(
          "config %s: key '%s' must be a string, number or boolean", path,
          name));
    }
    if (absl::Status s = SetFlag(*flag, value, config); !s.ok()) {
      return absl::InvalidArgumentError(
          absl::StrFormat("config %s line %d: %s", path,
                          int(key.source().begin.line), s.message()));
    }
  }
  return absl::OkStatus();
}

std::string ConfigToToml(const DaemonConfig& config) {
  std::string out = "# batchd settings (defaults, config file and flags)\n";
  for (const Flag& f : Flags()) {
    const std::string v = f.get(config);
    if (f.kind == Kind::kString) {
      std::ostringstream quoted;
      quoted << toml::value<std::string>(v);
      out += absl::StrCat(f.name, " = ", quoted.str(), "\n");
    } else {
      out += absl::StrCat(f.name, " = ", v, "\n");
    }
  }
  return out;
}

absl::StatusOr<std::vector<std::string>> ResolveListenAddress(
    const std::string& flag, const std::string& host_port, bool allow_remote) {
  auto refuse = [&](const std::string& why) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, " ", host_port, ": ", why));
  };
  const size_t colon = host_port.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return refuse(
        "give HOST:PORT (e.g. 127.0.0.1:9090); a bare port "
        "listens on every interface");
  }
  std::string host = host_port.substr(0, colon);
  const std::string port = host_port.substr(colon + 1);
  uint32_t port_number = 0;
  if (port.empty() || port.size() > 5 ||
      port.find_first_not_of("0123456789") != std::string::npos ||
      !absl::SimpleAtoi(port, &port_number) || port_number > 65535) {
    return refuse(
        absl::StrCat("the port '", port,
                     "' is not a decimal number up to 65535 (one "
                     "address only: no lists, no '+', no 's' or 'r' suffix)"));
  }
  bool bracketed = false;
  if (host.front() == '[') {
    if (host.size() < 3 || host.back() != ']') {
      return refuse("an IPv6 address is written [ADDRESS]:PORT");
    }
    host = host.substr(1, host.size() - 2);
    bracketed = true;
    in6_addr a6;
    if (inet_pton(AF_INET6, host.c_str(), &a6) != 1) {
      return refuse(absl::StrCat("'", host, "' is not an IPv6 address"));
    }
  } else {
    for (char c : host) {
      const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
                      (c >= '0' && c <= '9') || c == '.' || c == '-';
      if (!ok) {
        return refuse(absl::StrCat(
            "the host '", host, "' holds '", std::string(1, c),
            "': give one host name or IPv4 address (IPv6 in brackets)"));
      }
    }
  }
  addrinfo hints{};
  hints.ai_family = bracketed ? AF_INET6 : AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = bracketed ? AI_NUMERICHOST : 0;
  addrinfo* found = nullptr;
  const int rc = getaddrinfo(host.c_str(), nullptr, &hints, &found);
  if (rc != 0) {
    return refuse(
        absl::StrCat("cannot resolve '", host, "': ", gai_strerror(rc)));
  }
  std::vector<std::string> out;
  std::string remote;
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    char text[INET6_ADDRSTRLEN] = "";
    bool loopback = false;
    std::string address;
    if (a->ai_family == AF_INET) {
      const in_addr ip = reinterpret_cast<sockaddr_in*>(a->ai_addr)->sin_addr;
      inet_ntop(AF_INET, &ip, text, sizeof(text));
      loopback = (ntohl(ip.s_addr) >> 24) == 127;
      address = absl::StrCat(text, ":", port_number);
    } else if (a->ai_family == AF_INET6) {
      const in6_addr ip =
          reinterpret_cast<sockaddr_in6*>(a->ai_addr)->sin6_addr;
      inet_ntop(AF_INET6, &ip, text, sizeof(text));
      loopback = IN6_IS_ADDR_LOOPBACK(&ip) ||
                 (IN6_IS_ADDR_V4MAPPED(&ip) && ip.s6_addr[12] == 127);
      address = absl::StrCat("[", text, "]:", port_number);
    } else {
      continue;
    }
    if (!loopback && remote.empty()) remote = text;
    if (std::find(out.begin(), out.end(), address) == out.end()) {
      out.push_back(address);
    }
  }
  freeaddrinfo(found);
  // IPv4 first: where one address is bound (port 0, metrics), 127.0.0.1
  // is what clients of "localhost" try everywhere.
  std::stable_partition(out.begin(), out.end(),
                        [](const std::string& a) { return a[0] != '['; });
  if (out.empty()) return refuse(absl::StrCat("'", host, "' has no address"));
  if (!remote.empty() && !allow_remote) {
    return refuse(absl::StrCat(
        "'", host, "' resolves to ", remote,
        ", which is not loopback: loopback only unless --allow-remote"));
  }
  return out;
}

absl::Status ParseArgs(int argc, char** argv, DaemonConfig* config,
                       ParsedArgs* parsed) {
  // The file first, so that flags win whatever their order.
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    std::string path;
    if (arg == "--config" && i + 1 < argc) {
      path = argv[i + 1];
    } else if (arg.rfind("--config=", 0) == 0) {
      path = arg.substr(9);
    } else {
      continue;
    }
    if (absl::Status s = LoadConfigFile(path, config); !s.ok()) return s;
  }
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      parsed->help = true;
      continue;
    }
    if (arg == "--version") {
      parsed->version = true;
      continue;
    }
    if (arg == "--print-config") {
      parsed->print_config = true;
      continue;
    }
    if (arg.rfind("--", 0) != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("unexpected argument '", arg, "' (see batchd --help)"));
    }
    std::string name = arg.substr(2), value;
    const size_t eq = name.find('=');
    const bool has_eq = eq != std::string::npos;
    if (has_eq) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    if (name == "config") {
      if (!has_eq) ++i;
      continue;
    }
    const Flag* flag = FindFlag(name);
    if (flag == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown flag '", arg, "' (see batchd --help)"));
    }
    if (!has_eq) {
      if (flag->kind == Kind::kBool &&
          (i + 1 >= argc || std::string(argv[i + 1]).rfind("--", 0) == 0)) {
        value = "true";  // a bare boolean flag
      } else if (i + 1 >= argc) {
        return absl::InvalidArgumentError(
            absl::StrCat("--", name, " needs a value (see batchd --help)"));
      } else {
        value = argv[++i];
      }
    }
    if (absl::Status s = SetFlag(*flag, value, config); !s.ok()) return s;
  }
  if (!config->admin_group.empty()) {
    absl::StatusOr<gid_t> gid = ResolveGroup("admin-group", config->admin_group);
    if (!gid.ok()) return gid.status();
    config->core.admin_gid = *gid;
  }
  if (!config->shm_group.empty()) {
    absl::StatusOr<gid_t> gid = ResolveGroup("shm-group", config->shm_group);
    if (!gid.ok()) return gid.status();
    config->core.shm_group = *gid;
  }
  return absl::OkStatus();
}

}  // namespace batchd
