// Megatron-LM indexed datasets into token files (runtime/data/megatron_indexed.h): datasets written
// here byte by byte to the format megatron/core/datasets/indexed_dataset.py's _IndexWriter writes
// (make megatron-data-check compares with Megatron-Core's own writer), converted and read back.
#include "runtime/data/megatron_indexed.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "runtime/data/token_file.h"
#include "runtime/data/token_set.h"

namespace ptdp::runtime {
namespace {

template <typename T>
void Put(std::string& s, T v, int bytes = sizeof(T)) {
  for (int i = 0; i < bytes; ++i) s.push_back(static_cast<char>((uint64_t(v) >> (8 * i)) & 0xff));
}

// This process's own folder: two test processes (a sanitized build's and another's) never share a
// file.
std::filesystem::path Dir() {
  const auto dir = std::filesystem::temp_directory_path() / ("ptdp_mg_" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  return dir;
}

struct Dataset {
  int code = 8;  // uint16
  int item = 2;
  std::vector<std::vector<int64_t>> sequences;
  std::vector<int64_t> documents;  // document_indices
};

// PREFIX.bin and PREFIX.idx of `d`; `edit` may change the index bytes before they are written.
std::string Write(const Dataset& d, const std::string& name,
                  const std::function<void(std::string&)>& edit = nullptr) {
  const std::string prefix = (Dir() / name).string();
  std::string bin, idx("MMIDIDX\0\0", 9);
  std::vector<int64_t> pointers;
  for (const auto& seq : d.sequences) {
    pointers.push_back(int64_t(bin.size()));
    for (int64_t t : seq) Put<int64_t>(bin, t, d.item);
  }
  Put<uint64_t>(idx, 1);
  Put<uint8_t>(idx, uint8_t(d.code));
  Put<uint64_t>(idx, d.sequences.size());
  Put<uint64_t>(idx, d.documents.size());
  for (const auto& seq : d.sequences) Put<int32_t>(idx, int32_t(seq.size()));
  for (int64_t p : pointers) Put<int64_t>(idx, p);
  for (int64_t doc : d.documents) Put<int64_t>(idx, doc);
  if (edit) edit(idx);
  std::ofstream(prefix + ".bin", std::ios::binary) << bin;
  std::ofstream(prefix + ".idx", std::ios::binary) << idx;
  return prefix;
}

std::vector<int32_t> ReadAll(const std::string& path) {
  auto tf = TokenFile::Open(path, 0);
  EXPECT_TRUE(tf.ok()) << tf.status().ToString();
  if (!tf.ok()) return {};
  std::vector<int32_t> t(size_t(tf->count()));
  EXPECT_TRUE(tf->Read(0, tf->count(), t.data()).ok());
  return t;
}

// Three documents in four sequences (the second document two sequences), uint16: the token file
// is every token in order, 2 bytes each.
TEST(MegatronData, SequencesInOrderAsOneStream) {
  Dataset d;
  d.sequences = {{5, 6, 7}, {1}, {2, 3}, {65535, 0, 9, 9}};
  d.documents = {0, 1, 3, 4};
  const std::string prefix = Write(d, "mg_u16");
  const std::string out = prefix + ".tok";
  auto c = ConvertMegatronDataset(prefix, out);
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->tokens, 10);
  EXPECT_EQ(c->sequences, 4);
  EXPECT_EQ(c->documents, 3);
  EXPECT_EQ(c->token_bytes, 2);
  EXPECT_EQ(ReadAll(out), (std::vector<int32_t>{5, 6, 7, 1, 2, 3, 65535, 0, 9, 9}));
  EXPECT_FALSE(std::filesystem::exists(out + ".tmp"));
}

// int32 and int64 ids above 65535 keep 4 bytes; uint8 and int16 take 2.
TEST(MegatronData, WideAndNarrowDtypes) {
  for (int code : {4, 5}) {
    Dataset d;
    d.code = code;
    d.item = code == 4 ? 4 : 8;
    d.sequences = {{70000, 1}, {151935}};
    d.documents = {0, 2};
    const std::string prefix = Write(d, "mg_wide" + std::to_string(code));
    auto c = ConvertMegatronDataset(prefix, prefix + ".tok");
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_EQ(c->token_bytes, 4);
    EXPECT_EQ(ReadAll(prefix + ".tok"), (std::vector<int32_t>{70000, 1, 151935}));
  }
  for (int code : {1, 3}) {
    Dataset d;
    d.code = code;
    d.item = code == 1 ? 1 : 2;
    d.sequences = {{200, 3}};
    d.documents = {0, 1};
    const std::string prefix = Write(d, "mg_narrow" + std::to_string(code));
    auto c = ConvertMegatronDataset(prefix, prefix + ".tok");
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    EXPECT_EQ(c->token_bytes, 2);
    EXPECT_EQ(ReadAll(prefix + ".tok"), (std::vector<int32_t>{200, 3}));
  }
}

// Each refusal names the file, the field and the reason, and writes nothing.
std::string Refusal(Dataset d, const std::function<void(std::string&)>& edit = nullptr) {
  const std::string prefix = Write(d, "mg_bad", edit);
  const std::string out = prefix + ".tok";
  std::filesystem::remove(out);
  auto c = ConvertMegatronDataset(prefix, out);
  EXPECT_FALSE(std::filesystem::exists(out + ".tmp"));
  if (c.ok()) return "ok";
  EXPECT_FALSE(std::filesystem::exists(out));
  const std::string msg = c.status().message();
  return msg.substr(msg.find("mg_bad"));
}

TEST(MegatronData, BadInputIsNamed) {
  Dataset d;
  d.sequences = {{1, 2}, {3}};
  d.documents = {0, 1, 2};
  EXPECT_EQ(Refusal(d), "ok");
  EXPECT_EQ(Refusal(d, [](std::string& s) { s[0] = 'X'; }),
            "mg_bad.idx: header: no MMIDIDX magic: not a Megatron-LM index file");
  EXPECT_EQ(Refusal(d, [](std::string& s) { s[9] = 2; }),
            "mg_bad.idx: version: 2, only version 1 is read");
  EXPECT_EQ(Refusal(d, [](std::string& s) { s[17] = 7; }),
            "mg_bad.idx: dtype: float32 (code 7) holds no token ids");
  EXPECT_EQ(Refusal(d, [](std::string& s) { s[17] = 9; }),
            "mg_bad.idx: dtype: code 9 is not 1 to 8");
  EXPECT_EQ(Refusal(d, [](std::string& s) { s.resize(20); }),
            "mg_bad.idx: header: the file has 20 bytes, fewer than the header's 34");
  EXPECT_EQ(Refusal(d, [](std::string& s) { s.pop_back(); }),
            "mg_bad.idx: sequence and document counts: 2 sequences and 3 documents need more "
            "than the 47 bytes after the header");
  EXPECT_EQ(
      Refusal(d, [](std::string& s) { s += std::string(2, '\0'); }),
      "mg_bad.idx: modes: the index has a mode per sequence (a multimodal dataset), not read");
  EXPECT_EQ(Refusal(d, [](std::string& s) { s += std::string(3, '\0'); }),
            "mg_bad.idx: size: 51 bytes after the header, 2 sequences and 3 documents take 48");
  // The second sequence's pointer past the .bin's 6 bytes.
  EXPECT_EQ(Refusal(d, [](std::string& s) { s[34 + 8 + 8] = 6; }),
            "mg_bad.idx: sequence 1: 1 tokens at byte 6 do not lie inside the .bin's 6 bytes");
  // document_indices ending before the last sequence.
  EXPECT_EQ(Refusal(d, [](std::string& s) { s[s.size() - 8] = 1; }),
            "mg_bad.idx: document_indices: the last is 1, not the sequence count 2");
  EXPECT_EQ(Refusal(d, [](std::string& s) { s[34 + 8 + 16] = 1; }),
            "mg_bad.idx: document_indices[0]: 1 (they run from 0 up to the sequence count, never "
            "down)");
  Dataset neg;
  neg.code = 2;  // int8
  neg.item = 1;
  neg.sequences = {{4, -3}};
  neg.documents = {0, 1};
  EXPECT_EQ(Refusal(neg), "mg_bad.bin: sequence 0, token 1: -3 is not a token id (0 to 2^32 - 1)");
  Dataset empty;
  empty.sequences = {{}};
  empty.documents = {0, 1};
  EXPECT_EQ(Refusal(empty), "mg_bad.bin: the dataset holds no token");
  auto c = ConvertMegatronDataset((Dir() / "mg_gone").string(), (Dir() / "x.tok").string());
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("mg_gone.idx' cannot be opened"), std::string::npos)
      << c.status().message();
}

// Read in place (ptdp train --data PREFIX): the same tokens as the conversion's, for every integer
// dtype, by the prefix and by PREFIX.bin through TokenSet (a blend's file).
TEST(MegatronData, ReadInPlaceIsTheConversionsStream) {
  struct Case {
    int code, item;
    std::vector<std::vector<int64_t>> sequences;
  };
  for (const Case& c : std::vector<Case>{{8, 2, {{5, 6, 7}, {1}, {2, 3}, {65535, 0, 9, 9}}},
                                         {1, 1, {{200, 3}, {255}}},
                                         {2, 1, {{100, 3}, {127}}},
                                         {3, 2, {{30000, 3}}},
                                         {4, 4, {{70000, 1}, {151935}}},
                                         {5, 8, {{70000, 1}, {2147483647}}}}) {
    Dataset d;
    d.code = c.code;
    d.item = c.item;
    d.sequences = c.sequences;
    d.documents = {0, int64_t(c.sequences.size())};
    const std::string prefix = Write(d, "mg_inplace" + std::to_string(c.code));
    ASSERT_TRUE(ConvertMegatronDataset(prefix, prefix + ".tok").ok());
    const std::vector<int32_t> want = ReadAll(prefix + ".tok");
    auto tf = OpenMegatronTokens(prefix, 0);
    ASSERT_TRUE(tf.ok()) << tf.status().ToString();
    ASSERT_EQ(tf->count(), int64_t(want.size())) << "code " << c.code;
    std::vector<int32_t> got(want.size());
    ASSERT_TRUE(tf->Read(0, tf->count(), got.data()).ok());
    EXPECT_EQ(got, want) << "code " << c.code;
    for (const std::string& name : {prefix, prefix + ".bin"}) {
      auto files = TokenSet::OpenFiles(BlendSpec{{1.0}, {name}}, 0, "--data");
      ASSERT_TRUE(files.ok()) << files.status().ToString();
      EXPECT_EQ((*files)[0]->count(), int64_t(want.size())) << name;
    }
  }
}

TEST(MegatronData, ReadInPlaceRefusals) {
  Dataset d;
  d.sequences = {{1, 2}, {3}};
  d.documents = {0, 2};
  // The second sequence at byte 2 of 4 rather than right after the first (byte 4): a gap, or a
  // reordering, that the stream cannot be read in place through.
  const std::string gap = Write(d, "mg_gap", [](std::string& s) { s[34 + 8 + 8] = 2; });
  auto tf = OpenMegatronTokens(gap, 0);
  ASSERT_FALSE(tf.ok());
  EXPECT_NE(tf.status().message().find("mg_gap.idx: sequence 1 starts at byte 2, not 4: its "
                                       "sequences are not back to back in the .bin, so it is not "
                                       "read in place (convert it: ptdp tokenize --megatron)"),
            std::string::npos)
      << tf.status().ToString();
  Dataset wide;
  wide.code = 5;
  wide.item = 8;
  wide.sequences = {{7, int64_t(1) << 33}};
  wide.documents = {0, 1};
  auto big = OpenMegatronTokens(Write(wide, "mg_big"), 100);
  ASSERT_FALSE(big.ok());
  EXPECT_NE(big.status().message().find("mg_big.bin': token 1 is 8589934592, not a token id"),
            std::string::npos)
      << big.status().ToString();
  Dataset neg;
  neg.code = 3;  // int16
  neg.sequences = {{4, -3}};
  neg.documents = {0, 1};
  auto below = OpenMegatronTokens(Write(neg, "mg_neg"), 100);
  ASSERT_FALSE(below.ok());
  EXPECT_NE(below.status().message().find("mg_neg.bin': token 1 is 4294967293, beyond the model's "
                                          "vocabulary of 100"),
            std::string::npos)
      << below.status().ToString();
  // A ptdp token file named PREFIX.bin beside a PREFIX.idx is read as the token file it is.
  const std::string prefix = Write(d, "mg_tok");
  ASSERT_TRUE(ConvertMegatronDataset(prefix, prefix + ".bin").ok());
  auto files = TokenSet::OpenFiles(BlendSpec{{1.0}, {prefix + ".bin"}}, 0, "--data");
  ASSERT_TRUE(files.ok()) << files.status().ToString();
  EXPECT_EQ((*files)[0]->count(), 3);
}

}  // namespace
}  // namespace ptdp::runtime
