// `ptdp tokenize --in text.txt --out tokens.bin`: byte-level tokenization into the runtime's token
// file format (runtime/data/token_file.h); prints the count and the text's unigram entropy.
// `ptdp tokenize --megatron PREFIX --out tokens.bin`: Megatron-LM's PREFIX.bin and PREFIX.idx
// (tools/preprocess_data.py's output) as a token file (runtime/data/megatron_indexed.h).
#include <cstdio>

#include "core/json.h"
#include "runtime/data/megatron_indexed.h"
#include "runtime/data/token_file.h"
#include "tools/common.h"

namespace ptdp::tools {

void RegisterTokenize(CLI::App& app, int* exit_code) {
  auto* cmd = app.add_subcommand(
      "tokenize",
      "Byte-level tokenization of a text file, or a Megatron-LM dataset, into a token file");
  static std::string in, megatron, out;
  auto* in_opt = cmd->add_option("--in", in, "input text file (byte-level, vocabulary 256)");
  auto* mg_opt =
      cmd->add_option("--megatron", megatron,
                      "a Megatron-LM indexed dataset: PREFIX of PREFIX.bin and PREFIX.idx "
                      "(tools/preprocess_data.py), its tokens as they are");
  in_opt->excludes(mg_opt);
  cmd->add_option("--out", out, "output token file (written atomically)")->required();
  cmd->callback([exit_code] {
    if (in.empty() == megatron.empty()) {
      *exit_code =
          Fail("tokenize", Status::Invalid("give one of --in (text) and --megatron PREFIX"));
      return;
    }
    if (!megatron.empty()) {
      auto c = runtime::ConvertMegatronDataset(megatron, out);
      if (!c.ok()) {
        *exit_code = Fail("tokenize", c.status().WithPrefix("--megatron"));
        return;
      }
      std::printf(
          "wrote %lld tokens (%lld documents, %lld sequences, Megatron dtype code %d; %d "
          "bytes each) from %s.bin to %s\n",
          static_cast<long long>(c->tokens), static_cast<long long>(c->documents),
          static_cast<long long>(c->sequences), c->dtype_code, c->token_bytes, megatron.c_str(),
          out.c_str());
      *exit_code = 0;
      return;
    }
    if (Status st = CheckNotSpecialFile("--in", in); !st.ok()) {
      *exit_code = Fail("tokenize", st);
      return;
    }
    auto text = ReadTextFile(in);
    if (!text.ok()) {
      *exit_code = Fail("tokenize", text.status().WithPrefix("--in"));
      return;
    }
    if (text->empty()) {
      *exit_code = Fail("tokenize", Status::Invalid("--in: '" + in + "' is empty"));
      return;
    }
    const std::vector<uint32_t> tokens = runtime::ByteTokenize(*text);
    Status st = runtime::WriteTokenFile(out, tokens);
    if (!st.ok()) {
      *exit_code = Fail("tokenize", st.WithPrefix("--out"));
      return;
    }
    std::printf(
        "wrote %zu tokens (byte-level, vocabulary 256) to %s; unigram entropy %.4f nats/token\n",
        tokens.size(), out.c_str(), runtime::UnigramEntropyNats(tokens));
    *exit_code = 0;
  });
}

}  // namespace ptdp::tools
