#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "core/json.h"
#include "runtime/data/token_file.h"

namespace ptdp::runtime {
namespace {

std::string Tmp(const char* name) {
  return ::testing::TempDir() + name;
}

TEST(TokenFile, RoundTripsUint16AndUint32) {
  const std::string p16 = Tmp("t16.bin"), p32 = Tmp("t32.bin");
  ASSERT_TRUE(WriteTokenFile(p16, {1, 2, 65535, 7}).ok());
  ASSERT_TRUE(WriteTokenFile(p32, {1, 70000, 3}).ok());
  auto a = TokenFile::Open(p16, 0);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  EXPECT_EQ(a->bytes_per_token(), 2);
  EXPECT_EQ(a->count(), 4);
  std::vector<int32_t> v(4);
  ASSERT_TRUE(a->Read(0, 4, v.data()).ok());
  EXPECT_EQ(v, (std::vector<int32_t>{1, 2, 65535, 7}));
  auto b = TokenFile::Open(p32, 0);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->bytes_per_token(), 4);
  ASSERT_TRUE(b->Read(1, 2, v.data()).ok());
  EXPECT_EQ(v[0], 70000);
  EXPECT_EQ(v[1], 3);
}

TEST(TokenFile, RejectsTruncatedMissingAndOutOfVocabulary) {
  const std::string p = Tmp("tv.bin");
  ASSERT_TRUE(WriteTokenFile(p, {1, 2, 3, 300}).ok());
  auto oov = TokenFile::Open(p, 256);
  ASSERT_FALSE(oov.ok());
  EXPECT_NE(oov.status().message().find("token 3 is 300"), std::string::npos)
      << oov.status().message();
  auto text = ReadTextFile(p);
  ASSERT_TRUE(text.ok());
  ASSERT_TRUE(WriteFileAtomic(Tmp("short.bin"), text->substr(0, text->size() - 1)).ok());
  auto shrt = TokenFile::Open(Tmp("short.bin"), 0);
  ASSERT_FALSE(shrt.ok());
  EXPECT_EQ(shrt.status().code(), StatusCode::kIoError);
  EXPECT_FALSE(TokenFile::Open(Tmp("does-not-exist.bin"), 0).ok());
  ASSERT_TRUE(WriteFileAtomic(Tmp("bad.bin"), std::string(40, 'x')).ok());
  EXPECT_FALSE(TokenFile::Open(Tmp("bad.bin"), 0).ok());
}

TEST(TokenFile, RejectsAWrappingHeaderCountAndADirectory) {
  // 2^62 tokens of 2 bytes: the byte count wraps to 0 in 64 bits, so a file holding just the
  // header would pass a multiplied size check; the count must be compared, not the bytes.
  std::string h(kTokenMagic, sizeof(kTokenMagic));
  h += std::string("\1\0\0\0\2\0\0\0", 8);
  h += std::string("\0\0\0\0\0\0\0\x40", 8);
  ASSERT_TRUE(WriteFileAtomic(Tmp("huge.bin"), h).ok());
  auto huge = TokenFile::Open(Tmp("huge.bin"), 0);
  ASSERT_FALSE(huge.ok());
  EXPECT_NE(huge.status().message().find("header says 4611686018427387904 tokens"),
            std::string::npos)
      << huge.status().message();
  // Odd payload for 2-byte tokens.
  ASSERT_TRUE(WriteTokenFile(Tmp("odd.bin"), {1, 2}).ok());
  auto text = ReadTextFile(Tmp("odd.bin"));
  ASSERT_TRUE(text.ok());
  ASSERT_TRUE(WriteFileAtomic(Tmp("odd.bin"), *text + "x").ok());
  EXPECT_FALSE(TokenFile::Open(Tmp("odd.bin"), 0).ok());
  // A directory is named as such, not read as "bad magic".
  auto dir = TokenFile::Open(::testing::TempDir(), 0);
  ASSERT_FALSE(dir.ok());
  EXPECT_NE(dir.status().message().find("not a regular file"), std::string::npos)
      << dir.status().message();
}

TEST(TokenFile, SamplingIsDeterministicAndInRange) {
  for (int64_t i = 0; i < 1000; ++i) {
    const int64_t s = SequenceStart(7, i / 16, 16, i % 16, 100, 32);
    EXPECT_GE(s, 0);
    EXPECT_LE(s + 32, 99);  // s + 1 tokens fit
    EXPECT_EQ(s, SequenceStart(7, i / 16, 16, i % 16, 100, 32));
  }
  EXPECT_NE(SequenceStart(7, 0, 16, 0, 1 << 20, 32), SequenceStart(7, 0, 16, 1, 1 << 20, 32));
}

TEST(TokenFile, ByteTokenizeAndEntropy) {
  EXPECT_EQ(ByteTokenize("ab\xff"), (std::vector<uint32_t>{97, 98, 255}));
  EXPECT_NEAR(UnigramEntropyNats({1, 2, 1, 2}), std::log(2.0), 1e-12);
  EXPECT_DOUBLE_EQ(UnigramEntropyNats({5, 5, 5}), 0.0);
}

}  // namespace
}  // namespace ptdp::runtime
