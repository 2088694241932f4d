#include "planner/search.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <optional>
#include <tuple>

#include "core/fsdp.h"
#include "planner/recompute_choices.h"
#include "planner/refinement.h"

namespace ptdp::planner {

namespace {

// Trial division up to sqrt(n) in int64: n is capped (kMaxGlobalBatch), so this is at most
// 2^16 steps, and no divisor is narrowed. Ascending order, as the search expects.
std::vector<int> Divisors(int64_t n) {
  std::vector<int> small, large;
  for (int64_t i = 1; i <= n / i; ++i) {
    if (n % i != 0) continue;
    small.push_back(int(i));
    if (i != n / i) large.push_back(int(n / i));
  }
  small.insert(small.end(), large.rbegin(), large.rend());
  return small;
}

std::string GiB(Bytes b) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f GiB", BytesToGiB(double(b)));
  return buf;
}

// The best scored layout of the interleaved and of the zero-bubble schedules, for the report.
void Keep(const Candidate& c, SearchResult* res) {
  std::optional<Candidate>* best = c.layout.schedule == ScheduleKind::kInterleaved
                                       ? &res->best_interleaved
                                   : SplitsBackward(c.layout.schedule) ? &res->best_zero_bubble
                                                                       : nullptr;
  if (best && (!*best || c.prediction.iteration_s < (*best)->prediction.iteration_s)) *best = c;
}

// Why a layout is rejected; kReasonNames are the names SearchResult::rejected counts them under.
enum class Reason {
  kTpExceedsNode,
  kHeadsNotDivisible,
  kKvHeadsNotDivisible,
  kLayersNotDivisible,
  kBatchNotDivisible,
  kMicrobatchesFewerThanPp,
  kInvalid,
  kOutOfMemory,
  kRecomputesMoreThanAFit,
};
constexpr size_t kReasons = 9;
constexpr std::array<const char*, kReasons> kReasonNames = {"tp_exceeds_node",
                                                            "heads_not_divisible_by_tp",
                                                            "kv_heads_not_divisible_by_tp",
                                                            "layers_not_divisible",
                                                            "batch_not_divisible",
                                                            "microbatches_fewer_than_pp",
                                                            "invalid",
                                                            "out_of_memory",
                                                            "recomputes_more_than_a_fit"};

// Faster first; ties by the layout's text, so the order is total and the same on every run.
bool ByTime(const Candidate& a, const Candidate& b) {
  if (a.prediction.iteration_s != b.prediction.iteration_s) {
    return a.prediction.iteration_s < b.prediction.iteration_s;
  }
  return a.layout.ToString() < b.layout.ToString();
}

// The candidates, sorted by the closed form, ranked: the best refine_top (all when negative)
// finished and refined (FinishAll), re-sorted by the refined time, the rest of the kept finished,
// and the list cut to o.keep. The best interleaved and zero-bubble layouts are finished too: with
// every candidate refined, the best of each by the refined time; else the closed form's best.
Status RefineAndRank(const ModelSpec& m, const ClusterSpec& cluster, const SearchOptions& o,
                     std::vector<Candidate>* ok, SearchResult* res) {
  const size_t all = ok->size();
  const size_t k = !Refines(o) ? 0 : o.refine_top < 0 ? all : std::min(all, size_t(o.refine_top));
  const size_t keep = size_t(std::max(1, o.keep));
  ok->resize(std::min(all, std::max(keep, k)));
  PTDP_RETURN_IF_ERROR(FinishAll(m, cluster, o, ok, k));
  for (size_t i = k; i < ok->size(); ++i)
    PTDP_RETURN_IF_ERROR(Finish(m, cluster, nullptr, &(*ok)[i]));
  std::sort(ok->begin(), ok->begin() + long(k), ByTime);
  if (k == all && k > 0) {
    res->best_interleaved.reset();
    res->best_zero_bubble.reset();
    for (const Candidate& c : *ok) Keep(c, res);
  }
  if (ok->size() > keep) ok->resize(keep);
  const Refiner* refiner = o.refiner ? &o.refiner : nullptr;
  Refiner own;
  for (std::optional<Candidate>* best : {&res->best_interleaved, &res->best_zero_bubble}) {
    if (!*best || (*best)->refined) continue;
    const std::string layout = (*best)->layout.ToString();
    auto same = std::find_if(ok->begin(), ok->end(),
                             [&](const Candidate& c) { return c.layout.ToString() == layout; });
    if (same != ok->end()) {
      **best = *same;  // already finished (and refined) among the top
      continue;
    }
    if (!refiner && o.make_refiner) own = o.make_refiner(), refiner = &own;
    PTDP_RETURN_IF_ERROR(Finish(m, cluster, refiner, &**best));
  }
  return Status::Ok();
}

}  // namespace

namespace {

// A checked layout's prediction, memory not yet compared with the GPU's.
// `memo`: the search's, or null.
Candidate Score(const ModelSpec& m, const ClusterSpec& cluster, const ParallelConfig& c,
                const std::vector<int64_t>* param_elements, bool all_stages,
                costmodel::PieceCostMemo* memo) {
  // Once for both: computed twice, the prices were a tenth of the closed-form search.
  const StashPrices prices = StashPricesOf(m, c);
  const costmodel::CostTable table =
      costmodel::BuildCostTable(m, cluster, c, param_elements, &prices, memo);
  Candidate cand;
  cand.layout = c;
  cand.prediction = costmodel::Predict(m, cluster, c, table, nullptr, all_stages, &prices);
  return cand;
}

Bytes MemoryCap(const ClusterSpec& cluster) {
  return Bytes(cluster.profile.memory_GiB.value * kGiB);
}

std::string OutOfMemory(const ClusterSpec& cluster, const Candidate& cand) {
  return "pipeline stage " + std::to_string(cand.prediction.peak_memory_stage) + " needs " +
         GiB(cand.prediction.peak_memory) + " per GPU, more than the " + GiB(MemoryCap(cluster)) +
         " of " + cluster.profile.name;
}

}  // namespace

Result<Candidate> Evaluate(const ModelSpec& m, const ClusterSpec& cluster, const ParallelConfig& c,
                           const std::vector<int64_t>* param_elements, bool all_stages) {
  PTDP_RETURN_IF_ERROR(c.Validate(m));
  PTDP_RETURN_IF_ERROR(CheckPrecision(cluster.profile, c.precision));
  if (c.WorldSize() != cluster.Gpus()) {
    return Status::Invalid("layout: tp*pp*dp = " + std::to_string(c.WorldSize()) +
                           " but the cluster has " + std::to_string(cluster.Gpus()) + " GPUs");
  }
  Candidate cand = Score(m, cluster, c, param_elements, all_stages, nullptr);
  if (cand.prediction.peak_memory > MemoryCap(cluster)) {
    return Status::DoesNotFit(OutOfMemory(cluster, cand));
  }
  return cand;
}

Status CheckSearchCounts(int gpus, int nodes, int64_t global_batch) {
  if (global_batch < 1 || global_batch > kMaxGlobalBatch) {
    return Status::Invalid("--global-batch: " + std::to_string(global_batch) + " is outside 1.." +
                           std::to_string(kMaxGlobalBatch));
  }
  if (gpus < 0 || gpus > kMaxGpus) {
    return Status::Invalid("--gpus: " + std::to_string(gpus) + " is outside 1.." +
                           std::to_string(kMaxGpus));
  }
  if (nodes < 0 || nodes > kMaxGpus) {
    return Status::Invalid("--nodes: " + std::to_string(nodes) + " is outside 1.." +
                           std::to_string(kMaxGpus));
  }
  return Status::Ok();
}

namespace {

// The search's account: the layouts kept, the rejections counted by reason, each reason's example
// message built only the first time (most enumerated layouts are rejected: over a million with
// every option on gpt-1t), and of the layouts that do not fit the one needing the least memory,
// the example an out-of-memory refusal quotes (how far the closest layout is from fitting).
struct Tally {
  SearchResult res;
  std::vector<Candidate> ok;
  std::array<int64_t, kReasons> count{};
  std::array<std::string, kReasons> example;
  std::optional<Candidate> least_memory;
  template <typename Why>
  void Reject(Reason reason, Why&& why) {
    const auto i = size_t(reason);
    if (count[i]++ == 0) example[i] = why();
  }
};

// What pricing shares across layouts: parameters per rank by (t, p, v, first, last, V placement,
// ep, etp) (ZB-V's V puts the head on rank 0, interleaving on rank p - 1, so the two must not share
// an entry), and the layer's, embedding's and head's prices per key.
struct PriceCaches {
  // Each rank's parameters by what places the layers and the experts; a per-virtual-stage split
  // (stage_layers) by its counts too, apart, so that the usual key stays cheap to compare (the
  // search's splits once shared the even split's counts, and Finish then found a rank over the
  // GPU's memory that the search had admitted).
  using Key = std::tuple<int, int, int, int, int, bool, int, int>;
  std::map<Key, std::vector<int64_t>> params;
  std::map<std::pair<Key, std::vector<int>>, std::vector<int64_t>> split_params;
  costmodel::PieceCostMemo pieces;
};

// One point of the outer loops: the context-, tensor-, pipeline- and data-parallel sizes.
struct GridPoint {
  int cp = 1, t = 1, p = 1, d = 1;
  int node_instances = 0;  // core/fsdp.h NodeShardInstances: HSDP inside a node, or 0
};

// The layout of one combination of the inner loops' choices, or none where --fix or the search
// options leave it out (not counted as considered). `bits`: scatter/gather off (1), sequence
// parallelism (2), fused attention (4), the combined 1F1B (8), fully sharded data parallelism
// (16), and with it hybrid sharding inside a node (32: GridPoint::node_instances). `numerics`:
// one value for the whole search.
std::optional<ParallelConfig> Compose(const SearchOptions& o, const GridPoint& g,
                                      const PipelineShape& shape, int b,
                                      const RecomputeChoice& recompute, int bits,
                                      const ExpertSplit& ex, const SearchNumerics& numerics) {
  const Recompute rc = recompute.kind;
  const FixedLayout& fx = o.fix;
  const bool sg = (bits & 1) == 0, sp = (bits & 2) != 0, fused = (bits & 4) != 0;
  const bool a2a = (bits & 8) != 0, fsdp = (bits & 16) != 0, hsdp = (bits & 32) != 0;
  if (hsdp && (!fsdp || g.node_instances < 2 || fx.optimizer_instances)) return std::nullopt;
  if (fx.fsdp ? *fx.fsdp != fsdp : fsdp && !o.fsdp) return std::nullopt;
  // Nothing to shard with one rank per weight (fixed on, Validate says why not).
  if (fsdp && g.d * g.cp < 2 && !fx.fsdp) return std::nullopt;
  // Not modelled with a deferred weight gradient (core/fsdp.h; fixed on, Validate says so).
  if (fsdp && SplitsBackward(shape.schedule) && !fx.fsdp) return std::nullopt;
  if (fx.moe_a2a_overlap ? *fx.moe_a2a_overlap != a2a : a2a && !o.moe_a2a_overlap) {
    return std::nullopt;
  }
  // Nothing to overlap without expert parallelism (fixed on, Validate says why not).
  if (a2a && ex.ep < 2 && !fx.moe_a2a_overlap) return std::nullopt;
  if (fx.fused_attention) {
    if (*fx.fused_attention != fused) return std::nullopt;
  } else if (fused && !o.fused_attention && g.cp == 1) {
    return std::nullopt;
  }
  if (g.cp > 1 && !fused) return std::nullopt;  // the ring runs in the fused kernel (Validate)
  // Selective recomputation of the attention core drops only the log-sum-exp with fused attention
  // and redoes the kernel's forward: searched only where --fix asks for both; its other modules
  // drop more.
  const uint8_t modules = recompute.modules;
  const bool fixed_both = fx.recompute == Recompute::kSelective && fx.fused_attention == true;
  if (fused && rc == Recompute::kSelective && (modules == 0 || (modules & kRecomputeCoreAttn)) &&
      !fixed_both) {
    return std::nullopt;
  }
  if (fx.scatter_gather) {
    if (*fx.scatter_gather != sg) return std::nullopt;
  } else if (!sg && (g.t == 1 || g.p == 1 || sp)) {
    return std::nullopt;  // scatter/gather changes nothing without both t and p, or with SP
  }
  if (fx.sequence_parallel) {
    if (*fx.sequence_parallel != sp) return std::nullopt;
  } else if (sp && (!o.sequence_parallel || g.t == 1)) {
    return std::nullopt;
  }
  ParallelConfig c;
  c.tp = g.t;
  c.pp = g.p;
  c.dp = g.d;
  c.cp = g.cp;
  c.ep = ex.ep;
  c.etp = ex.etp;
  c.mbs = b;
  c.vp = shape.vp;
  c.schedule = shape.schedule;
  c.recompute = rc;
  c.recompute_modules = modules;
  c.scatter_gather = sg;
  c.sequence_parallel = sp;
  // Where it shards something: the weights over d cp, or experts over ExpertWeightReplicas.
  // FSDP shards the weights as the distributed optimizer's state (ParallelConfig::fsdp): on with
  // it.
  c.distributed_optimizer =
      fx.distributed_optimizer
          ? *fx.distributed_optimizer
          : fsdp || (o.distributed_optimizer && (g.d * g.cp > 1 || c.ExpertWeightReplicas() > 1));
  c.fsdp = fsdp;
  // Several optimizer instances only where fixed (never searched); on with the optimizer.
  c.optimizer_instances = hsdp ? g.node_instances : fx.optimizer_instances.value_or(1);
  if (c.optimizer_instances > 1 && !fx.distributed_optimizer) c.distributed_optimizer = true;
  c.grad_accumulation_fusion =
      fx.grad_accumulation_fusion ? *fx.grad_accumulation_fusion : o.grad_accumulation_fusion;
  c.grad_reduce_bf16 = numerics.grad_reduce_bf16;
  // 16-bit optimizer state lives in the distributed optimizer: where it is off, so is the state,
  // unless fixed on (then the optimizer too, as for optimizer_instances).
  c.optimizer_state_bf16 = numerics.optimizer_state_bf16 &&
                           (c.distributed_optimizer || fx.optimizer_state_bf16.value_or(false));
  if (c.optimizer_state_bf16 && !fx.distributed_optimizer) c.distributed_optimizer = true;
  c.fused_attention = fused;
  c.moe_a2a_overlap = a2a;
  c.moe_dispatcher = fx.moe_dispatcher.value_or(MoeDispatcher::kAllToAll);
  c.moe_shared_expert_overlap =
      fx.moe_shared_expert_overlap.value_or(numerics.shared_expert_overlap && !a2a);
  c.first_stage_layers = shape.first;
  c.last_stage_layers = shape.last;
  if (!shape.stages.empty()) c.stage_layers = shape.stages;  // most shapes have none
  c.global_batch = o.global_batch;
  c.precision = numerics.precision;
  return c;
}

// The checks before pricing, cheapest first, Validate last; a rejection is counted by reason.
bool Admissible(const ModelSpec& m, const ClusterSpec& cluster, const SearchOptions& o,
                const ParallelConfig& c, Tally* tally) {
  const int t = c.tp, pv = c.pp * c.vp;
  if (t > cluster.gpus_per_node && !o.allow_cross_node_tp && !o.fix.tp) {
    tally->Reject(Reason::kTpExceedsNode, [&] {
      return "tp=" + std::to_string(t) + " spans more than the " +
             std::to_string(cluster.gpus_per_node) + " GPUs of a node";
    });
    return false;
  }
  if (m.heads % t != 0) {
    tally->Reject(Reason::kHeadsNotDivisible, [&] {
      return std::to_string(m.heads) + " heads are not divisible by tp=" + std::to_string(t);
    });
    return false;
  }
  if (m.KvHeads() % t != 0) {
    tally->Reject(Reason::kKvHeadsNotDivisible, [&] {
      return std::to_string(m.KvHeads()) +
             " key/value heads are not divisible by tp=" + std::to_string(t);
    });
    return false;
  }
  if (!c.Uneven() && m.layers % pv != 0) {
    tally->Reject(Reason::kLayersNotDivisible, [&] {
      return std::to_string(m.layers) + " layers are not divisible by pp*vp=" + std::to_string(pv);
    });
    return false;
  }
  if (c.global_batch % (int64_t(c.mbs) * c.dp) != 0) {
    tally->Reject(Reason::kBatchNotDivisible, [&] {
      return "global batch " + std::to_string(c.global_batch) +
             " is not divisible by mbs*dp=" + std::to_string(int64_t(c.mbs) * c.dp);
    });
    return false;
  }
  if (c.schedule == ScheduleKind::kInterleaved && c.Microbatches() < c.pp) {
    tally->Reject(Reason::kMicrobatchesFewerThanPp, [&] {
      return "interleaving needs at least pp=" + std::to_string(c.pp) + " microbatches, got " +
             std::to_string(c.Microbatches());
    });
    return false;
  }
  Status valid = c.Validate(m);
  if (!valid.ok()) {
    tally->Reject(Reason::kInvalid, [&] { return valid.message(); });
    return false;
  }
  return true;
}

// Prices an admissible layout and keeps it, or counts it out of memory. Evaluate's checks hold:
// the layout is valid (Admissible), its precision was checked (ResolveSearchNumerics) and it spans
// the cluster's GPUs.
// Whether it fits (kept).
bool ScoreAndKeep(const ModelSpec& m, const ClusterSpec& cluster, const ParallelConfig& c,
                  PriceCaches* caches, Tally* tally) {
  const PriceCaches::Key key{
      c.tp, c.pp, c.vp, c.first_stage_layers, c.last_stage_layers, VShaped(c.schedule),
      c.ep, c.etp};
  const std::vector<int64_t>* params = nullptr;
  if (c.stage_layers.empty()) {
    auto it = caches->params.find(key);
    if (it == caches->params.end()) {
      it = caches->params.emplace(key, costmodel::StageParameterCounts(m, c)).first;
    }
    params = &it->second;
  } else {
    auto it = caches->split_params.find({key, c.stage_layers});
    if (it == caches->split_params.end()) {
      it = caches->split_params
               .emplace(std::make_pair(key, c.stage_layers), costmodel::StageParameterCounts(m, c))
               .first;
    }
    params = &it->second;
  }
  Candidate cand = Score(m, cluster, c, params, /*all_stages=*/false, &caches->pieces);
  const bool fits = cand.prediction.peak_memory <= MemoryCap(cluster);
  if (SplitsBackward(c.schedule)) {
    ++tally->res.zero_bubble_evaluated;
    if (!fits) ++tally->res.zero_bubble_out_of_memory;
  }
  if (!fits) {
    ++tally->count[size_t(Reason::kOutOfMemory)];
    if (!tally->least_memory ||
        cand.prediction.peak_memory < tally->least_memory->prediction.peak_memory) {
      tally->least_memory = std::move(cand);
    }
    return false;
  }
  Keep(cand, &tally->res);
  tally->ok.push_back(std::move(cand));
  return true;
}

// The rejections into the result; the ranked, refined top, or the error naming the commonest
// reason (memory first: every structurally valid layout ran out of it).
Result<SearchResult> Conclude(const ModelSpec& m, const ClusterSpec& cluster,
                              const SearchOptions& o, Tally* tally) {
  SearchResult& res = tally->res;
  if (tally->least_memory) {
    tally->example[size_t(Reason::kOutOfMemory)] =
        OutOfMemory(cluster, *tally->least_memory) + " (" + tally->least_memory->layout.ToString() +
        ": the least memory of the layouts that do not fit)";
  }
  for (size_t i = 0; i < kReasons; ++i) {
    if (tally->count[i] == 0) continue;
    res.rejected[kReasonNames[i]] = tally->count[i];
    res.example[kReasonNames[i]] = std::move(tally->example[i]);
  }
  res.feasible = int64_t(tally->ok.size());
  if (tally->ok.empty()) {
    const int N = cluster.Gpus();
    if (res.considered == 0) {
      return Status::Invalid("no layout matches --fix on " + std::to_string(N) +
                             " GPUs (tp*cp*pp*dp must be " + std::to_string(N) + ")");
    }
    std::string commonest;
    int64_t most = -1;
    for (const auto& [reason, n] : res.rejected) {
      if (n > most) most = n, commonest = reason;
    }
    if (res.rejected.count("out_of_memory")) commonest = "out_of_memory";
    const std::string msg = "no layout fits: " + std::to_string(res.considered) +
                            " considered, e.g. " + res.example[commonest];
    if (commonest == "out_of_memory") return Status::DoesNotFit(msg);
    return Status::Invalid(msg);
  }
  std::sort(tally->ok.begin(), tally->ok.end(), ByTime);
  PTDP_RETURN_IF_ERROR(RefineAndRank(m, cluster, o, &tally->ok, &res));
  res.top = std::move(tally->ok);
  return std::move(res);
}

// The enumeration's size for the progress callback: its layouts before the inner filters.
int64_t EstimateLayouts(int N, const std::vector<int>& cp_all, size_t microbatch_sizes,
                        const FixedLayout& fx) {
  int64_t total = 0;
  for (int cp : cp_all) {
    for (int t : Divisors(N / cp)) {
      if (fx.tp && *fx.tp != t) continue;
      for (int p : Divisors(N / cp / t)) {
        if (fx.pp && *fx.pp != p) continue;
        total += int64_t(microbatch_sizes) * (p > 1 ? 8 : 2);
      }
    }
  }
  return total;
}

}  // namespace

Result<SearchResult> Search(const ModelSpec& m, const ClusterSpec& cluster,
                            const SearchOptions& o) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const int N = cluster.Gpus();
  const int64_t B = o.global_batch;
  // Refused before any work proportional to them (the divisor lists, the layouts).
  if (N < 1 || N > kMaxGpus) {
    return Status::Invalid("--gpus: " + std::to_string(N) + " GPUs is outside 1.." +
                           std::to_string(kMaxGpus));
  }
  if (B < 1 || B > kMaxGlobalBatch) {
    return Status::Invalid("--global-batch: " + std::to_string(B) + " is outside 1.." +
                           std::to_string(kMaxGlobalBatch));
  }
  const FixedLayout& fx = o.fix;
  PTDP_ASSIGN_OR_RETURN(SearchNumerics numerics, ResolveSearchNumerics(cluster, o));
  numerics.shared_expert_overlap = o.moe_shared_expert_overlap && m.HasSharedExpert();
  const Precision precision = numerics.precision;
  // Compose's bits: the combined 1F1B's only where the search may turn it on, FSDP's likewise.
  const bool a2a_bit = fx.moe_a2a_overlap.value_or(false) || (m.IsMoe() && o.moe_a2a_overlap);
  const bool fsdp_bit = fx.fsdp.value_or(false) || (o.fsdp && !m.IsMoe());
  // FSDP's two bits: full sharding, and hybrid sharding inside a node.
  const int shift = 3 + int(a2a_bit) + 2 * int(fsdp_bit);
  const int options = 1 << shift;
  const std::vector<RecomputeChoice> recompute_choices = RecomputeChoices(m, o, precision);
  Tally tally;
  PriceCaches caches;
  // Candidate lists per dimension, filtered by --fix.
  const std::vector<int> mbs_all = Divisors(B);
  const std::vector<int> cp_all = ContextParallelSizes(m, N, o);
  const int64_t total_estimate = EstimateLayouts(N, cp_all, mbs_all.size(), fx);
  int64_t done = 0;
  auto last_report = start;
  for (int cp : cp_all) {
    for (int t : Divisors(N / cp)) {
      if (fx.tp && *fx.tp != t) continue;
      for (int p : Divisors(N / cp / t)) {
        if (fx.pp && *fx.pp != p) continue;
        GridPoint g{cp, t, p, N / (cp * t * p)};
        g.node_instances = NodeShardInstances(t, g.d * cp, cluster.gpus_per_node);
        if (fx.dp && *fx.dp != g.d) continue;
        const std::vector<ExpertSplit> experts = ExpertSplits(m, t, cp, g.d, fx);
        for (const PipelineShape& shape : PipelineShapes(m, p, fx)) {
          if (fx.schedule && *fx.schedule != shape.schedule) continue;
          if (fx.vp && *fx.vp != shape.vp) continue;
          for (int b : mbs_all) {
            if (fx.mbs && *fx.mbs != b) continue;
            // Three on/off options (Compose's bits) for each expert split (one when dense),
            // and the combined 1F1B and FSDP's two when they may be on (their bits follow the
            // three in that order; Compose reads them as 8, 16 and 32).
            // (The split and the bits as shift and mask: a division here was 3% of a search.)
            for (int combo = 0; combo < int(experts.size()) << shift; ++combo) {
              const int raw = combo & (options - 1);
              const int bits = fsdp_bit && !a2a_bit ? (raw & 7) | ((raw & 24) << 1) : raw;
              std::vector<uint8_t> fitted;  // the selective module sets kept for this combination
              for (const RecomputeChoice& rc : recompute_choices) {
                const std::optional<ParallelConfig> c =
                    Compose(o, g, shape, b, rc, bits, experts[size_t(combo >> shift)], numerics);
                if (!c) continue;
                ++tally.res.considered;
                ++done;
                if (RecomputesMoreThanAFit(rc, fitted)) {
                  tally.Reject(Reason::kRecomputesMoreThanAFit, [&] {
                    return c->ToString() + " recomputes more modules than a set that fits";
                  });
                  continue;
                }
                if (Admissible(m, cluster, o, *c, &tally) &&
                    ScoreAndKeep(m, cluster, *c, &caches, &tally) &&
                    rc.kind == Recompute::kSelective) {
                  fitted.push_back(ModuleSet(rc));
                }
              }
            }
          }
          if (o.progress) {
            const auto now = Clock::now();
            if (std::chrono::duration<double>(now - last_report).count() > 1.0) {
              last_report = now;
              o.progress(done, std::max(done, total_estimate),
                         std::chrono::duration<double>(now - start).count());
            }
          }
        }
      }
    }
  }
  Result<SearchResult> res = Conclude(m, cluster, o, &tally);
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  if (res.ok()) res->seconds = seconds;
  return res;
}

}  // namespace ptdp::planner
