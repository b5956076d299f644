// batchctl drain: the daemon refuses new streams and exits once no rank is
// attached; --wait follows it until it has.
#include <CLI/CLI.hpp>
#include <cstdint>
#include <cstdio>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/clock.h"
#include "tools/batchctl/commands.h"
#include "tools/batchctl/control.h"
#include "tools/batchctl/interrupt.h"
#include "tools/batchctl/output.h"

namespace batchd::batchctl {
namespace {

constexpr char kSummary[] =
    "refuse new streams; the daemon exits once no rank is attached";

constexpr char kHelp[] =
    R"(Usage: batchctl drain [--server ADDR] [--timeout S] [--wait [SECONDS]]
                      [--json]

Puts the daemon into draining: it refuses every new stream (OpenStream
fails with "batchd is draining"), keeps serving the ranks attached now,
and exits once none is attached (a clean exit: status 0, so a service
manager does not restart it), or once --drain-timeout-seconds (default
3600) have passed with ranks still attached: it then stops as on SIGTERM
and their clients reconnect to the daemon that follows. Prints the ranks attached when the call
returned. Draining cannot be undone; `batchctl shutdown` stops at once.

  --server ADDR      unix:///path or tcp://host:port
                     (default: $BATCHD_SERVER, else
                     unix:///run/batchd/batchd.sock)
  --timeout S        deadline of each call in seconds (default 10)
  --wait [SECONDS]   then wait until the daemon has exited, at most
                     SECONDS (default: for ever), printing the attached
                     ranks whenever their number changes
  --json             print JSON lines instead: {"server", "pid",
                     "draining": true, "attached_ranks"}, then with --wait
                     {"time", "attached_ranks"} at each change and
                     {"pid", "exited": true} at the end

Exit codes: 0 draining (with --wait: the daemon exited), 1 the server
failed or could not be reached (with --wait: or did not exit in time, or
the wait was interrupted), 2 usage error.
)";

// Counts the ranks attached in `st`.
uint32_t AttachedRanks(const v1::GetStatusResponse& st) {
  uint32_t n = 0;
  for (const v1::StreamStatus& s : st.streams()) {
    for (const v1::RankStatus& r : s.ranks()) n += r.attached() ? 1 : 0;
  }
  return n;
}

int RunDrain(int argc, char** argv) {
  std::unique_ptr<CLI::App> app = NewApp("drain");
  ConnectionFlags connection(*app, 10);
  std::string wait_value;
  CLI::Option* wait_flag =
      app->add_option("--wait", wait_value)->expected(0, 1);
  bool json = false;
  app->add_flag("--json", json);
  absl::StatusOr<Connection> c = ParseConnection(*app, argc, argv, connection);
  if (!c.ok()) return UsageError("drain", std::string(c.status().message()));
  const bool wait = Given(wait_flag);
  double wait_seconds = 0;  // 0: for ever
  if (!wait_value.empty()) {
    if (!absl::SimpleAtod(wait_value, &wait_seconds) || !(wait_seconds > 0)) {
      return UsageError("drain", absl::StrCat("--wait wants positive seconds, "
                                              "not '",
                                              wait_value, "'"));
    }
  }
  Control control(*c);
  // The pid, to wait for the process.
  absl::StatusOr<v1::GetStatusResponse> st = control.GetStatus();
  if (!st.ok()) return ServerError("drain", st.status());
  const uint32_t pid = st->pid();
  absl::StatusOr<v1::DrainResponse> drained = control.Drain();
  if (!drained.ok()) return ServerError("drain", drained.status());
  uint32_t attached = drained->attached_ranks();
  if (json) {
    printf("%s\n", DumpJson(Json{{"server", c->address},
                                 {"pid", uint64_t(pid)},
                                 {"draining", true},
                                 {"attached_ranks", uint64_t(attached)}})
                       .c_str());
  } else {
    printf(
        "batchd (pid %u) at %s is draining: %u rank(s) attached; it takes no "
        "new stream and exits once none is attached\n",
        pid, Printable(c->address).c_str(), attached);
  }
  fflush(stdout);
  if (!wait) return kExitOk;

  CatchInterrupts();
  const uint64_t deadline =
      wait_seconds > 0 ? MonotonicNanos() + uint64_t(wait_seconds * 1e9)
                       : UINT64_MAX;
  // First until it stops answering, then until its process is gone (when
  // visible from here).
  bool answers = true;
  while (!Interrupted() && MonotonicNanos() < deadline) {
    if (answers) {
      absl::StatusOr<v1::GetStatusResponse> now = control.GetStatus();
      if (now.ok() && now->pid() == pid) {
        const uint32_t n = AttachedRanks(*now);
        if (n != attached) {
          attached = n;
          if (json) {
            printf("%s\n", DumpJson(Json{{"time", UtcNow()},
                                         {"attached_ranks", uint64_t(n)}})
                               .c_str());
          } else {
            printf("%s  %u rank(s) attached\n", UtcNow().c_str(), attached);
          }
          fflush(stdout);
        }
      } else if (now.ok() || !absl::IsDeadlineExceeded(now.status())) {
        answers = false;  // gone, or another daemon took the address
      }                   // else slow to answer: ask again
    }
    if (!answers && !DaemonProcessVisible(pid)) {
      if (json) {
        printf(
            "%s\n",
            DumpJson(Json{{"pid", uint64_t(pid)}, {"exited", true}}).c_str());
      } else {
        printf("batchd (pid %u) exited\n", pid);
      }
      return kExitOk;
    }
    SleepUnlessInterrupted(answers ? 0.5 : 0.05);
  }
  return ServerError(
      "drain",
      absl::DeadlineExceededError(absl::StrFormat(
          "%s; batchd (pid %u) is still draining with %u rank(s) attached",
          Interrupted()
              ? "interrupted"
              : absl::StrFormat("not exited after %.0f s", wait_seconds),
          pid, attached)));
}

}  // namespace

Command DrainCommand() { return {"drain", kSummary, kHelp, RunDrain}; }

}  // namespace batchd::batchctl
