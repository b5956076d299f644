// batchctl close STREAM: CloseStream, and what the daemon said.
#include "tools/batchctl/close.h"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tools/batchctl/commands.h"
#include "tools/batchctl/control.h"

namespace batchd::batchctl {
namespace {

constexpr char kSummary[] = "close one stream and free its rings";

constexpr char kHelp[] =
    R"(Usage: batchctl close STREAM [--server ADDR] [--timeout S]
       batchctl close [flags] -- STREAM

Closes the stream named STREAM: every rank's ring is unlinked from
/dev/shm, its clients see "stream closed" at their next batch, and the
name is free for a new stream. A name that starts with "--" goes after
"--", which ends the flags: batchctl close -- --name (so may any name).

  --server ADDR  unix:///path or tcp://host:port
                 (default: $BATCHD_SERVER, else unix:///run/batchd/batchd.sock)
  --timeout S    deadline of the call in seconds (default 10)

Exit codes: 0 closed, 1 no such stream, or the server failed or could not
be reached, 2 usage error.
)";

int RunClose(int argc, char** argv) {
  absl::StatusOr<CloseArgs> args = ParseCloseArgs(argc, argv);
  if (!args.ok()) {
    return UsageError("close", std::string(args.status().message()));
  }
  Control control(args->connection);
  if (absl::Status s = control.CloseStream(args->stream); !s.ok()) {
    return ServerError("close", s);
  }
  printf("closed stream %s at %s\n", args->stream.c_str(),
         args->connection.address.c_str());
  return kExitOk;
}

}  // namespace

Command CloseCommand() { return {"close", kSummary, kHelp, RunClose}; }

absl::StatusOr<CloseArgs> ParseCloseArgs(int argc, char** argv) {
  std::unique_ptr<CLI::App> app = NewApp("close");
  ConnectionFlags connection(*app, 10);
  std::vector<std::string> operands;
  if (absl::Status s = ParseArgs(*app, argc, argv, &operands); !s.ok()) {
    return s;
  }
  if (operands.empty()) {
    return absl::InvalidArgumentError("which stream? batchctl close STREAM");
  }
  if (operands.size() > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("unexpected argument '", operands[1], "'"));
  }
  absl::StatusOr<Connection> c = connection.Resolve();
  if (!c.ok()) return c.status();
  CloseArgs args;
  args.connection = *std::move(c);
  args.stream = operands[0];
  return args;
}

}  // namespace batchd::batchctl
