#include "runtime/executor/trainer.h"

#if PTDP_HAVE_CUDA_BACKEND
#include "runtime/backend/cuda_backend.h"
#endif

#include <cmath>

#include "core/ledger.h"
#include "core/shapes.h"
#include "runtime/backend/guard_device.h"
#include "runtime/backend/registry.h"
#include "runtime/comm/agree.h"
#include "runtime/comm/world.h"
#include "runtime/executor/trainer_state.h"
#include "runtime/model/wiring.h"
#include "schedule/schedule.h"

namespace ptdp::runtime {

Trainer::Trainer() = default;

Trainer::~Trainer() {
  // Outstanding sends and weight gathers must finish before their buffers go.
  for (auto& p : pending_) (void)p->req->Wait();
  (void)WaitForWeights(-1);
}

// The plan's Program is what runs, once shown to be the one its layout gives (messages in the
// layout's precision).
Result<Program> TrainerProgram(const PlanFile& plan) {
  if (!plan.has_program) return Status::Invalid("plan: program: missing (re-run ptdp plan)");
  PTDP_RETURN_IF_ERROR(schedule::CheckProgramMatchesLayout(plan.program, plan.model, plan.layout)
                           .WithPrefix("plan: program"));
  PTDP_RETURN_IF_ERROR(schedule::Validate(plan.program));
  return plan.program;
}

Result<std::unique_ptr<Trainer>> Trainer::Create(Communicator* world, const PlanFile& plan,
                                                 const TrainOptions& opts, ParamInit init) {
  std::unique_ptr<Trainer> t(new Trainer());
  t->world_ = world;
  t->given_world_ = world;
  Status local = t->Setup(plan, opts);
  PTDP_RETURN_IF_ERROR(AgreeStatus(*world, local));
  PTDP_RETURN_IF_ERROR(AgreeStatus(*world, t->Build(init)));
  return t;
}

Status Trainer::InitialiseParams() {
  return AgreeStatus(*world_, params_->InitialiseRandom(model_));
}

// The ledger of every pipeline rank (before anything is allocated) against the memory limit.
Status Trainer::CheckMemoryLimit() const {
  if (opts_.memory_limit <= 0) return Status::Ok();
  for (int r = 0; r < cfg_.pp; ++r) {
    const MemoryLedger e = MemoryOf(model_, cfg_, program_, r);
    if (e.TotalWithWorkspace() > opts_.memory_limit) {
      return Status::DoesNotFit(
          "model does not fit: pipeline rank " + std::to_string(r) + " needs " +
          std::to_string(e.TotalWithWorkspace()) + " bytes (weights " + std::to_string(e.weights) +
          ", grads " + std::to_string(e.grads) + ", optimizer " + std::to_string(e.optimizer) +
          ", activations " + std::to_string(e.activations) + ", transient workspace " +
          std::to_string(e.workspace) + ") over the memory limit of " +
          std::to_string(opts_.memory_limit) + " bytes per rank (" +
          (opts_.memory_limit_source.empty() ? std::string("--memory-limit")
                                             : opts_.memory_limit_source) +
          ")");
    }
  }
  return Status::Ok();
}

namespace {

// What of a mixture of experts this runtime executes (runtime/model/moe_layer.h): its experts split
// over the tensor group (etp = t), spread over the data ranks by expert parallelism, a whole
// backward, on the CPU backends and CUDA (kernels/cuda/moe.cu).
Status CheckExecutesExperts(const ModelSpec& m, const ParallelConfig& c,
                            const std::string& backend) {
  if (!m.IsMoe()) return Status::Ok();
  if (c.moe_a2a_overlap) {
    return Status::Invalid(
        "plan: layout.moe_a2a_overlap: the combined 1F1B is planned but not "
        "executed by this runtime (use false)");
  }
  if (c.moe_shared_expert_overlap) {  // the runtime runs the shared expert on the one stream
    return Status::Invalid(
        "plan: layout.moe_shared_expert_overlap: the shared expert beside the dispatcher is "
        "planned but not executed by this runtime (use false)");
  }
  if (c.ExpertTp() != c.tp) {
    return Status::Invalid("plan: layout.etp: " + std::to_string(c.etp) +
                           " is planned but not executed by this runtime, which splits each "
                           "expert over the tensor group (use tp)");
  }
  if (SplitsBackward(c.schedule)) {
    return Status::Invalid("plan: layout.schedule: '" + std::string(ScheduleName(c.schedule)) +
                           "' splits the backward, which this runtime does not do for experts");
  }
  if (backend != "cpu" && backend != "cpu-guard" && backend != "cuda") {
    return Status::Invalid("--backend " + backend +
                           ": a mixture of experts runs on the cpu and cuda backends only (its "
                           "routing ops have no kernels there)");
  }
  return Status::Ok();
}

// Multi-token prediction (runtime/model/mtp.h) as the runtime executes it; the layout's own
// refusals (context parallelism, a split backward) are ParallelConfig::Validate's.
Status CheckExecutesPredictionDepths(const ModelSpec& m, const TrainOptions& opts) {
  if (m.mtp_layers == 0) return Status::Ok();
  if (!m.rotary) {
    return Status::Invalid(
        "plan.model.mtp_layers: needs rotary position embeddings (a position "
        "table on the head's stage is not executed)");
  }
  if (!(opts.mtp_loss_scale >= 0)) {
    return Status::Invalid("--mtp-loss-scaling-factor: " + std::to_string(opts.mtp_loss_scale) +
                           " is not a non-negative number");
  }
  return Status::Ok();
}

}  // namespace

Status Trainer::Setup(const PlanFile& plan, const TrainOptions& opts) {
  model_ = plan.model;
  cfg_ = plan.layout;
  opts_ = opts;
  PTDP_RETURN_IF_ERROR(model_.Validate("plan.model"));
  PTDP_RETURN_IF_ERROR(cfg_.Validate(model_).WithPrefix("plan: layout"));
  PTDP_RETURN_IF_ERROR(CheckExecutesExperts(model_, cfg_, opts.backend));
  PTDP_RETURN_IF_ERROR(CheckExecutesPredictionDepths(model_, opts));
  for (const auto& [flag, coeff] : {std::pair{"--moe-aux-loss-coeff", opts.moe_aux_loss_coeff},
                                    std::pair{"--moe-z-loss-coeff", opts.moe_z_loss_coeff}}) {
    if (coeff != 0 && (!model_.IsMoe() || !(coeff > 0))) {
      return Status::Invalid(
          std::string(flag) + ": " +
          (model_.IsMoe() ? "must be a number >= 0" : "the model has no mixture of experts"));
    }
  }
  if (opts.moe_load_balancing != "aux_loss" && opts.moe_load_balancing != "seq_aux_loss") {
    return Status::Invalid("--moe-router-load-balancing-type: '" + opts.moe_load_balancing +
                           "' is not aux_loss or seq_aux_loss (Megatron-LM's global_aux_loss, "
                           "sinkhorn and none are not run here)");
  }
  if (model_.layernorm_1p && model_.rmsnorm) {
    return Status::Invalid(
        "plan.model.layernorm_1p: with rmsnorm is planned but not executed by this runtime, whose "
        "LayerNorm1P is LayerNorm's");
  }
  if (cfg_.precision == Precision::kFp8) {
    return Status::Invalid(
        "plan: layout.precision: 'fp8' is planned but not executed by this runtime (use bf16)");
  }
  if (model_.IsMla() && model_.VHeadDim() > model_.QkHeadDim()) {
    return Status::Invalid("plan.model.mla_v_dim: " + std::to_string(model_.mla_v_dim) +
                           " is wider than a query/key head (head_dim + mla_rope_dim = " +
                           std::to_string(model_.QkHeadDim()) +
                           "), which this runtime's multi-latent attention pads the value to");
  }
  if (model_.IsMla() && SplitsBackward(cfg_.schedule)) {
    return Status::Invalid("plan: layout.schedule: '" + std::string(ScheduleName(cfg_.schedule)) +
                           "' splits the backward, which this runtime does not run with "
                           "multi-latent attention (model.mla_kv_lora)");
  }
  if (cfg_.Recomputes(kRecomputeMlp) && SplitsBackward(cfg_.schedule)) {
    return Status::Invalid(
        "plan: layout.recompute_modules: 'mlp' is not executed with the split backward of "
        "schedule '" +
        std::string(ScheduleName(cfg_.schedule)) + "' by this runtime");
  }
  if (cfg_.grad_reduce_bf16) {
    return Status::Invalid(
        "plan: layout.grad_reduce_bf16: planned but not executed by this runtime, which keeps "
        "fp32 main gradients (use false)");
  }
  if (cfg_.optimizer_state_bf16) {
    return Status::Invalid(
        "plan: layout.optimizer_state_bf16: planned but not executed by this runtime, which keeps "
        "fp32 master weights and Adam moments (use false)");
  }
  if (cfg_.optimizer_instances > 1) {
    return Status::Invalid(
        "plan: layout.optimizer_instances: planned but not executed by this runtime, whose "
        "distributed optimizer shards over the whole data-parallel group (use 1)");
  }
  if (cfg_.fsdp) {
    return Status::Invalid(
        "plan: layout.fsdp: planned but not executed by this runtime, which holds every weight of "
        "its stage whole (use false: the distributed optimizer shards the optimizer state)");
  }
  if (opts.overlap_param_gather && !cfg_.distributed_optimizer) {
    return Status::Invalid(
        "--overlap-param-gather: needs layout.distributed_optimizer (only its updated shards are "
        "gathered)");
  }
  if (cfg_.WorldSize() != world_->size()) {
    return Status::Invalid("plan: layout tp*cp*pp*dp = " + std::to_string(cfg_.tp) + "*" +
                           std::to_string(cfg_.cp) + "*" + std::to_string(cfg_.pp) + "*" +
                           std::to_string(cfg_.dp) + " = " + std::to_string(cfg_.WorldSize()) +
                           " ranks but the job has " + std::to_string(world_->size()) +
                           " (mpirun -np)");
  }
  PTDP_ASSIGN_OR_RETURN(RankGrid grid, RankGrid::Create(cfg_.tp, cfg_.WeightReplicas(), cfg_.pp));
  const int me = world_->rank();
  coord_ = grid.Coord(me);
  if (cfg_.precision == Precision::kFp16 && !cfg_.grad_accumulation_fusion) {
    return Status::Invalid(
        "plan: layout.grad_accumulation_fusion: fp16 without it keeps 16-bit gradients "
        "(core/ledger.h), but this runtime always keeps fp32 main gradients (set it to true)");
  }
  PTDP_ASSIGN_OR_RETURN(program_, TrainerProgram(plan));

  PTDP_RETURN_IF_ERROR(CheckMemoryLimit());
  return OpenData();
}

// Data: headers, sizes and every token's range, on every rank (each then reads its share). Each
// file is opened once for all the parts cut from it.
Status Trainer::OpenData() {
  const int64_t s = model_.seq_len, batch = cfg_.global_batch;
  PTDP_ASSIGN_OR_RETURN(const BlendSpec spec, ParseBlend(opts_.data, "--data"));
  DataSplit split;
  if (!opts_.split.empty()) {
    PTDP_ASSIGN_OR_RETURN(split, ParseSplit(opts_.split));
  }
  const auto& share = split.share;
  if (share[0] == 0) return Status::Invalid("--split " + split.text + ": no training share");
  if (share[1] > 0 && !opts_.eval_data.empty()) {
    return Status::Invalid("--eval-data: --split " + split.text +
                           " takes the validation data from --data already");
  }
  if (share[2] > 0 && !opts_.test_data.empty()) {
    return Status::Invalid("--test-data: --split " + split.text +
                           " takes the test data from --data already");
  }
  PTDP_ASSIGN_OR_RETURN(const TokenSet::Files files,
                        TokenSet::OpenFiles(spec, model_.vocab, "--data"));
  auto cut = [&](SplitPart part) -> Result<std::unique_ptr<TokenSet>> {
    PTDP_ASSIGN_OR_RETURN(TokenSet set,
                          TokenSet::Cut(spec, files, split, part, s, batch, "--data"));
    return std::make_unique<TokenSet>(std::move(set));
  };
  // Data of its own, whole.
  auto whole = [&](const std::vector<std::string>& words,
                   const std::string& flag) -> Result<std::unique_ptr<TokenSet>> {
    PTDP_ASSIGN_OR_RETURN(const BlendSpec own, ParseBlend(words, flag));
    PTDP_ASSIGN_OR_RETURN(const TokenSet::Files own_files,
                          TokenSet::OpenFiles(own, model_.vocab, flag));
    PTDP_ASSIGN_OR_RETURN(TokenSet set, TokenSet::Cut(own, own_files, DataSplit{},
                                                      SplitPart::kTrain, s, batch, flag));
    return std::make_unique<TokenSet>(std::move(set));
  };
  PTDP_ASSIGN_OR_RETURN(data_, cut(SplitPart::kTrain));
  if (share[1] > 0) {
    PTDP_ASSIGN_OR_RETURN(valid_, cut(SplitPart::kValid));
  } else if (!opts_.eval_data.empty()) {
    PTDP_ASSIGN_OR_RETURN(valid_, whole(opts_.eval_data, "--eval-data"));
  }
  if (share[2] > 0) {
    PTDP_ASSIGN_OR_RETURN(test_, cut(SplitPart::kTest));
  } else if (!opts_.test_data.empty()) {
    PTDP_ASSIGN_OR_RETURN(test_, whole(opts_.test_data, "--test-data"));
  }
  return Status::Ok();
}

std::string Trainer::DescribeData(SplitPart part) const {
  const TokenSet* set = part == SplitPart::kTrain   ? data_.get()
                        : part == SplitPart::kValid ? valid_.get()
                                                    : test_.get();
  return set == nullptr ? "" : set->Describe();
}

Status Trainer::Build(ParamInit init) {
  PTDP_ASSIGN_OR_RETURN(RankGrid grid, RankGrid::Create(cfg_.tp, cfg_.WeightReplicas(), cfg_.pp));
  const int me = world_->rank();
  // The device first: the cuda backend's communicators are ordered against its compute stream.
  PTDP_ASSIGN_OR_RETURN(dev_, CreateDevice(opts_.backend));
  if (opts_.op_times) dev_->EnableOpTimes();
  // Groups: every rank passes the same partitions, in the same order (so collectives, NCCL's
  // initialisation included, are submitted in the same order everywhere).
  auto split = [&](const std::vector<std::vector<int>>& groups) {
#if PTDP_HAVE_CUDA_BACKEND
    if (opts_.backend == "cuda") return CudaSplitComm(*world_, groups, dev_.get());
#endif
    return SplitComm(*world_, groups);
  };
  PTDP_ASSIGN_OR_RETURN(tp_, split(grid.AllTensorGroups()));
  PTDP_ASSIGN_OR_RETURN(dp_, split(grid.AllDataGroups()));
  PTDP_ASSIGN_OR_RETURN(pipe_, split(grid.AllPipelineGroups()));
  // A V carries one chunk's activations and the other's gradients between the same neighbours,
  // each in its own order: a second channel for the gradients (schedule/validate.cc checks the
  // order per channel), which an order-matching transport (NCCL) needs.
  if (VShaped(cfg_.schedule)) {
    PTDP_ASSIGN_OR_RETURN(pipe_grad_, split(grid.AllPipelineGroups()));
  }
  std::vector<std::vector<int>> emb_groups;
  if (InTiedEmbeddingGroup(model_, cfg_, 0)) {  // the head on another rank than the embedding
    for (const auto& g : grid.AllPipelineGroups()) emb_groups.push_back({g.front(), g.back()});
  }
  PTDP_ASSIGN_OR_RETURN(emb_, split(emb_groups));
  if (cfg_.cp > 1) {  // each data group's consecutive blocks of cp (tp-cp-dp-pp)
    std::vector<std::vector<int>> cp_groups;
    for (const auto& g : grid.AllDataGroups()) {
      for (size_t i = 0; i < g.size(); i += size_t(cfg_.cp)) {
        cp_groups.emplace_back(g.begin() + long(i), g.begin() + long(i) + cfg_.cp);
      }
    }
    PTDP_ASSIGN_OR_RETURN(cp_, split(cp_groups));
    PTDP_CHECK(cp_ != nullptr && cp_->rank() == ContextRank());
  }
  if (cfg_.ep > 1) {  // blocks of ep in each data group; every ep-th member
    std::vector<std::vector<int>> ep_groups, edp_groups;
    for (const auto& g : grid.AllDataGroups()) {
      for (size_t i = 0; i < g.size(); i += size_t(cfg_.ep)) {
        ep_groups.emplace_back(g.begin() + long(i), g.begin() + long(i) + cfg_.ep);
      }
      for (int r = 0; r < cfg_.ep; ++r) {
        edp_groups.emplace_back();
        for (size_t i = size_t(r); i < g.size(); i += size_t(cfg_.ep))
          edp_groups.back().push_back(g[i]);
      }
    }
    PTDP_ASSIGN_OR_RETURN(ep_, split(ep_groups));
    PTDP_ASSIGN_OR_RETURN(edp_, split(edp_groups));
    PTDP_CHECK(ep_ != nullptr && ep_->rank() == ExpertRank() && edp_ != nullptr);
  }
  if (tp_ == nullptr || dp_ == nullptr || pipe_ == nullptr) {
    return Status::Internal("rank " + std::to_string(me) + " is in no tensor/data/pipeline group");
  }
  PTDP_CHECK(tp_->rank() == coord_.tp && dp_->rank() == coord_.dp && pipe_->rank() == coord_.pp);

  GuardCommunicators();
  types_.act = ComputeDType(cfg_.precision);
  types_.wide = DType::kFp32;
  // The distributed optimizer shards the state over the data-parallel group, in its rank order
  // (docs/distributed_optimizer.md); with ep > 1 the experts' over the expert data-parallel group
  // (member dp / ep of its ExpertWeightReplicas).
  PTDP_CHECK(dp_->rank() == coord_.dp);
  OptimizerShard shard;
  if (cfg_.distributed_optimizer) {
    shard = {cfg_.WeightReplicas(), coord_.dp, 1, 0};
    if (cfg_.ep > 1) {
      shard.expert_count = cfg_.ExpertWeightReplicas();
      shard.expert_rank = coord_.dp / cfg_.ep;
      PTDP_CHECK(edp_->size() == shard.expert_count && edp_->rank() == shard.expert_rank);
    }
  }
  PTDP_ASSIGN_OR_RETURN(
      ParamStore ps, ParamStore::Create(dev_.get(), model_, cfg_, coord_.pp, coord_.tp, types_.act,
                                        init, shard, ExpertRank()));
  params_ = std::make_unique<ParamStore>(std::move(ps));
  std::vector<int> layers;  // this rank's, every chunk's
  for (int c = 0; c < cfg_.vp; ++c) {
    const LayerRange lr = ChunkLayers(model_, cfg_, coord_.pp, c);
    for (int l = lr.begin; l < lr.end; ++l) layers.push_back(l);
  }
  if (coord_.pp == HeadRank(cfg_)) {  // the prediction depths' layers: layers + d
    for (int d = 0; d < model_.mtp_layers; ++d) layers.push_back(model_.layers + d);
  }
  PTDP_ASSIGN_OR_RETURN(router_biases_,
                        RouterBiases::Create(dev_.get(), model_, layers, types_.wide));
  PTDP_ASSIGN_OR_RETURN(loss_sum_, Tensor::Make(dev_.get(), 1, DType::kFp64, MemTag::kWorkspace));
  PTDP_ASSIGN_OR_RETURN(
      mtp_loss_sum_, Tensor::Make(dev_.get(), model_.mtp_layers, DType::kFp64, MemTag::kWorkspace));
  PTDP_ASSIGN_OR_RETURN(scratch_scalar_,
                        Tensor::Make(dev_.get(), 1, DType::kFp64, MemTag::kWorkspace));
  scaler_ = std::make_unique<LossScaler>(opts_.initial_loss_scale, opts_.loss_scale_window,
                                         cfg_.precision == Precision::kFp16);
  const int t = cfg_.tp;
  dims_ = LayerDimsOf(model_, t, coord_.tp);
  dims_.b = cfg_.mbs;
  dims_.s = model_.seq_len;
  if (cfg_.sequence_parallel) {
    dims_.sp = t;
    dims_.sp_rank = coord_.tp;
  }
  dims_.cp = cfg_.cp;
  dims_.cp_rank = ContextRank();

  WireLayers();
  PlanGradReduce();
  timeline_.source = "runtime";
  timeline_.pp = cfg_.pp;
  timeline_.vp = cfg_.vp;
  timeline_.microbatches = cfg_.Microbatches();
  return Status::Ok();
}

// On the guard device every communicator opens the device's pages for its calls (MPI reads and
// writes tensors, and may progress a pending send inside any call, the world's included).
void Trainer::GuardCommunicators() {
  auto* guard = dynamic_cast<GuardDevice*>(dev_.get());
  if (guard == nullptr) return;
  tp_ = GuardCommunicator(std::move(tp_), guard->state());
  dp_ = GuardCommunicator(std::move(dp_), guard->state());
  pipe_ = GuardCommunicator(std::move(pipe_), guard->state());
  if (pipe_grad_ != nullptr) pipe_grad_ = GuardCommunicator(std::move(pipe_grad_), guard->state());
  emb_ = GuardCommunicator(std::move(emb_), guard->state());
  if (cp_ != nullptr) cp_ = GuardCommunicator(std::move(cp_), guard->state());
  if (ep_ != nullptr) ep_ = GuardCommunicator(std::move(ep_), guard->state());
  if (edp_ != nullptr) edp_ = GuardCommunicator(std::move(edp_), guard->state());
  guarded_world_ = GuardCommunicatorView(world_, guard->state());
  world_ = guarded_world_.get();
}

void Trainer::WireLayers() {
  chunk_layers_.assign(static_cast<size_t>(cfg_.vp), {});
  weights_.assign(static_cast<size_t>(cfg_.vp), {});
  grads_.assign(static_cast<size_t>(cfg_.vp), {});
  for (int c = 0; c < cfg_.vp; ++c) {
    const LayerRange lr = ChunkLayers(model_, cfg_, coord_.pp, c);
    for (int l = lr.begin; l < lr.end; ++l) {
      chunk_layers_[c].push_back(l);
      weights_[c].push_back(LayerWeightsOf(*params_, c, l));
      weights_[c].back().expert_bias = router_biases_.bias(l);
      weights_[c].back().expert_tokens = router_biases_.tokens(l);
      grads_[c].push_back(LayerGradsOf(*params_, c, l));
    }
  }
  const int head_chunk = LocalChunkOfStage(cfg_.VirtualStages() - 1);
  if (model_.mtp_layers > 0 && head_chunk >= 0) WirePredictionDepths(head_chunk);
}

Result<StepMetrics> Trainer::Step(int64_t step) {
  PTDP_RETURN_IF_ERROR(params_->ZeroGrads());
  PTDP_RETURN_IF_ERROR(dev_->ops()->Fill(loss_sum_.ref(), 0.0));
  if (model_.mtp_layers > 0) PTDP_RETURN_IF_ERROR(dev_->ops()->Fill(mtp_loss_sum_.ref(), 0.0));
  moe_aux_sum_ = moe_z_sum_ = moe_routed_copies_ = moe_dropped_copies_ = 0;
  events_.clear();
  activation_bytes_.clear();
  grad_reduce_bytes_.clear();
  grad_early_starts_.clear();
  PTDP_RETURN_IF_ERROR(dev_->Synchronize());
  PTDP_RETURN_IF_ERROR(dev_->StartTimer());
  PTDP_RETURN_IF_ERROR(RunProgram(step));
  // The expert biases move at the step boundary, as Megatron-Core's finalize_model_grads moves
  // them (a skipped fp16 step included).
  PTDP_RETURN_IF_ERROR(router_biases_.Update(dp_.get()));
  PTDP_ASSIGN_OR_RETURN(const double iter_s, dev_->ElapsedSeconds());
  // Only tensor rank 0 of the head's rank reports its loss (every tensor rank holds the same).
  const bool reports = coord_.pp == HeadRank(cfg_) && coord_.tp == 0;
  double loss_sum = 0;
  dev_->Copy(&loss_sum, loss_sum_.data(), sizeof(double));
  std::vector<double> mine = {reports ? loss_sum : 0.0,
                              iter_s,
                              static_cast<double>(dev_->stats().peak_total),
                              moe_aux_sum_,
                              moe_z_sum_,
                              moe_routed_copies_,
                              moe_dropped_copies_};
  const size_t fixed = mine.size(), depths = static_cast<size_t>(model_.mtp_layers);
  const size_t stride = fixed + depths;
  mine.resize(stride, 0.0);
  if (reports && depths > 0) {
    dev_->Copy(&mine[fixed], mtp_loss_sum_.data(), depths * sizeof(double));
  }
  PTDP_ASSIGN_OR_RETURN(std::vector<double> all, AllGatherDoubles(*world_, mine));
  StepMetrics m;
  m.step = step;
  m.mtp_losses.assign(depths, 0.0);
  double loss = 0, slowest = 0, peak = 0, aux = 0, z = 0, routed = 0, dropped = 0;
  for (size_t r = 0; r < all.size(); r += stride) {
    loss += all[r];
    slowest = std::max(slowest, all[r + 1]);
    peak = std::max(peak, all[r + 2]);
    aux += all[r + 3];
    z += all[r + 4];
    routed += all[r + 5];
    dropped += all[r + 6];
    for (size_t d = 0; d < depths; ++d) m.mtp_losses[d] += all[r + fixed + d];
  }
  m.moe_dropped_share = routed > 0 ? dropped / routed : 0.0;
  // Each depth's mean over its positions with a target: s - k of each sequence.
  for (size_t d = 0; d < depths; ++d) {
    m.mtp_losses[d] /= double(cfg_.global_batch) * double(model_.seq_len - int64_t(d) - 1);
  }
  // Averaged over the microbatches and, as Megatron-Core's track_moe_metrics prints them, over the
  // mixture layers (the prediction depths' among them).
  int moe_layers = 0;
  for (int l = 0; l < model_.layers + model_.mtp_layers; ++l) {
    moe_layers += model_.IsMoeLayer(l) ? 1 : 0;
  }
  const double per = double(cfg_.mbs) / double(cfg_.global_batch) / std::max(1, moe_layers);
  m.moe_aux_loss = aux * per;
  m.moe_z_loss = z * per;
  const double tokens = double(cfg_.global_batch) * double(model_.seq_len);
  m.loss = loss / tokens;
  m.grad_norm = last_grad_norm_;
  m.lr = last_lr_;
  m.loss_scale = last_loss_scale_;
  m.skipped_steps = scaler_->skipped_steps();
  m.iteration_s = slowest;
  m.tokens_per_s = tokens / slowest;
  m.tflops_per_gpu = HardwareIterationFlops(model_, cfg_) / slowest / world_->size() / 1e12;
  m.peak_memory_bytes = static_cast<Bytes>(peak);
  if (!warmed_up_) {
    warmed_up_ = true;
    warmup_step_ = step;
    AddToWindow(slowest, &warmup_window_);
  } else {
    if (window_first_step_ == 0) window_first_step_ = step;
    AddToWindow(slowest, &window_);
  }
  return m;
}

}  // namespace ptdp::runtime
