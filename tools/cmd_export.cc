// `ptdp export --checkpoint DIR --to
// hf-gpt2|hf-llama|hf-qwen2|hf-qwen3|hf-mistral|hf-nemotron|hf-qwen3-moe|hf-mixtral|hf-qwen2-moe|
// hf-glm4-moe|hf-deepseek-v3
// [--dtype bf16]
// [--max-shard-size 5GB] OUT`: a checkpoint (any layout) as a Hugging Face folder (config.json and
// the weights, one file or shards with their index) that transformers loads.
// `ptdp forward (--checkpoint DIR | --hf DIR) (--tokens FILE | --data FILE --step K
// --global-batch B [--seed N]) [--seq-len S] [--out logits.bin] [--batch-out batch.bin]`: the
// model's forward in one process, its logits and mean next-token loss (docs/checkpoints.md
// "Hugging Face GPT-2"). Wiring only: runtime/checkpoint/param_io.h and runtime/model/forward.h do
// the work.
#include <cstdio>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/checked.h"
#include "core/json.h"
#include "runtime/backend/registry.h"
#include "runtime/checkpoint/param_io.h"
#include "runtime/checkpoint/store.h"
#include "runtime/data/token_file.h"
#include "runtime/data/token_set.h"
#include "runtime/model/forward.h"
#include "tools/common.h"

namespace ptdp::tools {
namespace {

// `--to`'s formats: GPT-2's, then each of the Llama family's (runtime/checkpoint/hf_llama.h).
std::vector<std::string> ExportFormats() {
  std::vector<std::string> out = {"hf-gpt2"};
  for (runtime::HfLlamaArch a : runtime::kHfLlamaArchs)
    out.push_back(runtime::HfLlamaFormatName(a));
  return out;
}

// "5GB" (10^9, as Hugging Face's max_shard_size counts), "400KB", "2GiB" (2^30), "1000000" bytes.
Result<int64_t> ParseShardSize(const std::string& text) {
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (...) {
    used = 0;
  }
  const std::string unit = text.substr(used);
  const std::pair<const char*, double> units[] = {
      {"", 1},     {"B", 1},        {"KB", 1e3},        {"MB", 1e6},
      {"GB", 1e9}, {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}};
  for (const auto& [name, scale] : units) {
    if (used > 0 && unit == name && value * scale >= 1 && value * scale <= 1e15) {
      return static_cast<int64_t>(value * scale);
    }
  }
  return Status::Invalid("--max-shard-size: '" + text +
                         "' is not a size from 1 byte to 1 PB (e.g. 5GB, 400MB, 2GiB)");
}

// What one `ptdp forward` runs at most (its logits take tokens x vocabulary floats).
constexpr int64_t kMaxForwardTokens = int64_t(1) << 24;

struct ForwardArgs {
  std::string checkpoint, hf, tokens, out, batch_out, backend = "cpu";
  std::vector<std::string> data;      // one token file or a blend (ptdp train's --data)
  std::string split, part = "train";  // ptdp train's --split, and which of its parts
  int64_t seq_len = 0, step = 0, global_batch = 0;
  uint64_t seed = 1234;  // ptdp train's default --seed
};

// The sequences (S + 1 tokens each) of a token file cut into them (--tokens).
Result<std::vector<int32_t>> ReadTokenSequences(const ForwardArgs& a, int64_t vocab, int64_t S) {
  PTDP_RETURN_IF_ERROR(CheckNotSpecialFile("--tokens", a.tokens));
  auto tf = runtime::TokenFile::Open(a.tokens, vocab);
  if (!tf.ok()) return tf.status().WithPrefix("--tokens");
  if (tf->count() > kMaxForwardTokens) {
    return Status::Invalid("--tokens: " + std::to_string(tf->count()) + " tokens, more than the " +
                           std::to_string(kMaxForwardTokens) + " one forward takes");
  }
  if (tf->count() == 0 || tf->count() % (S + 1) != 0) {
    return Status::Invalid(
        "--tokens: " + std::to_string(tf->count()) +
        " tokens are not whole sequences of --seq-len + 1 = " + std::to_string(S + 1));
  }
  std::vector<int32_t> seqs(size_t(tf->count()));
  PTDP_RETURN_IF_ERROR(tf->Read(0, tf->count(), seqs.data()));
  return seqs;
}

// The batch `ptdp train` reads at --step from --data (one file or a blend) cut by --split, its
// --part (runtime/data/token_set.h): the training data's, or the validation's or the test's, of
// which a validation's batch j is drawn as iteration j's.
Result<std::vector<int32_t>> ReadDataSequences(const ForwardArgs& a, int64_t vocab, int64_t S) {
  int64_t total = 0;
  if (a.step < 1 || a.global_batch < 1) {
    return Status::Invalid("--data needs --step >= 1 and --global-batch >= 1");
  }
  if (!CheckedMul(a.global_batch, S + 1, &total) || total > kMaxForwardTokens) {
    return Status::Invalid("--global-batch: " + std::to_string(a.global_batch) +
                           " sequences are more than the " + std::to_string(kMaxForwardTokens) +
                           " tokens one forward takes");
  }
  const SplitPart part = a.part == "valid"  ? SplitPart::kValid
                         : a.part == "test" ? SplitPart::kTest
                                            : SplitPart::kTrain;
  if (a.part != "train" && part == SplitPart::kTrain) {
    return Status::Invalid("--part: '" + a.part + "' is not train, valid or test");
  }
  DataSplit split;
  if (!a.split.empty()) {
    PTDP_ASSIGN_OR_RETURN(split, ParseSplit(a.split));
  }
  if (split.share[static_cast<size_t>(part)] == 0) {
    return Status::Invalid("--part " + a.part + ": --split " + split.text + " gives it no share");
  }
  PTDP_ASSIGN_OR_RETURN(const BlendSpec spec, ParseBlend(a.data, "--data"));
  for (const std::string& path : spec.paths) {
    PTDP_RETURN_IF_ERROR(CheckNotSpecialFile("--data", path));
  }
  PTDP_ASSIGN_OR_RETURN(const auto files, runtime::TokenSet::OpenFiles(spec, vocab, "--data"));
  PTDP_ASSIGN_OR_RETURN(runtime::TokenSet set, runtime::TokenSet::Cut(spec, files, split, part, S,
                                                                      a.global_batch, "--data"));
  std::vector<int32_t> seqs(size_t(a.global_batch * (S + 1)));
  for (int64_t i = 0; i < a.global_batch; ++i) {
    PTDP_RETURN_IF_ERROR(set.ReadSequence(a.seed, a.step, i, S, seqs.data() + i * (S + 1)));
  }
  return seqs;
}

Status RunForward(const ForwardArgs& a) {
  if (a.checkpoint.empty() == a.hf.empty()) {
    return Status::Invalid("give one of --checkpoint DIR and --hf DIR");
  }
  if (a.tokens.empty() == a.data.empty()) {
    return Status::Invalid("give one of --tokens FILE and --data FILE");
  }
  PTDP_ASSIGN_OR_RETURN(auto dev, runtime::CreateDevice(a.backend));
  ModelSpec model;
  std::string source;
  runtime::Manifest manifest;
  std::optional<runtime::HfFolder> hf;
  if (!a.checkpoint.empty()) {
    PTDP_ASSIGN_OR_RETURN(source, runtime::ResolveCheckpoint(a.checkpoint, "ptdp forward"));
    PTDP_ASSIGN_OR_RETURN(manifest, runtime::ReadManifest(source));
    model = manifest.model;
  } else {
    PTDP_ASSIGN_OR_RETURN(auto f, runtime::HfFolder::Open(a.hf));
    hf.emplace(std::move(f));
    source = a.hf;
    model = hf->config().model;
  }
  const int64_t S = a.seq_len != 0 ? a.seq_len : model.seq_len;
  if (S < 1 || S > model.seq_len) {
    return Status::Invalid("--seq-len: " + std::to_string(S) + " is outside [1, " +
                           std::to_string(model.seq_len) + "] (the model's positions)");
  }
  PTDP_ASSIGN_OR_RETURN(std::vector<int32_t> seqs, a.data.empty()
                                                       ? ReadTokenSequences(a, model.vocab, S)
                                                       : ReadDataSequences(a, model.vocab, S));
  PTDP_ASSIGN_OR_RETURN(
      runtime::ParamStore params,
      runtime::ParamStore::Create(dev.get(), model, ParallelConfig{}, 0, 0, DType::kFp32));
  if (hf) {
    PTDP_RETURN_IF_ERROR(runtime::LoadHfParams(&params, *hf).WithPrefix("--hf"));
    for (int l = 0; l < model.layers && model.moe_router_expert_bias; ++l) {
      if (!model.IsMoeLayer(l)) continue;  // GLM-4.5's e_score_correction_bias
      PTDP_ASSIGN_OR_RETURN(const std::vector<float> b, hf->Read(runtime::ExpertBiasName(l)));
      manifest.router_expert_bias[l].assign(b.begin(), b.end());
    }
  } else {
    PTDP_RETURN_IF_ERROR(runtime::LoadCheckpointParams(&params, source, manifest, model.vocab)
                             .WithPrefix("--checkpoint " + source));
  }
  PTDP_ASSIGN_OR_RETURN(
      runtime::ForwardOutput fwd,
      runtime::ForwardLogits(dev.get(), model, params, seqs, S, manifest.router_expert_bias));
  const int64_t B = int64_t(seqs.size()) / (S + 1);
  std::printf(
      "ptdp forward: %s, %lld sequences of %lld tokens, vocabulary %lld: loss %.9f nats/token "
      "(mean over %lld next-token predictions)\n",
      source.c_str(), static_cast<long long>(B), static_cast<long long>(S),
      static_cast<long long>(model.vocab), fwd.loss, static_cast<long long>(B * S));
  if (!a.out.empty()) {
    const std::string bytes(reinterpret_cast<const char*>(fwd.logits.data()),
                            fwd.logits.size() * sizeof(float));
    PTDP_RETURN_IF_ERROR(WriteFileAtomic(a.out, bytes).WithPrefix("--out"));
    std::printf("logits [%lld, %lld, %lld] float32 little-endian written to %s\n",
                static_cast<long long>(B), static_cast<long long>(S),
                static_cast<long long>(model.vocab), a.out.c_str());
  }
  if (!a.batch_out.empty()) {
    std::vector<uint32_t> t(seqs.begin(), seqs.end());
    PTDP_RETURN_IF_ERROR(runtime::WriteTokenFile(a.batch_out, t).WithPrefix("--batch-out"));
  }
  return Status::Ok();
}

}  // namespace

void RegisterExport(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand(
      "export",
      "Write a checkpoint as a Hugging Face GPT-2, Llama, Qwen2, Qwen3, Mistral or Nemotron folder "
      "(config.json, model.safetensors)");
  static std::string checkpoint, to, out, dtype = "fp32", shard_size;
  cmd->add_option("--checkpoint", checkpoint,
                  "a checkpoint (DIR/step-NNNNNNNN) or a folder of them (the newest valid)")
      ->required();
  cmd->add_option("--to", to,
                  "the format: hf-gpt2 (GPT2LMHeadModel), hf-llama (LlamaForCausalLM), "
                  "hf-qwen2 (Qwen2ForCausalLM), hf-qwen3 (Qwen3ForCausalLM), hf-mistral "
                  "(MistralForCausalLM: Llama's with a sliding window), hf-nemotron "
                  "(NemotronForCausalLM), hf-qwen3-moe (Qwen3MoeForCausalLM), hf-mixtral "
                  "(MixtralForCausalLM), hf-qwen2-moe (Qwen2MoeForCausalLM), hf-glm4-moe "
                  "(Glm4MoeForCausalLM: GLM-4.5's) or hf-deepseek-v3 (DeepseekV3ForCausalLM)")
      ->required()
      ->check(CLI::IsMember(ExportFormats()));
  cmd->add_option("--dtype", dtype,
                  "the weights' type: fp32 (default) or bf16 (rounded to nearest even)")
      ->check(CLI::IsMember({"fp32", "bf16"}));
  cmd->add_option("--max-shard-size", shard_size,
                  "write model-0000i-of-0000N.safetensors files of at most this size (5GB, 400MB, "
                  "2GiB) and model.safetensors.index.json; default one model.safetensors");
  cmd->add_option("out", out, "output folder (created; config.json and the weights replaced)")
      ->required();
  cmd->callback([exit_code] {
    auto run = [&]() -> Status {
      PTDP_ASSIGN_OR_RETURN(std::string dir, runtime::ResolveCheckpoint(checkpoint, "ptdp export"));
      PTDP_ASSIGN_OR_RETURN(runtime::Manifest m, runtime::ReadManifest(dir));
      runtime::HfExportOptions options;
      options.llama = runtime::HfLlamaArchOfFormat(to);  // none: hf-gpt2
      options.bf16 = dtype == "bf16";
      if (!shard_size.empty()) {
        PTDP_ASSIGN_OR_RETURN(options.max_shard_bytes, ParseShardSize(shard_size));
      }
      PTDP_ASSIGN_OR_RETURN(Bytes bytes, runtime::ExportHf(dir, m, out, options));
      const char* files = options.max_shard_bytes > 0
                              ? "model-*.safetensors shards, model.safetensors.index.json"
                              : "model.safetensors";
      std::printf("exported %s (step %lld) to %s: config.json, %s (%.2f MiB, %s)\n", dir.c_str(),
                  static_cast<long long>(m.step), out.c_str(), files, bytes / kMiB, dtype.c_str());
      if (m.model.DropsTokens()) {  // docs/token_dropping.md: no config key holds it
        std::printf(
            "note: model.moe_capacity_factor %s is not in config.json (transformers has no "
            "capacity): the folder runs dropless there\n",
            FormatDouble(m.model.moe_capacity_factor).c_str());
      }
      return Status::Ok();
    };
    const Status st = run();
    *exit_code = st.ok() ? 0 : Fail("export", st);
  });
}

void RegisterForward(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand(
      "forward", "The model's forward in one process: logits and next-token loss of sequences");
  static ForwardArgs a;
  cmd->add_option("--checkpoint", a.checkpoint, "a checkpoint or a folder of them");
  cmd->add_option("--hf", a.hf,
                  "a Hugging Face GPT-2 or Llama folder (config.json, model.safetensors)");
  cmd->add_option("--tokens", a.tokens, "token file: whole sequences of --seq-len + 1 tokens");
  cmd->add_option("--data", a.data,
                  "token file or blend (as ptdp train's): the batch `ptdp train` reads at --step");
  cmd->add_option("--split", a.split, "with --data: ptdp train's --split");
  cmd->add_option("--part", a.part,
                  "with --data: train (default), or valid or test: the batch of --split's "
                  "validation or test part that a validation reads as its --step-th");
  cmd->add_option("--step", a.step, "with --data: the training step (1-based)");
  cmd->add_option("--global-batch", a.global_batch, "with --data: the plan's global batch");
  cmd->add_option("--seed", a.seed, "with --data: ptdp train's --seed (default 1234)");
  cmd->add_option("--seq-len", a.seq_len, "tokens per sequence (default: the model's seq_len)");
  cmd->add_option("--out", a.out, "write the logits: float32 [sequences][seq_len][vocab]");
  cmd->add_option("--batch-out", a.batch_out, "write the sequences run as a token file");
  cmd->add_option("--backend", a.backend, "compute backend (default cpu)");
  cmd->callback([exit_code] {
    const Status st = RunForward(a);
    *exit_code = st.ok() ? 0 : Fail("forward", st);
  });
}

}  // namespace ptdp::tools
