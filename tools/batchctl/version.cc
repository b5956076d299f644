// batchctl version: this program's version and layout version, and the
// daemon's version, pid and uptime.
#include <CLI/CLI.hpp>
#include <cstdio>

#include "absl/strings/str_format.h"
#include "ring/shm_layout.h"
#include "tools/batchctl/commands.h"
#include "tools/batchctl/control.h"
#include "tools/batchctl/output.h"

namespace batchd::batchctl {
namespace {

constexpr char kSummary[] = "print batchctl's version and the daemon's";

constexpr char kHelp[] =
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

int RunVersion(int argc, char** argv) {
  std::unique_ptr<CLI::App> app = NewApp("version");
  ConnectionFlags connection(*app, 5);
  bool json = false;
  app->add_flag("--json", json);
  absl::StatusOr<Connection> c = ParseConnection(*app, argc, argv, connection);
  if (!c.ok()) {
    return UsageError("version", std::string(c.status().message()));
  }
  Control control(*c);
  absl::StatusOr<v1::GetStatusResponse> st = control.GetStatus();
  if (json) {
    Json out;
    out["batchctl"] = {{"version", kBatchdVersion},
                       {"layout_version", uint64_t(shm::kLayoutVersion)}};
    if (st.ok()) {
      out["server"] = {{"address", c->address},
                       {"version", st->version()},
                       {"pid", uint64_t(st->pid())},
                       {"uptime_seconds", st->uptime_seconds()}};
    } else {
      out["server"] = nullptr;
      out["server_error"] = std::string(st.status().message());
    }
    printf("%s\n", DumpJson(out).c_str());
  } else {
    fputs(VersionLine().c_str(), stdout);
    if (st.ok()) {
      printf("batchd %s at %s (pid %u, up %s)\n",
             Printable(st->version()).c_str(), Printable(c->address).c_str(),
             st->pid(), FormatSeconds(st->uptime_seconds()).c_str());
    }
  }
  fflush(stdout);
  if (!st.ok()) return ServerError("version", st.status());
  return kExitOk;
}

}  // namespace

std::string VersionLine() {
  return absl::StrFormat("batchctl %s (shared-memory layout version %u)\n",
                         kBatchdVersion, shm::kLayoutVersion);
}

Command VersionCommand() { return {"version", kSummary, kHelp, RunVersion}; }

}  // namespace batchd::batchctl
