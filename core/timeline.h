// Timeline: what happened (runtime, measured) or would happen (simulator, predicted) when a Program
// runs: per pipeline rank, per stream, each instruction with its start and end in integer
// nanoseconds from the start of the iteration. Both the simulator and the runtime emit one, and
// both write it with the same Chrome trace writer below, so `ptdp compare` can put a prediction and
// a measurement side by side instruction by instruction.
//
// Thread-safety: plain values; no shared state.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/json.h"
#include "core/program.h"
#include "core/status.h"
#include "core/units.h"

namespace ptdp {

// The lanes of one pipeline rank. Compute runs kForward / kBackward / kOptimizerStep; the send and
// receive streams carry the point-to-point instructions; the collective stream carries
// kReduceGrads (the data-parallel and embedding all-reduces).
enum class Stream : uint8_t {
  kCompute = 0,
  kSend = 1,
  kRecv = 2,
  kCollective = 3,
};
inline constexpr int kNumStreams = 4;
const char* StreamName(Stream s);  // "compute" | "send" | "recv" | "collective"
// The stream an instruction runs on (kOptimizerStep: compute; kReduceGrads: collective).
Stream StreamOf(Op op);

struct TimelineEvent {
  int32_t pp_rank = 0;
  Stream stream = Stream::kCompute;
  Instr instr;               // the instruction as the Program states it
  Nanoseconds start_ns = 0;  // from the start of the iteration
  Nanoseconds end_ns = 0;    // REQUIRES: end_ns >= start_ns
  // How long the rank stood blocked in this receive waiting for its sender, kept out of the
  // interval so that both sides time the same thing: the runtime's wait ends at start_ns (the
  // message's envelope arrived) and the interval is the transfer; the simulator's interval is the
  // transfer (send issue to arrival) and its wait, the rank's blocked time, ends at end_ns.
  // `ptdp compare` reports it as blocking, not as the instruction's time. 0 elsewhere.
  Nanoseconds wait_ns = 0;
  Nanoseconds Duration() const { return end_ns - start_ns; }
};

// A sampled quantity of one rank over time (activation memory, say): the value holds from t_ns
// until the next sample of the same (pp_rank, name).
struct TimelineCounter {
  int32_t pp_rank = 0;
  std::string name;  // with its unit: "activation_GiB"
  Nanoseconds t_ns = 0;
  double value = 0;
};

struct Timeline {
  std::string source;  // "simulator" | "runtime": names the trace's origin
  int pp = 1;
  int vp = 1;
  int64_t microbatches = 1;
  std::vector<TimelineEvent> events;      // any order; writers sort what they need
  std::vector<TimelineCounter> counters;  // optional

  // Latest end over all events (0 when empty).
  Nanoseconds EndNs() const;
};

// Chrome trace event format (JSON object form), loadable in Perfetto and chrome://tracing:
//   {"displayTimeUnit": "ns", "otherData": {source, pp, vp, microbatches},
//    "traceEvents": [ metadata "M" events naming each process "pp rank r" and each thread by its
//    stream; one complete event per TimelineEvent:
//      {"name": "F3.1", "cat": "forward", "ph": "X", "pid": pp_rank, "tid": stream (0..3),
//       "ts": start in microseconds, "dur": microseconds (both with nanosecond decimals),
//       "args": {"op", "microbatch", "chunk", and for send/recv "peer", "bytes";
//                for backward "recompute"; "start_ns", "end_ns" exact; "wait_ns" when > 0}};
//    one counter event "C" per TimelineCounter ]}
// `name` of an event is InstrToText(instr) (core/program.h). Events are written sorted by
// (pp_rank, stream, start_ns) so the output is deterministic.
std::string ChromeTraceJson(const Timeline& t);
// Writes ChromeTraceJson(t) to `path` atomically (no partial file on failure).
Status WriteChromeTrace(const Timeline& t, const std::string& path);

// Reads back what ChromeTraceJson wrote (core/timeline_read.cc): the "X" events with their args;
// metadata and counters skipped. Every field range-checked; errors name the event and the field.
Result<Timeline> TimelineFromChromeTrace(const Json& j, const std::string& path);
// The file (at most kMaxPlanFileBytes) at `path`.
Result<Timeline> ReadChromeTrace(const std::string& path);

}  // namespace ptdp
