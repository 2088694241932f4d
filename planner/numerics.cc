// The numerics a search shares: the precision and the user's 16-bit choices (planner/search.h).
#include "planner/search.h"

namespace ptdp::planner {

std::string PrecisionCaveat(const ClusterSpec& cluster, Precision precision) {
  const std::string& dtype = cluster.profile.gemm.dtype;
  if (IsHalf(precision) == (dtype != "fp32")) return "";
  return std::string(PrecisionName(precision)) + " on " + cluster.profile.name +
         ", whose GEMM table is " + dtype + ": times use that table as measured (memory and " +
         "message sizes are " + PrecisionName(precision) + "'s); profile the machine in " +
         PrecisionName(precision) + " for its throughput";
}

Result<SearchNumerics> ResolveSearchNumerics(const ClusterSpec& cluster, const SearchOptions& o) {
  const FixedLayout& fx = o.fix;
  if (fx.precision && o.precision && *fx.precision != *o.precision) {
    return Status::Invalid(std::string("--precision ") + PrecisionName(*o.precision) +
                           " differs from --fix precision=" + PrecisionName(*fx.precision));
  }
  SearchNumerics n;
  n.precision = fx.precision.value_or(o.precision.value_or(cluster.profile.precision));
  PTDP_RETURN_IF_ERROR(CheckPrecision(cluster.profile, n.precision));
  // Both 16-bit choices need 16-bit parameters; fixed on at another precision is an error, asked
  // for in the options it is left off.
  const bool allowed = ParallelConfig::Bf16GradsAllowed(n.precision);
  for (const auto& [key, fixed] : {std::pair{"grad_reduce_bf16", fx.grad_reduce_bf16},
                                   std::pair{"optimizer_state_bf16", fx.optimizer_state_bf16}}) {
    if (fixed.value_or(false) && !allowed) {
      return Status::Invalid(std::string("--fix ") + key + "=on: needs precision bf16 or fp8, " +
                             "not " + PrecisionName(n.precision));
    }
  }
  n.grad_reduce_bf16 = fx.grad_reduce_bf16.value_or(o.grad_reduce_bf16 && allowed);
  n.optimizer_state_bf16 = fx.optimizer_state_bf16.value_or(o.optimizer_state_bf16 && allowed);
  return n;
}

}  // namespace ptdp::planner
