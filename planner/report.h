// What `ptdp plan` prints and writes: the contract's JSON (`--format json`), the ranked table and
// the winner's breakdown, Megatron-LM flags, and the plan file (core/plan_file.h).
#pragma once

#include <string>
#include <vector>

#include "core/hardware.h"
#include "core/json.h"
#include "core/model.h"
#include "core/plan_file.h"
#include "planner/search.h"

namespace ptdp::planner {

// {"iteration_s", "tflops_per_gpu", "percent_of_peak", "bubble_fraction", "peak_memory_GiB",
//  "tokens_per_s", "model_tflops_per_gpu"} (+ "days_to_train" when tokens > 0, and with
// `detail` the breakdown and "memory_per_stage").
OrderedJson PredictionToJson(const costmodel::Prediction& p, double tokens, bool detail);
// {"layout": ..., "prediction": ...}
OrderedJson CandidateToJson(const Candidate& c, double tokens, bool detail);
// {"best", "top", "search": {"considered", "rejected", "seconds", ...}}
OrderedJson SearchToJson(const SearchResult& r, double tokens);

// The ranked table and the winner's breakdown, for people.
std::string SearchToTable(const ModelSpec& m, const ClusterSpec& cluster, const SearchResult& r,
                          double tokens);

// Megatron-Core's --pipeline-model-parallel-layout value for per-(virtual-)stage layer counts,
// in virtual-stage order: 9/3/8/4 is "Et*9|t*3|t*8|t*4,L" (embedding first, loss last), and
// with `mtp_layers` multi-token prediction layers those before the loss ("m,L").
std::string MegatronLayout(const std::vector<int>& stage_layers, int mtp_layers = 0);
// Megatron-LM pretrain_gpt.py flags for a layout (per-stage counts as the quoted layout above).
// With `software`, also the flags of the overlaps it priced (--tp-comm-overlap with sequence
// parallelism, --overlap-grad-reduce and --overlap-param-gather with d > 1).
std::string MegatronArgs(const ModelSpec& m, const ParallelConfig& c,
                         const SoftwareProfile* software = nullptr);
// Empty when Megatron-LM's flags express the model, else what they leave out: Llama 3.1's RoPE
// scaling with other than Megatron-Core's fixed low and high frequency factors and original
// length (1, 4, 8192), YaRN's under multi-latent attention, and token dropping's unit.
std::string MegatronModelNote(const ModelSpec& m);

// Empty when Megatron-Core runs the layout's schedule, else why not. It has three
// (megatron/core/pipeline_parallel/schedules.py:53 get_forward_backward_func, NVIDIA/Megatron-LM
// d98e8a64): no pipelining (pp = 1), 1F1B and interleaved 1F1B; no GPipe, no zero-bubble schedule
// and no V placement, and pretrain_gpt.py has no flag that asks for one.
std::string MegatronScheduleGap(const ParallelConfig& c);

// The layout Megatron-LM flags are written for: the best ranked one Megatron-Core runs. `note` is
// empty when that is the best layout, else one line saying what differs from it (the schedule,
// the layout, the predicted iteration times). An error naming the reason when no ranked layout
// has a schedule Megatron-Core runs (e.g. --fix schedule=zb-h1).
struct MegatronChoice {
  ParallelConfig layout;
  std::string note;
};
Result<MegatronChoice> ChooseMegatronLayout(const SearchResult& r);

// The environment Megatron-LM needs to run the layout, as NAME=VALUE, or empty:
// CUDA_DEVICE_MAX_CONNECTIONS=1 with tensor or context parallelism (sequence parallelism and
// --tp-comm-overlap need tp > 1 too), which validate_args asserts before Blackwell; more queues
// with FSDP (which asserts it is not 1) and with the combined 1F1B.
std::string MegatronEnvironment(const ParallelConfig& c);

// The plan file of the winner (alternatives, search summary and Megatron flags as extras: the
// flags and environment of ChooseMegatronLayout's layout, with "megatron_layout" and
// "megatron_note" when that is not the winner, or only the note when no layout qualifies), with
// the winner's Program (schedule::BuildProgram, messages of the profile's activation bytes).
Result<PlanFile> MakePlanFile(const ModelSpec& m, const ClusterSpec& cluster, const SearchResult& r,
                              double tokens);

}  // namespace ptdp::planner
