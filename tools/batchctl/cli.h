// What every batchctl command shares: exit codes, the error lines it prints,
// the command table's entry, the connection flags (--server, --timeout,
// --tls-*) and CLI11 glue that keeps batchctl's messages for numbers and
// KEY=VALUE options.
#ifndef BATCHD_TOOLS_BATCHCTL_CLI_H_
#define BATCHD_TOOLS_BATCHCTL_CLI_H_

#include <grpcpp/security/credentials.h>

#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "base/address.h"

namespace CLI {
class App;
class Option;
}  // namespace CLI

namespace batchd::batchctl {

// Exit codes, as every --help states them.
constexpr int kExitOk = 0;
constexpr int kExitServer = 1;
constexpr int kExitUsage = 2;
constexpr int kExitNoShm = 3;  // plan: /dev/shm has too little free now

// One entry of the command table (main.cc). `run` gets the arguments from the
// command's name on: argv[0] is the name, as a program's argv[0] is.
struct Command {
  const char* name;
  // The lines under "Commands:" in batchctl --help; lines after the first
  // are continuations and are indented under it.
  const char* summary;
  const char* help;  // batchctl help NAME, batchctl NAME --help
  int (*run)(int argc, char** argv);
};

// Prints "batchctl CMD: message" and where the help is; returns kExitUsage.
int UsageError(const std::string& command, const std::string& message);
// Prints "batchctl CMD: message"; returns kExitServer.
int ServerError(const std::string& command, const absl::Status& s);

// True when --help or -h comes before a "--" that ends the flags.
bool WantsHelp(int argc, char** argv);

// batchctl's global flags, which every command takes, before or after its
// name: the connection flags (--server, --timeout, --tls-ca, --tls-cert,
// --tls-key, each with a value) and --json.
bool IsGlobalFlag(const std::string& arg);

// batchctl's argv with the global flags that stand before the command moved
// right after it, so that `batchctl --server X status` is `batchctl status
// --server X` (where a flag given on both sides, the one after the command
// wins). The command is the first argument that is not a global flag or its
// value; --help, -h and --version count as one (with `help`, they drop the
// global flags before them, which they do not use). An argument that starts
// with "-" and is not a global flag before the command is an error, as is a
// global flag without its value or no command at all.
absl::StatusOr<std::vector<std::string>> CommandFirst(int argc, char** argv);

// Parses argv (argv[0] the command's name) into `app`'s options; CLI11's
// parse errors become InvalidArgument with its message. An unknown "--flag"
// is an error; other arguments that are not flags' values (operands, e.g. a
// stream name) go to `operands` in order, or are an error when it is null.
// A single dash never starts a batchctl flag, so "-name" is an operand;
// after "--" everything is, "--name" too.
absl::Status ParseArgs(CLI::App& app, int argc, char** argv,
                       std::vector<std::string>* operands = nullptr);

// A CLI::App as every command wants it: no help flag of its own (the help
// texts are batchctl's), a repeated flag keeps its last value, what it does
// not know is left to ParseArgs.
std::unique_ptr<CLI::App> NewApp(const std::string& command);

// "--name VALUE" into `out`; an Option so that Given() can tell it was there.
CLI::Option* AddString(CLI::App& app, const std::string& name,
                       std::string* out);

// True when the flag was on the command line.
bool Given(const CLI::Option* flag);

// A flag's value as a number: unsigned types refuse a sign, doubles take
// what absl::SimpleAtod takes. `flag` names it in the error ("--steps").
template <typename T>
absl::Status ParseNumber(const std::string& flag, const std::string& value,
                         T* out) {
  bool ok;
  if constexpr (std::is_floating_point_v<T>) {
    ok = absl::SimpleAtod(value, out);
  } else {
    ok = !value.empty() && value[0] != '-' && absl::SimpleAtoi(value, out);
  }
  if (!ok) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, " wants a number, not '", value, "'"));
  }
  return absl::OkStatus();
}

// ParseNumber of a string flag's value when it was given; `out` unchanged
// otherwise.
template <typename T>
absl::Status ParseNumberFlag(const CLI::Option* flag,
                             const std::string& flag_name,
                             const std::string& value, T* out) {
  if (!Given(flag)) return absl::OkStatus();
  return ParseNumber(flag_name, value, out);
}

// --option KEY=VALUE arguments as a map (a later KEY wins).
absl::StatusOr<std::map<std::string, std::string>> ParseKeyValues(
    const std::vector<std::string>& pairs);

// "unix:///path" → "unix:/path", "tcp://host:port" → "host:port"; gRPC's own
// "unix:path" and "host:port" forms pass through.
absl::StatusOr<std::string> GrpcTarget(const std::string& address);

// Where and how to reach the daemon.
struct Connection {
  std::string address;  // as the user wrote it (or the default)
  std::string target;   // in gRPC's terms
  double timeout = 10;  // seconds, each call's deadline
  // TLS credentials when --tls-ca (or $BATCHD_TLS_CA) is given, else null.
  std::shared_ptr<grpc::ChannelCredentials> credentials;
};

// --server, --timeout, --tls-ca, --tls-cert, --tls-key on `app`; Resolve()
// after parsing applies the environment ($BATCHD_SERVER, $BATCHD_TLS_*) and
// reads the TLS files. `app` must outlive this.
class ConnectionFlags {
 public:
  ConnectionFlags(CLI::App& app, double default_timeout);
  absl::StatusOr<Connection> Resolve() const;

 private:
  const double default_timeout_;
  std::string server_, timeout_, tls_ca_, tls_cert_, tls_key_;
  CLI::Option* server_flag_;
  CLI::Option* timeout_flag_;
  CLI::Option* tls_ca_flag_;
  CLI::Option* tls_cert_flag_;
  CLI::Option* tls_key_flag_;
};

// ParseArgs(app, argc, argv) for a command without operands, then
// flags.Resolve(): the connection, or the first of their errors.
absl::StatusOr<Connection> ParseConnection(CLI::App& app, int argc, char** argv,
                                           const ConnectionFlags& flags);

}  // namespace batchd::batchctl

#endif  // BATCHD_TOOLS_BATCHCTL_CLI_H_
