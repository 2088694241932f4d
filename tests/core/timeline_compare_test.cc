// Chrome traces read back (core/timeline_read.cc) and a prediction compared with a measurement
// instruction by instruction (core/timeline_compare.h).
#include "core/timeline_compare.h"

#include <gtest/gtest.h>

#include "core/json.h"
#include "core/timeline.h"

namespace ptdp {
namespace {

TimelineEvent Ev(int rank, Op op, int mb, Nanoseconds start, Nanoseconds end, int peer = -1) {
  TimelineEvent e;
  e.pp_rank = rank;
  e.stream = StreamOf(op);
  e.instr.op = op;
  e.instr.microbatch = mb;
  e.instr.peer = peer;
  if (peer >= 0) e.instr.bytes = 4096;
  e.instr.recompute = op == Op::kBackward && mb == 1;
  e.start_ns = start;
  e.end_ns = end;
  return e;
}

// Two ranks, two microbatches: forwards, a send/recv pair, backwards, the batch-level ops.
Timeline TwoRanks(double scale) {
  Timeline t;
  t.source = "test";
  t.pp = 2;
  t.microbatches = 2;
  const auto s = [&](Nanoseconds ns) { return Nanoseconds(double(ns) * scale); };
  t.events = {Ev(0, Op::kForward, 0, 0, s(100)),
              Ev(0, Op::kSendAct, 0, s(100), s(110), 1),
              Ev(1, Op::kRecvAct, 0, s(100), s(110), 0),
              Ev(1, Op::kForward, 0, s(110), s(210)),
              Ev(0, Op::kForward, 1, s(100), s(200)),
              Ev(1, Op::kBackward, 0, s(210), s(410)),
              Ev(0, Op::kBackward, 1, s(400), s(600)),
              Ev(0, Op::kReduceGrads, -1, s(600), s(650)),
              Ev(0, Op::kOptimizerStep, -1, s(650), s(700))};
  return t;
}

TEST(TimelineRead, RoundTripsWhatTheWriterWrites) {
  Timeline t = TwoRanks(1.0);
  t.events[2].wait_ns = 77;  // the receive's wait for its sender
  auto back = TimelineFromChromeTrace(Json::parse(ChromeTraceJson(t)), "t.json");
  ASSERT_TRUE(back.ok()) << back.status().message();
  EXPECT_EQ(back->source, "test");
  EXPECT_EQ(back->pp, 2);
  ASSERT_EQ(back->events.size(), t.events.size());
  // The writer sorts by (rank, stream, start): compare as sets of events.
  for (const TimelineEvent& e : t.events) {
    bool found = false;
    for (const TimelineEvent& b : back->events) {
      found |= b.pp_rank == e.pp_rank && b.stream == e.stream && b.instr == e.instr &&
               b.start_ns == e.start_ns && b.end_ns == e.end_ns && b.wait_ns == e.wait_ns;
    }
    EXPECT_TRUE(found) << InstrToText(e.instr);
  }
}

TEST(TimelineRead, RefusesBadEventsNamingThem) {
  const std::string text = ChromeTraceJson(TwoRanks(1.0));
  struct Case {
    const char* what;
    void (*edit)(Json&);
    const char* expect;
  };
  const Case cases[] = {
      {"rank beyond pp", [](Json& j) { j["otherData"]["pp"] = 1; }, "is outside [-1, 0]"},
      {"end before start",
       [](Json& j) {
         for (Json& e : j["traceEvents"])
           if (e["ph"] == "X") {
             e["args"]["end_ns"] = -5;
             break;
           }
       },
       "args.end_ns"},
      {"unknown op",
       [](Json& j) {
         for (Json& e : j["traceEvents"])
           if (e["ph"] == "X") {
             e["args"]["op"] = "teleport";
             break;
           }
       },
       "args.op"},
      {"missing args",
       [](Json& j) {
         for (Json& e : j["traceEvents"])
           if (e["ph"] == "X") {
             e.erase("args");
             break;
           }
       },
       "args"},
      {"not a trace", [](Json& j) { j = Json::array(); }, "expected a JSON object"},
  };
  for (const Case& c : cases) {
    Json j = Json::parse(text);
    c.edit(j);
    auto r = TimelineFromChromeTrace(j, "t.json");
    ASSERT_FALSE(r.ok()) << c.what;
    EXPECT_NE(r.status().message().find(c.expect), std::string::npos)
        << c.what << ": " << r.status().message();
    EXPECT_NE(r.status().message().find("t.json"), std::string::npos) << c.what;
  }
}

// Every measured instruction takes twice its predicted time: each kind's sum doubles, the median
// error is 50% of the measurement, and the step time doubles.
TEST(TimelineCompare, MatchesInstructionsAndSumsByKind) {
  auto c = CompareTimelines(TwoRanks(1.0), TwoRanks(2.0), 3);
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->matched, 9);
  EXPECT_EQ(c->only_predicted, 0);
  EXPECT_EQ(c->only_measured, 0);
  EXPECT_DOUBLE_EQ(c->measured_step_s, 2 * c->predicted_step_s);
  EXPECT_NEAR(c->median_relative_error, 0.5, 1e-12);
  for (const OpKindTimes& k : c->by_kind) {
    EXPECT_NEAR(k.measured_s, 2 * k.predicted_s, 1e-15) << OpName(k.op);
  }
  ASSERT_EQ(c->divergent.size(), 3u);  // the two 200 ns backwards first
  EXPECT_EQ(c->divergent[0].instr.op, Op::kBackward);
  EXPECT_EQ(c->divergent[1].instr.op, Op::kBackward);
  // Rank 1's compute span is [0, 410]: forward 100 + backward 200 busy, so 110 idle.
  EXPECT_NEAR(c->predicted_bubble[1], 110.0 / 410.0, 1e-12);
  EXPECT_NE(ComparisonText(*c).find("step time: predicted"), std::string::npos);
}

// Only the point-to-point instructions differ (a receive that waited 10x): the compute
// instructions' median stays 0; when everything takes twice as long it is 50%.
TEST(TimelineCompare, ComputeMedianLeavesOutPointToPoint) {
  Timeline measured = TwoRanks(1.0);
  for (TimelineEvent& e : measured.events) {
    if (e.instr.op == Op::kSendAct || e.instr.op == Op::kRecvAct) e.end_ns += 90;
  }
  auto c = CompareTimelines(TwoRanks(1.0), measured, 0);
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->median_relative_error_compute, 0.0);
  auto all_slow = CompareTimelines(TwoRanks(1.0), TwoRanks(2.0), 0);
  ASSERT_TRUE(all_slow.ok());
  EXPECT_NEAR(all_slow->median_relative_error_compute, 0.5, 1e-12);
  EXPECT_NE(
      ComparisonText(*c).find("compute instructions (forward, backward, optimizer step) 0.0%"),
      std::string::npos);
}

// A receive's wait for its sender is blocking, reported per rank, not the receive's duration.
TEST(TimelineCompare, ReportsReceiveWaitApartFromTheTransfer) {
  Timeline measured = TwoRanks(1.0);
  measured.events[2].wait_ns = 5000;
  auto c = CompareTimelines(TwoRanks(1.0), measured, 0);
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->median_relative_error, 0.0);
  ASSERT_EQ(c->measured_wait_s.size(), 2u);
  EXPECT_EQ(c->measured_wait_s[0], 0.0);
  EXPECT_NEAR(c->measured_wait_s[1], 5e-6, 1e-15);
  EXPECT_EQ(c->predicted_wait_s[1], 0.0);
  EXPECT_NE(ComparisonText(*c).find("pp rank 1: 0.000 ms / 0.005 ms"), std::string::npos);
}

TEST(TimelineCompare, CountsUnmatchedAndRefusesAnotherLayout) {
  Timeline measured = TwoRanks(1.0);
  measured.events.pop_back();  // no optimizer step measured
  auto c = CompareTimelines(TwoRanks(1.0), measured, 0);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->matched, 8);
  EXPECT_EQ(c->only_predicted, 1);
  EXPECT_TRUE(c->divergent.empty());
  measured.pp = 3;
  auto bad = CompareTimelines(TwoRanks(1.0), measured, 0);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("different layouts"), std::string::npos);
}

}  // namespace
}  // namespace ptdp
