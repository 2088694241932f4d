// `ptdp tokenize --in text.txt --out tokens.bin`: byte-level tokenization into the runtime's token
// file format (runtime/data/token_file.h); prints the count and the text's unigram entropy.
#include <cstdio>

#include "core/json.h"
#include "runtime/data/token_file.h"
#include "tools/common.h"

namespace ptdp::tools {

void RegisterTokenize(CLI::App& app, int* exit_code) {
  auto* cmd =
      app.add_subcommand("tokenize", "Byte-level tokenization of a text file into a token file");
  static std::string in, out;
  cmd->add_option("--in", in, "input text file")->required();
  cmd->add_option("--out", out, "output token file (written atomically)")->required();
  cmd->callback([exit_code] {
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
