// What `ptdp plan` prints and writes: the contract's JSON (`--format json`), the ranked table and
// the winner's breakdown, Megatron-LM flags, and the plan file (core/plan_file.h).
#pragma once

#include <string>

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

// Megatron-LM pretrain_gpt.py flags for a layout.
// With `software`, also the flags of the overlaps it priced (--tp-comm-overlap with sequence
// parallelism, --overlap-grad-reduce and --overlap-param-gather with d > 1).
std::string MegatronArgs(const ModelSpec& m, const ParallelConfig& c,
                         const SoftwareProfile* software = nullptr);

// The plan file of the winner (alternatives, search summary and Megatron flags as extras), with
// the winner's Program (schedule::BuildProgram, messages of the profile's activation bytes).
Result<PlanFile> MakePlanFile(const ModelSpec& m, const ClusterSpec& cluster, const SearchResult& r,
                              double tokens);

}  // namespace ptdp::planner
