// batchctl shutdown: Shutdown, then wait until the daemon no longer answers
// and its process (when visible from here) has exited.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdint>
#include <cstdio>

#include "absl/strings/str_format.h"
#include "base/clock.h"
#include "tools/batchctl/commands.h"
#include "tools/batchctl/control.h"
#include "tools/batchctl/output.h"

namespace batchd::batchctl {
namespace {

constexpr char kSummary[] = "close every stream and stop the daemon";

constexpr char kHelp[] =
    R"(Usage: batchctl shutdown [--server ADDR] [--timeout S] [--json]

Asks the daemon to close every stream (clients see "stream closed"),
unlink every shared-memory segment and exit; then waits up to S seconds
until it no longer answers and, when its process is visible from here,
until that process has exited.

  --server ADDR  unix:///path or tcp://host:port
                 (default: $BATCHD_SERVER, else unix:///run/batchd/batchd.sock)
  --timeout S    seconds to wait for the call and for the exit (default 10)
  --json         print {"server": ADDR, "pid": PID, "stopped": true} on
                 stdout once it stopped

Exit codes: 0 the daemon stopped, 1 the server failed, could not be
reached or did not stop in time, 2 usage error.
)";

int RunShutdown(int argc, char** argv) {
  std::unique_ptr<CLI::App> app = NewApp("shutdown");
  ConnectionFlags connection(*app, 10);
  bool json = false;
  app->add_flag("--json", json);
  absl::StatusOr<Connection> c = ParseConnection(*app, argc, argv, connection);
  if (!c.ok()) {
    return UsageError("shutdown", std::string(c.status().message()));
  }
  Control control(*c);
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
  if (json) {
    Json out;
    out["server"] = c->address;
    out["pid"] = uint64_t(pid);
    out["stopped"] = true;
    printf("%s\n", DumpJson(out).c_str());
  }
  fprintf(stderr, "batchctl shutdown: batchd (pid %u) at %s stopped\n", pid,
          Printable(c->address).c_str());
  return kExitOk;
}

}  // namespace

Command ShutdownCommand() { return {"shutdown", kSummary, kHelp, RunShutdown}; }

}  // namespace batchd::batchctl
