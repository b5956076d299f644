// Ring geometry, segment creation and the server's side of the protocol
// (claim, publish, close), and stale-segment removal; the client's side is
// ring_reader.cc. See shm_layout.h for why each memory order is what it is.
#include "ring/ring.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/xattr.h>
#include <unistd.h>

#include <algorithm>
#include <boost/interprocess/mapped_region.hpp>
#include <boost/interprocess/shared_memory_object.hpp>
#include <cerrno>
#include <cstddef>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "base/clock.h"
#include "base/files.h"
#include "base/format.h"
#include "base/process.h"
#include "ring/ring_internal.h"

namespace batchd {

namespace bip = boost::interprocess;

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
  if (slot_count > shm::kMaxSlots) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a ring holds at most ", shm::kMaxSlots, " slots, not ", slot_count));
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


// ---------------------------------------------------------------- RingWriter

namespace {

// Writes the creator's pid, start time and pid namespace at their header
// offsets of a segment not yet mapped (the magic and version stay 0).
absl::Status RecordCreator(int fd, const std::string& name) {
  const uint32_t pid = uint32_t(getpid());
  const uint64_t start = ProcessStartTicks(getpid());
  const uint64_t ns = SelfPidNamespace();
  if (pwrite(fd, &pid, sizeof(pid), offsetof(shm::RingHeader, server_pid)) !=
          ssize_t(sizeof(pid)) ||
      pwrite(fd, &start, sizeof(start),
             offsetof(shm::RingHeader, server_start)) != ssize_t(sizeof(start)) ||
      pwrite(fd, &ns, sizeof(ns), offsetof(shm::RingHeader, server_pid_ns)) !=
          ssize_t(sizeof(ns))) {
    return absl::InternalError(absl::StrCat(
        "cannot write the header of ring ", name, ": ", strerror(errno)));
  }
  return absl::OkStatus();
}

// Gives uid `user` read and write access to the segment behind `fd`, and
// nobody else: a POSIX access ACL of user::rw, user:<user>:rw, group::---,
// mask::rw, other::--- (the file's group bits then show the mask, rw, while
// its group has no access). Written as the kernel's xattr (a version, then
// entries sorted by tag and id; little-endian), so no library is needed.
absl::Status GrantUser(int fd, const std::string& name, uid_t user) {
  struct Entry {
    uint16_t tag, perm;
    uint32_t id;
  };
  const Entry entries[] = {{kAclUserObj, 6, kAclUndefinedId},
                           {kAclUser, 6, uint32_t(user)},
                           {kAclGroupObj, 0, kAclUndefinedId},
                           {kAclMask, 6, kAclUndefinedId},
                           {kAclOther, 0, kAclUndefinedId}};
  unsigned char buf[4 + sizeof(entries) / sizeof(entries[0]) * 8];
  auto put = [&](size_t at, uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) buf[at + i] = uint8_t(v >> (8 * i));
  };
  put(0, kAclXattrVersion, 4);
  size_t at = 4;
  for (const Entry& e : entries) {
    put(at, e.tag, 2);
    put(at + 2, e.perm, 2);
    put(at + 4, e.id, 4);
    at += 8;
  }
  if (fsetxattr(fd, kAclXattr, buf, sizeof(buf), 0) != 0) {
    const int err = errno;
    return absl::FailedPreconditionError(absl::StrCat(
        "cannot give uid ", user, " (and no one else) access to ring ", name,
        " through a POSIX ACL: ", strerror(err),
        err == EOPNOTSUPP
            ? " (the file system of /dev/shm has no POSIX ACLs; batchd "
              "refuses to fall back to access by group: mount a tmpfs with "
              "ACL support there, or run the trainer as the daemon's uid)"
            : ""));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<RingWriter>> RingWriter::Create(
    const std::string& name, const RingGeometry& geometry, int64_t client_uid) {
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
  // The segment is made whole before it has a name: an unnamed file in
  // /dev/shm (O_TMPFILE) gets its mode, its ACL, its creator and every page,
  // and only then is linked under `name` (which fails if the name exists,
  // and never follows a link there). A daemon killed at any step leaves
  // nothing behind, or a segment whose dead creator the next one sees.
  const int dir_fd = open("/dev/shm", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) {
    return absl::InternalError(
        absl::StrCat("cannot open /dev/shm for ring ", name, ": ",
                     strerror(errno)));
  }
  const int fd = openat(dir_fd, ".", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
  if (fd < 0) {
    const int err = errno;
    close(dir_fd);
    return absl::InternalError(absl::StrCat(
        "cannot create ring ", name, " (an unnamed file in /dev/shm): ",
        strerror(err)));
  }
  auto fail = [&](absl::Status s) {
    close(fd);
    close(dir_fd);
    return s;
  };
  // 0600 whatever the umask, then the one client uid by ACL: a ring is
  // its owner's alone, never a group's.
  fchmod(fd, 0600);
  if (client_uid >= 0 && uid_t(client_uid) != geteuid()) {
    if (absl::Status s = GrantUser(fd, name, uid_t(client_uid)); !s.ok()) {
      return fail(s);
    }
  }
  if (absl::Status s = RecordCreator(fd, name); !s.ok()) return fail(s);
  // Reserve every page now: tmpfs allocates lazily and a full /dev/shm
  // would otherwise SIGBUS whichever process touches a page first.
  if (const int rc = posix_fallocate(fd, 0, off_t(bytes)); rc != 0) {
    if (rc == ENOSPC) return fail(exhausted(" (reservation failed)"));
    return fail(absl::InternalError(
        absl::StrCat("cannot reserve ring ", name, ": ", strerror(rc))));
  }
  const std::string bare = BareSegmentName(name);
  // AT_EMPTY_PATH needs CAP_DAC_READ_SEARCH; /proc's link to the open file
  // does the same for any uid.
  if (linkat(fd, "", dir_fd, bare.c_str(), AT_EMPTY_PATH) != 0) {
    const std::string self = absl::StrCat("/proc/self/fd/", fd);
    if (errno == EEXIST ||
        linkat(AT_FDCWD, self.c_str(), dir_fd, bare.c_str(),
               AT_SYMLINK_FOLLOW) != 0) {
      if (errno == EEXIST) {
        return fail(absl::AlreadyExistsError(
            absl::StrCat("shared memory segment ", name, " already exists")));
      }
      return fail(absl::InternalError(absl::StrCat(
          "cannot name ring ", name, ": ", strerror(errno))));
    }
  }
  struct stat made;
  fstat(fd, &made);
  close(fd);
  close(dir_fd);
  std::unique_ptr<Mapping> mapping;
  try {
    bip::shared_memory_object shm(bip::open_only, bare.c_str(),
                                  bip::read_write);
    // The name is ours in a sticky directory; check anyway that it is
    // still the file just made before trusting it.
    struct stat st;
    if (fstat(shm.get_mapping_handle().handle, &st) != 0 ||
        !S_ISREG(st.st_mode) || st.st_ino != made.st_ino ||
        st.st_dev != made.st_dev || st.st_uid != geteuid()) {
      return absl::PermissionDeniedError(absl::StrCat(
          "ring ", name, " is not the regular file of uid ", geteuid(),
          " just made"));
    }
    mapping = std::make_unique<Mapping>(
        bip::mapped_region(shm, bip::read_write, 0, size_t(bytes)));
  } catch (const bip::interprocess_exception& e) {
    bip::shared_memory_object::remove(bare.c_str());
    return absl::InternalError(
        absl::StrCat("cannot map ring ", name, ": ", e.what()));
  }
  return std::unique_ptr<RingWriter>(
      new RingWriter(name, geometry, std::move(mapping)));
}

RingWriter::RingWriter(std::string name, RingGeometry geometry,
                       std::unique_ptr<Mapping> mapping)
    : name_(std::move(name)),
      geometry_(std::move(geometry)),
      mapping_(std::move(mapping)),
      header_(reinterpret_cast<shm::RingHeader*>(mapping_->base())),
      claimed_slot_(geometry_.slot_count, 0) {
  // The pages are fresh zeroes (every slot kSlotFree) from tmpfs; fill in everything but the
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
  h->released.store(0, std::memory_order_relaxed);
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
  // A client still mapped keeps its pages; tell it the ring is gone (unless
  // it knows already that the daemon exits, and may reopen the stream).
  if (header_->state.load(std::memory_order_relaxed) != shm::kStateExiting) {
    SetState(shm::kStateClosed);
  }
  bip::shared_memory_object::remove(BareSegmentName(name_).c_str());
}

shm::SlotTable* RingWriter::table() const {
  return reinterpret_cast<shm::SlotTable*>(mapping_->base() +
                                           shm::kSlotTableOffset);
}

uint8_t* RingWriter::SlotBase(uint64_t pos) const {
  return mapping_->base() + shm::kHeaderBytes +
         uint64_t(claimed_slot_[pos % geometry_.slot_count]) *
             geometry_.SlotBytes();
}

bool RingWriter::TryClaim(uint64_t* pos) {
  // Positions claimed and not yet published each hold a slot, so there are
  // never more than slot_count of them and claimed_slot_ does not collide.
  shm::SlotTable* t = table();
  const uint32_t n = geometry_.slot_count;
  for (uint32_t k = 0; k < n; ++k) {
    const uint32_t i = (next_free_hint_ + k) % n;
    // Acquire pairs with the client's release in RingReader::Release: it is
    // done reading slot i before we overwrite it.
    if (t->slot_state[i].load(std::memory_order_acquire) != shm::kSlotFree) {
      continue;
    }
    t->slot_state[i].store(shm::kSlotServer, std::memory_order_relaxed);
    next_free_hint_ = (i + 1) % n;
    claimed_slot_[claimed_ % n] = i;
    *pos = claimed_++;
    return true;
  }
  return false;
}

void RingWriter::Publish(uint64_t pos) {
  // Where pos lives, before pos is public (the release below covers it).
  table()->slot_of[pos % geometry_.slot_count].store(
      claimed_slot_[pos % geometry_.slot_count], std::memory_order_relaxed);
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
  return header_->released.load(std::memory_order_acquire);
}

RingWriter::ClientInfo RingWriter::client() const {
  ClientInfo info;
  info.pid = header_->client_pid.load(std::memory_order_acquire);
  info.heartbeat_ns =
      header_->client_heartbeat_ns.load(std::memory_order_acquire);
  info.wait_ns = header_->client_wait_ns.load(std::memory_order_relaxed);
  return info;
}

bool RingWriter::ClientGone(uint64_t now_ns, uint64_t stale_ns,
                            uint32_t holder_pid, uint64_t holder_start) const {
  const uint32_t pid = header_->client_pid.load(std::memory_order_acquire);
  if (pid == 0) return false;  // nobody attached yet
  if (header_->client_detached.load(std::memory_order_acquire)) return true;
  // The process the kernel named when it asked for the ring: it alone
  // counts, whatever the client wrote (pid 1, another's start time).
  if (holder_pid != 0) {
    return !ProcessAlive(holder_pid, holder_start, SelfPidNamespace());
  }
  // No such process (TCP, another pid namespace): the client's own stamps.
  // Its word that it died is believed; that it lives needs a fresh
  // heartbeat, and one from the future (beyond the skew allowed between
  // a stamp and our clock) is forged, hence stale.
  const uint64_t beat =
      header_->client_heartbeat_ns.load(std::memory_order_acquire);
  if (beat > now_ns && beat - now_ns > shm::kMaxClockSkewNs) return true;
  const uint64_t start = header_->client_start.load(std::memory_order_acquire);
  const uint64_t ns = header_->client_pid_ns.load(std::memory_order_acquire);
  if (ns == SelfPidNamespace() && !ProcessAlive(pid, start, ns)) return true;
  return now_ns > beat && now_ns - beat > stale_ns;
}

// ---------------------------------------------------------- stale segments

namespace {

// What a segment's safe read gave: its header's bytes (`got` of them, a
// plain byte copy) and its file's status.
using SegmentFate = bool (*)(const shm::RingHeader& h, ssize_t got,
                             const struct stat& st);

// Removes the segments named `prefix`* that are regular files of this
// process's uid and for which `remove` says so; see RemoveStaleSegments.
std::vector<std::string> RemoveSegmentsIf(const std::string& prefix,
                                          SegmentFate remove,
                                          std::vector<std::string>* skipped) {
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
    const ssize_t got = PreadFull(fd, raw, sizeof(raw), 0);
    const auto& h = *reinterpret_cast<const shm::RingHeader*>(raw);
    close(fd);
    if (remove(h, got, st) && unlinkat(dir_fd, n.c_str(), 0) == 0) {
      removed.push_back("/" + n);
    }
  }
  close(dir_fd);
  return removed;
}

}  // namespace

std::vector<std::string> RemoveStaleSegments(
    const std::string& prefix, std::vector<std::string>* skipped) {
  return RemoveSegmentsIf(
      prefix,
      [](const shm::RingHeader& h, ssize_t got, const struct stat& st) {
        // The creator is recorded before the pages are reserved: a segment
        // whose creator died while it was being made (magic still 0) is
        // stale as one whose server died.
        const ssize_t identity = ssize_t(
            offsetof(shm::RingHeader, server_pid_ns) + sizeof(uint64_t));
        if (got >= identity && (h.magic == shm::kMagic || h.magic == 0) &&
            h.server_pid != 0) {
          return !ProcessAlive(h.server_pid, h.server_start, h.server_pid_ns);
        }
        // Never finished: stale once its creator has had ample time.
        return time(nullptr) - st.st_mtime > 60;
      },
      skipped);
}

std::vector<std::string> RemoveOwnSegments(const std::string& prefix) {
  return RemoveSegmentsIf(
      prefix,
      [](const shm::RingHeader& h, ssize_t got, const struct stat&) {
        return got == ssize_t(sizeof(h)) && h.magic == shm::kMagic &&
               h.server_pid == uint32_t(getpid());
      },
      nullptr);
}

}  // namespace batchd
