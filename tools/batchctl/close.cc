// batchctl close STREAM: CloseStream, and what the daemon said.
#include "tools/batchctl/close.h"

#include <CLI/CLI.hpp>
#include <cstdio>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tools/batchctl/commands.h"
#include "tools/batchctl/control.h"
#include "tools/batchctl/output.h"

namespace batchd::batchctl {
namespace {

constexpr char kSummary[] = "close one stream and free its rings";

constexpr char kHelp[] =
    R"(Usage: batchctl close STREAM [--owner UID] [--server ADDR] [--timeout S]
                      [--json]
       batchctl close [flags] -- STREAM

Closes your stream named STREAM (streams are keyed by their owner's uid
and their name: each user's STREAM is their own): every rank's ring is
unlinked from /dev/shm, its clients see "stream closed" at their next
batch, and the name is free for a new stream. A name that starts with "--"
goes after "--", which ends the flags: batchctl close -- --name (so may
any name).

  --owner UID    close the stream STREAM of that uid ("tcp": of anonymous
                 TCP callers): for batchd's administrators only (root, the
                 daemon's user, --admin-group); `batchctl status` shows
                 each stream's owner
  --server ADDR  unix:///path or tcp://host:port
                 (default: $BATCHD_SERVER, else unix:///run/batchd/batchd.sock)
  --timeout S    deadline of the call in seconds (default 10)
  --json         print {"closed": STREAM, "owner_uid": UID or null,
                 "server": ADDR}

Exit codes: 0 closed, 1 no such stream, or the server failed or could not
be reached, 2 usage error.
)";

int RunClose(int argc, char** argv) {
  absl::StatusOr<CloseArgs> args = ParseCloseArgs(argc, argv);
  if (!args.ok()) {
    return UsageError("close", std::string(args.status().message()));
  }
  Control control(args->connection);
  if (absl::Status s = control.CloseStream(args->stream, args->owner_uid);
      !s.ok()) {
    return ServerError("close", s);
  }
  if (args->json) {
    Json out;
    out["closed"] = args->stream;
    out["owner_uid"] = args->owner_uid.has_value()
                           ? Json(uint64_t(*args->owner_uid))
                           : Json(nullptr);
    out["server"] = args->connection.address;
    printf("%s\n", DumpJson(out).c_str());
    return kExitOk;
  }
  const std::string owner = !args->owner_uid.has_value() ? std::string()
                            : *args->owner_uid == kAnonymousOwner
                                ? std::string(" of anonymous TCP callers")
                                : absl::StrCat(" of uid ", *args->owner_uid);
  printf("closed stream %s%s at %s\n", Printable(args->stream).c_str(),
         owner.c_str(), Printable(args->connection.address).c_str());
  return kExitOk;
}

}  // namespace

Command CloseCommand() { return {"close", kSummary, kHelp, RunClose}; }

absl::StatusOr<CloseArgs> ParseCloseArgs(int argc, char** argv) {
  std::unique_ptr<CLI::App> app = NewApp("close");
  ConnectionFlags connection(*app, 10);
  std::vector<std::string> operands;
  std::string owner;
  CLI::Option* owner_flag = AddString(*app, "--owner", &owner);
  bool json = false;
  app->add_flag("--json", json);
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
  args.json = json;
  if (Given(owner_flag)) {
    uint32_t uid = kAnonymousOwner;
    if (owner != "tcp" && !ParseNumber("--owner", owner, &uid).ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--owner wants a uid or tcp (anonymous TCP callers), not '", owner,
          "'"));
    }
    args.owner_uid = uid;
  }
  return args;
}

}  // namespace batchd::batchctl
