// batchctl's commands, one per file, each with its own help text; main.cc
// lists them in one table. Adding a command: write foo.cc with its summary,
// help and Run function, declare FooCommand() here, add it to the table.
#ifndef BATCHD_TOOLS_BATCHCTL_COMMANDS_H_
#define BATCHD_TOOLS_BATCHCTL_COMMANDS_H_

#include <string>

#include "batchd/version.h"

#include "tools/batchctl/cli.h"

namespace batchd::batchctl {

Command StatusCommand();    // status.cc
Command CloseCommand();     // close.cc
Command DrainCommand();     // drain.cc
Command ShutdownCommand();  // shutdown.cc
Command PlanCommand();      // plan.cc
Command VersionCommand();   // version.cc
Command BenchCommand();     // bench.cc

// "batchctl 0.1.0 (shared-memory layout version N)\n": `batchctl --version`
// and the first line of `batchctl version`.
std::string VersionLine();

}  // namespace batchd::batchctl

#endif  // BATCHD_TOOLS_BATCHCTL_COMMANDS_H_
