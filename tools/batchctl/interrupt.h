// Ctrl-C and SIGTERM end a watch, a wait or a bench through one flag, so that
// each can still clean up (close its stream, reap its ranks) and say what it
// left.
#ifndef BATCHD_TOOLS_BATCHCTL_INTERRUPT_H_
#define BATCHD_TOOLS_BATCHCTL_INTERRUPT_H_

namespace batchd::batchctl {

// From now on SIGINT and SIGTERM set the flag instead of ending the process.
void CatchInterrupts();

// True once SIGINT or SIGTERM arrived after CatchInterrupts().
bool Interrupted();

// Sleeps `seconds` unless interrupted first; false when interrupted.
bool SleepUnlessInterrupted(double seconds);

}  // namespace batchd::batchctl

#endif  // BATCHD_TOOLS_BATCHCTL_INTERRUPT_H_
