// The daemon's libraries' own messages (protobuf's GOOGLE_LOG, gRPC's
// gpr_log) as lines of the daemon's log (base/log.h): key=value, escaped,
// and warnings and errors rate-limited per library. Left to themselves they
// write free-form lines to stderr, one per event, whatever a caller sends:
// every OpenStream with a string that is not UTF-8 made protobuf write one.
//
// Thread safety: RouteLibraryLogs once, at the start of main, before any
// thread that logs; the handlers are thread-safe.
#ifndef BATCHD_SERVER_LIBRARY_LOG_H_
#define BATCHD_SERVER_LIBRARY_LOG_H_

namespace batchd {

// Installs protobuf's log handler and gRPC's log function.
void RouteLibraryLogs();

}  // namespace batchd

#endif  // BATCHD_SERVER_LIBRARY_LOG_H_
