// The executed-order check must be able to fail: a record from a faulty executor (a skipped,
// repeated or misdirected handler) is caught; the faithful record passes.
#include <gtest/gtest.h>

#include "runtime/executor/trainer.h"
#include "schedule/schedule.h"

namespace ptdp::runtime {
namespace {

std::vector<Instr> Rank0Program() {
  ModelSpec m;
  m.layers = 4;
  m.hidden = 64;
  m.heads = 4;
  m.seq_len = 32;
  m.vocab = 256;
  ParallelConfig c;
  c.pp = 2;
  c.mbs = 1;
  c.global_batch = 4;
  c.schedule = ScheduleKind::k1F1B;
  auto p = schedule::BuildProgram(m, c);
  EXPECT_TRUE(p.ok()) << p.status().ToString();
  return p->ranks[0].instrs;
}

// What a correct executor records: each handler's op and the (microbatch, chunk) it acted on.
std::vector<ExecRecord> Faithful(const std::vector<Instr>& prog) {
  std::vector<ExecRecord> out;
  for (const Instr& in : prog) {
    const bool batch = in.op == Op::kReduceGrads || in.op == Op::kOptimizerStep;
    out.push_back({in.op, batch ? -1 : in.microbatch, batch ? -1 : in.chunk});
  }
  return out;
}

TEST(ExecutedOrder, FaithfulRecordPasses) {
  const auto prog = Rank0Program();
  ASSERT_GT(prog.size(), 6u);
  EXPECT_TRUE(CheckExecutedOrder(prog, Faithful(prog)).ok());
}

TEST(ExecutedOrder, SkippedHandlerIsCaught) {
  const auto prog = Rank0Program();
  auto rec = Faithful(prog);
  rec.erase(rec.begin() + 2);
  EXPECT_FALSE(CheckExecutedOrder(prog, rec).ok());
}

TEST(ExecutedOrder, HandlerActingOnTheWrongMicrobatchIsCaught) {
  const auto prog = Rank0Program();
  auto rec = Faithful(prog);
  for (auto& r : rec) {
    if (r.op == Op::kBackward) {
      r.microbatch += 1;  // a backward that picked the next microbatch's state
      break;
    }
  }
  const Status st = CheckExecutedOrder(prog, rec);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.ToString().find("backward"), std::string::npos) << st.ToString();
}

TEST(ExecutedOrder, SwappedHandlersAreCaught) {
  const auto prog = Rank0Program();
  auto rec = Faithful(prog);
  std::swap(rec[0], rec[1]);
  EXPECT_FALSE(CheckExecutedOrder(prog, rec).ok());
  rec = Faithful(prog);
  rec.push_back(rec.back());  // a repeated optimizer step
  EXPECT_FALSE(CheckExecutedOrder(prog, rec).ok());
}

}  // namespace
}  // namespace ptdp::runtime
