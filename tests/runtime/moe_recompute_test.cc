// Selective recomputation of a mixture layer (recompute_modules moe_act, layernorm, moe,
// shared_experts; runtime/model/gpt_layers.h LayerCtx::redo_*): what each leaves out of the stash
// after the forward, and the gradients of the layer that rebuilds it bit for bit the kept layer's,
// with dropout and a shared expert (which reads the norm's output).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "runtime/model/gpt_layers.h"
#include "tests/runtime/gradient_check.h"
#include "tests/runtime/moe_fixture.h"

namespace ptdp::runtime {
namespace {

using namespace gradient_check;  // NOLINT(build/namespaces): the tests' shared helpers
using namespace moe_fixture;     // NOLINT(build/namespaces)

struct MoeRedo {
  bool act = false, norm = false, block = false, shared = false;
  std::string Name() const {
    std::string out;
    for (auto [on, name] : {std::pair{act, "moe_act"}, std::pair{norm, "layernorm"},
                            std::pair{block, "moe"}, std::pair{shared, "shared_experts"}}) {
      if (on) out += out.empty() ? name : std::string("+") + name;
    }
    return out;
  }
};

// Runs the layer's forward and backward with `redo`, into g and dx; checks what the stash holds
// between the two.
void RunMoeRedo(const LayerCtx& kept, const MoeParams& p, const Vec& x, const Vec& dy, MoeRedo redo,
                MoeParams* g, Vec* dx) {
  LayerCtx c = kept;
  c.redo_moe_act = redo.act;
  c.redo_moe_norm = redo.norm;
  c.redo_moe_block = redo.block;
  c.redo_shared_expert = redo.shared;
  g->Zero();
  LayerStash st;
  ASSERT_TRUE(AllocLayerInput(c, &st).ok());
  Put(st.x, x);
  Vec y(x.size());
  ASSERT_TRUE(LayerForward(c, p.W(), 1, MemTag::kActivations, &st, M(y)).ok());
  const std::string what = redo.Name();
  EXPECT_EQ(st.gelu_out.empty(), redo.act || redo.block) << what;
  EXPECT_EQ(st.ln2_out.empty(), redo.norm) << what;
  for (const Tensor* t : {&st.router_logits, &st.router_probs, &st.moe_in, &st.fc1_out}) {
    EXPECT_EQ(t->empty(), redo.block) << what;
  }
  EXPECT_EQ(st.shared_fc1_out.empty(), redo.block || redo.shared) << what;
  EXPECT_EQ(st.shared_act.empty(), redo.block || redo.shared) << what;
  const Status back = LayerBackward(c, p.W(), g->G(), 1, &st, C(dy), M(*dx));
  ASSERT_TRUE(back.ok()) << back.ToString();
}

TEST(MoeRecompute, EveryModuleGivesTheSameGradients) {
  CpuDevice dev;
  LayerCtx kept = MoeCtx(&dev, 0.1);
  kept.d.shared_f_local = 4;
  const int64_t nh = kept.d.N() * kept.d.h;
  const MoeParams p(kept.d, kExperts);
  const Vec x = Random(nh, 51, 1.0), dy = Random(nh, 52, 1.0);
  MoeParams want(kept.d, kExperts);
  Vec want_dx(static_cast<size_t>(nh));
  RunMoeRedo(kept, p, x, dy, {}, &want, &want_dx);
  const std::vector<MoeRedo> redos = {{.act = true},
                                      {.norm = true},
                                      {.act = true, .norm = true},
                                      {.block = true},
                                      {.shared = true},
                                      {.norm = true, .block = true},
                                      {.act = true, .shared = true},
                                      {.act = true, .norm = true, .block = true, .shared = true}};
  for (const MoeRedo& redo : redos) {
    MoeParams got(kept.d, kExperts);
    Vec dx(static_cast<size_t>(nh));
    RunMoeRedo(kept, p, x, dy, redo, &got, &dx);
    const std::string what = redo.Name();
    EXPECT_EQ(dx, want_dx) << what;
    EXPECT_EQ(got.ln2_w, want.ln2_w) << what;
    EXPECT_EQ(got.router_w, want.router_w) << what;
    EXPECT_EQ(got.fc1, want.fc1) << what;
    EXPECT_EQ(got.fc2, want.fc2) << what;
    EXPECT_EQ(got.shared_fc1, want.shared_fc1) << what;
    EXPECT_EQ(got.shared_fc2, want.shared_fc2) << what;
  }
}

// A gated shared expert (Qwen2-MoE's): the gate is read from the rebuilt inside's input alike.
TEST(MoeRecompute, AGatedSharedExpertGivesTheSameGradients) {
  CpuDevice dev;
  LayerCtx kept = MoeCtx(&dev, 0.0);
  kept.d.shared_f_local = 4;
  const int64_t nh = kept.d.N() * kept.d.h;
  const MoeParams p(kept.d, kExperts, false, true);
  const Vec x = Random(nh, 61, 1.0), dy = Random(nh, 62, 1.0);
  MoeParams want(kept.d, kExperts, false, true);
  Vec want_dx(static_cast<size_t>(nh));
  RunMoeRedo(kept, p, x, dy, {}, &want, &want_dx);
  for (const MoeRedo& redo : std::vector<MoeRedo>{{.shared = true}, {.block = true}}) {
    MoeParams got(kept.d, kExperts, false, true);
    Vec dx(static_cast<size_t>(nh));
    RunMoeRedo(kept, p, x, dy, redo, &got, &dx);
    EXPECT_EQ(dx, want_dx) << redo.Name();
    EXPECT_EQ(got.shared_gate, want.shared_gate) << redo.Name();
    EXPECT_EQ(got.shared_fc1, want.shared_fc1) << redo.Name();
  }
}

}  // namespace
}  // namespace ptdp::runtime
