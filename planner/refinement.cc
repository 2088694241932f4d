#include "planner/refinement.h"

#include <algorithm>
#include <atomic>
#include <numeric>
#include <thread>
#include <tuple>

namespace ptdp::planner {

namespace {

// A fixed pipeline time, to re-score with a refiner's answer.
class FixedPipeline : public costmodel::PipelineModel {
 public:
  explicit FixedPipeline(costmodel::PipelineTime t) : t_(t) {}
  costmodel::PipelineTime Time(const costmodel::CostTable&, const ParallelConfig&) const override {
    return t_;
  }

 private:
  costmodel::PipelineTime t_;
};

// Runs of candidate indices with one pipeline shape (schedule, pp, vp, microbatches,
// recomputation): what a caching refiner builds once.
std::vector<std::vector<size_t>> ShapeGroups(const std::vector<Candidate>& c, size_t k) {
  auto shape = [&](size_t i) {
    const ParallelConfig& l = c[i].layout;
    return std::make_tuple(l.schedule, l.pp, l.vp, l.Microbatches(), l.recompute);
  };
  std::vector<size_t> order(k);
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return shape(a) < shape(b); });
  std::vector<std::vector<size_t>> groups;
  for (size_t n = 0; n < order.size(); ++n) {
    if (n == 0 || shape(order[n]) != shape(order[n - 1])) groups.emplace_back();
    groups.back().push_back(order[n]);
  }
  return groups;
}

}  // namespace

bool Refines(const SearchOptions& o) {
  return bool(o.refiner) || bool(o.make_refiner);
}

Status Finish(const ModelSpec& m, const ClusterSpec& cluster, const Refiner* refiner,
              Candidate* c) {
  if (c->refined) return Status::Ok();
  // The stages' parameter counts once for both tables below (counting walks every layer's
  // tensors: a tenth of a refined search's time when done twice per layout).
  const std::vector<int64_t> params = costmodel::StageParameterCounts(m, c->layout);
  auto full = Evaluate(m, cluster, c->layout, &params, /*all_stages=*/true);
  PTDP_CHECK_MSG(full.ok(), c->layout.ToString() + ": " + full.status().message());
  c->prediction = full->prediction;
  if (!refiner) return Status::Ok();
  const costmodel::CostTable table = costmodel::BuildCostTable(m, cluster, c->layout, &params);
  auto pt = (*refiner)(m, cluster, c->layout, table);
  if (!pt.ok()) return pt.status().WithPrefix("refining " + c->layout.ToString());
  const FixedPipeline fixed(*pt);
  c->closed_form_iteration_s = c->prediction.iteration_s;
  c->closed_form_bubble_fraction = c->prediction.bubble_fraction;
  c->prediction = costmodel::Predict(m, cluster, c->layout, table, &fixed, true);
  c->refined = true;
  return Status::Ok();
}

Status FinishAll(const ModelSpec& m, const ClusterSpec& cluster, const SearchOptions& o,
                 std::vector<Candidate>* candidates, size_t k) {
  if (k == 0) return Status::Ok();
  const std::vector<std::vector<size_t>> groups = ShapeGroups(*candidates, k);
  std::vector<Status> status(k, Status::Ok());
  std::atomic<size_t> next_group{0};
  auto work = [&] {
    const Refiner own = o.make_refiner ? o.make_refiner() : Refiner();
    const Refiner* refiner = own ? &own : o.refiner ? &o.refiner : nullptr;
    for (size_t g = next_group++; g < groups.size(); g = next_group++) {
      for (size_t i : groups[g]) status[i] = Finish(m, cluster, refiner, &(*candidates)[i]);
    }
  };
  const size_t threads = std::clamp<size_t>(size_t(std::max(1, o.threads)), 1, groups.size());
  std::vector<std::thread> pool;
  for (size_t t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
  for (const Status& s : status) PTDP_RETURN_IF_ERROR(s);
  return Status::Ok();
}

}  // namespace ptdp::planner
