// protobuf's and gRPC's messages through the daemon's log; see
// library_log.h.
#include "server/library_log.h"

#include <google/protobuf/stubs/logging.h>
#include <grpc/support/log.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "base/log.h"

namespace batchd {
namespace {

// One key per library: a caller who makes a library complain on every
// request gets one line per 10 s, with the count of the lines dropped.
void Write(LogLevel level, const char* library, const char* file, int line,
           const std::string& message) {
  const LogFields fields = {{"library", library},
                            {"source", absl::StrCat(file, ":", line)},
                            {"msg", message}};
  LogKeyed(level, absl::StrCat("library_log ", library), "library_log", fields);
}

void ProtobufLog(google::protobuf::LogLevel level, const char* file, int line,
                 const std::string& message) {
  switch (level) {
    case google::protobuf::LOGLEVEL_INFO:
      Write(LogLevel::kInfo, "protobuf", file, line, message);
      break;
    case google::protobuf::LOGLEVEL_WARNING:
      Write(LogLevel::kWarn, "protobuf", file, line, message);
      break;
    case google::protobuf::LOGLEVEL_ERROR:
      Write(LogLevel::kError, "protobuf", file, line, message);
      break;
    case google::protobuf::LOGLEVEL_FATAL:
    default:
      // The process ends next: never folded into an earlier error.
      Log(LogLevel::kError, "library_fatal",
          {{"library", "protobuf"},
           {"source", absl::StrCat(file, ":", line)},
           {"msg", message}});
      break;
  }
}

void GrpcLog(gpr_log_func_args* args) {
  const LogLevel level =
      args->severity == GPR_LOG_SEVERITY_ERROR  ? LogLevel::kError
      : args->severity == GPR_LOG_SEVERITY_INFO ? LogLevel::kInfo
                                                : LogLevel::kDebug;
  Write(level, "grpc", args->file != nullptr ? args->file : "?", args->line,
        args->message != nullptr ? args->message : "");
}

}  // namespace

void RouteLibraryLogs() {
  google::protobuf::SetLogHandler(&ProtobufLog);
  gpr_set_log_function(&GrpcLog);
}

}  // namespace batchd
