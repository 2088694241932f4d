// A deterministic discrete-event queue: integer-nanosecond time, events ordered by
// (time, priority, insertion sequence) in a 4-ary heap (shallower than a binary one: fewer cache
// lines per pop; the order is total, so the pops come in the same order either way). Events are
// plain values (a kind and two integer arguments) that the owner dispatches with a switch: no
// allocation per event.
//
// Thread-safety: none; one queue per simulation.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/status.h"
#include "core/units.h"

namespace ptdp::sim {

// Named priorities: at equal times, lower values run first.
enum class Priority : int32_t {
  kArrival = 0,   // a message or a collective completes (wakes waiters before they re-check)
  kTransfer = 1,  // a transfer's rate changes or it finishes its latency phase
  kCompute = 2,   // a compute instruction ends and its rank issues the next ones
};

struct Event {
  Nanoseconds time = 0;
  // (priority << 48) | insertion sequence: ties at equal time run by priority, then first-in
  // first-out. 2^48 events per simulation at most.
  uint64_t order = 0;
  int64_t a = 0;  // the owner's arguments
  int32_t b = 0;
  uint32_t kind = 0;  // the owner's event type
  int32_t priority() const { return static_cast<int32_t>(order >> 48); }
  int64_t seq() const { return static_cast<int64_t>(order & ((uint64_t(1) << 48) - 1)); }
};

class EventQueue {
 public:
  void Reserve(size_t n) { heap_.reserve(n); }
  // Empty at time 0, as constructed, keeping the heap's capacity (a replay reuses its queue).
  void Reset() {
    heap_.clear();
    now_ = 0;
    seq_ = 0;
    processed_ = 0;
  }
  // REQUIRES: t >= now() (no event in the past).
  void Schedule(Nanoseconds t, Priority p, uint32_t kind, int64_t a, int32_t b = 0) {
    PTDP_CHECK_MSG(t >= now_, "event scheduled in the past");
    const Event e{t, (uint64_t(static_cast<uint32_t>(p)) << 48) | seq_++, a, b, kind};
    size_t i = heap_.size();
    heap_.push_back(e);
    while (i > 0) {
      const size_t parent = (i - 1) / kArity;
      if (!Before(e, heap_[parent])) break;
      heap_[i] = heap_[parent];
      i = parent;
    }
    heap_[i] = e;
  }
  bool Empty() const { return heap_.empty(); }
  // Removes the earliest event and advances now() to its time. REQUIRES: !Empty().
  Event Pop() {
    const Event e = heap_.front();
    const Event last = heap_.back();
    heap_.pop_back();
    const size_t n = heap_.size();
    // Sift `last` down from the root into the hole the earliest event left.
    size_t i = 0;
    for (;;) {
      const size_t first = kArity * i + 1;
      if (first >= n) break;
      size_t least = first;
      const size_t end = std::min(first + kArity, n);
      for (size_t c = first + 1; c < end; ++c) {
        if (Before(heap_[c], heap_[least])) least = c;
      }
      if (!Before(heap_[least], last)) break;
      heap_[i] = heap_[least];
      i = least;
    }
    if (n > 0) heap_[i] = last;
    now_ = e.time;
    ++processed_;
    return e;
  }
  Nanoseconds now() const { return now_; }
  int64_t processed() const { return processed_; }

 private:
  static constexpr size_t kArity = 4;
  static bool Before(const Event& x, const Event& y) {
    return x.time != y.time ? x.time < y.time : x.order < y.order;
  }
  std::vector<Event> heap_;
  Nanoseconds now_ = 0;
  uint64_t seq_ = 0;
  int64_t processed_ = 0;
};

}  // namespace ptdp::sim
