// The fast replay's cuts (contract in simulator/pipeline_replay.h): which of a port's pipeline
// flows run on the network model beside an overlapped reduction's buckets, found by the check
// after a walk (MarkTouching) and carried from one layout, or one shape, to the next.
#include <algorithm>

#include "simulator/pipeline_replay.h"
#include "simulator/pipeline_replay_state.h"

namespace ptdp::sim {

using namespace replay_internal;

namespace {

// The rank whose activations (or gradients) cross `port` (egress r, ingress pp + r), outside a V.
int SenderOf(int port, int pp, bool grad) {
  const int r = port % pp;
  if (port < pp) return r;
  return grad ? (r + 1) % pp : (r + pp - 1) % pp;
}

}  // namespace

// Records how many of each port's last flows the new shape's cut let join (Scratch::TailCut).
void PipelineReplayer::KeepTailCut() {
  Scratch& s = *scratch_;
  const Shape& sh = *shape_;
  auto it = std::find_if(s.tail_cuts.begin(), s.tail_cuts.end(), [&](const Scratch::TailCut& c) {
    return c.kind == sh.kind && c.pp == sh.pp && c.vp == sh.vp;
  });
  if (it == s.tail_cuts.end()) {
    s.tail_cuts.push_back({sh.kind, sh.pp, sh.vp, {}, {}});
    it = s.tail_cuts.end() - 1;
  }
  it->act.assign(size_t(2 * sh.pp), 0);
  it->grad.assign(size_t(2 * sh.pp), 0);
  for (int port = 0; port < 2 * sh.pp; ++port) {
    const size_t acts = s.act_flows[size_t(SenderOf(port, sh.pp, false))].size();
    const size_t grads = s.grad_flows[size_t(SenderOf(port, sh.pp, true))].size();
    it->act[size_t(port)] = int32_t(acts) - sh.cut_act[size_t(port)];
    it->grad[size_t(port)] = int32_t(grads) - sh.cut_grad[size_t(port)];
  }
}

// A new shape's cut, from the last one of its pipeline (kind, pp, vp): as many last flows per
// port join the network model as did there.
void PipelineReplayer::StartFromTailCut() {
  const Scratch& s = *scratch_;
  Shape& sh = *shape_;
  for (const Scratch::TailCut& c : s.tail_cuts) {
    if (c.kind != sh.kind || c.pp != sh.pp || c.vp != sh.vp) continue;
    std::vector<int32_t> act_sends(size_t(sh.pp), 0), grad_sends(size_t(sh.pp), 0);
    for (int r = 0; r < sh.pp; ++r) {
      for (const Step& st : sh.ranks[size_t(r)]) {
        if (st.op == StepOp::kSend) ++(st.grad ? grad_sends : act_sends)[size_t(r)];
      }
    }
    sh.cut_act.assign(size_t(2 * sh.pp), 0);
    sh.cut_grad.assign(size_t(2 * sh.pp), 0);
    for (int port = 0; port < 2 * sh.pp; ++port) {
      const int32_t acts = act_sends[size_t(SenderOf(port, sh.pp, false))];
      const int32_t grads = grad_sends[size_t(SenderOf(port, sh.pp, true))];
      sh.cut_act[size_t(port)] = std::max(0, acts - c.act[size_t(port)]);
      sh.cut_grad[size_t(port)] = std::max(0, grads - c.grad[size_t(port)]);
    }
    ++tail_cut_starts_;
    return;
  }
}

// Lowers each port's `from` to the start of the earliest flow in a touching pair of which one ran
// alone (its price assumed no other flow on its ports). Egress r carries rank r's activations,
// gradients and buckets; ingress r rank r - 1's activations, rank r + 1's gradients and rank r's
// buckets (in a V, other flows too: every port joins from 0). True when it lowered one.
bool PipelineReplayer::MarkTouching() {
  Scratch& s = *scratch_;
  const int pp = shape_->pp;
  bool marked = false;
  if (VShaped(shape_->kind)) {
    for (Nanoseconds& f : s.from) marked = marked || f != 0, f = 0;
    return marked;
  }
  for (int port = 0; port < 2 * pp; ++port) {
    const int r = port % pp;
    const bool egress = port < pp;
    const std::vector<Interval>* lists[3] = {&s.act_flows[size_t(egress ? r : (r + pp - 1) % pp)],
                                             &s.grad_flows[size_t(egress ? r : (r + 1) % pp)],
                                             &s.bucket_flows[size_t(r)]};
    // Each list is sorted by start (one stream on one link, issued in order): merge them by start
    // and compare each flow with the ones before that end latest, alone and on the network.
    size_t at[3] = {0, 0, 0};
    Interval last_alone{-1, -1}, last_any{-1, -1};
    Nanoseconds lowest = kNever;
    for (;;) {
      int next = -1;
      for (int l = 0; l < 3; ++l) {
        if (at[l] < lists[l]->size() &&
            (next < 0 || (*lists[l])[at[l]].start < (*lists[next])[at[next]].start)) {
          next = l;
        }
      }
      if (next < 0) break;
      const Interval& f = (*lists[next])[at[next]++];
      const Interval& before = f.network ? last_alone : last_any;
      if (f.start <= before.end) lowest = std::min(lowest, before.start);
      if (f.end > last_any.end) last_any = f;
      if (!f.network && f.end > last_alone.end) last_alone = f;
    }
    if (lowest < s.from[size_t(port)]) s.from[size_t(port)] = lowest, marked = true;
  }
  return marked;
}

}  // namespace ptdp::sim
