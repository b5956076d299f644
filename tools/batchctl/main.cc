// batchctl: the operator's command line for a batchd daemon. This file holds
// the command table and the dispatch; each command lives in its own file
// (status.cc, close.cc, drain.cc, shutdown.cc, plan.cc, version.cc,
// bench.cc) with its help text, and cli.h, control.h and output.h are what
// they share.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "tools/batchctl/commands.h"

namespace batchd::batchctl {
namespace {

// Every command, in the order batchctl --help lists them.
const std::vector<Command>& Commands() {
  static const std::vector<Command> commands = {
      StatusCommand(), CloseCommand(),   DrainCommand(), ShutdownCommand(),
      PlanCommand(),   VersionCommand(), BenchCommand(),
  };
  return commands;
}

const Command* FindCommand(const std::string& name) {
  for (const Command& c : Commands()) {
    if (name == c.name) return &c;
  }
  return nullptr;
}

// "  name       summary", continuation lines under the summary's column.
std::string CommandLine(const std::string& name, const std::string& summary) {
  std::string out;
  bool first = true;
  for (const absl::string_view line : absl::StrSplit(summary, '\n')) {
    absl::StrAppendFormat(&out, "  %-10s %s\n", first ? name : "", line);
    first = false;
  }
  return out;
}

std::string MainHelp() {
  std::string out =
      "batchctl - operate a batchd daemon\n"
      "\n"
      "Usage: batchctl [global flags] <command> [flags]\n"
      "\n"
      "Commands:\n";
  for (const Command& c : Commands()) out += CommandLine(c.name, c.summary);
  out += CommandLine("help CMD",
                     "print the help of CMD (also: batchctl CMD --help)");
  out += CommandLine("--version",
                     "print batchctl's version (without asking the daemon)");
  out += R"(
Global flags, which every command takes before or after its name
(batchctl --server X status is batchctl status --server X; given on both
sides, the one after the name wins):
  --server ADDR  unix:///path/to/socket or tcp://host:port. Default:
                 $BATCHD_SERVER, else unix:///run/batchd/batchd.sock
  --timeout S    deadline of each call in seconds (each command's help
                 gives its default)
  --json         print the answer as JSON
  --tls-ca FILE, --tls-cert FILE, --tls-key FILE   (below)

A daemon that serves TCP with TLS (batchd --tls-cert) is reached with
--tls-ca FILE (PEM roots that sign its certificate) and, when it asks for
client certificates (--tls-client-ca), --tls-cert FILE --tls-key FILE;
defaults: $BATCHD_TLS_CA, $BATCHD_TLS_CERT, $BATCHD_TLS_KEY (unix sockets
ignore them). bench takes none: its ranks map rings on this node.

Exit codes: 0 ok, 1 the server failed or could not be reached,
2 usage error, 3 (plan only) /dev/shm has too little free space.
)";
  return out;
}

int Main(int raw_argc, char** raw_argv) {
  if (raw_argc < 2) {
    fputs(MainHelp().c_str(), stderr);
    return kExitUsage;
  }
  // Global flags before the command go right after it.
  absl::StatusOr<std::vector<std::string>> args =
      CommandFirst(raw_argc, raw_argv);
  if (!args.ok()) return UsageError("", std::string(args.status().message()));
  std::vector<char*> pointers;
  for (std::string& a : *args) pointers.push_back(a.data());
  pointers.push_back(nullptr);
  const int argc = int(args->size());
  char** const argv = pointers.data();
  const std::string command = argv[1];
  if (command == "--help" || command == "-h") {
    fputs(MainHelp().c_str(), stdout);
    return kExitOk;
  }
  if (command == "--version") {  // this program's alone; `version` asks
    fputs(VersionLine().c_str(), stdout);
    return kExitOk;
  }
  if (command == "help") {
    const std::string topic = argc > 2 ? argv[2] : "";
    if (topic.empty()) {
      fputs(MainHelp().c_str(), stdout);
      return kExitOk;
    }
    const Command* c = FindCommand(topic);
    if (c == nullptr) {
      return UsageError("", absl::StrCat("no command '", topic, "'"));
    }
    fputs(c->help, stdout);
    return kExitOk;
  }
  const Command* c = FindCommand(command);
  if (c == nullptr) {
    return UsageError("", absl::StrCat("no command '", command, "'"));
  }
  if (WantsHelp(argc - 1, argv + 1)) {
    fputs(c->help, stdout);
    return kExitOk;
  }
  return c->run(argc - 1, argv + 1);
}

}  // namespace
}  // namespace batchd::batchctl

int main(int argc, char** argv) { return batchd::batchctl::Main(argc, argv); }
