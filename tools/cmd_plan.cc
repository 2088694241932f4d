// `ptdp plan`: search the layouts of a model on a cluster and print / write the best.
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <thread>

#include "core/cluster.h"
#include "core/json.h"
#include "core/model.h"
#include "core/plan_file.h"
#include "planner/fix.h"
#include "planner/report.h"
#include "planner/search.h"
#include "planner/software_search.h"
#include "simulator/pipeline_replay.h"
#include "tools/common.h"

namespace ptdp::tools {

namespace {

constexpr int kMaxTop = 10000;
constexpr int kMaxSimulateTop = 1000000;
constexpr int kMaxThreads = 1024;

struct PlanArgs {
  std::string model = "gpt-1t";
  std::string cluster = "selene";
  int gpus = 0;
  int nodes = 0;
  int64_t global_batch = 0;
  int top = 10;
  std::string out;
  std::string format = "table";
  std::string emit;
  std::string fix;
  std::string precision;  // empty: the cluster profile's
  std::string software = kDefaultSoftware;
  bool allow_cross_node_tp = false;
  bool selective_recompute = false, sequence_parallel = false, distributed_optimizer = false,
       grad_accumulation_fusion = false, grad_reduce_bf16 = false, optimizer_state_bf16 = false,
       fused_attention = false, context_parallel = false, moe_a2a_overlap = false,
       moe_shared_expert_overlap = false, recompute_modules = false, fsdp = false;
  double tokens = 0;
  int simulate_top = -1;  // -1: every layout that fits
  int threads = 0;        // 0: not given (the machine's hardware threads)
  bool threads_given = false;
};

// `--emit megatron` as a shell would take it: a comment line when the flags are not the best
// layout's, the environment Megatron-LM asserts, then pretrain_gpt.py's flags.
void PrintMegatron(const ModelSpec& model, const ClusterSpec& cluster,
                   const planner::MegatronChoice& megatron) {
  std::cout << "\nMegatron-LM pretrain_gpt.py flags:\n";
  if (!megatron.note.empty()) std::cout << "  # note: " << megatron.note << "\n";
  const std::string model_note = planner::MegatronModelNote(model);
  if (!model_note.empty()) std::cout << "  # note: " << model_note << "\n";
  const std::string env = planner::MegatronEnvironment(megatron.layout);
  if (!env.empty()) std::cout << "  export " << env << "\n";
  std::cout << "  " << planner::MegatronArgs(model, megatron.layout, &cluster.software) << "\n";
}

Status RunPlan(const PlanArgs& a) {
  if (a.format != "table" && a.format != "json") {
    return Status::Invalid("--format: \"" + a.format + "\" is not table or json");
  }
  if (!a.emit.empty() && a.emit != "megatron") {
    return Status::Invalid("--emit: \"" + a.emit + "\" is not megatron");
  }
  // Counts are capped up front: each scales work or memory (layouts kept, layouts simulated).
  if (a.top < 1 || a.top > kMaxTop) {
    return Status::Invalid("--top: " + std::to_string(a.top) + " is outside 1.." +
                           std::to_string(kMaxTop));
  }
  if (a.simulate_top < -1 || a.simulate_top > kMaxSimulateTop) {
    return Status::Invalid("--simulate-top: " + std::to_string(a.simulate_top) +
                           " is outside -1.." + std::to_string(kMaxSimulateTop));
  }
  if (a.threads_given && (a.threads < 1 || a.threads > kMaxThreads)) {
    return Status::Invalid("--threads: " + std::to_string(a.threads) + " is outside 1.." +
                           std::to_string(kMaxThreads));
  }
  PTDP_RETURN_IF_ERROR(planner::CheckSearchCounts(a.gpus, a.nodes, a.global_batch));
  std::error_code ec;
  if (a.gpus == 0 && a.nodes == 0 && !std::filesystem::is_regular_file(a.cluster, ec)) {
    return Status::Invalid("--gpus or --nodes: one is required with a preset cluster");
  }
  PTDP_RETURN_IF_ERROR(CheckNotSpecialFile("--model", a.model));
  PTDP_RETURN_IF_ERROR(CheckNotSpecialFile("--cluster", a.cluster));
  PTDP_ASSIGN_OR_RETURN(ModelSpec model, LoadModel(a.model));
  PTDP_ASSIGN_OR_RETURN(ClusterSpec cluster, LoadCluster(a.cluster, a.gpus, a.nodes));
  PTDP_RETURN_IF_ERROR(CheckNotSpecialFile("--software", a.software));
  PTDP_ASSIGN_OR_RETURN(cluster.software, LoadSoftware(a.software));
  planner::SearchOptions o;
  o.global_batch = a.global_batch;
  o.keep = a.top;
  o.allow_cross_node_tp = a.allow_cross_node_tp;
  o.selective_recompute = a.selective_recompute;
  o.sequence_parallel = a.sequence_parallel;
  o.distributed_optimizer = a.distributed_optimizer;
  o.grad_accumulation_fusion = a.grad_accumulation_fusion;
  o.grad_reduce_bf16 = a.grad_reduce_bf16;
  o.optimizer_state_bf16 = a.optimizer_state_bf16;
  o.fsdp = a.fsdp;
  o.fused_attention = a.fused_attention;
  o.context_parallel = a.context_parallel;
  o.moe_a2a_overlap = a.moe_a2a_overlap;
  o.moe_shared_expert_overlap = a.moe_shared_expert_overlap;
  o.recompute_modules = a.recompute_modules;
  planner::ApplySoftwareSearchDefaults(cluster.software, &o);
  if (!a.precision.empty()) {
    PTDP_ASSIGN_OR_RETURN(o.precision, ParsePrecision(a.precision, "--precision"));
  }
  if (a.simulate_top != 0) {
    o.refine_top = a.simulate_top;            // -1: every layout that fits
    o.make_refiner = sim::MakeReplayRefiner;  // the simulator's replay, one per thread
  }
  o.threads = a.threads_given ? a.threads : int(std::max(1u, std::thread::hardware_concurrency()));
  PTDP_ASSIGN_OR_RETURN(o.fix, planner::ParseFix(a.fix));
  o.progress = [](int64_t done, int64_t total, double s) {
    std::fprintf(stderr, "ptdp plan: searching... %lld of ~%lld layouts, %.1f s\n", (long long)done,
                 (long long)total, s);
  };
  PTDP_ASSIGN_OR_RETURN(planner::SearchResult r, planner::Search(model, cluster, o));
  // Before anything is written: a refused --emit leaves no plan file behind.
  // The flags are for a schedule Megatron-Core runs (planner::ChooseMegatronLayout): the best
  // layout's, or the best ranked one it runs with a note saying what differs, or a refusal.
  planner::MegatronChoice megatron;
  if (!a.emit.empty()) {
    Result<planner::MegatronChoice> choice = planner::ChooseMegatronLayout(r);
    if (!choice.ok()) return choice.status().WithPrefix("--emit");
    megatron = *choice;
  }
  const std::string caveat = planner::PrecisionCaveat(cluster, r.top.front().layout.precision);
  if (!caveat.empty()) std::fprintf(stderr, "ptdp plan: note: %s\n", caveat.c_str());
  if (!a.out.empty()) {
    PTDP_ASSIGN_OR_RETURN(const PlanFile plan, planner::MakePlanFile(model, cluster, r, a.tokens));
    PTDP_RETURN_IF_ERROR(WriteFileAtomic(a.out, PlanToJson(plan).dump(1) + "\n"));
  }
  if (a.format == "json") {
    OrderedJson j = planner::SearchToJson(r, a.tokens);
    if (!a.emit.empty()) {
      j["megatron_args"] = planner::MegatronArgs(model, megatron.layout, &cluster.software);
      const std::string env = planner::MegatronEnvironment(megatron.layout);
      if (!env.empty()) j["megatron_env"] = env;
      const std::string model_note = planner::MegatronModelNote(model);
      if (!model_note.empty()) j["megatron_model_note"] = model_note;
      if (!megatron.note.empty()) {
        j["megatron_layout"] = LayoutToJson(megatron.layout);
        j["megatron_note"] = megatron.note;
      }
    }
    j["software"] = cluster.software.name;
    std::cout << j.dump(1) << "\n";
  } else {
    std::cout << planner::SearchToTable(model, cluster, r, a.tokens);
    if (!a.emit.empty()) PrintMegatron(model, cluster, megatron);
    if (!a.out.empty()) std::cout << "wrote " << a.out << "\n";
  }
  return Status::Ok();
}

}  // namespace

void RegisterPlan(CLI::App& app, int* exit_code) {
  auto a = std::make_shared<PlanArgs>();
  auto* cmd = app.add_subcommand("plan", "Find the best tensor/pipeline/data-parallel layout");
  cmd->add_option(
         "--model", a->model,
         "Preset name, model JSON, or a Hugging Face config.json (GPT-2, Llama, Mistral, Qwen2)")
      ->capture_default_str();
  cmd->add_option("--cluster", a->cluster, "Cluster preset, profile JSON or cluster JSON")
      ->capture_default_str();
  cmd->add_option("--gpus", a->gpus, "Number of GPUs (a multiple of GPUs per node)");
  cmd->add_option("--nodes", a->nodes, "Number of nodes (instead of --gpus)");
  cmd->add_option("--global-batch", a->global_batch, "Sequences per iteration (B)")->required();
  cmd->add_option("--top", a->top, "How many layouts to list")->capture_default_str();
  cmd->add_option("--out", a->out, "Write the chosen plan to this JSON file");
  cmd->add_option("--format", a->format, "table | json")->capture_default_str();
  cmd->add_option("--emit", a->emit, "megatron: print Megatron-LM flags for the best layout");
  cmd->add_option("--fix", a->fix,
                  "Fix parts of the layout: tp=8,pp=64,dp=6,mbs=1,vp=1,recompute=full,"
                  "schedule=1f1b,scatter_gather=on (also sequence_parallel=on|off, "
                  "distributed_optimizer=on|off, recompute=selective, precision=bf16)");
  cmd->add_option("--precision", a->precision,
                  "fp32 | bf16 | fp16 | fp8: the precision of every layout (default: the cluster "
                  "profile's; fp8 needs a profile with fp8_peak_tflops)");
  cmd->add_option("--software", a->software,
                  "Training stack: megatron-core | megatron-lm-2021 | ptdp or a software profile "
                  "JSON (overlaps, fusions, and the options searched by default)")
      ->capture_default_str();
  cmd->add_flag("--allow-cross-node-tp", a->allow_cross_node_tp,
                "Let the search put a tensor group across nodes");
  cmd->add_flag(
      "--selective-recompute", a->selective_recompute,
      "Also search recompute=selective (Korthikanti et al. 2022; not in the paper's runs)");
  cmd->add_flag("--sequence-parallel", a->sequence_parallel,
                "Also search sequence parallelism when tp > 1 (not in the paper's runs)");
  cmd->add_flag("--distributed-optimizer", a->distributed_optimizer,
                "Shard the optimizer state over the data-parallel group when dp > 1");
  cmd->add_flag("--fsdp", a->fsdp,
                "Also search fully sharded data parallelism (ZeRO-3: weights and gradients "
                "sharded too, gathered per layer and microbatch; Megatron-FSDP, torch FSDP2) "
                "where dp * cp > 1 on a dense model, whole and hybrid-sharded inside a node");
  cmd->add_flag("--grad-accumulation-fusion", a->grad_accumulation_fusion,
                "Accumulate weight gradients inside the GEMM (today's Megatron-LM default; the "
                "paper's 2021 code added them separately)");
  cmd->add_flag(
      "--grad-reduce-in-bf16", a->grad_reduce_bf16,
      "Keep and reduce the gradients in bf16, not fp32 (Megatron-LM --grad-reduce-in-bf16; "
      "a numerics choice): every bf16 or fp8 layout");
  cmd->add_flag("--optimizer-state-bf16", a->optimizer_state_bf16,
                "Keep Adam's moments in bf16 and the master weights as 16-bit remainders, 6 bytes "
                "a parameter in place of 12 (Megatron-LM --use-precision-aware-optimizer "
                "--exp-avg-dtype bf16 --exp-avg-sq-dtype bf16; a numerics choice): every bf16 or "
                "fp8 layout with the distributed optimizer");
  cmd->add_flag("--fused-attention", a->fused_attention,
                "Also search a fused (FlashAttention-class) attention kernel that stores no s^2 "
                "tensor (Megatron-LM --attention-backend flash; not in the paper's runs)");
  cmd->add_flag("--context-parallel", a->context_parallel,
                "Also search context parallelism (ring attention over cp ranks, with fused "
                "attention) where each rank keeps at least 4096 tokens (--fix cp=N: any cp)");
  cmd->add_flag("--moe-a2a-overlap", a->moe_a2a_overlap,
                "Also search, for a mixture of experts with ep > 1, the combined 1F1B that hides "
                "the all-to-alls behind another microbatch's compute (Megatron-Core "
                "--overlap-moe-expert-parallel-comm --delay-wgrad-compute)");
  cmd->add_flag("--moe-shared-expert-overlap", a->moe_shared_expert_overlap,
                "For a mixture with a shared expert, run it beside the dispatcher's all-to-alls "
                "(Megatron-Core --moe-shared-expert-overlap) on every layout without the combined "
                "1F1B");
  cmd->add_flag(
      "--recompute-modules", a->recompute_modules,
      "Also search selective recomputation of Megatron-Core's other modules (mla_up_proj, "
      "mlp, moe_act, layernorm, moe, shared_experts: each set the model has), fused attention "
      "too (--recompute-modules; "
      "--fix recompute_modules=A+B fixes one)");
  cmd->add_option("--simulate-top", a->simulate_top,
                  "Re-score the best K layouts (by the closed form) with the event-driven "
                  "simulator and rank by it (-1: every layout that fits; 0: closed form only)")
      ->capture_default_str();
  auto* threads = cmd->add_option(
      "--threads", a->threads,
      "Threads that simulate layouts (default: the machine's hardware threads); the "
      "result is the same for any count");
  cmd->add_option("--tokens", a->tokens, "Tokens to train on, for days-to-train (e.g. 3e11)");
  cmd->callback([a, exit_code, threads] {
    a->threads_given = threads->count() > 0;
    Status s = RunPlan(*a);
    *exit_code = s.ok() ? 0 : Fail("plan", s);
  });
}

}  // namespace ptdp::tools
