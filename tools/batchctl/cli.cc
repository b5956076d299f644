// The parts every batchctl command shares; see cli.h.
#include "tools/batchctl/cli.h"

#include <grpcpp/security/credentials.h>

#include <CLI/CLI.hpp>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/format.h"

namespace batchd::batchctl {
namespace {

// The flag's value when given, else the environment variable's, else "".
std::string FlagOrEnv(const CLI::Option* flag, const std::string& value,
                      const char* env) {
  if (Given(flag)) return value;
  const char* v = getenv(env);
  return v != nullptr ? v : "";
}

absl::StatusOr<std::string> ReadFileContents(const std::string& flag,
                                             const std::string& path) {
  FILE* f = fopen(path.c_str(), "re");
  if (f == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " ", path, ": ", strerror(errno)));
  }
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
  const bool failed = ferror(f) != 0;
  fclose(f);
  if (failed) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " ", path, ": read error"));
  }
  return out;
}

}  // namespace

int UsageError(const std::string& command, const std::string& message) {
  fprintf(stderr, "batchctl%s%s: %s\n(see batchctl %s--help)\n",
          command.empty() ? "" : " ", command.c_str(),
          batchd::Printable(message).c_str(),
          command.empty() ? "" : (command + " ").c_str());
  return kExitUsage;
}

int ServerError(const std::string& command, const absl::Status& s) {
  // The message may name a data path or an option another user chose.
  fprintf(stderr, "batchctl %s: %s\n", command.c_str(),
          batchd::Printable(s.message()).c_str());
  return kExitServer;
}

bool WantsHelp(int argc, char** argv) {
  for (int i = 0; i < argc; ++i) {
    // After "--" come stream names, and "--help" may be one.
    if (strcmp(argv[i], "--") == 0) return false;
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
      return true;
    }
  }
  return false;
}

namespace {

// The global flags that take a value ("--server X" or "--server=X").
constexpr const char* kGlobalValueFlags[] = {
    "--server", "--timeout", "--tls-ca", "--tls-cert", "--tls-key"};

// The flag's name: "--server" of "--server=X".
std::string FlagName(const std::string& arg) {
  return arg.substr(0, arg.find('='));
}

bool TakesValue(const std::string& name) {
  for (const char* f : kGlobalValueFlags) {
    if (name == f) return true;
  }
  return false;
}

}  // namespace

bool IsGlobalFlag(const std::string& arg) {
  const std::string name = FlagName(arg);
  return TakesValue(name) || arg == "--json";
}

absl::StatusOr<std::vector<std::string>> CommandFirst(int argc, char** argv) {
  std::vector<std::string> globals;
  int i = 1;
  for (; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h" || arg == "--version") break;
    if (!IsGlobalFlag(arg)) {
      if (arg.rfind("-", 0) == 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "'", FlagName(arg),
            "' before the command is not a global flag "
            "(--server, --timeout, --tls-ca, --tls-cert, --tls-key, --json); "
            "a command's own flags go after its name"));
      }
      break;
    }
    globals.push_back(arg);
    if (TakesValue(arg) && arg.find('=') == std::string::npos) {
      if (i + 1 >= argc) {
        return absl::InvalidArgumentError(absl::StrCat(arg, " needs a value"));
      }
      globals.push_back(argv[++i]);
    }
  }
  if (i >= argc) {
    return absl::InvalidArgumentError(
        "no command given (batchctl [global flags] COMMAND [flags])");
  }
  std::vector<std::string> out = {argv[0], argv[i]};
  // Help and --version ask no daemon: their global flags mean nothing.
  const std::string command = argv[i];
  const bool asks_no_daemon = command == "help" || command == "--help" ||
                              command == "-h" || command == "--version";
  if (!asks_no_daemon) out.insert(out.end(), globals.begin(), globals.end());
  out.insert(out.end(), argv + i + 1, argv + argc);
  return out;
}

std::unique_ptr<CLI::App> NewApp(const std::string& command) {
  auto app = std::make_unique<CLI::App>("", "batchctl " + command);
  app->set_help_flag();  // batchctl's own help texts answer --help
  app->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  // CLI11 would read "-name" as short flags (batchctl has none) and word its
  // own errors; ParseArgs sorts what is left over.
  app->allow_extras();
  return app;
}

absl::Status ParseArgs(CLI::App& app, int argc, char** argv,
                       std::vector<std::string>* operands) {
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return absl::InvalidArgumentError(e.what());
  }
  // remaining() keeps the order and the "--" that ended the flags.
  bool after_dashes = false;
  for (const std::string& arg : app.remaining()) {
    if (arg == "--" && !after_dashes) {
      after_dashes = true;
      continue;
    }
    if (!after_dashes && arg.rfind("--", 0) == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown flag '", arg.substr(0, arg.find('=')), "'"));
    }
    if (operands == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("unexpected argument '", arg, "'"));
    }
    operands->push_back(arg);
  }
  return absl::OkStatus();
}

CLI::Option* AddString(CLI::App& app, const std::string& name,
                       std::string* out) {
  // Values that start with '-' (a negative number, "-x") stay values; one
  // value per occurrence, so "--option a=1 b=2" leaves b=2 unexpected.
  return app.add_option(name, *out)->allow_extra_args(false);
}

bool Given(const CLI::Option* flag) {
  return flag != nullptr && flag->count() > 0;
}

absl::StatusOr<std::map<std::string, std::string>> ParseKeyValues(
    const std::vector<std::string>& pairs) {
  std::map<std::string, std::string> out;
  for (const std::string& kv : pairs) {
    const size_t eq = kv.find('=');
    if (eq == std::string::npos || eq == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--option wants KEY=VALUE, not '", kv, "'"));
    }
    out[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  return out;
}

absl::StatusOr<std::string> GrpcTarget(const std::string& address) {
  const Address a = ParseAddress(address);
  if (address.rfind("unix://", 0) == 0 &&
      (a.socket_path.empty() || a.socket_path[0] != '/')) {
    return absl::InvalidArgumentError(absl::StrCat(
        "server address '", address,
        "': unix:// wants an absolute path, e.g. ", kDefaultServerAddress));
  }
  if (a.scheme == Address::Scheme::kTcp) {
    const size_t colon = a.host_port.rfind(':');
    uint32_t port;
    if (colon == std::string::npos || colon == 0 ||
        !absl::SimpleAtoi(a.host_port.substr(colon + 1), &port) || port == 0 ||
        port > 65535) {
      return absl::InvalidArgumentError(
          absl::StrCat("server address '", address,
                       "': tcp:// wants host:port, e.g. tcp://127.0.0.1:7070"));
    }
  }
  if (a.scheme != Address::Scheme::kOther ||
      (address.find("://") == std::string::npos &&
       address.find(':') != std::string::npos)) {
    return a.grpc_target;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("server address '", address,
                   "': use unix:///path/to/socket or tcp://host:port"));
}

ConnectionFlags::ConnectionFlags(CLI::App& app, double default_timeout)
    : default_timeout_(default_timeout),
      server_flag_(AddString(app, "--server", &server_)),
      timeout_flag_(AddString(app, "--timeout", &timeout_)),
      tls_ca_flag_(AddString(app, "--tls-ca", &tls_ca_)),
      tls_cert_flag_(AddString(app, "--tls-cert", &tls_cert_)),
      tls_key_flag_(AddString(app, "--tls-key", &tls_key_)) {}

absl::StatusOr<Connection> ConnectionFlags::Resolve() const {
  Connection c;
  if (Given(server_flag_)) {
    c.address = server_;
  } else {
    const char* env = getenv("BATCHD_SERVER");
    c.address = env != nullptr && *env != '\0' ? env : kDefaultServerAddress;
  }
  absl::StatusOr<std::string> target = GrpcTarget(c.address);
  if (!target.ok()) return target.status();
  c.target = *target;
  c.timeout = default_timeout_;
  if (absl::Status s =
          ParseNumberFlag(timeout_flag_, "--timeout", timeout_, &c.timeout);
      !s.ok()) {
    return s;
  }
  if (!(c.timeout > 0)) {
    return absl::InvalidArgumentError("--timeout must be positive");
  }
  if (c.target.rfind("unix:", 0) == 0) {
    // A unix socket is guarded by its file mode; $BATCHD_TLS_* are for
    // tcp:// addresses and do not apply.
    if (Given(tls_ca_flag_) || Given(tls_cert_flag_) || Given(tls_key_flag_)) {
      return absl::InvalidArgumentError(
          "--tls-ca, --tls-cert and --tls-key are for tcp:// addresses");
    }
    return c;
  }
  // TLS towards a daemon that serves TCP with --tls-cert: --tls-ca verifies
  // it; --tls-cert and --tls-key answer its --tls-client-ca.
  const std::string ca = FlagOrEnv(tls_ca_flag_, tls_ca_, "BATCHD_TLS_CA");
  const std::string cert =
      FlagOrEnv(tls_cert_flag_, tls_cert_, "BATCHD_TLS_CERT");
  const std::string key = FlagOrEnv(tls_key_flag_, tls_key_, "BATCHD_TLS_KEY");
  if (ca.empty()) {
    if (!cert.empty() || !key.empty()) {
      return absl::InvalidArgumentError(
          "--tls-cert and --tls-key need --tls-ca (the roots that sign the "
          "daemon's certificate)");
    }
    return c;
  }
  if (cert.empty() != key.empty()) {
    return absl::InvalidArgumentError("--tls-cert and --tls-key go together");
  }
  grpc::SslCredentialsOptions ssl;
  absl::StatusOr<std::string> roots = ReadFileContents("--tls-ca", ca);
  if (!roots.ok()) return roots.status();
  ssl.pem_root_certs = *roots;
  if (!cert.empty()) {
    absl::StatusOr<std::string> chain = ReadFileContents("--tls-cert", cert);
    if (!chain.ok()) return chain.status();
    absl::StatusOr<std::string> pkey = ReadFileContents("--tls-key", key);
    if (!pkey.ok()) return pkey.status();
    ssl.pem_cert_chain = *chain;
    ssl.pem_private_key = *pkey;
  }
  c.credentials = grpc::SslCredentials(ssl);
  return c;
}

absl::StatusOr<Connection> ParseConnection(CLI::App& app, int argc, char** argv,
                                           const ConnectionFlags& flags) {
  if (absl::Status s = ParseArgs(app, argc, argv); !s.ok()) return s;
  return flags.Resolve();
}

}  // namespace batchd::batchctl
