// Trainer: one rank of a PTD-P training job. It builds the rank's groups from core's RankGrid,
// its parameters (core/shapes.h), the plan file's Program (once
// schedule::CheckProgramMatchesLayout shows it is its layout's), and runs each iteration by
// interpreting the Program instruction by instruction, in order. The work is split by concern:
//   trainer.cc          setup (plan, groups, device, parameters), the iteration loop, metrics
//   executor.cc         the Program interpreter: one handler per instruction, pipeline sends and
//                       receives, the record of what was executed (checked against the Program)
//   stage.cc            the model wiring: chunks, layers, the per-microbatch stash, token upload
//   grad_reduce.cc      the tied-embedding and data-parallel gradient reductions (overlapped with
//                       the backward per chunk with TrainOptions::overlap_grad_reduce)
//   optimizer_step.cc   global norm, clipping, loss scaling, AdamW
//   report.cc           memory and timeline gathering
// Instructions:
//   kRecvAct/kRecvGrad   blocking receive from the pipeline peer (with scatter/gather, 1/t of the
//                        boundary tensor from the peer of the same tensor rank, then an all-gather
//                        over the tensor group)
//   kForward/kBackward   the chunk's layers (tensor-parallel collectives inside); the first virtual
//                        stage embeds, the last computes the loss; kBackward with `recompute`
//                        redoes each layer's forward from its checkpointed input first
//   kBackwardInput       the zero-bubble split backward's input half (zero-bubble schedules): as
//                        kBackward, but the Linears' weight-gradient GEMMs are queued with their
//                        operands (runtime/model/gpt_layers.h DeferredWeightGrad)
//   kBackwardWeight      runs the queued GEMMs and frees the (microbatch, chunk)'s state
//   kSendAct/kSendGrad   non-blocking send (1/t of the tensor with scatter/gather)
//   kReduceGrads         waits for the sends, all-reduces the tied embedding's gradient between the
//                        first and last stage, then the gradients over the data group in buckets
//                        (with overlap_grad_reduce: waits for the buckets each chunk started after
//                        the instruction that completed its gradients; grad_reduce.cc)
//   kOptimizerStep       global gradient norm (each parameter counted once), clipping, AdamW
// Every tensor lives on the Device and is computed by its Ops (runtime/backend/ops.h); the host
// sees only scalars (loss, norm, non-finite flag) copied back through Device::Copy.
//
// The loss is the mean over all B * s tokens of the global batch (each token's loss gradient is
// 1 / (B s)), so every layout computes the same number.
#pragma once

#include <algorithm>
#include <array>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/plan_file.h"
#include "core/program.h"
#include "core/rank_grid.h"
#include "core/timeline.h"
#include "runtime/backend/device.h"
#include "runtime/backend/timed_ops.h"
#include "runtime/comm/communicator.h"
#include "runtime/data/token_set.h"
#include "runtime/executor/grad_reduce.h"
#include "runtime/executor/monitor.h"
#include "runtime/model/gpt_layers.h"
#include "runtime/model/mla.h"
#include "runtime/model/mtp.h"
#include "runtime/model/params.h"
#include "runtime/model/router_bias.h"
#include "runtime/optim/loss_scaler.h"
#include "runtime/optim/optimizer.h"

namespace ptdp::runtime {

struct CkptFile;  // runtime/checkpoint/manifest.h
struct Manifest;

struct TrainOptions {
  // The training data: one token file, or a blend WEIGHT FILE WEIGHT FILE ... (runtime/data/
  // token_set.h), and the split that cuts a validation and a test part from each of its files
  // (Megatron-LM's --split; empty: all of it trains).
  std::vector<std::string> data;
  std::string split;
  // Validation and test data of their own (Megatron-LM's --valid-data-path, --test-data-path):
  // the same words as `data`, whole; empty: none, or the split's parts. Not both for one.
  std::vector<std::string> eval_data, test_data;
  int64_t steps = 1;
  // A mixture of experts' auxiliary load-balancing loss coefficient (Megatron-LM's
  // --moe-aux-loss-coeff; 0: none): runtime/model/moe_layer.h.
  double moe_aux_loss_coeff = 0;
  // Its kind (--moe-router-load-balancing-type, Megatron-LM's names): "aux_loss" over each
  // microbatch, or "seq_aux_loss" over each sequence, their mean (DeepSeek-V2's and V3's).
  std::string moe_load_balancing = "aux_loss";
  bool MoeAuxPerSequence() const { return moe_load_balancing == "seq_aux_loss"; }
  // Its router z-loss coefficient (Megatron-LM's --moe-z-loss-coeff; 0: none).
  double moe_z_loss_coeff = 0;
  // Multi-token prediction (model.mtp_layers): the weight of the depths' mean token losses in
  // the objective, shared among the depths (Megatron-LM's --mtp-loss-scaling-factor, 0.1).
  double mtp_loss_scale = 0.1;
  OptimizerConfig optim;
  uint64_t data_seed = 1234;
  int64_t bucket_elements = 1 << 18;  // data-parallel all-reduce bucket (fp32 elements)
  // Start each chunk's data-parallel all-reduce (non-blocking, in buckets) right after the
  // instruction that completes its gradients, and wait at kReduceGrads (Megatron-LM's
  // --overlap-grad-reduce). Off by default: on the CPU it did not pay (docs/runtime.md).
  bool overlap_grad_reduce = false;
  // With layout.distributed_optimizer: start the all-gather of the updated weights bucket by
  // bucket after the update and wait for a chunk's before its first forward of the next step
  // (Megatron-LM's --overlap-param-gather), instead of one blocking all-gather. Off by default.
  bool overlap_param_gather = false;
  std::string backend = "cpu";        // runtime/backend/registry.h
  int64_t inject_overflow_step = 0;   // tests: an inf in one gradient at this step (fp16)
  int64_t kill_in_save_step = 0;      // tests: the last rank is killed inside this step's save
  double initial_loss_scale = 65536;  // fp16 dynamic loss scaling
  int loss_scale_window = 1000;       // clean steps before the scale doubles
  Bytes memory_limit = 0;             // per rank; 0: none
  std::string memory_limit_source;    // where the limit came from, for the error message
  bool op_times = false;              // time every Ops call (runtime/backend/timed_ops.h)
  // Tests: world rank `slow_rank` (-1: none) sleeps (slow_factor - 1) times the measured duration
  // of each forward and backward after it, a device slower by that factor (the monitor's
  // straggler; a sleep, not a busy wait, so that ranks sharing the CPU do not slow down too).
  int slow_rank = -1;
  double slow_factor = 1;
};

struct StepMetrics {
  int64_t step = 0;  // 1-based
  double loss = 0;
  double grad_norm = 0;  // before clipping
  double lr = 0;
  double loss_scale = 1;      // fp16: the scale this step's backward used
  int64_t skipped_steps = 0;  // fp16: steps skipped for a non-finite gradient so far
  double iteration_s = 0;     // slowest rank, from the device's event timer
  double tokens_per_s = 0;
  double tflops_per_gpu = 0;
  Bytes peak_memory_bytes = 0;  // max over ranks, since the start
  // --moe-aux-loss-coeff: the auxiliary load-balancing loss without its coefficient, averaged over
  // the mixture layers and the microbatches, as Megatron-LM prints it (0 without it).
  double moe_aux_loss = 0;
  double moe_z_loss = 0;  // --moe-z-loss-coeff's z-loss, the same way
  // Token dropping (model.moe_capacity_factor): the share of the step's routed token copies (every
  // mixture layer's, every rank's) that their experts dropped; 0 dropless.
  double moe_dropped_share = 0;
  // Each multi-token prediction depth's mean token loss over the positions with a target
  // (Megatron-LM's "mtp_1 loss", ...), without mtp_loss_scale; empty without the depths.
  std::vector<double> mtp_losses;
};

// One rank's measured memory, gathered to every rank.
struct RankMemory {
  int rank = 0;
  int pp_rank = 0;
  Bytes peak_total = 0;
  std::array<Bytes, kNumMemTags> peak{};
};

// One completed instruction as the handler that completed it saw it: the op and the
// (microbatch, chunk) of the state it acted on.
struct ExecRecord {
  Op op = Op::kForward;
  int32_t microbatch = -1;
  int32_t chunk = -1;
  bool operator==(const ExecRecord&) const = default;
};
// Ok when `done` is exactly `program`'s (op, microbatch, chunk) sequence; otherwise names the first
// difference.
Status CheckExecutedOrder(const std::vector<Instr>& program, const std::vector<ExecRecord>& done);

// The Program a trainer executes for its plan (one place, so that a plan carrying its Program
// replaces only this function): built for the layout with messages in the compute dtype.
Result<Program> TrainerProgram(const PlanFile& plan);

class Trainer {
 public:
  // Collective over `world` (every rank calls it): any rank's setup error is returned on every
  // rank. Checks the plan against the world size, the data file and the memory limit. With
  // ParamInit::kLoadFollows the parameters are left for a LoadCheckpoint that must come next
  // (runtime/model/params.h; everything else is as with kRandom), or for InitialiseParams.
  static Result<std::unique_ptr<Trainer>> Create(Communicator* world, const PlanFile& plan,
                                                 const TrainOptions& opts,
                                                 ParamInit init = ParamInit::kRandom);
  // The initial model (ParamInit::kRandom's values), after a kLoadFollows Create whose
  // LoadCheckpoint found no checkpoint (--load latest before the first save). Collective.
  Status InitialiseParams();
  ~Trainer();
  // Runs iteration `step` (1-based). Collective.
  Result<StepMetrics> Step(int64_t step);
  // Collective, between iterations: the mean token loss of `batches` global batches of the
  // validation data (or the test data; its batch j drawn as iteration j's from the training
  // data), the model in eval mode (no dropout), forward only (runtime/executor/evaluate.cc).
  // Parameters, optimizer state and the training data's order are untouched. The same value on
  // every rank.
  Result<double> Evaluate(int64_t batches, SplitPart part = SplitPart::kValid);
  bool has_eval_data() const { return valid_ != nullptr; }
  bool has_test_data() const { return test_ != nullptr; }
  // The data each part draws from (TokenSet::Describe; empty: none), for the start line.
  std::string DescribeData(SplitPart part) const;
  // Collective: every rank's peak memory.
  Result<std::vector<RankMemory>> GatherMemory();
  // Collective: the last iteration's measured timeline of every pipeline rank (tensor rank 0, data
  // rank 0 of each), on world rank 0 (others get an empty Timeline), with an "activation_GiB"
  // counter sample after every instruction.
  Result<Timeline> GatherTimeline();
  // On rank 0's gathered timeline: each send's interval becomes its message's transfer.
  void GiveSendsTheirTransfer(Timeline* t) const;
  // Collective: the monitor's window (runtime/executor/monitor.h) since the last call, every
  // rank's, analysed with `straggler_threshold`; the same report on every rank. Starts a new
  // window.
  Result<MonitorReport> GatherMonitor(double straggler_threshold);
  // Collective: compares this rank's parameters with a single-process dump (WriteParamDump) and
  // returns the largest per-tensor relative difference ||p - ref|| / ||ref|| over all ranks
  // (padded vocabulary rows excluded), and the tensor that has it.
  struct ParamDifference {
    double worst = 0;
    std::string tensor;
  };
  Result<ParamDifference> CompareParams(const std::string& dump_path);
  // Collective: writes the full parameters to `path` (single-process runs only).
  Status WriteParamDump(const std::string& path);

  // Collective: saves the state after iteration `step` as DIR/step-NNNNNNNN (runtime/checkpoint,
  // docs/checkpoints.md), crash-safe, keeping the newest `keep`. Returns the bytes of its shards.
  Result<Bytes> SaveCheckpoint(const std::string& dir, int64_t step, int keep);
  // Collective: loads a checkpoint into this layout (any layout may have written it) and returns
  // the step it was saved after. `path` is a step-NNNNNNNN folder, or a folder holding them (the
  // newest valid one is taken; world rank 0 prints the ones it skips and why). With `allow_none`,
  // a folder holding no checkpoint at all gives 0 (start from scratch).
  Result<int64_t> LoadCheckpoint(const std::string& path, bool allow_none);
  // Collective: sets the parameters from a Hugging Face GPT-2 folder (config.json and
  // model.safetensors, docs/checkpoints.md) whose model is the plan's (its n_positions at least the
  // plan's seq_len); Adam's moments stay zero and training starts at step 1. Any layout.
  Status InitFromHf(const std::string& dir);

  // Collective, at the step boundary after iteration `step`: a trainer running `next` that holds
  // this one's state. `next` is a plan for the same model on the same ranks (t, p, d, global batch
  // and precision unchanged: a change of t or p is a relaunch through --save / --load); the
  // microbatch size, the schedule and interleaving may differ, and so may the split of layers
  // across the pipeline stages once plans carry one (the checkpoint names tensors globally, so a
  // layer that moves takes its weights and Adam moments to its new rank). The state moves through
  // a checkpoint (runtime/checkpoint: master weights, Adam m and v, Adam's step count, the
  // loss-scale state) saved in `scratch_dir` and loaded by the resharding loader, then removed;
  // the maths is unchanged (the losses follow the unswitched run within the layout equivalence
  // bounds). Every rank must see `scratch_dir` (one host, or a shared file system). `times`, when
  // given, receives this rank's seconds in each part (the save, building the new Trainer, the
  // load), to tell where a slow switch goes.
  struct SwitchTimes {
    double save_s = 0;
    double create_s = 0;
    double load_s = 0;
  };
  static Result<std::unique_ptr<Trainer>> SwitchPlan(std::unique_ptr<Trainer> current,
                                                     const PlanFile& next, int64_t step,
                                                     const std::string& scratch_dir,
                                                     SwitchTimes* times = nullptr);

  const Program& program() const { return program_; }
  const ParallelConfig& layout() const { return cfg_; }
  const ModelSpec& model() const { return model_; }
  int world_rank() const { return world_->rank(); }
  // This rank's Ops timer, with TrainOptions::op_times (nullptr otherwise).
  TimedOps* op_times() { return dev_->op_times(); }

 private:
  struct MbState;
  struct Pending;
  struct GradBucket;
  Trainer();
  Status Setup(const PlanFile& plan, const TrainOptions& opts);
  Status Build(ParamInit init);  // collective: groups, parameters
  Status CheckMemoryLimit() const;
  void WireLayers();
  void GuardCommunicators();
  // executor.cc
  Status Execute(const Instr& in, int64_t step);
  Status ExecuteSlowed(const Instr& in, int64_t step);   // TrainOptions::slow_rank
  void AddToWindow(double step_s, RankWindow* w) const;  // report.cc: this step's events
  Status RunProgram(int64_t step);
  // Whether a boundary message is the tensor rank's 1/t slice, all-gathered by the receiver
  // (scatter/gather); under sequence parallelism the rank's rows are its own message.
  bool ScatterGathers() const {
    return cfg_.scatter_gather && cfg_.tp > 1 && !cfg_.sequence_parallel;
  }
  Status RecvBoundary(const Instr& in, TensorRef full);
  Status SendBoundary(const Instr& in, Tensor buf);
  Status WaitSends();
  Status PollSends();
  MbState* FindState(int mb, int chunk);
  MbState* NewState(int mb, int chunk);  // finds or creates
  void Record(Op op, const MbState& st);
  // stage.cc
  Status Forward(int mb, int chunk, int64_t step);
  // split: the input half of a split backward (kBackwardInput); BackwardWeight its weight half.
  Status Backward(int mb, int chunk, bool recompute, int64_t step, bool split = false);
  Status BackwardWeight(int mb, int chunk, int64_t step);
  Status ForwardLayers(MbState& st, int chunk, const LayerCtx& c, bool last);
  Status BackwardLayers(MbState& st, int chunk, const LayerCtx& c, bool recompute, Tensor* dy);
  // The microbatch's inputs (or targets) `shift` places on: a multi-token prediction depth's (0:
  // the model's). Past the sequence's end an input is 0 and a target -1 (none).
  Status UploadTokens(int mb, int64_t step, bool inputs, Tensor* out, int shift = 0);
  // The multi-token prediction depths (runtime/model/mtp.h) of the head's chunk: after the head
  // in the forward, before it in the backward (*d_head_out: the gradient of the head's ln_out).
  Status ForwardPredictionDepths(MbState& st, const LayerCtx& c, int mb, int64_t step);
  Status BackwardPredictionDepths(MbState& st, const LayerCtx& c, Tensor* d_head_out);
  void WirePredictionDepths(int chunk);
  LayerCtx Ctx(int mb, int64_t step);
  int OutputIndex(int chunk) const;  // the output matrix the head multiplies by
  int LocalChunkOfStage(int stage) const;
  HeadWeights HeadW(int chunk) const;
  int64_t Key(int mb, int chunk) const { return int64_t(mb) * cfg_.vp + chunk; }
  // grad_reduce.cc
  Status StartGradBucket(ElementRange bucket);
  // The distributed optimizer's all-gather of the updated weights: one blocking call, or (with
  // overlap_param_gather) each chunk's buckets started now, each piece broadcast by its owner.
  Status GatherUpdatedWeights();
  // Waits for the weights of `chunk` (-1: every chunk) started by GatherUpdatedWeights.
  Status WaitForWeights(int chunk);
  Status SumTensorPartialGrads();
  Status ReduceGrads();
  void PlanGradReduce();  // chunk_grads_final_at_ from the Program
  void BeginChunkGradReduce(size_t instr_index);
  Status ChunkGradsFinalFrom(int chunk, const std::string& piece_prefix);
  Status RunWeightGrads(const LayerCtx& c, int chunk, WeightGradQueue* queue);
  Status StartReadyGradBuckets(const std::vector<ElementRange>& pending);
  Status StartChunkGradReduce(size_t instr_index);
  Status PollGradReduce();
  int64_t GradElementsInFlight() const;
  int TiedGradIndex() const;  // the gradient the embedding all-reduce sums, or -1
  ElementRange EntryRange(int entry) const;
  ElementRange ChunkGradRange(int chunk) const;
  int64_t BucketElements() const { return std::max<int64_t>(1, opts_.bucket_elements); }
  // optimizer_step.cc
  Status OptimizerStep(int64_t step);
  // The arena elements this rank's optimizer step updates (with the distributed optimizer its
  // shard of each region: the dense parameters', and with ep > 1 the experts') and their
  // gradients.
  std::vector<ElementRange> StepRanges() const;
  std::vector<TensorRef> StepGrads();
  Result<double> GradNormSquared();
  Result<bool> GradientsFinite();
  Status ApplyAdamW(int64_t step, double clip_coef);
  // checkpoint.cc
  Status WriteShard(const std::string& path, int64_t step, CkptFile* out);
  Status WriteManifest(const std::string& tmp, int64_t step, const std::vector<double>& files,
                       const std::map<int, std::vector<double>>& biases);
  // Collective: every mixture layer's expert bias, on every rank (none without the bias).
  Result<std::map<int, std::vector<double>>> GatherRouterBiases();
  Status CheckCompatible(const Manifest& m, const std::string& source) const;
  Status LoadParams(const std::string& dir, const Manifest& m);

  Communicator* world_ = nullptr;
  Communicator* given_world_ = nullptr;  // what Create got (world_ may be the guard's view of it)
  std::unique_ptr<Communicator> guarded_world_;  // the guard device's view of the world
  // dp_: the data-parallel group with the context-parallel ranks in it (d cp ranks, Megatron-Core's
  // data_parallel_group_with_cp): gradients are reduced and the optimizer state sharded over it.
  // cp_: the context-parallel group (layout.cp > 1 only), the attention's.
  std::unique_ptr<Communicator> tp_, dp_, pipe_, emb_, cp_;
  std::unique_ptr<Communicator> pipe_grad_;  // a V's gradient channel (nullptr: pipe_ carries all)
  // With layout.ep > 1 (core/experts.h's etp-ep-edp grid over a stage's tp cp dp ranks, etp = tp):
  // ep_, the expert-parallel group (consecutive blocks of ep in dp_), whose members hold E / ep
  // experts each; edp_, the expert data-parallel group (every ep-th member of dp_), over which the
  // experts' gradients are reduced.
  std::unique_ptr<Communicator> ep_, edp_;
  int ExpertRank() const { return coord_.dp % cfg_.ep; }  // which experts this rank holds
  // Whether this rank writes a checkpoint file: data rank 0, and with ep > 1 the rest of the first
  // expert-parallel group (each file then holds its experts; pieces.h ShardFileName).
  bool ShardWriter() const { return coord_.dp < cfg_.ep; }
  std::vector<ElementRange> ExpertGradRanges() const;  // grad_reduce.cc
  Communicator* PipeFor(Op op) const {
    const bool grad = op == Op::kSendGrad || op == Op::kRecvGrad;
    return grad && pipe_grad_ != nullptr ? pipe_grad_.get() : pipe_.get();
  }
  ModelSpec model_;
  ParallelConfig cfg_;
  // coord_.dp is the place in dp_ (cp rank + cp * data rank; RankGrid built with d cp).
  RankCoord coord_;
  int DataRank() const { return coord_.dp / cfg_.cp; }     // which sequences this rank reads
  int ContextRank() const { return coord_.dp % cfg_.cp; }  // which chunks of them
  TrainOptions opts_;
  Program program_;
  std::unique_ptr<Device> dev_;
  MlaIndexCache mla_indices_;  // after dev_, so that its tensors go first
  std::unique_ptr<ParamStore> params_;
  RouterBiases router_biases_;  // the expert biases of this rank's mixture layers (or none)
  std::unique_ptr<TokenSet> data_;
  std::unique_ptr<TokenSet> valid_, test_;  // nullptr: none
  Status OpenData();
  // Set inside Evaluate to the part evaluated (valid_ or test_): the forwards read it and draw no
  // dropout, and keep nothing for a backward.
  TokenSet* evaluating_ = nullptr;
  double moe_aux_sum_ = 0;  // this step's auxiliary loss values (LayerCtx::moe_aux_sum)
  double moe_z_sum_ = 0;    // and z-loss values (LayerCtx::moe_z_sum)
  double moe_routed_copies_ = 0, moe_dropped_copies_ = 0;  // LayerCtx::moe_routed_copies
  Status EvaluateBatches(int64_t batches);
  Status ForgetAfterEvalForward(int mb, int chunk);
  LayerDims dims_;
  DTypes types_;
  // Per local chunk: its global layers and their weights / gradients.
  std::vector<std::vector<int>> chunk_layers_;
  std::vector<std::vector<LayerWeights>> weights_;
  std::vector<std::vector<LayerGrads>> grads_;
  // The head's chunk's multi-token prediction depths (none elsewhere).
  std::vector<MtpWeights> mtp_weights_;
  std::vector<MtpGrads> mtp_grads_;
  std::map<int64_t, std::unique_ptr<MbState>> live_;
  std::vector<std::unique_ptr<Pending>> pending_;
  // Per instruction of this rank's Program: the chunk whose gradients it completes when its
  // data-parallel all-reduce starts there (overlap_grad_reduce), else -1.
  std::vector<int> chunk_grads_final_at_;
  std::vector<std::unique_ptr<GradBucket>> grad_buckets_;  // started, not yet seen complete
  // Per local chunk, its weights' broadcasts still to be waited for (overlap_param_gather).
  std::vector<std::vector<std::unique_ptr<CommRequest>>> weight_gathers_;
  // While the instruction that completes a chunk's gradients runs: the chunk (else -1), its buckets
  // not yet started (ascending), and how many it started while some of the chunk's gradients were
  // still to be written (the per-layer start; the trace's dp_grad_buckets_started_early).
  int early_chunk_ = -1;
  std::vector<ElementRange> unstarted_grad_buckets_;
  int64_t buckets_started_early_ = 0;
  std::vector<ExecRecord> executed_;  // appended by the handlers as they complete
  Tensor loss_sum_;                   // fp64 device scalar: this iteration's summed token losses
  Tensor mtp_loss_sum_;               // fp64 [mtp_layers]: the same for each prediction depth
  Tensor scratch_scalar_;             // fp64 device scalar: norms and non-finite flags
  std::unique_ptr<LossScaler> scaler_;
  double last_grad_norm_ = 0;
  double last_lr_ = 0;
  double last_loss_scale_ = 1;
  int64_t last_step_ = 0;
  Timeline timeline_;
  std::vector<TimelineEvent> events_;
  std::vector<Bytes> activation_bytes_;     // after each event
  std::vector<Bytes> grad_reduce_bytes_;    // data-parallel buckets in flight after each event
  std::vector<int64_t> grad_early_starts_;  // buckets_started_early_ of each event
  // The running receive's wait for its message (host clock; 0 where the communicator cannot tell
  // the wait from the transfer), taken out of the instruction's interval by RunProgram.
  Nanoseconds recv_wait_ns_ = 0;
  // The running receive's host bookkeeping before it (allocations), also kept out of its interval.
  Nanoseconds recv_prep_ns_ = 0;
  RankWindow window_;              // the monitor's sums since the last GatherMonitor
  int64_t window_first_step_ = 0;  // 0: no step in the window yet
  // The trainer's first step, kept out of window_: on a GPU it pays one-off costs (cuBLASLt's
  // timing of each GEMM shape, cuDNN's plans, the allocator's first cudaMallocs; 2-4 s against a
  // 0.34-0.45 s step in the H200 adapt stage of 2026-11-27) that read as stage compute, and after a
  // plan switch as a slower new layout. GatherMonitor reports it only when the window has nothing
  // else (a monitor window of one step).
  bool warmed_up_ = false;
  RankWindow warmup_window_;
  int64_t warmup_step_ = 0;
};

}  // namespace ptdp::runtime
