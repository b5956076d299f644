// What the streams of one daemon share, so that many streams of one data set
// cost what one does: objects made from data (a loaded SentencePiece model,
// a WMT length index and its pass), found again by the identity of what they
// were made from for as long as anything (a stream, a pass still running)
// holds them; and the budget of memory that loaded models may hold at once
// (batchd --max-model-bytes). The daemon makes one (server/core.cc) and
// hands it to every workload; a workload without one shares nothing.
//
// Thread safety: thread-safe.
#ifndef BATCHD_WORKLOADS_SHARED_WORK_H_
#define BATCHD_WORKLOADS_SHARED_WORK_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace batchd {

class SharedWork {
 public:
  // Default budget of loaded models: 1 GiB.
  static constexpr uint64_t kDefaultMaxModelBytes = uint64_t(1) << 30;

  explicit SharedWork(uint64_t max_model_bytes = kDefaultMaxModelBytes);
  SharedWork(const SharedWork&) = delete;
  SharedWork& operator=(const SharedWork&) = delete;

  // The live object of (kind, key), else the one `make` returns, which later
  // calls then find while it lives (only weak references are kept here).
  // One `make` per (kind, key) at a time: a concurrent caller waits for it
  // and takes its object, or makes its own when it failed. A kind names one
  // type T.
  template <typename T>
  absl::StatusOr<std::shared_ptr<T>> Find(
      const std::string& kind, const std::string& key,
      const std::function<absl::StatusOr<std::shared_ptr<T>>()>& make) {
    absl::StatusOr<std::shared_ptr<void>> found =
        FindImpl(kind, key, [&]() -> absl::StatusOr<std::shared_ptr<void>> {
          absl::StatusOr<std::shared_ptr<T>> made = make();
          if (!made.ok()) return made.status();
          return std::shared_ptr<void>(
              std::const_pointer_cast<std::remove_const_t<T>>(*std::move(made)));
        });
    if (!found.ok()) return found.status();
    return std::static_pointer_cast<T>(*std::move(found));
  }
  // Live objects of `kind` (tests, status).
  size_t Count(const std::string& kind) const;

  // Bytes of loaded models, held until the Charge goes.
  class Charge {
   public:
    ~Charge();
    uint64_t bytes() const { return bytes_; }

   private:
    friend class SharedWork;
    struct Budget;
    Charge(std::shared_ptr<Budget> budget, uint64_t bytes)
        : budget_(std::move(budget)), bytes_(bytes) {}
    const std::shared_ptr<Budget> budget_;
    const uint64_t bytes_;
  };
  // ResourceExhausted naming `what`, its bytes, those held and the limit
  // when holding `bytes` more would exceed max_model_bytes.
  absl::StatusOr<std::shared_ptr<const Charge>> ChargeModel(
      uint64_t bytes, const std::string& what);
  uint64_t model_bytes() const;
  uint64_t max_model_bytes() const;

 private:
  using Key = std::pair<std::string, std::string>;
  struct Entry {
    std::weak_ptr<void> object;
    bool making = false;
  };
  absl::StatusOr<std::shared_ptr<void>> FindImpl(
      const std::string& kind, const std::string& key,
      const std::function<absl::StatusOr<std::shared_ptr<void>>()>& make);

  const std::shared_ptr<Charge::Budget> budget_;
  mutable absl::Mutex mu_;
  absl::CondVar made_;  // some `making` ended
  std::map<Key, Entry> objects_ ABSL_GUARDED_BY(mu_);
};

}  // namespace batchd

#endif  // BATCHD_WORKLOADS_SHARED_WORK_H_
