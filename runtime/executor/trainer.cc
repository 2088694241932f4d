#include "runtime/executor/trainer.h"

#include <chrono>
#include <cmath>
#include <fstream>

#include "core/shapes.h"
#include "kernels/reference/ops.h"
#include "runtime/comm/agree.h"
#include "runtime/comm/world.h"
#include "schedule/schedule.h"

namespace ptdp::runtime {

namespace k = ::ptdp::kernels;
using Clock = std::chrono::steady_clock;

// Everything one (microbatch, chunk) keeps between its instructions.
struct Trainer::MbState {
  std::vector<LayerStash<float>> layers;
  HeadStash<float> head;
  Buffer<float> out;    // forward output awaiting kSendAct
  Buffer<float> dout;   // received output gradient (kRecvGrad)
  Buffer<float> dgrad;  // input gradient awaiting kSendGrad
  std::vector<int32_t> inputs, targets;
};

// A posted send and the buffer it reads from (kept alive until the send completes).
struct Trainer::Pending {
  std::unique_ptr<CommRequest> req;
  Buffer<float> buf;
};

Trainer::~Trainer() {
  // Outstanding sends must finish before their buffers go.
  for (auto& p : pending_) (void)p->req->Wait();
}

MemoryEstimate EstimateRankMemory(const ModelSpec& m, const ParallelConfig& c, const Program& p,
                                  int pp_rank) {
  MemoryEstimate e;
  const int64_t elems = StageParameterElements(m, c, pp_rank);
  e.weights = 4 * elems;
  e.grads = 4 * elems;
  e.optimizer = 8 * elems;
  const bool recompute = c.recompute == Recompute::kFull;
  // Dropout masks are regenerated from the counter, never stored: count without them.
  const Bytes layer_full = ActivationBytes(LayerActivations(m, c, /*dropout=*/false), 4);
  const Bytes layer_kept = recompute ? ActivationBytes(LayerCheckpoint(m, c), 4) : layer_full;
  // Walk the rank's compute order: a (microbatch, chunk) holds its chunk's stash from its forward
  // to its backward; the peak of the sum is what the rank keeps at once.
  Bytes live = 0, peak = 0;
  for (const Instr& in : p.ranks[static_cast<size_t>(pp_rank)].instrs) {
    if (in.op != Op::kForward && in.op != Op::kBackward) continue;
    Bytes stash = ChunkLayers(m, c, pp_rank, in.chunk).size() * layer_kept;
    if (HoldsHead(c, pp_rank, in.chunk)) stash += ActivationBytes(HeadActivations(m, c), 4);
    live += in.op == Op::kForward ? stash : -stash;
    peak = std::max(peak, live);
  }
  // With recomputation one layer's full activations are live again during its backward.
  e.activations = peak + (recompute ? layer_full : 0);
  return e;
}

Result<std::unique_ptr<Trainer>> Trainer::Create(Communicator* world, const PlanFile& plan,
                                                 const TrainOptions& opts) {
  std::unique_ptr<Trainer> t(new Trainer());
  t->world_ = world;
  Status local = t->Setup(plan, opts);
  PTDP_RETURN_IF_ERROR(AgreeStatus(*world, local));
  PTDP_RETURN_IF_ERROR(AgreeStatus(*world, t->Build()));
  return t;
}

Status Trainer::Setup(const PlanFile& plan, const TrainOptions& opts) {
  model_ = plan.model;
  cfg_ = plan.layout;
  opts_ = opts;
  PTDP_RETURN_IF_ERROR(model_.Validate().WithPrefix("plan: model"));
  PTDP_RETURN_IF_ERROR(cfg_.Validate(model_).WithPrefix("plan: layout"));
  // Options the planner models but this runtime does not execute yet.
  if (cfg_.recompute == Recompute::kSelective) {
    return Status::Invalid(
        "plan: layout.recompute: 'selective' is planned but not executed by this runtime "
        "(use none or full)");
  }
  if (cfg_.sequence_parallel) {
    return Status::Invalid(
        "plan: layout.sequence_parallel: planned but not executed by this runtime (use false)");
  }
  if (cfg_.distributed_optimizer) {
    return Status::Invalid(
        "plan: layout.distributed_optimizer: planned but not executed by this runtime (use false)");
  }
  if (cfg_.WorldSize() != world_->size()) {
    return Status::Invalid("plan: layout tp*pp*dp = " + std::to_string(cfg_.tp) + "*" +
                           std::to_string(cfg_.pp) + "*" + std::to_string(cfg_.dp) + " = " +
                           std::to_string(cfg_.WorldSize()) + " ranks but the job has " +
                           std::to_string(world_->size()) + " (mpirun -np)");
  }
  PTDP_ASSIGN_OR_RETURN(RankGrid grid, RankGrid::Create(cfg_.tp, cfg_.dp, cfg_.pp));
  const int me = world_->rank();
  coord_ = grid.Coord(me);
  // The plan's Program is what runs, once shown to be the one its layout gives.
  if (cfg_.precision != Precision::kFp32) {
    return Status::Invalid("plan: layout.precision: '" + std::string(PrecisionName(cfg_.precision)) +
                           "' is not executed by this runtime yet (use fp32)");
  }
  if (!plan.has_program) return Status::Invalid("plan: program: missing (re-run ptdp plan)");
  PTDP_RETURN_IF_ERROR(schedule::CheckProgramMatchesLayout(plan.program, model_, cfg_)
                           .WithPrefix("plan: program"));
  program_ = plan.program;
  PTDP_RETURN_IF_ERROR(schedule::Validate(program_));

  // Memory: the shape-based estimate of every pipeline rank against the limit.
  if (opts.memory_limit > 0) {
    for (int r = 0; r < cfg_.pp; ++r) {
      const MemoryEstimate e = EstimateRankMemory(model_, cfg_, program_, r);
      if (e.Total() > opts.memory_limit) {
        return Status::DoesNotFit("model does not fit: pipeline rank " + std::to_string(r) +
                                  " needs " + std::to_string(e.Total()) + " bytes (weights " +
                                  std::to_string(e.weights) + ", grads " + std::to_string(e.grads) +
                                  ", optimizer " + std::to_string(e.optimizer) + ", activations " +
                                  std::to_string(e.activations) + ") over the memory limit of " +
                                  std::to_string(opts.memory_limit) + " bytes per rank (" +
                                  (opts.memory_limit_source.empty() ? std::string("--memory-limit")
                                                                    : opts.memory_limit_source) +
                                  ")");
      }
    }
  }
  // Data: header, size and every token's range, on every rank (each then reads its share).
  {
    auto tf = TokenFile::Open(opts.data_path, model_.vocab);
    if (!tf.ok()) return tf.status();
    if (tf->count() < model_.seq_len + 2) {
      return Status::Invalid(
          "data file '" + opts.data_path + "' has " + std::to_string(tf->count()) +
          " tokens, fewer than seq_len + 2 = " + std::to_string(model_.seq_len + 2));
    }
    data_ = std::make_unique<TokenFile>(std::move(tf).value());
  }
  return Status::Ok();
}

}  // namespace ptdp::runtime

namespace ptdp::runtime {

Status Trainer::Build() {
  PTDP_ASSIGN_OR_RETURN(RankGrid grid, RankGrid::Create(cfg_.tp, cfg_.dp, cfg_.pp));
  const int me = world_->rank();
  // Groups: every rank passes the same partitions, in the same order.
  PTDP_ASSIGN_OR_RETURN(tp_, SplitComm(*world_, grid.AllTensorGroups()));
  PTDP_ASSIGN_OR_RETURN(dp_, SplitComm(*world_, grid.AllDataGroups()));
  PTDP_ASSIGN_OR_RETURN(pipe_, SplitComm(*world_, grid.AllPipelineGroups()));
  std::vector<std::vector<int>> emb_groups;
  if (cfg_.pp > 1) {
    for (const auto& g : grid.AllPipelineGroups()) emb_groups.push_back({g.front(), g.back()});
  }
  PTDP_ASSIGN_OR_RETURN(emb_, SplitComm(*world_, emb_groups));
  if (tp_ == nullptr || dp_ == nullptr || pipe_ == nullptr) {
    return Status::Internal("rank " + std::to_string(me) + " is in no tensor/data/pipeline group");
  }
  PTDP_CHECK(tp_->rank() == coord_.tp && dp_->rank() == coord_.dp && pipe_->rank() == coord_.pp);

  dev_ = std::make_unique<CpuDevice>();
  PTDP_ASSIGN_OR_RETURN(ParamStore ps,
                        ParamStore::Create(dev_.get(), model_, cfg_, coord_.pp, coord_.tp));
  params_ = std::make_unique<ParamStore>(std::move(ps));

  const int t = cfg_.tp;
  dims_.b = cfg_.mbs;
  dims_.s = model_.seq_len;
  dims_.h = model_.hidden;
  dims_.heads = model_.heads;
  dims_.heads_local = model_.heads / t;
  dims_.head0 = int64_t(coord_.tp) * dims_.heads_local;
  dims_.f_local = model_.FfnHidden() / t;
  dims_.v_local = PaddedVocab(model_, t) / t;
  dims_.vocab_begin = int64_t(coord_.tp) * dims_.v_local;
  dims_.vocab_real = model_.vocab;

  chunk_layers_.assign(static_cast<size_t>(cfg_.vp), {});
  weights_.assign(static_cast<size_t>(cfg_.vp), {});
  grads_.assign(static_cast<size_t>(cfg_.vp), {});
  for (int c = 0; c < cfg_.vp; ++c) {
    const LayerRange lr = ChunkLayers(model_, cfg_, coord_.pp, c);
    for (int l = lr.begin; l < lr.end; ++l) {
      const std::string p = "layer" + std::to_string(l) + ".";
      auto idx = [&](const char* n) {
        const int i = params_->Find(c, p + n);
        PTDP_CHECK_MSG(i >= 0, p + n);
        return i;
      };
      ParamStore& s = *params_;
      LayerWeights<float> w{s.param(idx("ln1.weight")),       s.param(idx("ln1.bias")),
                            s.param(idx("attn.qkv.weight")),  s.param(idx("attn.qkv.bias")),
                            s.param(idx("attn.proj.weight")), s.param(idx("attn.proj.bias")),
                            s.param(idx("ln2.weight")),       s.param(idx("ln2.bias")),
                            s.param(idx("mlp.fc1.weight")),   s.param(idx("mlp.fc1.bias")),
                            s.param(idx("mlp.fc2.weight")),   s.param(idx("mlp.fc2.bias"))};
      LayerGrads<float> g{s.grad(idx("ln1.weight")),       s.grad(idx("ln1.bias")),
                          s.grad(idx("attn.qkv.weight")),  s.grad(idx("attn.qkv.bias")),
                          s.grad(idx("attn.proj.weight")), s.grad(idx("attn.proj.bias")),
                          s.grad(idx("ln2.weight")),       s.grad(idx("ln2.bias")),
                          s.grad(idx("mlp.fc1.weight")),   s.grad(idx("mlp.fc1.bias")),
                          s.grad(idx("mlp.fc2.weight")),   s.grad(idx("mlp.fc2.bias"))};
      chunk_layers_[c].push_back(l);
      weights_[c].push_back(w);
      grads_[c].push_back(g);
    }
  }
  timeline_.source = "runtime";
  timeline_.pp = cfg_.pp;
  timeline_.vp = cfg_.vp;
  timeline_.microbatches = cfg_.Microbatches();
  return Status::Ok();
}

DropoutCtx Trainer::Dropout(int mb, int64_t step) const {
  DropoutCtx d;
  d.p = model_.dropout;
  d.step = step;
  d.seq0 = int64_t(coord_.dp) * (cfg_.global_batch / cfg_.dp) + int64_t(mb) * cfg_.mbs;
  return d;
}

Status Trainer::LoadMicrobatch(int mb, int64_t step, std::vector<int32_t>* inputs,
                               std::vector<int32_t>* targets) {
  const int64_t s = model_.seq_len, b = cfg_.mbs;
  const int64_t seq0 = Dropout(mb, step).seq0;
  std::vector<int32_t> seq(static_cast<size_t>(s + 1));
  if (inputs) inputs->resize(static_cast<size_t>(b * s));
  if (targets) targets->resize(static_cast<size_t>(b * s));
  for (int64_t i = 0; i < b; ++i) {
    const int64_t start =
        SequenceStart(opts_.data_seed, step - 1, cfg_.global_batch, seq0 + i, data_->count(), s);
    PTDP_RETURN_IF_ERROR(data_->Read(start, s + 1, seq.data()));
    for (int64_t j = 0; j < s; ++j) {
      if (inputs) (*inputs)[static_cast<size_t>(i * s + j)] = seq[static_cast<size_t>(j)];
      if (targets) (*targets)[static_cast<size_t>(i * s + j)] = seq[static_cast<size_t>(j + 1)];
    }
  }
  return Status::Ok();
}

Status Trainer::Forward(int mb, int chunk, int64_t step) {
  auto& slot = live_[Key(mb, chunk)];
  if (!slot) slot = std::make_unique<MbState>();
  MbState& st = *slot;
  const int vs = VirtualStage(cfg_, coord_.pp, chunk);
  const bool first = vs == 0, last = vs == cfg_.VirtualStages() - 1;
  const int nl = static_cast<int>(chunk_layers_[chunk].size());
  const int64_t nh = dims_.N() * dims_.h;
  const DropoutCtx drop = Dropout(mb, step);
  st.layers.resize(static_cast<size_t>(nl));
  if (first) {
    PTDP_RETURN_IF_ERROR(LoadMicrobatch(mb, step, &st.inputs, nullptr));
    PTDP_RETURN_IF_ERROR(AllocLayerInput(dev_.get(), dims_, &st.layers[0]));
    const int wte = params_->Find(0, "embedding.word"),
              wpe = params_->Find(0, "embedding.position");
    PTDP_RETURN_IF_ERROR(EmbeddingForwardTp(tp_.get(), dims_, params_->param(wte),
                                            params_->param(wpe), st.inputs.data(), drop,
                                            st.layers[0].x.data()));
  } else if (st.layers[0].x.empty()) {
    return Status::Internal("forward of (" + std::to_string(mb) + ", " + std::to_string(chunk) +
                            ") before its input arrived");
  }
  const bool recompute = cfg_.recompute == Recompute::kFull;
  for (int li = 0; li < nl; ++li) {
    float* y = nullptr;
    if (li + 1 < nl) {
      PTDP_RETURN_IF_ERROR(AllocLayerInput(dev_.get(), dims_, &st.layers[li + 1]));
      y = st.layers[li + 1].x.data();
    } else if (last) {
      PTDP_ASSIGN_OR_RETURN(st.head.x, Buffer<float>::Make(dev_.get(), nh, MemTag::kActivations));
      y = st.head.x.data();
    } else {
      PTDP_ASSIGN_OR_RETURN(st.out, Buffer<float>::Make(dev_.get(), nh, MemTag::kWorkspace));
      y = st.out.data();
    }
    PTDP_RETURN_IF_ERROR(LayerForward(dev_.get(), tp_.get(), dims_, weights_[chunk][li], drop,
                                      chunk_layers_[chunk][li], &st.layers[li], y));
    if (recompute) DropLayerActivations(&st.layers[li]);  // keep only the layer's input
  }
  if (last) {
    PTDP_RETURN_IF_ERROR(LoadMicrobatch(mb, step, nullptr, &st.targets));
    const int lw = params_->Find(chunk, "final_ln.weight"),
              lb = params_->Find(chunk, "final_ln.bias");
    PTDP_RETURN_IF_ERROR(HeadForward(dev_.get(), tp_.get(), dims_, params_->param(lw),
                                     params_->param(lb), params_->param(OutputIndex(chunk)),
                                     st.targets.data(), &st.head, &loss_sum_));
  }
  return Status::Ok();
}

int Trainer::OutputIndex(int chunk) const {
  for (const char* n : {"output.weight", "output.word_copy", "embedding.word"}) {
    const int i = params_->Find(chunk, n);
    if (i >= 0) return i;
  }
  PTDP_CHECK_MSG(false, "the last chunk holds no output matrix");
  return -1;
}

Status Trainer::Backward(int mb, int chunk, bool recompute, int64_t step) {
  auto it = live_.find(Key(mb, chunk));
  if (it == live_.end()) {
    return Status::Internal("backward of (" + std::to_string(mb) + ", " + std::to_string(chunk) +
                            ") without its forward");
  }
  MbState& st = *it->second;
  const int vs = VirtualStage(cfg_, coord_.pp, chunk);
  const bool first = vs == 0, last = vs == cfg_.VirtualStages() - 1;
  const int nl = static_cast<int>(chunk_layers_[chunk].size());
  const int64_t nh = dims_.N() * dims_.h;
  const DropoutCtx drop = Dropout(mb, step);
  Buffer<float> dy;
  if (last) {
    PTDP_ASSIGN_OR_RETURN(dy, Buffer<float>::Make(dev_.get(), nh, MemTag::kWorkspace));
    const int lw = params_->Find(chunk, "final_ln.weight"),
              lb = params_->Find(chunk, "final_ln.bias");
    const int wo = OutputIndex(chunk);
    const double dloss = 1.0 / (double(cfg_.global_batch) * double(model_.seq_len));
    PTDP_RETURN_IF_ERROR(HeadBackward(
        dev_.get(), tp_.get(), dims_, params_->param(lw), params_->param(wo), params_->grad(lw),
        params_->grad(lb), params_->grad(wo), st.targets.data(), dloss, &st.head, dy.data()));
  } else {
    if (st.dout.empty()) return Status::Internal("backward before its output gradient arrived");
    dy = std::move(st.dout);
  }
  for (int li = nl - 1; li >= 0; --li) {
    if (recompute) {
      PTDP_ASSIGN_OR_RETURN(Buffer<float> y,
                            Buffer<float>::Make(dev_.get(), nh, MemTag::kWorkspace));
      PTDP_RETURN_IF_ERROR(LayerForward(dev_.get(), tp_.get(), dims_, weights_[chunk][li], drop,
                                        chunk_layers_[chunk][li], &st.layers[li], y.data()));
    }
    PTDP_ASSIGN_OR_RETURN(Buffer<float> dx,
                          Buffer<float>::Make(dev_.get(), nh, MemTag::kWorkspace));
    PTDP_RETURN_IF_ERROR(LayerBackward(dev_.get(), tp_.get(), dims_, weights_[chunk][li],
                                       grads_[chunk][li], drop, chunk_layers_[chunk][li],
                                       &st.layers[li], dy.data(), dx.data()));
    st.layers[li].x.Reset();
    dy = std::move(dx);
  }
  if (first) {
    const int wte = params_->Find(0, "embedding.word"),
              wpe = params_->Find(0, "embedding.position");
    PTDP_RETURN_IF_ERROR(EmbeddingBackwardTp(dev_.get(), dims_, params_->grad(wte),
                                             params_->grad(wpe), st.inputs.data(), drop,
                                             dy.data()));
    live_.erase(it);
  } else {
    st.dgrad = std::move(dy);  // kSendGrad follows
  }
  return Status::Ok();
}

}  // namespace ptdp::runtime

namespace ptdp::runtime {

Status Trainer::RecvBoundary(const Instr& in, float* full) {
  const int64_t n = dims_.N() * dims_.h;
  const bool sg = cfg_.scatter_gather && cfg_.tp > 1;
  const int64_t count = sg ? n / cfg_.tp : n;
  if (in.bytes != count * 4) {
    return Status::Internal("program message of " + std::to_string(in.bytes) +
                            " bytes, runtime moves " + std::to_string(count * 4));
  }
  const int tag = static_cast<int>(schedule::MessageKey(program_, coord_.pp, in));
  float* mine = sg ? full + int64_t(coord_.tp) * count : full;
  PTDP_RETURN_IF_ERROR(pipe_->Recv(mine, count, DType::kFp32, in.peer, tag));
  if (sg) PTDP_RETURN_IF_ERROR(tp_->AllGather(mine, full, count, DType::kFp32));
  return Status::Ok();
}

Status Trainer::SendBoundary(const Instr& in, Buffer<float> buf) {
  const int64_t n = dims_.N() * dims_.h;
  PTDP_CHECK(buf.size() == n);
  const bool sg = cfg_.scatter_gather && cfg_.tp > 1;
  const int64_t count = sg ? n / cfg_.tp : n;
  const int tag = static_cast<int>(schedule::MessageKey(program_, coord_.pp, in));
  const float* mine = sg ? buf.data() + int64_t(coord_.tp) * count : buf.data();
  auto p = std::make_unique<Pending>();
  PTDP_ASSIGN_OR_RETURN(p->req, pipe_->ISend(mine, count, DType::kFp32, in.peer, tag));
  p->buf = std::move(buf);
  pending_.push_back(std::move(p));
  return Status::Ok();
}

Status Trainer::PollSends() {
  for (size_t i = 0; i < pending_.size();) {
    PTDP_ASSIGN_OR_RETURN(bool done, pending_[i]->req->Test());
    if (done) {
      pending_.erase(pending_.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      ++i;
    }
  }
  return Status::Ok();
}

Status Trainer::WaitSends() {
  for (auto& p : pending_) PTDP_RETURN_IF_ERROR(p->req->Wait());
  pending_.clear();
  return Status::Ok();
}

Status Trainer::Execute(const Instr& in, int64_t step) {
  switch (in.op) {
    case Op::kRecvAct: {
      auto& slot = live_[Key(in.microbatch, in.chunk)];
      if (!slot) slot = std::make_unique<MbState>();
      slot->layers.resize(chunk_layers_[in.chunk].size());
      PTDP_RETURN_IF_ERROR(AllocLayerInput(dev_.get(), dims_, &slot->layers[0]));
      return RecvBoundary(in, slot->layers[0].x.data());
    }
    case Op::kForward:
      return Forward(in.microbatch, in.chunk, step);
    case Op::kSendAct: {
      auto it = live_.find(Key(in.microbatch, in.chunk));
      if (it == live_.end() || it->second->out.empty()) {
        return Status::Internal("send_act with no forward output");
      }
      return SendBoundary(in, std::move(it->second->out));
    }
    case Op::kRecvGrad: {
      auto it = live_.find(Key(in.microbatch, in.chunk));
      if (it == live_.end()) return Status::Internal("recv_grad for a microbatch with no forward");
      PTDP_ASSIGN_OR_RETURN(it->second->dout, Buffer<float>::Make(dev_.get(), dims_.N() * dims_.h,
                                                                  MemTag::kWorkspace));
      return RecvBoundary(in, it->second->dout.data());
    }
    case Op::kBackward:
      return Backward(in.microbatch, in.chunk, in.recompute, step);
    case Op::kSendGrad: {
      auto it = live_.find(Key(in.microbatch, in.chunk));
      if (it == live_.end() || it->second->dgrad.empty()) {
        return Status::Internal("send_grad with no input gradient");
      }
      Buffer<float> g = std::move(it->second->dgrad);
      live_.erase(it);
      return SendBoundary(in, std::move(g));
    }
    case Op::kReduceGrads:
      return ReduceGrads();
    case Op::kOptimizerStep:
      return OptimizerStep(step, &last_grad_norm_, &last_lr_);
  }
  return Status::Internal("unknown instruction");
}

Status Trainer::ReduceGrads() {
  PTDP_RETURN_IF_ERROR(WaitSends());
  // The tied word embedding: its first-stage and last-stage copies get the sum of both gradients.
  if (emb_ != nullptr && model_.tied_embeddings) {
    int i = params_->Find(0, "embedding.word");
    if (i < 0) i = params_->Find(cfg_.vp - 1, "output.word_copy");
    PTDP_CHECK(i >= 0);
    PTDP_RETURN_IF_ERROR(emb_->AllReduceSum(
        params_->grad(i), params_->entries()[i].spec.LocalElements(), DType::kFp32));
  }
  // Data parallelism: sum (the loss is already normalised by the global batch) in buckets over the
  // flat gradient arena.
  if (dp_->size() > 1) {
    const int64_t total = params_->size(), bucket = std::max<int64_t>(1, opts_.bucket_elements);
    for (int64_t off = 0; off < total; off += bucket) {
      PTDP_RETURN_IF_ERROR(dp_->AllReduceSum(params_->all_grads() + off,
                                             std::min(bucket, total - off), DType::kFp32));
    }
  }
  return Status::Ok();
}

Status Trainer::OptimizerStep(int64_t step, double* grad_norm, double* lr) {
  // Global norm: a tensor counts once. Tensor-replicated ones on tensor rank 0 only, the tied copy
  // never, and (gradients being equal after the all-reduce) data rank 0 only.
  double local = 0;
  if (coord_.dp == 0) {
    for (size_t i = 0; i < params_->entries().size(); ++i) {
      const ParamTensor& p = params_->entries()[i].spec;
      if (p.tied_copy) continue;
      if (p.sharding == Sharding::kReplicated && coord_.tp != 0) continue;
      local += k::SumSquares(params_->grad(static_cast<int>(i)), p.LocalElements());
    }
  }
  PTDP_ASSIGN_OR_RETURN(std::vector<double> all, AllGatherDoubles(*world_, {local}));
  double total = 0;
  for (double v : all) total += v;  // rank order: identical on every rank
  *grad_norm = std::sqrt(total);
  *lr = LearningRate(opts_.optim, step);
  const double coef = ClipCoefficient(opts_.optim, *grad_norm);
  const OptimizerConfig& o = opts_.optim;
  for (size_t i = 0; i < params_->entries().size(); ++i) {
    const ParamTensor& p = params_->entries()[i].spec;
    const int ii = static_cast<int>(i);
    const int64_t n = p.LocalElements();
    float* g = params_->grad(ii);
    if (coef != 1.0) {
      for (int64_t j = 0; j < n; ++j) g[j] = static_cast<float>(g[j] * coef);
    }
    const double wd = p.global_shape.size() == 2 ? o.weight_decay : 0.0;
    k::AdamWUpdate(params_->param(ii), g, params_->adam_m(ii), params_->adam_v(ii), n, *lr, o.beta1,
                   o.beta2, o.eps, wd, step);
  }
  return Status::Ok();
}

Result<StepMetrics> Trainer::Step(int64_t step) {
  params_->ZeroGrads();
  loss_sum_ = 0;
  events_.clear();
  activation_bytes_.clear();
  const auto t0 = Clock::now();
  const auto ns = [&t0](Clock::time_point t) {
    return static_cast<Nanoseconds>(
        std::chrono::duration_cast<std::chrono::nanoseconds>(t - t0).count());
  };
  const std::vector<Instr>& instrs = program_.ranks[static_cast<size_t>(coord_.pp)].instrs;
  std::vector<Instr> executed;
  executed.reserve(instrs.size());
  for (size_t i = 0; i < instrs.size(); ++i) {
    const Instr& in = instrs[i];
    const auto a = Clock::now();
    Status st = Execute(in, step);
    if (!st.ok()) {
      return st.WithPrefix("rank " + std::to_string(world_->rank()) + ", step " +
                           std::to_string(step) + ", instruction " + std::to_string(i) + " (" +
                           InstrToText(in) + ")");
    }
    const auto b = Clock::now();
    events_.push_back(TimelineEvent{coord_.pp, StreamOf(in.op), in, ns(a), ns(b)});
    activation_bytes_.push_back(dev_->stats().current[static_cast<int>(MemTag::kActivations)]);
    executed.push_back(in);
    PTDP_RETURN_IF_ERROR(PollSends());
  }
  if (executed != instrs) return Status::Internal("executed order differs from the Program");
  if (!live_.empty()) {
    return Status::Internal(std::to_string(live_.size()) +
                            " microbatch states left at the end of the iteration");
  }
  const double iter_s = std::chrono::duration<double>(Clock::now() - t0).count();
  // Only tensor rank 0 of a last stage reports its loss (every tensor rank holds the same).
  const bool reports = coord_.pp == cfg_.pp - 1 && coord_.tp == 0;
  PTDP_ASSIGN_OR_RETURN(std::vector<double> all,
                        AllGatherDoubles(*world_, {reports ? loss_sum_ : 0.0, iter_s,
                                                   static_cast<double>(dev_->stats().peak_total)}));
  StepMetrics m;
  m.step = step;
  double loss = 0, slowest = 0, peak = 0;
  for (size_t r = 0; r < all.size(); r += 3) {
    loss += all[r];
    slowest = std::max(slowest, all[r + 1]);
    peak = std::max(peak, all[r + 2]);
  }
  const double tokens = double(cfg_.global_batch) * double(model_.seq_len);
  m.loss = loss / tokens;
  m.grad_norm = last_grad_norm_;
  m.lr = last_lr_;
  m.iteration_s = slowest;
  m.tokens_per_s = tokens / slowest;
  // Paper eq. (3) (72 instead of 96 without recomputation), with the padded vocabulary that runs.
  const double B = double(cfg_.global_batch), s = double(model_.seq_len), l = model_.layers,
               h = double(model_.hidden), V = double(PaddedVocab(model_, cfg_.tp));
  const double factor = cfg_.recompute == Recompute::kFull ? 96.0 : 72.0;
  const double flops = factor * B * s * l * h * h * (1 + s / (6 * h)) + 6 * B * s * h * V;
  m.tflops_per_gpu = flops / slowest / world_->size() / 1e12;
  m.peak_memory_bytes = static_cast<Bytes>(peak);
  return m;
}

Result<std::vector<RankMemory>> Trainer::GatherMemory() {
  std::vector<double> mine = {double(coord_.pp), double(dev_->stats().peak_total)};
  for (Bytes b : dev_->stats().peak) mine.push_back(double(b));
  PTDP_ASSIGN_OR_RETURN(std::vector<double> all, AllGatherDoubles(*world_, mine));
  std::vector<RankMemory> out;
  const size_t w = mine.size();
  for (size_t r = 0; r * w < all.size(); ++r) {
    RankMemory m;
    m.rank = static_cast<int>(r);
    m.pp_rank = static_cast<int>(all[r * w]);
    m.peak_total = static_cast<Bytes>(all[r * w + 1]);
    for (int t = 0; t < kNumMemTags; ++t) m.peak[t] = static_cast<Bytes>(all[r * w + 2 + t]);
    out.push_back(m);
  }
  return out;
}

Result<Timeline> Trainer::GatherTimeline() {
  const bool reports = coord_.tp == 0 && coord_.dp == 0;
  constexpr size_t kW = 9;
  PTDP_ASSIGN_OR_RETURN(std::vector<double> counts,
                        AllGatherDoubles(*world_, {reports ? double(events_.size()) : 0.0}));
  size_t most = 0;
  for (double c : counts) most = std::max(most, static_cast<size_t>(c));
  std::vector<double> mine(most * kW, 0.0);
  if (reports) {
    for (size_t i = 0; i < events_.size(); ++i) {
      const TimelineEvent& e = events_[i];
      const double v[kW] = {double(static_cast<int>(e.instr.op)),
                            double(e.instr.microbatch),
                            double(e.instr.chunk),
                            double(e.instr.peer),
                            double(e.instr.bytes),
                            e.instr.recompute ? 1.0 : 0.0,
                            double(e.start_ns),
                            double(e.end_ns),
                            double(activation_bytes_[i])};
      std::copy(v, v + kW, mine.begin() + static_cast<std::ptrdiff_t>(i * kW));
    }
  }
  PTDP_ASSIGN_OR_RETURN(std::vector<double> all, AllGatherDoubles(*world_, mine));
  Timeline t = timeline_;
  if (world_->rank() != 0) return t;
  PTDP_ASSIGN_OR_RETURN(RankGrid grid, RankGrid::Create(cfg_.tp, cfg_.dp, cfg_.pp));
  for (size_t r = 0; r < counts.size(); ++r) {
    const RankCoord c = grid.Coord(static_cast<int>(r));
    for (size_t i = 0; i < static_cast<size_t>(counts[r]); ++i) {
      const double* v = all.data() + (r * most + i) * kW;
      TimelineEvent e;
      e.pp_rank = c.pp;
      e.instr.op = static_cast<Op>(static_cast<int>(v[0]));
      e.instr.microbatch = static_cast<int32_t>(v[1]);
      e.instr.chunk = static_cast<int32_t>(v[2]);
      e.instr.peer = static_cast<int32_t>(v[3]);
      e.instr.bytes = static_cast<Bytes>(v[4]);
      e.instr.recompute = v[5] != 0;
      e.stream = StreamOf(e.instr.op);
      e.start_ns = static_cast<Nanoseconds>(v[6]);
      e.end_ns = static_cast<Nanoseconds>(v[7]);
      t.events.push_back(e);
      // Activation memory held after each instruction (the simulator emits the same counter).
      t.counters.push_back(TimelineCounter{c.pp, "activation_GiB", e.end_ns, BytesToGiB(v[8])});
    }
  }
  return t;
}

}  // namespace ptdp::runtime
