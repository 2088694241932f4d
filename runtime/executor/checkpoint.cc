// Trainer::SaveCheckpoint / LoadCheckpoint: the trainer's side of runtime/checkpoint (format and
// guarantees in docs/checkpoints.md). The save: data rank 0 of every (pipeline, tensor) rank writes
// one safetensors file of its pieces into DIR/tmp-N; world rank 0 gathers the files' sizes and
// checksums, writes the manifest, and publishes the folder once every rank has agreed that its
// file is complete. The load: world rank 0 picks and verifies the checkpoint, then every rank
// assembles its own blocks from whichever pieces overlap them (any writing layout). --init-from:
// every rank reads its tensors from a Hugging Face GPT-2 or Llama folder
// (runtime/checkpoint/param_io.h).
#include <chrono>
#include <csignal>
#include <cstdio>
#include <filesystem>

#include "core/rank_grid.h"
#include "runtime/checkpoint/hf_llama.h"
#include "runtime/checkpoint/manifest.h"
#include "runtime/checkpoint/param_io.h"
#include "runtime/checkpoint/pieces.h"
#include "runtime/checkpoint/store.h"
#include "runtime/comm/agree.h"
#include "runtime/executor/trainer.h"

namespace ptdp::runtime {

// Data rank 0 writes (with ep > 1 data ranks 0 to ep - 1: ShardWriter); with the distributed
// optimizer every data rank calls it, to gather each state kind of the shards into its gradient
// arena (ParamStore::GatherWhole) for the writer. The file holds the masters, then Adam's m, then
// v (one kind gathered at a time).
Status Trainer::WriteShard(const std::string& path, int64_t step, CkptFile* out) {
  const bool writer = ShardWriter();
  std::vector<StTensor> tensors;
  std::vector<int> saved;  // entries, in the file's order within each kind
  for (int i = 0; i < static_cast<int>(params_->entries().size()); ++i) {
    if (IsSavedBy(params_->entries()[i].spec, coord_.tp, ExpertRank())) saved.push_back(i);
  }
  for (int k = 0; k < kStateKinds; ++k) {
    for (int i : saved) {
      const ParamTensor& p = params_->entries()[i].spec;
      tensors.push_back({p.name + kStateSuffix[k], "F32", p.local_shape});
    }
  }
  const std::string header =
      EncodeSafetensorsHeader(&tensors, {{"format", kCheckpointFormat},
                                         {"step", std::to_string(step)},
                                         {"pp_rank", std::to_string(coord_.pp)},
                                         {"tp_rank", std::to_string(coord_.tp)}});
  SyncedFile f;
  Status io;  // the writer's; the gathers go on after a failed write, as every data rank joins them
  if (writer) {
    io = f.Open(path);
    if (io.ok()) io = f.Write(header.data(), header.size());
  }
  // Through one staging buffer, block by block: no host copy of a whole (vocabulary-sized)
  // tensor to allocate and fault in.
  constexpr Bytes kStage = Bytes(8) << 20;
  std::vector<char> stage(writer ? static_cast<size_t>(kStage) : 0);
  for (int k = 0; k < kStateKinds; ++k) {
    PTDP_RETURN_IF_ERROR(params_->GatherWhole(static_cast<StateKind>(k), dp_.get(), edp_.get()));
    for (int i : saved) {
      if (!writer || !io.ok()) break;
      const TensorRef r = params_->whole(i, static_cast<StateKind>(k));
      const Bytes total = r.count * Bytes(sizeof(float));
      for (Bytes at = 0; at < total && io.ok(); at += kStage) {
        const Bytes n = std::min(kStage, total - at);
        dev_->Copy(stage.data(), static_cast<const char*>(r.data) + at, n);
        io = f.Write(stage.data(), static_cast<size_t>(n));
      }
    }
  }
  PTDP_RETURN_IF_ERROR(params_->EndGather());
  if (!writer) return Status::Ok();
  PTDP_RETURN_IF_ERROR(io);
  PTDP_RETURN_IF_ERROR(f.Close());
  out->name = std::filesystem::path(path).filename().string();
  out->bytes = f.bytes();
  out->checksum_kind = f.checksum_kind();
  out->checksum = f.checksum();
  return Status::Ok();
}

// World rank 0. `files`: per world rank (writes?, pp, tp, bytes, checksum high, checksum low,
// ep rank).
Status Trainer::WriteManifest(const std::string& tmp, int64_t step,
                              const std::vector<double>& files,
                              const std::map<int, std::vector<double>>& biases) {
  Manifest m;
  m.step = step;
  m.model = model_;
  m.layout = cfg_;
  m.data_seed = opts_.data_seed;
  m.token_count = data_->tokens();
  m.data_parts = data_->Signature();
  m.optim = opts_.optim;
  m.skipped_steps = scaler_->skipped_steps();
  m.adam_steps = step - m.skipped_steps;
  m.loss_scale = scaler_->scale();
  m.clean_steps = scaler_->clean_steps();
  m.router_expert_bias = biases;
  for (size_t r = 0; r + 7 <= files.size(); r += 7) {
    if (files[r] == 0) continue;
    const int pp = static_cast<int>(files[r + 1]), tp = static_cast<int>(files[r + 2]);
    const int ep = static_cast<int>(files[r + 6]);
    m.files.push_back({ShardFileName(pp, tp, ep), static_cast<int64_t>(files[r + 3]),
                       ChecksumKind::kCrc32c,
                       (uint64_t(files[r + 4]) << 32) | uint64_t(files[r + 5])});
    AddPiecesOf(model_, cfg_, pp, tp, &m, ep);
  }
  SyncedFile f;
  const std::string text = ManifestToJson(m).dump(1) + "\n";
  PTDP_RETURN_IF_ERROR(f.Open(tmp + "/manifest.json"));
  PTDP_RETURN_IF_ERROR(f.Write(text.data(), text.size()));
  PTDP_RETURN_IF_ERROR(f.Close());
  return FsyncDir(tmp);
}

Result<Bytes> Trainer::SaveCheckpoint(const std::string& dir, int64_t step, int keep) {
  PTDP_RETURN_IF_ERROR(WaitForWeights(-1));  // fp32 training saves the weights themselves
  const bool root = world_->rank() == 0;
  const std::string tmp = dir + "/" + TmpDirName(step);
  Status prep;
  if (root) {
    // A tmp- folder of this step is a save that crashed: never published, safe to replace.
    prep = MakeDirs(dir);
    if (prep.ok()) prep = RemoveTree(tmp);
    if (prep.ok()) prep = MakeDirs(tmp);
  }
  PTDP_RETURN_IF_ERROR(AgreeStatus(*world_, prep.WithPrefix("--save")));
  const bool writer = ShardWriter();
  CkptFile mine;
  const std::string file = ShardFileName(coord_.pp, coord_.tp, ExpertRank());
  Status w =
      writer || params_->sharded() ? WriteShard(tmp + "/" + file, step, &mine) : Status::Ok();
  // Tests: a rank dies with the shards written but nothing published (runtime_checkpoint_killed).
  if (step == opts_.kill_in_save_step && world_->rank() == world_->size() - 1) std::raise(SIGKILL);
  PTDP_RETURN_IF_ERROR(AgreeStatus(*world_, w.WithPrefix("--save")));
  // Sizes below 2^53 and the checksum in two 32-bit halves travel exactly as doubles.
  PTDP_ASSIGN_OR_RETURN(
      std::vector<double> files,
      AllGatherDoubles(*world_, {writer ? 1.0 : 0.0, double(coord_.pp), double(coord_.tp),
                                 double(mine.bytes), double(mine.checksum >> 32),
                                 double(mine.checksum & 0xffffffffu), double(ExpertRank())}));
  PTDP_ASSIGN_OR_RETURN(const auto biases, GatherRouterBiases());
  Status pub;
  if (root) {
    pub = WriteManifest(tmp, step, files, biases);
    if (pub.ok()) pub = PublishCheckpoint(dir, step, keep);
  }
  PTDP_RETURN_IF_ERROR(AgreeStatus(*world_, pub.WithPrefix("--save")));
  Bytes total = 0;
  for (size_t r = 0; r + 7 <= files.size(); r += 7) total += static_cast<Bytes>(files[r + 3]);
  return total;
}

// Every stage's ranks hold its layers' biases alike: the first rank of each stage's tensor and
// data groups gives them, the others zeros, and one world sum (exact: a value plus zeros) hands
// every layer's to every rank.
Result<std::map<int, std::vector<double>>> Trainer::GatherRouterBiases() {
  std::map<int, std::vector<double>> out;
  if (!model_.moe_router_expert_bias) return out;
  const int64_t experts = model_.moe_experts;
  const int layers = model_.layers + model_.mtp_layers;  // the prediction depths' too
  std::vector<double> all(size_t(layers * experts), 0.0);
  if (coord_.tp == 0 && coord_.dp == 0) {
    for (int l : router_biases_.layers()) {
      const std::vector<double> v = router_biases_.Values(l);
      std::copy(v.begin(), v.end(), all.begin() + l * experts);
    }
  }
  PTDP_RETURN_IF_ERROR(world_->AllReduceSum(all.data(), int64_t(all.size()), DType::kFp64));
  for (int l = 0; l < layers; ++l) {
    if (!model_.IsMoeLayer(l)) continue;
    out[l].assign(all.begin() + l * experts, all.begin() + (l + 1) * experts);
  }
  return out;
}

Status Trainer::CheckCompatible(const Manifest& m, const std::string& source) const {
  const ModelSpec& a = m.model;
  const ModelSpec& b = model_;
  auto field = [&](const char* name, int64_t x, int64_t y) -> Status {
    if (x == y) return Status::Ok();
    return Status::Invalid(source + ": model." + name + " is " + std::to_string(x) +
                           " in the checkpoint but " + std::to_string(y) + " in the plan");
  };
  PTDP_RETURN_IF_ERROR(field("layers", a.layers, b.layers));
  PTDP_RETURN_IF_ERROR(field("hidden", a.hidden, b.hidden));
  PTDP_RETURN_IF_ERROR(field("heads", a.heads, b.heads));
  PTDP_RETURN_IF_ERROR(field("ffn_hidden", a.FfnHidden(), b.FfnHidden()));
  PTDP_RETURN_IF_ERROR(field("seq_len", a.seq_len, b.seq_len));
  PTDP_RETURN_IF_ERROR(field("vocab", a.vocab, b.vocab));
  PTDP_RETURN_IF_ERROR(field("tied_embeddings", a.tied_embeddings, b.tied_embeddings));
  // The token stream continues only with the same seed, data and batch (docs/checkpoints.md).
  if (m.data_seed != opts_.data_seed) {
    return Status::Invalid(source + ": saved with --seed " + std::to_string(m.data_seed) +
                           ", this run has " + std::to_string(opts_.data_seed));
  }
  if (m.token_count != data_->tokens()) {
    return Status::Invalid(source + ": saved with training data of " +
                           std::to_string(m.token_count) + " tokens, --data has " +
                           std::to_string(data_->tokens()));
  }
  if (!m.data_parts.empty() && m.data_parts != data_->Signature()) {
    return Status::Invalid(source + ": saved with training data " + m.data_parts +
                           " (token ranges and weights), --data and --split give " +
                           data_->Signature());
  }
  if (m.layout.global_batch != cfg_.global_batch) {
    return Status::Invalid(source + ": saved with global_batch " +
                           std::to_string(m.layout.global_batch) + ", the plan has " +
                           std::to_string(cfg_.global_batch));
  }
  return Status::Ok();
}

Status Trainer::LoadParams(const std::string& dir, const Manifest& m) {
  // Each rank verifies the files it reads, once. A file no rank of this layout reads (possible
  // only in corner cases: every element is someone's) is verified by one rank anyway, so a damaged
  // checkpoint is still refused whole.
  std::vector<bool> mine;
  Status s =
      LoadCheckpointParams(params_.get(), dir, m, model_.vocab, &mine).WithPrefix("--load " + dir);
  PTDP_RETURN_IF_ERROR(AgreeStatus(*world_, s));
  if (m.files.empty()) return s;
  std::vector<double> flags(m.files.size());
  for (size_t i = 0; i < flags.size(); ++i) flags[i] = mine[i] ? 1 : 0;
  PTDP_ASSIGN_OR_RETURN(std::vector<double> all, AllGatherDoubles(*world_, flags));
  const int world = world_->size();
  for (size_t i = 0; i < m.files.size() && s.ok(); ++i) {
    bool read = false;
    for (int r = 0; r < world; ++r) read = read || all[size_t(r) * flags.size() + i] != 0;
    if (!read && int(i % size_t(world)) == world_->rank()) {
      s = VerifyFile(dir, m.files[i]).WithPrefix("--load " + dir);
    }
  }
  return s;
}

Status Trainer::InitFromHf(const std::string& dir) {
  // Every rank checks the folder (config.json and the safetensors header are small) and reads
  // only the tensors it holds; the lowest rank's error is every rank's.
  auto f = HfFolder::Open(dir);
  Status check = f.status();
  if (check.ok()) check = CheckHfMatchesModel(f->config(), model_, dir + "/config.json");
  PTDP_RETURN_IF_ERROR(AgreeStatus(*world_, check.WithPrefix("--init-from")));
  Status load = LoadHfParams(params_.get(), *f);
  for (int l : router_biases_.layers()) {  // GLM-4.5's e_score_correction_bias
    if (!load.ok()) break;
    auto bias = f->Read(ExpertBiasName(l));
    load = bias.status();
    if (load.ok())
      load = router_biases_.SetValues(l, std::vector<double>(bias->begin(), bias->end()));
  }
  return AgreeStatus(*world_, load.WithPrefix("--init-from"));
}

Result<int64_t> Trainer::LoadCheckpoint(const std::string& path, bool allow_none) {
  const bool root = world_->rank() == 0;
  // Which checkpoint: the folder itself, or world rank 0's pick of the newest valid one.
  int64_t picked = -1;
  Status pick;
  if (root && !IsCheckpointFolder(path)) {
    auto s = PickNewestCheckpoint(path, allow_none, "ptdp train: --load");
    pick = s.status();
    if (s.ok()) picked = *s;
  } else if (root) {
    // The files are verified by the ranks that read them (LoadParams), each once.
    pick = ReadManifest(path).status();
  }
  PTDP_RETURN_IF_ERROR(AgreeStatus(*world_, pick.WithPrefix("--load")));
  PTDP_ASSIGN_OR_RETURN(std::vector<double> b, AllGatherDoubles(*world_, {double(picked)}));
  picked = static_cast<int64_t>(b[0]);
  if (picked == 0) return int64_t(0);
  const std::string dir = picked < 0 ? path : path + "/" + StepDirName(picked);
  auto m = ReadManifest(dir);
  Status check = m.status();
  if (check.ok()) check = CheckCompatible(*m, dir + "/manifest.json");
  PTDP_RETURN_IF_ERROR(AgreeStatus(*world_, check));
  PTDP_RETURN_IF_ERROR(AgreeStatus(*world_, LoadParams(dir, *m)));
  Status biases;
  for (int l : router_biases_.layers()) {
    const auto it = m->router_expert_bias.find(l);
    if (!biases.ok()) break;
    biases = it == m->router_expert_bias.end()
                 ? Status::Invalid("router_expert_bias." + std::to_string(l) +
                                   ": missing (saved by a model without moe_router_expert_bias)")
                 : router_biases_.SetValues(l, it->second);
  }
  PTDP_RETURN_IF_ERROR(AgreeStatus(*world_, biases.WithPrefix("--load " + dir)));
  scaler_->Restore(m->loss_scale, static_cast<int>(m->clean_steps), m->skipped_steps);
  if (root) {
    const OptimizerConfig &a = m->optim, &o = opts_.optim;
    if (a.lr != o.lr || a.min_lr != o.min_lr || a.warmup_steps != o.warmup_steps ||
        a.decay_steps != o.decay_steps) {
      std::printf(
          "ptdp train: note: the learning-rate schedule differs from the checkpoint's (lr %g, "
          "min-lr %g, warmup %lld, decay steps %lld): it continues under this run's\n",
          a.lr, a.min_lr, static_cast<long long>(a.warmup_steps),
          static_cast<long long>(a.decay_steps));
    }
  }
  return m->step;
}

namespace {

// What a plan switch may not change (docs/runtime.md "Switching plans").
Status CheckSwitchable(const ParallelConfig& from, const ParallelConfig& to) {
  auto differs = [](const char* what, int64_t a, int64_t b) {
    return Status::Invalid(std::string("plan switch: layout.") + what + " " + std::to_string(b) +
                           " differs from the running " + std::to_string(a) +
                           " (a change of t, p or d is a relaunch through --save / --load)");
  };
  if (from.tp != to.tp) return differs("tp", from.tp, to.tp);
  if (from.pp != to.pp) return differs("pp", from.pp, to.pp);
  if (from.dp != to.dp) return differs("dp", from.dp, to.dp);
  if (from.global_batch != to.global_batch) {
    return differs("global_batch", from.global_batch, to.global_batch);
  }
  if (from.precision != to.precision) {
    return Status::Invalid("plan switch: layout.precision differs from the running one");
  }
  return Status::Ok();
}

}  // namespace

Result<std::unique_ptr<Trainer>> Trainer::SwitchPlan(std::unique_ptr<Trainer> current,
                                                     const PlanFile& next, int64_t step,
                                                     const std::string& scratch_dir,
                                                     SwitchTimes* times) {
  Communicator* world = current->given_world_;
  PTDP_RETURN_IF_ERROR(AgreeStatus(*world, CheckSwitchable(current->cfg_, next.layout)));
  const TrainOptions opts = current->opts_;  // a different model is refused by the loader
  SwitchTimes local;
  auto lap = [last = std::chrono::steady_clock::now()](double* part) mutable {
    const auto now = std::chrono::steady_clock::now();
    *part = std::chrono::duration<double>(now - last).count();
    last = now;
  };
  PTDP_RETURN_IF_ERROR(current->SaveCheckpoint(scratch_dir, step, /*keep=*/1).status());
  current.reset();  // its memory goes before the new layout's is allocated
  lap(&local.save_s);
  // The load below writes every parameter and moment: the new trainer does not draw them first.
  PTDP_ASSIGN_OR_RETURN(std::unique_ptr<Trainer> t,
                        Create(world, next, opts, ParamInit::kLoadFollows));
  lap(&local.create_s);
  const std::string ckpt = scratch_dir + "/" + StepDirName(step);
  PTDP_ASSIGN_OR_RETURN(const int64_t loaded, t->LoadCheckpoint(ckpt, /*allow_none=*/false));
  lap(&local.load_s);
  if (times != nullptr) *times = local;
  if (loaded != step) {
    return Status::Internal("plan switch: loaded step " + std::to_string(loaded) + ", not " +
                            std::to_string(step));
  }
  // Every rank has read its pieces before the folder goes.
  PTDP_RETURN_IF_ERROR(world->Barrier());
  Status removed;
  if (world->rank() == 0) {
    std::error_code ec;
    std::filesystem::remove_all(scratch_dir, ec);
    if (ec) removed = Status::IoError("plan switch: removing " + scratch_dir + ": " + ec.message());
  }
  PTDP_RETURN_IF_ERROR(AgreeStatus(*world, removed));
  return t;
}

}  // namespace ptdp::runtime
