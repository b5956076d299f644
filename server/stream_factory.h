// Streams from their specs: the one place a spec is checked (the server's
// defaults, the limits of a request, the rank in range), its data path
// confined to --data-root and read with the caller's permissions, compared with
// an existing stream's, and turned into what the engine fills from (workload,
// sampler, layout, schedule).
//
// Thread safety: constant after construction; every method is
// thread-safe.
#ifndef BATCHD_SERVER_STREAM_FACTORY_H_
#define BATCHD_SERVER_STREAM_FACTORY_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "base/executor.h"
#include "batchd/v1/batchd.pb.h"
#include "server/engine.h"
#include "storage/read_access.h"
#include "workloads/shared_work.h"

namespace batchd {

struct CoreOptions;

// The first field in which `b` differs from `a` (start_step and
// start_cursor only when compare_start_step), or "" when none does.
// `detail` receives "x here but y in the existing stream".
std::string FirstDifference(const v1::StreamSpec& a, const v1::StreamSpec& b,
                            bool compare_start_step, std::string* detail);
// The cursor a v1::Cursor names (its step aside).
RowCursor CursorOf(const v1::Cursor& cursor);
// The layout's tensors with the batch dimension first.
void TensorsToProto(const BatchLayout& layout,
                    google::protobuf::RepeatedPtrField<v1::TensorInfo>* out);

class StreamFactory {
 public:
  // `options` (resolved by Core::Create), `executor`, `shared` and
  // `engine` must outlive the factory and what it makes.
  StreamFactory(const CoreOptions& options, Executor* executor,
                SharedWork* shared, Engine* engine)
      : options_(options),
        executor_(executor),
        shared_(shared),
        engine_(engine) {}

  // The spec with the server's defaults (slots, split), checked against
  // the limits of a request; and `rank` in range when given.
  absl::StatusOr<v1::StreamSpec> CheckedSpec(
      const v1::StreamSpec& in, std::optional<uint32_t> rank) const;
  // The stream `spec` (checked) asks for, prepared for read-ahead and
  // anchored at its start; its ring geometry checked.
  // Its data is read with `access`'s permissions (the caller's), and its
  // workload made under the calling thread's work context (CurrentWork():
  // the request's owner and cancellation, which Core sets): CANCELLED
  // once that is cancelled.
  absl::StatusOr<std::shared_ptr<StreamSetup>> Make(
      const v1::StreamSpec& spec, const ReadAccess& access) const;
  // What `spec` would need, without creating anything.
  absl::StatusOr<v1::PlanResponse> Plan(const v1::StreamSpec& spec,
                                        const ReadAccess& access) const;

 private:
  absl::StatusOr<std::string> ConfineDataPath(const std::string& data,
                                              const ReadAccess& access) const;

  const CoreOptions& options_;
  Executor* const executor_;
  SharedWork* const shared_;
  Engine* const engine_;
};

}  // namespace batchd

#endif  // BATCHD_SERVER_STREAM_FACTORY_H_
