// The fast replay's cuts (contract in simulator/pipeline_replay.h): which of a port's pipeline
// flows, and which of the overlapped reduction's buckets, run on the network model, found by the
// check after a walk (MarkTouching), guessed during it (MeetsBuckets, MeetsMessages) and carried
// from one layout, or one shape, to the next.
#include <algorithm>
#include <limits>

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
    s.tail_cuts.push_back({sh.kind, sh.pp, sh.vp, {}, {}, {}, {}, {}});
    it = s.tail_cuts.end() - 1;
  }
  it->net_jobs_first = sh.net_jobs_first, it->net_jobs_last = sh.net_jobs_last;
  it->pipe_shared = sh.pipe_shared;
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
    // The stream's jobs do not depend on the microbatch count: the same buckets meet messages.
    sh.net_jobs_first = c.net_jobs_first, sh.net_jobs_last = c.net_jobs_last;
    // Two messages that touch on a port do so in the steady state, whatever its length.
    sh.pipe_shared = c.pipe_shared;
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

// What the check does with a touching pair of which one ran alone (its price assumed no other
// flow on its ports): the alone one joins the network model in the next round. A pipeline flow
// joins through its port's `from` (lowered to the pair's earlier start when both are pipeline
// flows), a bucket through its rank's `bucket_from`: from then on, as a delayed flow delays those
// after it. True when it changed one.
bool PipelineReplayer::JoinPair(int port, const Interval& before, const Interval& f) {
  Scratch& s = *scratch_;
  const size_t r = size_t(port % shape_->pp);
  Nanoseconds& from = s.from[size_t(port)];
  bool marked = false;
  auto join_pipeline = [&](Nanoseconds start) {
    if (start < from) from = start, marked = true;
  };
  auto join_bucket = [&](const Interval& b) {
    if (b.start < s.bucket_from[r]) s.bucket_from[r] = b.start, marked = true;
  };
  if (before.job < 0 && f.job < 0) {
    s.pipe_shared[size_t(port)] = 1;
    join_pipeline(before.start);
    return marked;
  }
  for (const Interval* x : {&before, &f}) {
    if (x->network) continue;
    if (x->job < 0) {
      join_pipeline(x->start);
    } else {
      join_bucket(*x);
    }
  }
  return marked;
}

// Notes that bucket `job` of rank r met a pipeline flow (Scratch's need_first/last).
void PipelineReplayer::NoteNeed(int r, int32_t job) {
  Scratch& s = *scratch_;
  s.need_first[size_t(r)] = std::min(s.need_first[size_t(r)], job);
  s.need_last[size_t(r)] = std::max(s.need_last[size_t(r)], job);
}

// Compares each flow on each port with the ones before it that end latest (alone, and on the
// network model; a bucket with pipeline flows only: its stream's jobs run one after another) and
// joins the alone one of each touching pair to the network model (JoinPair). Egress r carries
// rank r's activations, gradients and buckets; ingress r rank r - 1's activations, rank r + 1's
// gradients and rank r's buckets (in a V, other flows too: every flow joins). True when it joined
// one.
bool PipelineReplayer::MarkTouching() {
  Scratch& s = *scratch_;
  const int pp = shape_->pp;
  s.need_first.assign(size_t(pp), std::numeric_limits<int32_t>::max());
  s.need_last.assign(size_t(pp), -1);
  bool marked = false;
  if (VShaped(shape_->kind)) {
    for (Nanoseconds& f : s.from) marked = marked || f != 0, f = 0;
    for (Nanoseconds& f : s.bucket_from) marked = marked || f != 0, f = 0;
    return marked;
  }
  for (int port = 0; port < 2 * pp; ++port) {
    const int r = port % pp;
    const bool egress = port < pp;
    const std::vector<Interval>* lists[3] = {&s.act_flows[size_t(egress ? r : (r + pp - 1) % pp)],
                                             &s.grad_flows[size_t(egress ? r : (r + 1) % pp)],
                                             &s.bucket_flows[size_t(r)]};
    // Each list is sorted by start (one stream on one link, issued in order): merge them by start.
    size_t at[3] = {0, 0, 0};
    // The flows before that end latest: [a bucket][alone only].
    const Interval none{-1, -1};
    const Interval* latest[2][2] = {{&none, &none}, {&none, &none}};
    // Most of a port's flows are the steady state's messages, alone, before its first bucket: while
    // the next flow is such, the loop below comes down to comparing it with the latest-ending
    // message before it (no bucket yet, every message alone: latest[0][0] and [0][1] are one). This
    // runs that part as a merge of the two message lists only, then hands over where it stopped.
    const Nanoseconds first_bucket = lists[2]->empty() ? kNever : lists[2]->front().start;
    for (const Interval* pipeline = &none;;) {
      const bool act = at[0] < lists[0]->size();
      const bool grad = at[1] < lists[1]->size();
      const int next = act && (!grad || (*lists[0])[at[0]].start <= (*lists[1])[at[1]].start) ? 0
                       : grad                                                                 ? 1
                                                                                              : -1;
      const Interval* f = next < 0 ? nullptr : &(*lists[next])[at[next]];
      if (f == nullptr || f->network || f->start >= first_bucket) {
        latest[0][0] = latest[0][1] = pipeline;
        break;
      }
      ++at[next];
      if (f->start <= pipeline->end && JoinPair(port, *pipeline, *f)) marked = true;
      if (f->end > pipeline->end) pipeline = f;
    }
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
      // A network flow is exact beside other network flows: only alone ones are its concern. A
      // bucket is compared with pipeline flows only (its stream's jobs run one after another).
      const int alone_only = f.network ? 1 : 0;
      const Interval& pipeline = *latest[0][alone_only];
      if (f.start <= pipeline.end && JoinPair(port, pipeline, f)) marked = true;
      if (f.job < 0) {
        const Interval& bucket = *latest[1][alone_only];
        if (f.start <= bucket.end && JoinPair(port, bucket, f)) marked = true;
        if (f.start <= latest[1][0]->end) NoteNeed(r, latest[1][0]->job);
      } else if (f.start <= latest[0][0]->end) {
        NoteNeed(r, f.job);
      }
      const Interval** mine = latest[f.job < 0 ? 0 : 1];
      if (f.end > mine[0]->end) mine[0] = &f;
      if (!f.network && f.end > mine[1]->end) mine[1] = &f;
    }
  }
  return marked;
}

// True when a message from rank r to `peer` over [start, end] (priced alone) would meet a bucket
// of either rank's collective stream; the ones run alone run on the network model again when they
// have not started yet (CollectiveStreams::Rejoin), and the message goes there too. Called for
// every message, so that no bucket it meets stays alone.
bool PipelineReplayer::MeetsBuckets(int r, int peer, Nanoseconds start, Nanoseconds end) {
  Scratch& s = *scratch_;
  const bool sender = s.collectives->Rejoin(*s.queue, *s.network, r, start, end);
  return s.collectives->Rejoin(*s.queue, *s.network, peer, start, end) || sender;
}

// CollectiveStreams' veto for a bucket of rank r over [start, end]: true when it would meet one of
// the last pipeline flows on the rank's ports walked so far (a guess that saves a round; the
// check decides).
bool PipelineReplayer::MeetsMessages(const void* self, int r, Nanoseconds start, Nanoseconds end) {
  const Scratch& s = *static_cast<const PipelineReplayer*>(self)->scratch_;
  const int pp = static_cast<const PipelineReplayer*>(self)->shape_->pp;
  const std::vector<Interval>* lists[4] = {&s.act_flows[size_t(r)], &s.grad_flows[size_t(r)],
                                           &s.act_flows[size_t((r + pp - 1) % pp)],
                                           &s.grad_flows[size_t((r + 1) % pp)]};
  for (const std::vector<Interval>* list : lists) {
    size_t i = list->size();
    while (i > 0 && (*list)[i - 1].start > end) --i;
    for (size_t k = i; k > 0 && k + 2 > i; --k) {
      const Interval& f = (*list)[k - 1];
      const bool running = f.network && f.end == f.start;  // a network flow not ended yet
      if (running || f.end >= start) return true;
    }
  }
  return false;
}

// True when a flow from rank r to `peer` that ends at `end` may meet a collective either rank's
// walk has queued already (it ends at or after the first one's ready time): it joins the network
// model now, where the check would otherwise find it touching a bucket and cost another walk.
// Joining is never wrong, only slower (a flow on the network model that meets no other flow runs
// as it would alone), and an earlier walk cannot tell: the check after the walk still decides.
bool PipelineReplayer::MeetsQueuedBuckets(int r, int peer, Nanoseconds end) {
  const Scratch& s = *scratch_;
  if (end < s.buckets_from[size_t(r)] && end < s.buckets_from[size_t(peer)]) return false;
  ++bucket_joins_;
  return true;
}

}  // namespace ptdp::sim
