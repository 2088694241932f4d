// Which of a search's layouts Megatron-LM can run (MegatronScheduleGap, ChooseMegatronLayout) and
// the environment it needs (MegatronEnvironment): planner/report.h. Kept apart from the flags'
// writer (megatron_args.cc), which they do not share code with.
#include "planner/report.h"

#include <cstdio>

namespace ptdp::planner {
namespace {

std::string SecondsText(double s) {  // "%.4g s", as the plan table prints iteration times
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.4g s", s);
  return buf;
}

}  // namespace

std::string MegatronScheduleGap(const ParallelConfig& c) {
  switch (c.schedule) {
    case ScheduleKind::k1F1B:
    case ScheduleKind::kInterleaved:
      return "";
    case ScheduleKind::kGPipe:
      // One stage has no pipeline schedule: Megatron-Core's forward_backward_no_pipelining.
      return c.pp == 1 ? "" : "gpipe, which Megatron-Core has no schedule for (it runs 1F1B)";
    case ScheduleKind::kZbH1:
    case ScheduleKind::kZbH2:
      return std::string(ScheduleName(c.schedule)) +
             ", which Megatron-Core has no schedule for (its schedules never split the backward "
             "into input- and weight-gradient passes)";
    case ScheduleKind::kZbV:
      return "zb-v, which Megatron-Core has no schedule for (no V placement of chunks)";
  }
  return "an unknown schedule";
}

Result<MegatronChoice> ChooseMegatronLayout(const SearchResult& r) {
  const Candidate& best = r.top.front();
  const std::string gap = MegatronScheduleGap(best.layout);
  if (gap.empty()) return MegatronChoice{best.layout, ""};
  for (const Candidate& c : r.top) {
    if (!MegatronScheduleGap(c.layout).empty()) continue;
    return MegatronChoice{
        c.layout, "the best layout (" + best.layout.ToString() + ", " +
                      SecondsText(best.prediction.iteration_s) + " per iteration) runs " + gap +
                      "; these flags are for the best layout it runs (" + c.layout.ToString() +
                      ", " + SecondsText(c.prediction.iteration_s) + " predicted)"};
  }
  return Status::Invalid("megatron: the best layout (" + best.layout.ToString() + ") runs " + gap +
                         ", and so does every ranked layout; fix another "
                         "schedule, e.g. --fix schedule=1f1b");
}

std::string MegatronEnvironment(const ParallelConfig& c) {
  // NVIDIA/Megatron-LM d98e8a64, megatron/training/arguments.py:1453-1479 (validate_args): with
  // tensor (or context) parallelism on a GPU before Blackwell it asserts
  // CUDA_DEVICE_MAX_CONNECTIONS == "1" (unless FSDP or the combined 1F1B), so that a
  // tensor-parallel collective is queued before the GEMM it overlaps
  // (megatron/core/tensor_parallel/layers.py:678). Sequence parallelism and --tp-comm-overlap
  // only exist with tp > 1; ptdp's profiles are all pre-Blackwell GPUs (A100, H100, H200).
  // The combined 1F1B wants more queues for its second stream: Megatron-Bridge sets 8 with the
  // alltoall dispatcher on H100, 32 with DeepEP (scripts/performance/utils/overrides.py at
  // 067f987d). Megatron-FSDP asserts the opposite, that it is not 1 (arguments.py:1166-1167, "FSDP
  // requires CUDA_DEVICE_MAX_CONNECTIONS > 1 or unset"), so its gathers run beside the compute;
  // 32, as the same commit's H100 Llama 3 8B FP8 recipe runs.
  if (c.fsdp) return "CUDA_DEVICE_MAX_CONNECTIONS=32";
  if (c.moe_a2a_overlap) {
    return c.moe_dispatcher == MoeDispatcher::kDeepEp ? "CUDA_DEVICE_MAX_CONNECTIONS=32"
                                                      : "CUDA_DEVICE_MAX_CONNECTIONS=8";
  }
  return c.tp > 1 || c.cp > 1 ? "CUDA_DEVICE_MAX_CONNECTIONS=1" : "";
}

}  // namespace ptdp::planner
