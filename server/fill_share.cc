// The window of fills shared between streams of the same content; see
// fill_share.h.
#include "server/fill_share.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <map>
#include <set>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "base/log.h"
#include "server/engine.h"
#include "workloads/workload.h"

namespace batchd {
namespace fill_share_internal {

// Where a fill is: being filled by its claimant, kept, or gone (given up,
// dropped, evicted). Waiters read it without the lock.
enum State : int { kFilling = 0, kReady = 1, kGone = 2 };

// Each tensor's part of a fill begins on its own cache line.
constexpr uint64_t kPartAlign = 64;
// Buffers of dropped fills kept for the group's next claims, at most.
constexpr size_t kMaxSpares = 32;

using Buffer = std::unique_ptr<uint8_t[]>;

// One item's fill. The key, id and step are constant; the rest is the
// window's (under its lock), except `state`.
struct Entry {
  uint64_t epoch = 0, position = 0, id = 0;
  uint64_t step = 0;    // the step its filler filled it for
  uint64_t serial = 0;  // the order fills entered the window
  std::atomic<int> state{kFilling};
  Buffer bytes;
  uint64_t decode_errors = 0, skipped_examples = 0;  // what its fill counted
  uint64_t taken = 0;  // members (bit = slot) that have its bytes
  uint32_t pins = 0;   // copies of it in progress
};

struct Group;

struct Window {
  explicit Window(uint64_t b) : budget(b) {}
  const uint64_t budget;
  absl::Mutex mu;
  uint64_t held ABSL_GUARDED_BY(mu) = 0;
  uint64_t max_held ABSL_GUARDED_BY(mu) = 0;
  uint64_t next_group_id ABSL_GUARDED_BY(mu) = 1;
  uint64_t next_serial ABSL_GUARDED_BY(mu) = 1;
  std::map<std::string, std::weak_ptr<Group>> by_key ABSL_GUARDED_BY(mu);
  // Every group alive (a group removes itself as it goes).
  std::set<Group*> live ABSL_GUARDED_BY(mu);
};

// The streams of one key and their fills. Everything but the constants is
// the window's, under its lock (a Group's state lives in its window's lock
// domain; the annotations name it through `window`).
struct Group {
  Group(std::shared_ptr<Window> w, std::string k, uint64_t i,
        const std::vector<uint64_t>& sizes)
      : window(std::move(w)), key(std::move(k)), id(i), tensor_bytes(sizes) {
    uint64_t offset = 0;
    for (uint64_t n : sizes) {
      tensor_offset.push_back(offset);
      offset += (n + kPartAlign - 1) / kPartAlign * kPartAlign;
    }
    item_bytes = std::max<uint64_t>(offset, 1);
    charge = item_bytes + FillShare::kEntryOverheadBytes;
    used.assign(FillShare::kMaxStreamsPerGroup, false);
    ranks.resize(FillShare::kMaxStreamsPerGroup);
  }
  ~Group();

  const std::shared_ptr<Window> window;
  const std::string key;
  const uint64_t id;
  const std::vector<uint64_t> tensor_bytes;
  std::vector<uint64_t> tensor_offset;  // constant after construction
  uint64_t item_bytes = 0;              // constant after construction
  // What one fill counts against the window: its bytes and its entry.
  uint64_t charge = 0;  // constant after construction

  // By member slot: whether it is taken, and the member's ranks.
  std::vector<bool> used ABSL_GUARDED_BY(window->mu);
  std::vector<std::vector<const RankProducer*>> ranks
      ABSL_GUARDED_BY(window->mu);
  // Fills by (epoch, position), and by the order they entered.
  std::map<std::pair<uint64_t, uint64_t>, std::shared_ptr<Entry>> index
      ABSL_GUARDED_BY(window->mu);
  std::map<uint64_t, Entry*> fifo ABSL_GUARDED_BY(window->mu);
  std::vector<Buffer> spare ABSL_GUARDED_BY(window->mu);
  uint64_t held ABSL_GUARDED_BY(window->mu) = 0;  // entries' and spares'
  bool warned_mismatch ABSL_GUARDED_BY(window->mu) = false;
  // Read without the lock (written under it): members with a rank, and
  // fills in the window.
  std::atomic<uint32_t> live_streams{0};
  std::atomic<uint64_t> entries{0};
};

Group::~Group() {
  absl::MutexLock lock(&window->mu);
  window->live.erase(this);
  auto it = window->by_key.find(key);
  if (it != window->by_key.end() && it->second.expired()) {
    window->by_key.erase(it);
  }
  window->held -= held;
}

}  // namespace fill_share_internal

using fill_share_internal::Buffer;
using fill_share_internal::Entry;
using fill_share_internal::Group;
using fill_share_internal::kFilling;
using fill_share_internal::kGone;
using fill_share_internal::kReady;
using fill_share_internal::Window;

namespace {

uint64_t Bit(int slot) { return uint64_t(1) << slot; }

// The oldest step `m`'s ranks have not published (its ranks never want a
// fill of an earlier step again); the largest step when it has no rank.
uint64_t LowStep(const std::vector<const RankProducer*>& ranks) {
  uint64_t low = std::numeric_limits<uint64_t>::max();
  for (const RankProducer* p : ranks) {
    low = std::min(low, p->start_step() +
                            p->published_steps.load(std::memory_order_relaxed));
  }
  return low;
}

// What the window does under its lock. Everything here requires
// g.window->mu (the annotations cannot name a parameter's lock).
class Locked {
 public:
  explicit Locked(Group& g) : g_(g), w_(*g.window) {}

  // Whether any member may still want `e`: it has a rank, has not taken
  // it, and its oldest unpublished step is not past e's.
  bool AnyoneWants(const Entry& e) const ABSL_NO_THREAD_SAFETY_ANALYSIS {
    for (int slot = 0; slot < int(g_.ranks.size()); ++slot) {
      const std::vector<const RankProducer*>& ranks = g_.ranks[slot];
      if (ranks.empty() || (e.taken & Bit(slot)) != 0) continue;
      if (LowStep(ranks) <= e.step) return true;
    }
    return false;
  }
  // Whether a member other than `self` may want a fill of `step`.
  bool OthersMayWant(int self,
                     uint64_t step) const ABSL_NO_THREAD_SAFETY_ANALYSIS {
    for (int slot = 0; slot < int(g_.ranks.size()); ++slot) {
      const std::vector<const RankProducer*>& ranks = g_.ranks[slot];
      if (slot == self || ranks.empty()) continue;
      if (LowStep(ranks) <= step) return true;
    }
    return false;
  }

  // A free member slot, now taken; -1 when the group is full.
  int TakeSlot() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    for (int slot = 0; slot < int(g_.used.size()); ++slot) {
      if (g_.used[slot]) continue;
      g_.used[slot] = true;
      return slot;
    }
    return -1;
  }

  // Removes `e` from the window (it must not be pinned) and keeps or frees
  // its buffer.
  void Drop(Entry& e) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    Buffer buffer = Unlink(e);
    if (buffer != nullptr) Release(std::move(buffer));
  }
  // Drops every kept fill that no member wants any more.
  void Sweep() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    std::vector<Entry*> unwanted;
    for (const auto& [serial, e] : g_.fifo) {
      if (e->state.load(std::memory_order_relaxed) == kReady && e->pins == 0 &&
          !AnyoneWants(*e)) {
        unwanted.push_back(e);
      }
    }
    for (Entry* e : unwanted) Drop(*e);
    TrimSpares();
  }

  // A buffer for a new fill of the group, within the group's share of the
  // window and the window's budget: a spare, a new one, or the buffer of
  // the group's oldest kept fill. Null when there is no room (every fill
  // is being filled or copied, or an item is larger than the share).
  Buffer TakeBuffer() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    const uint64_t need = g_.charge;
    for (;;) {
      const uint64_t cap = Share();
      if (g_.held > cap && !g_.spare.empty()) {
        FreeOne(std::move(g_.spare.back()));  // the share shrank
        g_.spare.pop_back();
        continue;
      }
      if (!g_.spare.empty()) {
        Buffer b = std::move(g_.spare.back());
        g_.spare.pop_back();
        return b;
      }
      if (g_.held + need > cap) {
        Entry* oldest = OldestEvictable(g_);
        return oldest == nullptr ? nullptr : Unlink(*oldest);
      }
      if (w_.held + need <= w_.budget) {
        g_.held += need;
        w_.held += need;
        w_.max_held = std::max(w_.max_held, w_.held);
        return Buffer(new uint8_t[g_.item_bytes]);
      }
      // The group is within its share but the window is full: the group
      // furthest over its share gives one fill back.
      Group* fat = nullptr;
      for (Group* other : w_.live) {
        if (other != &g_ && other->held > cap &&
            (fat == nullptr || other->held > fat->held)) {
          fat = other;
        }
      }
      if (fat == nullptr) return nullptr;
      Locked other(*fat);
      if (!fat->spare.empty()) {
        other.FreeOne(std::move(fat->spare.back()));
        fat->spare.pop_back();
        continue;
      }
      Entry* victim = OldestEvictable(*fat);
      if (victim == nullptr) return nullptr;
      other.FreeOne(other.Unlink(*victim));
    }
  }

  // Keeps a buffer of a fill that went for the next claim, or frees it
  // (nothing is kept for a group that shares no more).
  void Release(Buffer buffer) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    if (g_.live_streams.load(std::memory_order_relaxed) >= 2 &&
        g_.held <= Share() &&
        g_.spare.size() < fill_share_internal::kMaxSpares) {
      g_.spare.push_back(std::move(buffer));
    } else {
      FreeOne(std::move(buffer));
    }
  }

  void TrimSpares() ABSL_NO_THREAD_SAFETY_ANALYSIS {
    // Nothing to share with: no memory kept for it.
    if (g_.live_streams.load(std::memory_order_relaxed) >= 2) return;
    while (!g_.spare.empty()) {
      FreeOne(std::move(g_.spare.back()));
      g_.spare.pop_back();
    }
  }

  // The fill's buffer, taken out of the window with the fill.
  // `e` may go with it: the caller holds it only by reference.
  Buffer Unlink(Entry& e) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    std::shared_ptr<Entry> keep;
    auto it = g_.index.find({e.epoch, e.position});
    if (it != g_.index.end() && it->second.get() == &e) {
      keep = std::move(it->second);
      g_.index.erase(it);
    }
    g_.fifo.erase(e.serial);
    g_.entries.fetch_sub(1, std::memory_order_relaxed);
    e.state.store(kGone, std::memory_order_release);
    return std::move(e.bytes);
  }

 private:
  // The group's even share of the budget among the groups that hold fills
  // or share now.
  uint64_t Share() const ABSL_NO_THREAD_SAFETY_ANALYSIS {
    uint64_t groups = 0;
    for (const Group* other : w_.live) {
      groups += other == &g_ || other->held > 0 ||
                other->live_streams.load(std::memory_order_relaxed) >= 2;
    }
    return w_.budget / std::max<uint64_t>(1, groups);
  }
  static Entry* OldestEvictable(Group& g) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    for (const auto& [serial, e] : g.fifo) {
      if (e->state.load(std::memory_order_relaxed) == kReady && e->pins == 0) {
        return e;
      }
    }
    return nullptr;
  }
  void FreeOne(Buffer buffer) ABSL_NO_THREAD_SAFETY_ANALYSIS {
    if (buffer == nullptr) return;
    buffer.reset();
    g_.held -= g_.charge;
    w_.held -= g_.charge;
  }

  Group& g_;
  Window& w_;
};

}  // namespace

// ------------------------------------------------------------ tickets

ShareTicket::ShareTicket(ShareTicket&& other) noexcept
    : group_(std::move(other.group_)),
      entry_(std::move(other.entry_)),
      kind_(other.kind_),
      targets_(std::move(other.targets_)) {
  other.kind_ = Kind::kNone;
  other.targets_.clear();
}

ShareTicket& ShareTicket::operator=(ShareTicket&& other) noexcept {
  if (this != &other) {
    Reset();
    group_ = std::move(other.group_);
    entry_ = std::move(other.entry_);
    kind_ = other.kind_;
    targets_ = std::move(other.targets_);
    other.kind_ = Kind::kNone;
    other.targets_.clear();
  }
  return *this;
}

bool ShareTicket::settled() const {
  return kind_ != Kind::kWait ||
         entry_->state.load(std::memory_order_acquire) != kFilling;
}

void ShareTicket::Reset() {
  if (kind_ == Kind::kClaim) {
    absl::MutexLock lock(&group_->window->mu);
    if (entry_->state.load(std::memory_order_relaxed) == kFilling) {
      Locked(*group_).Drop(*entry_);
    }
  }
  kind_ = Kind::kNone;
  targets_.clear();
  entry_.reset();
  group_.reset();  // without the lock: it may be the group's last holder
}

// ------------------------------------------------------------ members

ShareMember::ShareMember(std::shared_ptr<Group> group, int slot)
    : group_(std::move(group)), slot_(slot) {}

ShareMember::~ShareMember() {
  Group& g = *group_;
  absl::MutexLock lock(&g.window->mu);
  g.used[slot_] = false;
  if (!g.ranks[slot_].empty()) {
    g.live_streams.fetch_sub(1, std::memory_order_relaxed);
  }
  g.ranks[slot_].clear();
  // The slot's next member has taken nothing yet.
  for (auto& [serial, e] : g.fifo) e->taken &= ~Bit(slot_);
  Locked(g).Sweep();
}

void ShareMember::AddRank(const RankProducer* p) {
  Group& g = *group_;
  absl::MutexLock lock(&g.window->mu);
  std::vector<const RankProducer*>& ranks = g.ranks[slot_];
  ranks.push_back(p);
  if (ranks.size() == 1) g.live_streams.fetch_add(1, std::memory_order_relaxed);
}

void ShareMember::RemoveRank(const RankProducer* p) {
  Group& g = *group_;
  absl::MutexLock lock(&g.window->mu);
  std::vector<const RankProducer*>& ranks = g.ranks[slot_];
  auto it = std::find(ranks.begin(), ranks.end(), p);
  if (it == ranks.end()) return;
  ranks.erase(it);
  if (ranks.empty()) g.live_streams.fetch_sub(1, std::memory_order_relaxed);
  // What only this stream would still have taken goes now.
  Locked(g).Sweep();
}

uint64_t ShareMember::group_id() const { return group_->id; }

uint32_t ShareMember::group_streams() const {
  return group_->live_streams.load(std::memory_order_relaxed);
}

ShareMember::Begin ShareMember::BeginItem(uint64_t step, const ItemRef& item,
                                          uint8_t* const* out,
                                          WorkloadCounters* counters,
                                          ShareTicket* ticket) {
  if (ticket->claimed() && ticket->entry_->epoch == item.epoch &&
      ticket->entry_->position == item.position) {
    return Begin::kFill;  // its read was pending: the claim holds
  }
  ticket->Reset();
  Group& g = *group_;
  // Padding is zeros, cheaper written than copied; a stream alone fills
  // without the window's lock.
  if (!item.valid || (g.live_streams.load(std::memory_order_relaxed) < 2 &&
                      g.entries.load(std::memory_order_relaxed) == 0)) {
    made_.fetch_add(1, std::memory_order_relaxed);
    return Begin::kFill;
  }
  std::shared_ptr<Entry> copy;
  {
    absl::MutexLock lock(&g.window->mu);
    Locked locked(g);
    auto it = g.index.find({item.epoch, item.position});
    if (it != g.index.end() && it->second->id != item.id) {
      // Never copied: a fill is the same item or nothing. The key covers
      // every input of a fill, so this is a bug worth a line in the log.
      if (!g.warned_mismatch) {
        g.warned_mismatch = true;
        Log(LogLevel::kWarn, "share_mismatch",
            {{"group", absl::StrCat(g.id)},
             {"epoch", absl::StrCat(item.epoch)},
             {"position", absl::StrCat(item.position)}});
      }
      made_.fetch_add(1, std::memory_order_relaxed);
      return Begin::kFill;
    }
    if (it != g.index.end()) {
      Entry& e = *it->second;
      if (e.state.load(std::memory_order_relaxed) == kFilling) {
        ticket->group_ = group_;
        ticket->entry_ = it->second;
        ticket->kind_ = ShareTicket::Kind::kWait;
        return Begin::kWait;
      }
      ++e.pins;
      copy = it->second;
    } else {
      made_.fetch_add(1, std::memory_order_relaxed);
      if (!locked.OthersMayWant(slot_, step)) return Begin::kFill;
      Buffer buffer = locked.TakeBuffer();
      if (buffer == nullptr) return Begin::kFill;
      auto e = std::make_shared<Entry>();
      e->epoch = item.epoch;
      e->position = item.position;
      e->id = item.id;
      e->step = step;
      e->serial = g.window->next_serial++;
      e->bytes = std::move(buffer);
      g.fifo.emplace(e->serial, e.get());
      g.index.emplace(std::make_pair(item.epoch, item.position), e);
      g.entries.fetch_add(1, std::memory_order_relaxed);
      ticket->group_ = group_;
      ticket->entry_ = e;
      ticket->kind_ = ShareTicket::Kind::kClaim;
      for (uint64_t off : g.tensor_offset) {
        ticket->targets_.push_back(e->bytes.get() + off);
      }
      return Begin::kFill;
    }
  }
  // Pinned: it stays while it is copied, without the lock.
  for (size_t k = 0; k < g.tensor_bytes.size(); ++k) {
    memcpy(out[k], copy->bytes.get() + g.tensor_offset[k], g.tensor_bytes[k]);
  }
  if (counters != nullptr) {
    if (copy->decode_errors != 0) {
      counters->decode_errors.fetch_add(copy->decode_errors,
                                        std::memory_order_relaxed);
    }
    if (copy->skipped_examples != 0) {
      counters->skipped_examples.fetch_add(copy->skipped_examples,
                                           std::memory_order_relaxed);
    }
  }
  shared_.fetch_add(1, std::memory_order_relaxed);
  absl::MutexLock lock(&g.window->mu);
  --copy->pins;
  copy->taken |= Bit(slot_);
  if (copy->pins == 0 &&
      copy->state.load(std::memory_order_relaxed) == kReady &&
      !Locked(g).AnyoneWants(*copy)) {
    Locked(g).Drop(*copy);
  }
  return Begin::kCopied;
}

void ShareMember::EndItem(ShareTicket* ticket, const absl::Status& status,
                          uint8_t* const* out,
                          const WorkloadCounters& counted) {
  if (!ticket->claimed()) return;
  if (!status.ok()) {
    ticket->Reset();  // gives the item up: its waiters fill it themselves
    return;
  }
  Group& g = *group_;
  Entry& e = *ticket->entry_;
  // The claim is this worker's alone until it is published.
  for (size_t k = 0; k < g.tensor_bytes.size(); ++k) {
    memcpy(out[k], e.bytes.get() + g.tensor_offset[k], g.tensor_bytes[k]);
  }
  {
    absl::MutexLock lock(&g.window->mu);
    e.decode_errors = counted.decode_errors.load(std::memory_order_relaxed);
    e.skipped_examples =
        counted.skipped_examples.load(std::memory_order_relaxed);
    e.taken |= Bit(slot_);
    e.state.store(kReady, std::memory_order_release);
    if (!Locked(g).AnyoneWants(e)) Locked(g).Drop(e);
  }
  ticket->kind_ = ShareTicket::Kind::kNone;  // published, not given up
  ticket->Reset();
}

// ------------------------------------------------------------ the window

FillShare::FillShare(uint64_t budget_bytes)
    : window_(std::make_shared<Window>(budget_bytes)) {}

FillShare::~FillShare() = default;

std::shared_ptr<ShareMember> FillShare::Join(
    const std::string& key, const std::vector<uint64_t>& tensor_bytes) {
  if (window_->budget == 0) return nullptr;
  std::shared_ptr<Group> group;  // dropped after the lock, if need be
  absl::MutexLock lock(&window_->mu);
  auto it = window_->by_key.find(key);
  if (it != window_->by_key.end()) group = it->second.lock();
  if (group == nullptr || group->tensor_bytes != tensor_bytes) {
    if (group != nullptr) return nullptr;  // same key, other layout: a bug
    group = std::make_shared<Group>(window_, key, window_->next_group_id++,
                                    tensor_bytes);
    window_->by_key[key] = group;
    window_->live.insert(group.get());
  }
  const int slot = Locked(*group).TakeSlot();
  if (slot < 0) return nullptr;
  return std::shared_ptr<ShareMember>(new ShareMember(group, slot));
}

FillShare::Stats FillShare::stats() const {
  Stats s;
  s.budget_bytes = window_->budget;
  absl::MutexLock lock(&window_->mu);
  s.held_bytes = window_->held;
  s.max_held_bytes = window_->max_held;
  for (const Group* g : window_->live) {
    s.groups_sharing += g->live_streams.load(std::memory_order_relaxed) >= 2;
  }
  return s;
}

}  // namespace batchd
