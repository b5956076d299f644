// Segment creation, attachment and the ring's claim / publish / acquire /
// release protocol. See shm_layout.h for why each memory order is what it is.
#include "client/ring.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <boost/interprocess/mapped_region.hpp>
#include <boost/interprocess/shared_memory_object.hpp>
#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/format.h"
#include "client/process.h"

namespace batchd {

namespace bip = boost::interprocess;

class Mapping {
 public:
  explicit Mapping(bip::mapped_region region) : region_(std::move(region)) {}
  uint8_t* base() const { return static_cast<uint8_t*>(region_.get_address()); }
  size_t size() const { return region_.get_size(); }

 private:
  bip::mapped_region region_;
};

uint64_t RingGeometry::SlotBytes() const {
  uint64_t sum, aligned;
  if (__builtin_add_overflow(payload_bytes, uint64_t(shm::kSlotHeaderBytes),
                             &sum) ||
      !shm::CheckedAlignUp(sum, 4096, &aligned)) {
    return UINT64_MAX;
  }
  return aligned;
}

uint64_t RingGeometry::SegmentBytes() const {
  uint64_t slots, total;
  if (__builtin_mul_overflow(uint64_t(slot_count), SlotBytes(), &slots) ||
      __builtin_add_overflow(slots, uint64_t(shm::kHeaderBytes), &total)) {
    return UINT64_MAX;
  }
  return total;
}

absl::Status RingGeometry::Check() const {
  if (slot_count == 0) {
    return absl::InvalidArgumentError("ring needs at least one slot");
  }
  if (SlotBytes() > shm::kMaxSlotBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "one ring slot would take ",
        SlotBytes() == UINT64_MAX ? std::string("more than 2^64")
                                  : absl::StrCat(SlotBytes()),
        " bytes (payload ", payload_bytes, "); the limit is ",
        shm::kMaxSlotBytes, ": use a smaller batch per rank or payload"));
  }
  if (SegmentBytes() > shm::kMaxSegmentBytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "one ring of ", slot_count, " slots of ", SlotBytes(),
        " bytes would take ",
        SegmentBytes() == UINT64_MAX ? std::string("more than 2^64")
                                     : absl::StrCat(SegmentBytes()),
        " bytes; the limit is ", shm::kMaxSegmentBytes,
        ": use fewer slots or smaller batches"));
  }
  return absl::OkStatus();
}

uint64_t ShmFreeBytes() {
  struct statvfs st;
  if (statvfs("/dev/shm", &st) != 0) return 0;
  return uint64_t(st.f_bavail) * uint64_t(st.f_frsize);
}

namespace {

std::string Bare(const std::string& name) {
  return name.empty() || name[0] != '/' ? name : name.substr(1);
}

}  // namespace

// ---------------------------------------------------------------- RingWriter

absl::StatusOr<std::unique_ptr<RingWriter>> RingWriter::Create(
    const std::string& name, const RingGeometry& geometry, gid_t gid) {
  if (absl::Status s = geometry.Check(); !s.ok()) return s;
  const uint64_t bytes = geometry.SegmentBytes();
  const uint64_t free_bytes = ShmFreeBytes();
  auto exhausted = [&](const std::string& why) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "shared memory too small for ring ", name, ": needs ", bytes,
        " bytes (", HumanBytes(double(bytes)), "), /dev/shm has ", free_bytes,
        " bytes (", HumanBytes(double(free_bytes)), ") free", why,
        "; give /dev/shm more room (docker run --shm-size) or use fewer "
        "slots or smaller batches"));
  };
  if (bytes > free_bytes) return exhausted("");
  std::unique_ptr<Mapping> mapping;
  try {
    const mode_t mode = gid_t(gid) == gid_t(-1) ? 0600 : 0660;
    bip::permissions perms(mode);
    bip::shared_memory_object shm(bip::create_only, Bare(name).c_str(),
                                  bip::read_write, perms);
    const int fd = shm.get_mapping_handle().handle;
    if (gid_t(gid) != gid_t(-1) && fchown(fd, uid_t(-1), gid) != 0) {
      const int err = errno;
      bip::shared_memory_object::remove(Bare(name).c_str());
      return absl::PermissionDeniedError(absl::StrCat(
          "cannot give ring ", name, " to group ", gid, ": ", strerror(err)));
    }
    // shm_open(O_CREAT | O_EXCL) never follows a link; check anyway that
    // what we hold is a regular file of ours before trusting it.
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid()) {
      return absl::PermissionDeniedError(absl::StrCat(
          "ring ", name, " is not a regular file of uid ", geteuid()));
    }
    fchmod(fd, mode);
    // Reserve every page now: tmpfs allocates lazily and a full /dev/shm
    // would otherwise SIGBUS whichever process touches a page first.
    const int rc = posix_fallocate(fd, 0, off_t(bytes));
    if (rc != 0) {
      bip::shared_memory_object::remove(Bare(name).c_str());
      if (rc == ENOSPC) return exhausted(" (reservation failed)");
      return absl::InternalError(absl::StrCat("cannot reserve ring ", name,
                                              ": ", strerror(rc)));
    }
    mapping = std::make_unique<Mapping>(
        bip::mapped_region(shm, bip::read_write, 0, size_t(bytes)));
  } catch (const bip::interprocess_exception& e) {
    if (e.get_error_code() == bip::already_exists_error) {
      return absl::AlreadyExistsError(
          absl::StrCat("shared memory segment ", name, " already exists"));
    }
    bip::shared_memory_object::remove(Bare(name).c_str());
    return absl::InternalError(
        absl::StrCat("cannot create ring ", name, ": ", e.what()));
  }
  return std::unique_ptr<RingWriter>(
      new RingWriter(name, geometry, std::move(mapping)));
}

RingWriter::RingWriter(std::string name, RingGeometry geometry,
                       std::unique_ptr<Mapping> mapping)
    : name_(std::move(name)),
      geometry_(std::move(geometry)),
      mapping_(std::move(mapping)),
      header_(reinterpret_cast<shm::RingHeader*>(mapping_->base())) {
  // The pages are fresh zeroes from tmpfs; fill in everything but the
  // version, then publish the version last so that a reader never sees a
  // half-written header.
  shm::RingHeader* h = header_;
  h->magic = shm::kMagic;
  h->header_bytes = shm::kHeaderBytes;
  h->slot_count = geometry_.slot_count;
  h->world_size = geometry_.world_size;
  h->slot_bytes = geometry_.SlotBytes();
  h->segment_bytes = geometry_.SegmentBytes();
  h->rank = geometry_.rank;
  h->server_pid = uint32_t(getpid());
  h->server_start = ProcessStartTicks(getpid());
  h->server_pid_ns = SelfPidNamespace();
  h->write_pos.store(0, std::memory_order_relaxed);
  h->read_pos.store(0, std::memory_order_relaxed);
  h->state.store(shm::kStateOpen, std::memory_order_relaxed);
  h->server_heartbeat_ns.store(MonotonicNanos(), std::memory_order_relaxed);
  snprintf(h->stream_name, sizeof(h->stream_name), "%s",
           geometry_.stream_name.c_str());
  h->layout_version.store(shm::kLayoutVersion, std::memory_order_release);
}

RingWriter::~RingWriter() { Unlink(); }

void RingWriter::Unlink() {
  if (unlinked_) return;
  unlinked_ = true;
  // A client still mapped keeps its pages; tell it the ring is gone.
  SetState(shm::kStateClosed);
  bip::shared_memory_object::remove(Bare(name_).c_str());
}

uint8_t* RingWriter::SlotBase(uint64_t pos) const {
  return mapping_->base() + shm::kHeaderBytes +
         (pos % geometry_.slot_count) * geometry_.SlotBytes();
}

bool RingWriter::TryClaim(uint64_t* pos) {
  // Acquire pairs with the client's release of read_pos: the client is done
  // reading the slot before we overwrite it.
  const uint64_t read = header_->read_pos.load(std::memory_order_acquire);
  if (claimed_ - read >= geometry_.slot_count) return false;
  *pos = claimed_++;
  return true;
}

void RingWriter::Publish(uint64_t pos) {
  // The slot's bytes are visible before the position that covers it
  // (seq_cst includes release). seq_cst also orders this store before the
  // load of data_waiters below, pairing with the client's raise-then-recheck
  // in Acquire: either it sees the new write_pos or we see it waiting.
  header_->write_pos.store(pos + 1, std::memory_order_seq_cst);
  header_->data_futex.fetch_add(1, std::memory_order_seq_cst);
  if (header_->data_waiters.load(std::memory_order_seq_cst) != 0) {
    FutexWakeAll(&header_->data_futex);
  }
}

void RingWriter::SetState(uint32_t state) {
  header_->state.store(state, std::memory_order_release);
  header_->data_futex.fetch_add(1, std::memory_order_release);
  FutexWakeAll(&header_->data_futex);
}

void RingWriter::Close(const std::string& reason) {
  // Plain bytes, published by the release store of the state below.
  snprintf(header_->close_reason, sizeof(header_->close_reason), "%s",
           reason.c_str());
  SetState(shm::kStateClosed);
}

void RingWriter::SetWaitReason(const std::string& reason) {
  const size_t n = std::min<size_t>(reason.size(),
                                    sizeof(header_->wait_reason) - 1);
  if (reason.compare(0, n, wait_reason_) == 0 && n == wait_reason_.size()) {
    return;
  }
  wait_reason_ = reason.substr(0, n);
  for (size_t i = 0; i < n; ++i) {
    header_->wait_reason[i].store(reason[i], std::memory_order_relaxed);
  }
  header_->wait_reason[n].store('\0', std::memory_order_release);
}

void RingWriter::Heartbeat(uint64_t now_ns) {
  header_->server_heartbeat_ns.store(now_ns, std::memory_order_release);
}

uint64_t RingWriter::published() const {
  return header_->write_pos.load(std::memory_order_acquire);
}

uint64_t RingWriter::released() const {
  return header_->read_pos.load(std::memory_order_acquire);
}

RingWriter::ClientInfo RingWriter::client() const {
  ClientInfo info;
  info.pid = header_->client_pid.load(std::memory_order_acquire);
  info.heartbeat_ns =
      header_->client_heartbeat_ns.load(std::memory_order_acquire);
  info.wait_ns = header_->client_wait_ns.load(std::memory_order_relaxed);
  return info;
}

bool RingWriter::ClientGone(uint64_t now_ns, uint64_t stale_ns) const {
  const uint32_t pid = header_->client_pid.load(std::memory_order_acquire);
  if (pid == 0) return false;  // nobody attached yet
  if (header_->client_detached.load(std::memory_order_acquire)) return true;
  const uint64_t start = header_->client_start.load(std::memory_order_acquire);
  const uint64_t ns = header_->client_pid_ns.load(std::memory_order_acquire);
  if (ns == SelfPidNamespace()) return !ProcessAlive(pid, start, ns);
  const uint64_t beat =
      header_->client_heartbeat_ns.load(std::memory_order_acquire);
  return now_ns > beat && now_ns - beat > stale_ns;
}

// ---------------------------------------------------------------- RingReader

absl::StatusOr<std::unique_ptr<RingReader>> RingReader::Attach(
    const std::string& name, const Options& options) {
  std::unique_ptr<Mapping> mapping;
  try {
    bip::shared_memory_object shm(bip::open_only, Bare(name).c_str(),
                                  bip::read_write);
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
      new RingReader(name, options, std::move(mapping)));
}

RingReader::RingReader(std::string name, Options options,
                       std::unique_ptr<Mapping> mapping)
    : name_(std::move(name)),
      options_(options),
      mapping_(std::move(mapping)),
      header_(reinterpret_cast<shm::RingHeader*>(mapping_->base())),
      slot_count_(header_->slot_count),
      slot_bytes_(header_->slot_bytes),
      released_(header_->slot_count, 0) {
  next_acquire_ = header_->read_pos.load(std::memory_order_acquire);
  header_->client_start.store(ProcessStartTicks(getpid()),
                              std::memory_order_relaxed);
  header_->client_pid_ns.store(SelfPidNamespace(), std::memory_order_relaxed);
  header_->client_heartbeat_ns.store(MonotonicNanos(),
                                     std::memory_order_relaxed);
  header_->client_pid.store(uint32_t(getpid()), std::memory_order_release);
}

uint8_t* RingReader::base() const { return mapping_->base(); }
size_t RingReader::size() const { return mapping_->size(); }

RingReader::~RingReader() {
  // The server frees the ring on its next look, as for a dead client.
  header_->client_detached.store(1, std::memory_order_release);
}

void RingReader::Heartbeat() {
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

absl::StatusOr<uint64_t> RingReader::Acquire(double timeout_seconds) {
  const uint64_t start = MonotonicNanos();
  uint64_t last_check = start;
  uint64_t pos;
  {
    std::lock_guard<std::mutex> lock(mu_);
    pos = next_acquire_;
  }
  // Check liveness at least every 100 ms of waiting.
  constexpr uint64_t kPollNs = 100 * 1000 * 1000;
  for (uint64_t spins = 0;; ++spins) {
    const uint32_t seen = header_->data_futex.load(std::memory_order_acquire);
    // Acquire pairs with the server's release in Publish: the slot's bytes
    // are visible once write_pos covers it.
    if (header_->write_pos.load(std::memory_order_acquire) > pos) break;
    const uint32_t state = header_->state.load(std::memory_order_acquire);
    if (state == shm::kStateEnded) {
      return absl::OutOfRangeError("end of stream");
    }
    if (state == shm::kStateClosed) {
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
        std::string why;
        for (size_t i = 0; i + 1 < sizeof(header_->wait_reason); ++i) {
          const char c =
              header_->wait_reason[i].load(std::memory_order_acquire);
          if (c == '\0') break;
          why.push_back(c);
        }
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
  const uint64_t waited = MonotonicNanos() - start;
  header_->client_wait_ns.fetch_add(waited, std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(mu_);
  next_acquire_ = pos + 1;
  return pos;
}

uint8_t* RingReader::SlotBase(uint64_t pos) const {
  return mapping_->base() + shm::kHeaderBytes + (pos % slot_count_) * slot_bytes_;
}

const shm::SlotHeader* RingReader::Slot(uint64_t pos) const {
  return reinterpret_cast<const shm::SlotHeader*>(SlotBase(pos));
}

absl::StatusOr<std::vector<SlotTensor>> RingReader::Tensors(
    uint64_t pos) const {
  const shm::SlotHeader* slot = Slot(pos);
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
    t.data = SlotBase(pos) + d.offset;
    t.nbytes = d.nbytes;
    out.push_back(std::move(t));
  }
  return out;
}

void RingReader::Release(uint64_t pos) {
  std::lock_guard<std::mutex> lock(mu_);
  uint64_t read = header_->read_pos.load(std::memory_order_relaxed);
  if (pos < read || pos >= next_acquire_) return;  // not held
  released_[pos % slot_count_] = 1;
  const uint64_t before = read;
  while (read < next_acquire_ && released_[read % slot_count_]) {
    released_[read % slot_count_] = 0;
    ++read;
  }
  if (read != before) {
    // Release: our reads of the slots happen before the server reuses them.
    // The server polls full rings, so nothing else is due.
    header_->read_pos.store(read, std::memory_order_release);
  }
}

// ---------------------------------------------------------- stale segments

std::vector<std::string> RemoveStaleSegments(
    const std::string& prefix, std::vector<std::string>* skipped) {
  std::vector<std::string> removed;
  // /dev/shm is world-writable: any user may put a FIFO, a link or a forged
  // ring under our names. Entries are opened relative to the directory,
  // without following links and without blocking, and only a regular file
  // of ours is read, trusted or removed.
  const int dir_fd = open("/dev/shm", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) return removed;
  DIR* dir = fdopendir(dup(dir_fd));
  if (dir == nullptr) {
    close(dir_fd);
    return removed;
  }
  std::vector<std::string> names;
  while (dirent* e = readdir(dir)) {
    if (strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0) {
      names.emplace_back(e->d_name);
    }
  }
  closedir(dir);
  auto skip = [&](const std::string& n, const std::string& why) {
    if (skipped != nullptr) skipped->push_back(absl::StrCat("/", n, ": ", why));
  };
  const uid_t me = geteuid();
  for (const std::string& n : names) {
    const int fd =
        openat(dir_fd, n.c_str(),
               O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
    if (fd < 0) {
      skip(n, errno == ELOOP ? "a symbolic link"
                             : absl::StrCat("cannot open: ", strerror(errno)));
      continue;
    }
    struct stat st;
    if (fstat(fd, &st) != 0) {
      skip(n, absl::StrCat("cannot stat: ", strerror(errno)));
      close(fd);
      continue;
    }
    if (!S_ISREG(st.st_mode)) {
      skip(n, "not a regular file");
      close(fd);
      continue;
    }
    if (st.st_uid != me) {
      // Another user's file: neither its header nor its name is ours to
      // trust; rings get unpredictable names, so it cannot take one's place.
      skip(n, absl::StrCat("owned by uid ", st.st_uid, ", not ", me));
      close(fd);
      continue;
    }
    // Only plain fields are read, from a byte copy of the header.
    alignas(shm::RingHeader) unsigned char raw[sizeof(shm::RingHeader)] = {};
    const ssize_t got = pread(fd, raw, sizeof(raw), 0);
    const auto& h = *reinterpret_cast<const shm::RingHeader*>(raw);
    close(fd);
    bool stale;
    if (got == ssize_t(sizeof(h)) && h.magic == shm::kMagic &&
        h.server_pid != 0) {
      stale = !ProcessAlive(h.server_pid, h.server_start, h.server_pid_ns);
    } else {
      // Never finished: stale once its creator has had ample time.
      stale = time(nullptr) - st.st_mtime > 60;
    }
    if (stale && unlinkat(dir_fd, n.c_str(), 0) == 0) {
      removed.push_back("/" + n);
    }
  }
  close(dir_fd);
  return removed;
}

}  // namespace batchd
