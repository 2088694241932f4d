// Timeline helpers and the Chrome trace event writer shared by the simulator and the runtime.
#include "core/timeline.h"

#include <algorithm>
#include <cstdio>

#include "core/json.h"

namespace ptdp {

const char* StreamName(Stream s) {
  switch (s) {
    case Stream::kCompute:
      return "compute";
    case Stream::kSend:
      return "send";
    case Stream::kRecv:
      return "recv";
    case Stream::kCollective:
      return "collective";
  }
  return "?";
}

Stream StreamOf(Op op) {
  switch (op) {
    case Op::kSendAct:
    case Op::kSendGrad:
      return Stream::kSend;
    case Op::kRecvAct:
    case Op::kRecvGrad:
      return Stream::kRecv;
    case Op::kReduceGrads:
      return Stream::kCollective;
    default:
      return Stream::kCompute;
  }
}

Nanoseconds Timeline::EndNs() const {
  Nanoseconds end = 0;
  for (const TimelineEvent& e : events) end = std::max(end, e.end_ns);
  return end;
}

namespace {

// Microseconds with nanosecond decimals, exact for integer nanoseconds.
void AppendMicros(std::string* out, Nanoseconds ns) {
  char buf[40];
  const char* sign = ns < 0 ? "-" : "";
  const int64_t a = ns < 0 ? -ns : ns;
  std::snprintf(buf, sizeof buf, "%s%lld.%03lld", sign, static_cast<long long>(a / 1000),
                static_cast<long long>(a % 1000));
  *out += buf;
}

void AppendEscaped(std::string* out, const std::string& s) {
  *out += OrderedJson(s).dump();
}

}  // namespace

std::string ChromeTraceJson(const Timeline& t) {
  std::vector<const TimelineEvent*> ev;
  ev.reserve(t.events.size());
  int max_rank = t.pp - 1;
  for (const TimelineEvent& e : t.events) {
    ev.push_back(&e);
    max_rank = std::max<int>(max_rank, e.pp_rank);
  }
  std::stable_sort(ev.begin(), ev.end(), [](const TimelineEvent* a, const TimelineEvent* b) {
    if (a->pp_rank != b->pp_rank) return a->pp_rank < b->pp_rank;
    if (a->stream != b->stream) return a->stream < b->stream;
    return a->start_ns < b->start_ns;
  });
  std::string out;
  out.reserve(256 + ev.size() * 200);
  out += "{\"displayTimeUnit\":\"ns\",\"otherData\":{\"source\":";
  AppendEscaped(&out, t.source);
  out += ",\"pp\":" + std::to_string(t.pp) + ",\"vp\":" + std::to_string(t.vp) +
         ",\"microbatches\":" + std::to_string(t.microbatches) + "},\n\"traceEvents\":[\n";
  bool first = true;
  auto sep = [&] {
    if (!first) out += ",\n";
    first = false;
  };
  for (int r = 0; r <= max_rank; ++r) {
    sep();
    out += "{\"name\":\"process_name\",\"ph\":\"M\",\"pid\":" + std::to_string(r) +
           ",\"tid\":0,\"args\":{\"name\":\"pp rank " + std::to_string(r) + "\"}}";
    sep();
    out += "{\"name\":\"process_sort_index\",\"ph\":\"M\",\"pid\":" + std::to_string(r) +
           ",\"tid\":0,\"args\":{\"sort_index\":" + std::to_string(r) + "}}";
    for (int s = 0; s < kNumStreams; ++s) {
      sep();
      out += "{\"name\":\"thread_name\",\"ph\":\"M\",\"pid\":" + std::to_string(r) +
             ",\"tid\":" + std::to_string(s) + ",\"args\":{\"name\":\"" +
             StreamName(static_cast<Stream>(s)) + "\"}}";
    }
  }
  const bool with_chunk = t.vp > 1;
  for (const TimelineEvent* e : ev) {
    const Instr& in = e->instr;
    sep();
    out += "{\"name\":";
    AppendEscaped(&out, InstrToText(in, with_chunk));
    out += ",\"cat\":\"";
    out += OpName(in.op);
    out += "\",\"ph\":\"X\",\"pid\":" + std::to_string(e->pp_rank) +
           ",\"tid\":" + std::to_string(static_cast<int>(e->stream)) + ",\"ts\":";
    AppendMicros(&out, e->start_ns);
    out += ",\"dur\":";
    AppendMicros(&out, e->end_ns - e->start_ns);
    out += ",\"args\":{\"op\":\"";
    out += OpName(in.op);
    out += "\",\"microbatch\":" + std::to_string(in.microbatch) +
           ",\"chunk\":" + std::to_string(in.chunk);
    if (in.peer >= 0)
      out += ",\"peer\":" + std::to_string(in.peer) + ",\"bytes\":" + std::to_string(in.bytes);
    if (ComputesInputGrad(in.op))
      out += std::string(",\"recompute\":") + (in.recompute ? "true" : "false");
    out +=
        ",\"start_ns\":" + std::to_string(e->start_ns) + ",\"end_ns\":" + std::to_string(e->end_ns);
    if (e->wait_ns > 0) out += ",\"wait_ns\":" + std::to_string(e->wait_ns);
    out += "}}";
  }
  for (const TimelineCounter& c : t.counters) {
    sep();
    out += "{\"name\":";
    AppendEscaped(&out, c.name);
    out += ",\"ph\":\"C\",\"pid\":" + std::to_string(c.pp_rank) + ",\"tid\":0,\"ts\":";
    AppendMicros(&out, c.t_ns);
    out += ",\"args\":{";
    AppendEscaped(&out, c.name);
    out += ':';
    out += OrderedJson(c.value).dump();
    out += "}}";
  }
  out += "\n]}\n";
  return out;
}

Status WriteChromeTrace(const Timeline& t, const std::string& path) {
  return WriteFileAtomic(path, ChromeTraceJson(t));
}

}  // namespace ptdp
