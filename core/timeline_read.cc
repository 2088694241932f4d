// Reading back the Chrome traces that core/timeline.cc writes (ptdp simulate --trace, ptdp train
// --trace), for `ptdp compare`. Only this writer's format is accepted: every "X" event must carry
// our args (op, microbatch, chunk, start_ns, end_ns, ...); metadata ("M") and counter ("C") events
// are skipped. A trace is input like any other file: bounded size, every number range-checked,
// one line naming the event and the field on error.
#include <cstdint>
#include <string>

#include "core/json.h"
#include "core/parallel.h"
#include "core/timeline.h"

namespace ptdp {
namespace {

// A trace holds one event per instruction of one iteration: bounded by the Program's own cap
// (schedule: 2^21 instructions per rank) times a few ranks; 2^24 events is 2 GB of JSON, beyond
// the file cap anyway.
constexpr int64_t kMaxTraceEvents = int64_t(1) << 24;
constexpr int64_t kMaxTraceNs = int64_t(1) << 62;
constexpr int64_t kMaxMicrobatches = int64_t(1) << 31;

Status ReadEvent(const Json& e, const std::string& path, const Timeline& t, TimelineEvent* out) {
  JsonObjectReader r(e, path);
  std::string ph, name, cat, op;
  int64_t pid = 0, tid = 0, microbatch = 0, chunk = 0, peer = -1, bytes = 0, start = 0, end = 0,
          wait = 0;
  double ts = 0, dur = 0;
  bool recompute = false;
  r.Required("ph", &ph);
  r.Required("name", &name);
  r.Required("cat", &cat);
  r.Required("pid", &pid);
  r.Required("tid", &tid);
  r.Required("ts", &ts);
  r.Required("dur", &dur);
  const Json* args = r.Child("args", true);
  PTDP_RETURN_IF_ERROR(r.Finish());
  if (!args->is_object()) return Status::Invalid(path + ".args: expected an object");
  JsonObjectReader a(*args, path + ".args");
  a.Required("op", &op);
  a.Required("microbatch", &microbatch);
  a.Required("chunk", &chunk);
  a.Optional("peer", &peer);
  a.Optional("bytes", &bytes);
  a.Optional("recompute", &recompute);
  a.Required("start_ns", &start);
  a.Required("end_ns", &end);
  a.Optional("wait_ns", &wait);
  PTDP_RETURN_IF_ERROR(a.Finish());
  const auto range = [&](const char* field, int64_t v, int64_t lo, int64_t hi) -> Status {
    if (v >= lo && v <= hi) return Status::Ok();
    return Status::Invalid(path + "." + field + ": " + std::to_string(v) + " is outside [" +
                           std::to_string(lo) + ", " + std::to_string(hi) + "]");
  };
  PTDP_RETURN_IF_ERROR(range("pid", pid, 0, t.pp - 1));
  PTDP_RETURN_IF_ERROR(range("tid", tid, 0, kNumStreams - 1));
  PTDP_RETURN_IF_ERROR(range("args.microbatch", microbatch, -1, t.microbatches - 1));
  PTDP_RETURN_IF_ERROR(range("args.chunk", chunk, 0, t.vp - 1));
  PTDP_RETURN_IF_ERROR(range("args.peer", peer, -1, t.pp - 1));
  PTDP_RETURN_IF_ERROR(range("args.bytes", bytes, 0, kMaxTraceNs));
  PTDP_RETURN_IF_ERROR(range("args.start_ns", start, 0, kMaxTraceNs));
  PTDP_RETURN_IF_ERROR(range("args.end_ns", end, start, kMaxTraceNs));
  PTDP_RETURN_IF_ERROR(range("args.wait_ns", wait, 0, kMaxTraceNs));
  Result<Op> parsed_op = ParseOpName(op);
  if (!parsed_op.ok()) return parsed_op.status().WithPrefix(path + ".args.op");
  const Op parsed = *parsed_op;
  out->pp_rank = static_cast<int32_t>(pid);
  out->stream = static_cast<Stream>(tid);
  out->instr = Instr{parsed,
                     static_cast<int32_t>(microbatch),
                     static_cast<int32_t>(chunk),
                     static_cast<int32_t>(peer),
                     bytes,
                     recompute};
  out->start_ns = start;
  out->end_ns = end;
  out->wait_ns = wait;
  return Status::Ok();
}

}  // namespace

Result<Timeline> TimelineFromChromeTrace(const Json& j, const std::string& path) {
  if (!j.is_object()) return Status::Invalid(path + ": expected a JSON object (a Chrome trace)");
  JsonObjectReader r(j, path);
  r.Allow("displayTimeUnit");
  const Json* other = r.Child("otherData", true);
  const Json* events = r.Child("traceEvents", true);
  PTDP_RETURN_IF_ERROR(r.Finish());
  if (!other->is_object()) return Status::Invalid(path + ".otherData: expected an object");
  Timeline t;
  int64_t pp = 0, vp = 0, microbatches = 0;
  JsonObjectReader o(*other, path + ".otherData");
  o.Required("source", &t.source);
  o.Required("pp", &pp);
  o.Required("vp", &vp);
  o.Required("microbatches", &microbatches);
  PTDP_RETURN_IF_ERROR(o.Finish());
  if (pp < 1 || pp > kMaxPp)
    return Status::Invalid(path + ".otherData.pp: " + std::to_string(pp) + " is outside [1, " +
                           std::to_string(kMaxPp) + "]");
  if (vp < 1 || vp > kMaxVp)
    return Status::Invalid(path + ".otherData.vp: " + std::to_string(vp) + " is outside [1, " +
                           std::to_string(kMaxVp) + "]");
  if (microbatches < 1 || microbatches > kMaxMicrobatches) {
    return Status::Invalid(path + ".otherData.microbatches: " + std::to_string(microbatches) +
                           " is outside [1, 2^31]");
  }
  t.pp = static_cast<int>(pp), t.vp = static_cast<int>(vp), t.microbatches = microbatches;
  if (!events->is_array()) return Status::Invalid(path + ".traceEvents: expected an array");
  if (int64_t(events->size()) > kMaxTraceEvents) {
    return Status::Invalid(path + ".traceEvents: " + std::to_string(events->size()) +
                           " events, more than " + std::to_string(kMaxTraceEvents));
  }
  for (size_t i = 0; i < events->size(); ++i) {
    const Json& e = (*events)[i];
    const std::string at = path + ".traceEvents[" + std::to_string(i) + "]";
    if (!e.is_object()) return Status::Invalid(at + ": expected an object");
    const auto ph = e.find("ph");
    if (ph == e.end() || !ph->is_string()) return Status::Invalid(at + ".ph: expected a string");
    if (*ph != "X") continue;  // metadata and counters
    TimelineEvent ev;
    PTDP_RETURN_IF_ERROR(ReadEvent(e, at, t, &ev));
    t.events.push_back(ev);
  }
  return t;
}

Result<Timeline> ReadChromeTrace(const std::string& path) {
  PTDP_ASSIGN_OR_RETURN(const Json j, ReadJsonFile(path, kMaxPlanFileBytes));
  return TimelineFromChromeTrace(j, path);
}

}  // namespace ptdp
