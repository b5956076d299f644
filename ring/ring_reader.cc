// The client's side of the ring protocol: attach, acquire in order, release
// in any order. See shm_layout.h for why each memory order is what it is.
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <boost/interprocess/mapped_region.hpp>
#include <boost/interprocess/shared_memory_object.hpp>
#include <cerrno>
#include <cstring>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/clock.h"
#include "base/process.h"
#include "ring/ring.h"
#include "ring/ring_internal.h"

namespace batchd {

namespace bip = boost::interprocess;

namespace {

std::string UidList(const std::vector<uint32_t>& uids) {
  std::string out;
  for (size_t i = 0; i < uids.size(); ++i) {
    absl::StrAppend(&out,
                    i == 0                 ? ""
                    : i + 1 == uids.size() ? " or "
                                           : ", ",
                    uids[i]);
  }
  return out;
}

// Who besides the owner may write the segment behind `fd` (mode `mode`):
// "" when nobody but this process's uid, else who ("group 1234", "uid
// 99", "every user"). A POSIX ACL, where the file has one, decides for the
// group class; without one the mode's group bits do.
std::string OtherWriters(int fd, mode_t mode) {
  if ((mode & S_IWOTH) != 0) return "every user";
  unsigned char acl[4 + 8 * 64];
  const ssize_t n = fgetxattr(fd, kAclXattr, acl, sizeof(acl));
  if (n < 0 && errno != ENODATA && errno != EOPNOTSUPP) {
    return absl::StrCat("unknown (its ACL cannot be read: ", strerror(errno),
                        ")");
  }
  if (n < 0) return (mode & S_IWGRP) != 0 ? "its group" : "";
  auto get = [&](size_t at, int bytes) {
    uint32_t v = 0;
    for (int i = 0; i < bytes; ++i) v |= uint32_t(acl[at + i]) << (8 * i);
    return v;
  };
  if (n < 4 || (n - 4) % 8 != 0 || get(0, 4) != kAclXattrVersion) {
    return "unknown (an ACL of a format this client does not know)";
  }
  for (ssize_t at = 4; at < n; at += 8) {
    const uint32_t tag = get(size_t(at), 2), perm = get(size_t(at) + 2, 2),
                   id = get(size_t(at) + 4, 4);
    if ((perm & kAclWrite) == 0) continue;
    if (tag == kAclUser && id != geteuid()) return absl::StrCat("uid ", id);
    if (tag == kAclGroupObj) return "its group";
    if (tag == kAclGroup) return absl::StrCat("group ", id);
    if (tag == kAclOther) return "every user";
  }
  return "";
}

// The segment behind `fd` must be a regular file of an owner `options`
// allows that nobody else (but this process's uid) may write: a ring made
// or rewritten by another user would feed this trainer its data.
absl::Status CheckOwner(const std::string& name, int fd,
                        const RingReader::Options& options, uid_t* owner) {
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    return absl::PermissionDeniedError(
        absl::StrCat("ring ", name, " is not a regular file"));
  }
  *owner = st.st_uid;
  if (options.owner_uid >= 0 && st.st_uid != uid_t(options.owner_uid)) {
    return absl::PermissionDeniedError(
        absl::StrCat("ring ", name, " belongs to uid ", st.st_uid,
                     ", not to uid ", options.owner_uid,
                     " that the batchd daemon runs as: "
                     "refused (another user may have made it)"));
  }
  if (options.owner_uid < 0 && !options.owner_uids.empty() &&
      std::find(options.owner_uids.begin(), options.owner_uids.end(),
                uint32_t(st.st_uid)) == options.owner_uids.end()) {
    return absl::PermissionDeniedError(absl::StrCat(
        "ring ", name, " belongs to uid ", st.st_uid, ", not to uid ",
        UidList(options.owner_uids),
        " (root, this process's uid, server_uid or the uid of the daemon "
        "first attached): refused (another user's daemon may serve this "
        "address)"));
  }
  const std::string writers = OtherWriters(fd, st.st_mode);
  if (!writers.empty()) {
    return absl::PermissionDeniedError(absl::StrFormat(
        "ring %s (uid %u, group %u, mode %04o) may be written by %s, not "
        "only by its owner and this process's uid %u: refused (another user "
        "could change its batches)",
        name, st.st_uid, st.st_gid, unsigned(st.st_mode & 07777), writers,
        geteuid()));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<RingReader>> RingReader::Attach(
    const std::string& name, const Options& options) {
  std::unique_ptr<Mapping> mapping;
  uid_t owner = 0;
  try {
    bip::shared_memory_object shm(bip::open_only,
                                  BareSegmentName(name).c_str(),
                                  bip::read_write);
    if (absl::Status s =
            CheckOwner(name, shm.get_mapping_handle().handle, options, &owner);
        !s.ok()) {
      return s;
    }
    bip::offset_t size = 0;
    if (!shm.get_size(size) || size < bip::offset_t(shm::kHeaderBytes)) {
      return absl::FailedPreconditionError(
          absl::StrCat("ring ", name, " is not a batchd ring (",
                       int64_t(size), " bytes)"));
    }
    mapping = std::make_unique<Mapping>(
        bip::mapped_region(shm, bip::read_write, 0, size_t(size)));
  } catch (const bip::interprocess_exception& e) {
    return absl::NotFoundError(
        absl::StrCat("cannot open ring ", name, ": ", e.what()));
  }
  auto* h = reinterpret_cast<shm::RingHeader*>(mapping->base());
  const uint32_t version = h->layout_version.load(std::memory_order_acquire);
  if (h->magic != shm::kMagic) {
    return absl::FailedPreconditionError(
        absl::StrCat("ring ", name, " is not a batchd ring (bad magic)"));
  }
  if (version != shm::kLayoutVersion) {
    return absl::FailedPreconditionError(absl::StrCat(
        "ring ", name, " has layout version ", version,
        " but this client speaks version ", shm::kLayoutVersion,
        "; use a client and server of the same batchd release"));
  }
  // Products checked: a forged header must not make a slot lie outside the
  // mapping through a wrapped multiplication.
  uint64_t slots_bytes = 0, end = 0;
  if (h->header_bytes != shm::kHeaderBytes || h->slot_count == 0 ||
      h->slot_count > shm::kMaxSlots ||
      h->segment_bytes != mapping->size() ||
      h->slot_bytes < shm::kSlotHeaderBytes ||
      __builtin_mul_overflow(uint64_t(h->slot_count), h->slot_bytes,
                             &slots_bytes) ||
      __builtin_add_overflow(slots_bytes, uint64_t(h->header_bytes), &end) ||
      end > mapping->size()) {
    return absl::FailedPreconditionError(
        absl::StrCat("ring ", name, " has an inconsistent header"));
  }
  return std::unique_ptr<RingReader>(
      new RingReader(name, options, std::move(mapping), owner));
}

RingReader::RingReader(std::string name, Options options,
                       std::unique_ptr<Mapping> mapping, uid_t segment_uid)
    : name_(std::move(name)),
      options_(options),
      mapping_(std::move(mapping)),
      header_(reinterpret_cast<shm::RingHeader*>(mapping_->base())),
      table_(reinterpret_cast<shm::SlotTable*>(mapping_->base() +
                                               shm::kSlotTableOffset)),
      slot_count_(header_->slot_count),
      slot_bytes_(header_->slot_bytes),
      owner_pid_(getpid()),
      segment_uid_(segment_uid) {
  // A reader of a fresh ring starts at 0; one that takes over a ring the
  // server kept would start at what is published and not yet released.
  next_acquire_ = header_->released.load(std::memory_order_acquire);
  header_->client_start.store(ProcessStartTicks(getpid()),
                              std::memory_order_relaxed);
  header_->client_pid_ns.store(SelfPidNamespace(), std::memory_order_relaxed);
  header_->client_heartbeat_ns.store(MonotonicNanos(),
                                     std::memory_order_relaxed);
  header_->client_pid.store(uint32_t(getpid()), std::memory_order_release);
}

uint8_t* RingReader::base() const { return mapping_->base(); }
size_t RingReader::size() const { return mapping_->size(); }

bool RingReader::InOwnerProcess() const { return getpid() == owner_pid_; }

RingReader::~RingReader() {
  // A forked child's copy of the reader is not the client the server knows.
  if (!InOwnerProcess()) return;
  // The server frees the ring on its next look, as for a dead client.
  header_->client_detached.store(1, std::memory_order_release);
}

void RingReader::Heartbeat() {
  if (!InOwnerProcess()) return;
  header_->client_heartbeat_ns.store(MonotonicNanos(),
                                     std::memory_order_release);
}

absl::Status RingReader::CheckServer() const {
  const uint64_t beat =
      header_->server_heartbeat_ns.load(std::memory_order_acquire);
  const uint64_t now = MonotonicNanos();
  const double age = now > beat ? double(now - beat) / 1e9 : 0.0;
  const bool alive = ProcessAlive(header_->server_pid, header_->server_start,
                                  header_->server_pid_ns);
  if (!alive || age > options_.server_stale_seconds) {
    return absl::UnavailableError(absl::StrFormat(
        "batchd (pid %u) stopped: last heartbeat %.1f s ago%s",
        header_->server_pid, age, alive ? "" : ", process gone"));
  }
  return absl::OkStatus();
}

std::string RingReader::WaitReason() const {
  std::string why;
  for (size_t i = 0; i + 1 < sizeof(header_->wait_reason); ++i) {
    const char c = header_->wait_reason[i].load(std::memory_order_acquire);
    if (c == '\0') break;
    why.push_back(c);
  }
  return why;
}

absl::Status RingReader::ClosedStatus(uint32_t state) const {
  if (state == shm::kStateEnded) return absl::OutOfRangeError("end of stream");
  if (state == shm::kStateExiting) {
    return absl::UnavailableError(absl::StrFormat(
        "batchd (pid %u) is exiting", header_->server_pid));
  }
  const std::string reason(
      header_->close_reason,
      strnlen(header_->close_reason, sizeof(header_->close_reason)));
  const std::string stream(
      header_->stream_name,
      strnlen(header_->stream_name, sizeof(header_->stream_name)));
  return absl::CancelledError(absl::StrFormat(
      "stream %s was closed by batchd (pid %u)%s%s", stream,
      header_->server_pid, reason.empty() ? "" : ": ", reason));
}

absl::StatusOr<uint64_t> RingReader::Acquire(double timeout_seconds) {
  if (!InOwnerProcess()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "this ring belongs to pid %d, not to its forked child %d",
        owner_pid_, getpid()));
  }
  const uint64_t start = MonotonicNanos();
  uint64_t last_check = 0;  // the first sleep checks the server first
  uint64_t pos;
  {
    absl::MutexLock lock(&mu_);
    pos = next_acquire_;
  }
  // Check liveness at least every 100 ms of waiting.
  constexpr uint64_t kPollNs = 100 * 1000 * 1000;
  for (uint64_t spins = 0;; ++spins) {
    const uint32_t seen = header_->data_futex.load(std::memory_order_acquire);
    // Acquire pairs with the server's release in Publish: the slot table's
    // entry and the slot's bytes are visible once write_pos covers pos.
    if (header_->write_pos.load(std::memory_order_acquire) > pos) break;
    const uint32_t state = header_->state.load(std::memory_order_acquire);
    if (state != shm::kStateOpen) return ClosedStatus(state);
    if (spins < 64) continue;  // a publish is often moments away
    const uint64_t now = MonotonicNanos();
    // /proc is read at most every kPollNs, not before every sleep.
    if (now - last_check >= kPollNs) {
      if (absl::Status s = CheckServer(); !s.ok()) return s;
      last_check = now;
    }
    uint64_t wait = kPollNs;
    if (timeout_seconds >= 0) {
      const uint64_t limit = uint64_t(timeout_seconds * 1e9);
      if (now - start >= limit) {
        header_->client_wait_ns.fetch_add(now - start,
                                          std::memory_order_relaxed);
        const std::string why = WaitReason();
        return absl::DeadlineExceededError(absl::StrFormat(
            "no batch from batchd (pid %u) for %.1f s (server alive)%s%s",
            header_->server_pid, double(now - start) / 1e9,
            why.empty() ? "" : "; the server says: ", why));
      }
      wait = std::min(wait, limit - (now - start));
    }
    header_->data_waiters.fetch_add(1, std::memory_order_seq_cst);
    if (header_->write_pos.load(std::memory_order_seq_cst) <= pos) {
      FutexWait(&header_->data_futex, seen, wait);
    }
    header_->data_waiters.fetch_sub(1, std::memory_order_seq_cst);
  }
  const uint32_t slot =
      table_->slot_of[pos % slot_count_].load(std::memory_order_relaxed);
  if (slot >= slot_count_) {
    return absl::DataLossError(absl::StrCat(
        "ring ", name_, " puts position ", pos, " in slot ", slot, " of ",
        slot_count_));
  }
  const uint64_t waited = MonotonicNanos() - start;
  header_->client_wait_ns.fetch_add(waited, std::memory_order_relaxed);
  absl::MutexLock lock(&mu_);
  next_acquire_ = pos + 1;
  held_[pos] = Held{slot, reinterpret_cast<const shm::SlotHeader*>(
                              SlotAt(slot))->step};
  return pos;
}

uint8_t* RingReader::SlotAt(uint32_t slot) const {
  return mapping_->base() + shm::kHeaderBytes + uint64_t(slot) * slot_bytes_;
}

uint8_t* RingReader::SlotBase(uint64_t pos) const {
  absl::MutexLock lock(&mu_);
  auto it = held_.find(pos);
  return it == held_.end() ? nullptr : SlotAt(it->second.slot);
}

const shm::SlotHeader* RingReader::Slot(uint64_t pos) const {
  return reinterpret_cast<const shm::SlotHeader*>(SlotBase(pos));
}

std::vector<uint64_t> RingReader::HeldSteps() const {
  absl::MutexLock lock(&mu_);
  std::vector<uint64_t> steps;
  for (const auto& [pos, held] : held_) steps.push_back(held.step);
  return steps;
}

absl::StatusOr<std::vector<SlotTensor>> RingReader::Tensors(
    uint64_t pos) const {
  uint8_t* base = SlotBase(pos);
  if (base == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("position ", pos, " is not held"));
  }
  const auto* slot = reinterpret_cast<const shm::SlotHeader*>(base);
  if (slot->num_tensors > shm::kMaxTensors) {
    return absl::DataLossError(absl::StrCat("slot of position ", pos, " has ",
                                            slot->num_tensors, " tensors"));
  }
  std::vector<SlotTensor> out;
  out.reserve(slot->num_tensors);
  for (uint32_t i = 0; i < slot->num_tensors; ++i) {
    const shm::TensorDesc& d = slot->tensors[i];
    SlotTensor t;
    t.name.assign(d.name, strnlen(d.name, sizeof(d.name)));
    t.dtype = d.dtype;
    if (d.ndim > shm::kMaxDims || shm::DTypeSize(d.dtype) == 0) {
      return absl::DataLossError(
          absl::StrCat("tensor ", t.name, " has a bad descriptor"));
    }
    // Every product and sum is checked: a forged descriptor whose shape
    // product or offset + nbytes wraps must not point outside the slot.
    uint64_t bytes = shm::DTypeSize(d.dtype);
    bool bad = false;
    for (uint32_t k = 0; k < d.ndim; ++k) {
      t.shape.push_back(d.shape[k]);
      bad |= d.shape[k] < 0 ||
             __builtin_mul_overflow(bytes, uint64_t(d.shape[k]), &bytes);
    }
    if (bad || bytes != d.nbytes || d.offset < shm::kSlotHeaderBytes ||
        d.offset > slot_bytes_ || d.nbytes > slot_bytes_ - d.offset) {
      return absl::DataLossError(absl::StrCat(
          "tensor ", t.name, " of the slot of position ", pos,
          " lies outside its slot (offset ", d.offset, ", ", d.nbytes,
          " bytes, slot ", slot_bytes_, " bytes)"));
    }
    t.data = base + d.offset;
    t.nbytes = d.nbytes;
    out.push_back(std::move(t));
  }
  return out;
}

void RingReader::Release(uint64_t pos) {
  // A forked child must not give its parent's slots back.
  if (!InOwnerProcess()) return;
  absl::MutexLock lock(&mu_);
  auto it = held_.find(pos);
  if (it == held_.end()) return;  // not held
  const uint32_t slot = it->second.slot;
  held_.erase(it);
  // Release: our reads of the slot happen before the server reuses it. The
  // server polls full rings, so nothing else is due.
  table_->slot_state[slot].store(shm::kSlotFree, std::memory_order_release);
  header_->released.fetch_add(1, std::memory_order_release);
}

}  // namespace batchd
