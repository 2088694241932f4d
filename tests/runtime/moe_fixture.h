// The mixture-of-experts layer tests' fixture (moe_layer_gradient_test.cc, moe_recompute_test.cc):
// a Llama-style layer (RMSNorm, rotary, SwiGLU) in double precision whose MLP is 4 experts of 6
// features, top 2, and its parameters.
#pragma once

#include <algorithm>
#include <vector>

#include "runtime/model/gpt_layers.h"
#include "tests/runtime/gradient_check.h"

namespace ptdp::runtime::moe_fixture {

using gradient_check::C;
using gradient_check::M;
using gradient_check::Random;
using gradient_check::Vec;

constexpr int kExperts = 4, kTopK = 2;

inline LayerCtx MoeCtx(Device* dev, double dropout, int experts = kExperts, int topk = kTopK) {
  LayerCtx c;
  c.dev = dev;
  c.d.b = 2;
  c.d.s = 5;
  c.d.h = 16;
  c.d.heads = c.d.heads_local = 4;
  c.d.kv_heads_local = 2;
  c.d.f_local = 12;  // a dense layer's (not read by a mixture)
  c.d.expert_f_local = 6;
  c.arch = {true, true, true, {500.0}};
  c.arch.moe_experts = experts;
  c.arch.moe_topk = topk;
  c.types = {DType::kFp64, DType::kFp64};
  c.drop.p = dropout;
  c.drop.step = 2;
  c.drop.seq0 = 3;
  return c;
}

struct MoeParams {
  Vec ln1_w, qkv_w, proj_w, ln2_w, router_w;
  std::vector<Vec> fc1, fc2;
  Vec shared_fc1, shared_fc2;  // with d.shared_f_local > 0
  Vec shared_gate;             // with a gate too
  MoeParams(const LayerDims& d, int experts, bool alike = false, bool gate = false) {
    const int64_t h = d.h, f = d.expert_f_local;
    ln1_w = Random(h, 1, 0.2);
    ln2_w = Random(h, 5, 0.2);
    for (Vec* v : {&ln1_w, &ln2_w}) {
      for (auto& e : *v) e += 1;
    }
    qkv_w = Random(d.QkvWidth() * h, 2, 0.3);
    proj_w = Random(h * d.heads_local * d.D(), 4, 0.3);
    router_w = Random(experts * h, 6, 0.5);
    for (int e = 0; e < experts; ++e) {
      fc1.push_back(Random(2 * f * h, alike ? 7 : 7 + 2 * e, 0.3));
      fc2.push_back(Random(h * f, alike ? 8 : 8 + 2 * e, 0.3));
    }
    if (d.shared_f_local > 0) {
      shared_fc1 = Random(2 * d.shared_f_local * h, 41, 0.3);
      shared_fc2 = Random(h * d.shared_f_local, 42, 0.3);
      if (gate) shared_gate = Random(h, 43, 0.5);
    }
  }
  LayerWeights W() const {
    LayerWeights w;
    w.ln1_w = C(ln1_w);
    w.qkv_w = C(qkv_w);
    w.proj_w = C(proj_w);
    w.ln2_w = C(ln2_w);
    w.router_w = C(router_w);
    for (size_t e = 0; e < fc1.size(); ++e) {
      w.expert_fc1.push_back(C(fc1[e]));
      w.expert_fc2.push_back(C(fc2[e]));
    }
    if (!shared_fc1.empty()) w.shared_fc1 = C(shared_fc1), w.shared_fc2 = C(shared_fc2);
    if (!shared_gate.empty()) w.shared_gate = C(shared_gate);
    return w;
  }
  LayerGrads G() {
    LayerGrads g;
    g.ln1_w = M(ln1_w);
    g.qkv_w = M(qkv_w);
    g.proj_w = M(proj_w);
    g.ln2_w = M(ln2_w);
    g.router_w = M(router_w);
    for (size_t e = 0; e < fc1.size(); ++e) {
      g.expert_fc1.push_back(M(fc1[e]));
      g.expert_fc2.push_back(M(fc2[e]));
    }
    if (!shared_fc1.empty()) g.shared_fc1 = M(shared_fc1), g.shared_fc2 = M(shared_fc2);
    if (!shared_gate.empty()) g.shared_gate = M(shared_gate);
    return g;
  }
  void Zero() {
    for (Vec* v :
         {&ln1_w, &qkv_w, &proj_w, &ln2_w, &router_w, &shared_fc1, &shared_fc2, &shared_gate})
      std::fill(v->begin(), v->end(), 0.0);
    for (auto* vs : {&fc1, &fc2}) {
      for (Vec& v : *vs) std::fill(v.begin(), v.end(), 0.0);
    }
  }
};

}  // namespace ptdp::runtime::moe_fixture
