// The checkpoint files' checksums (runtime/checkpoint/checksum.h): CRC32C against published values
// and a bit-at-a-time reference written here from the polynomial, the SSE4.2 and table paths equal
// on random buffers of odd lengths and alignments, and a damaged byte caught in files of both
// kinds, the old FNV-1a 64 manifests included.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <vector>

#include "runtime/checkpoint/checksum.h"
#include "runtime/checkpoint/manifest.h"
#include "runtime/checkpoint/store.h"

namespace ptdp::runtime {
namespace {

// CRC32C one bit at a time: the definition, with nothing shared with checksum.cc.
uint32_t ReferenceCrc32c(const unsigned char* p, size_t n) {
  uint32_t c = 0xffffffffu;
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int b = 0; b < 8; ++b) c = (c >> 1) ^ (0x82f63b78u & (0u - (c & 1)));
  }
  return ~c;
}

std::vector<unsigned char> RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<unsigned char> v(n);
  for (auto& x : v) x = static_cast<unsigned char>(gen());
  return v;
}

TEST(Checksum, Crc32cKnownValues) {
  // "123456789" is the catalogue's check value; the 32-byte buffers are RFC 3720's (B.4).
  std::vector<unsigned char> zeros(32, 0), ones(32, 0xff), up(32);
  for (int i = 0; i < 32; ++i) up[i] = static_cast<unsigned char>(i);
  for (auto* f : {&Crc32cPortable, &Crc32c}) {
    EXPECT_EQ(f(0, "123456789", 9), 0xe3069283u);
    EXPECT_EQ(f(0, "", 0), 0u);
    EXPECT_EQ(f(0, zeros.data(), 32), 0x8a9136aau);
    EXPECT_EQ(f(0, ones.data(), 32), 0x62a8ab43u);
    EXPECT_EQ(f(0, up.data(), 32), 0x46dd794eu);
  }
  EXPECT_EQ(ReferenceCrc32c(reinterpret_cast<const unsigned char*>("123456789"), 9), 0xe3069283u);
}

TEST(Checksum, Fnv1a64KnownValues) {
  EXPECT_EQ(Fnv1a64(kFnv1a64Init, "", 0), 0xcbf29ce484222325ull);
  EXPECT_EQ(Fnv1a64(kFnv1a64Init, "a", 1), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(ChecksumHex(ChecksumKind::kFnv1a64, 0xaf63dc4c8601ec8cull), "af63dc4c8601ec8c");
  EXPECT_EQ(ChecksumHex(ChecksumKind::kCrc32c, 0xe306928u), "0e306928");
}

// Lengths around the 8-byte words and the three 4096-byte streams; every start offset mod 8.
TEST(Checksum, PathsAgreeOnOddLengthsAndAlignments) {
  const std::vector<unsigned char> buf = RandomBytes(5 * 12288 + 64, 7);
  const size_t lengths[] = {0, 1, 7, 8, 9, 63, 4095, 12287, 12288, 12289, 3 * 12288 + 5, 5 * 12288};
  for (size_t n : lengths) {
    for (size_t off = 0; off < 8; ++off) {
      const unsigned char* p = buf.data() + off;
      const uint32_t want = ReferenceCrc32c(p, n);
      EXPECT_EQ(Crc32cPortable(0, p, n), want) << n << " bytes at +" << off;
      EXPECT_EQ(Crc32c(0, p, n), want) << n << " bytes at +" << off;
      if (Crc32cHardwareAvailable()) {
        EXPECT_EQ(Crc32cHardware(0, p, n), want) << n << " bytes at +" << off;
      }
    }
  }
  if (!Crc32cHardwareAvailable()) GTEST_SKIP() << "no SSE4.2: the table path alone was checked";
}

TEST(Checksum, StreamEqualsWholeWhateverTheSplits) {
  const std::vector<unsigned char> buf = RandomBytes(100003, 11);
  std::mt19937 gen(3);
  for (ChecksumKind kind : {ChecksumKind::kCrc32c, ChecksumKind::kFnv1a64}) {
    StreamChecksum whole(kind), parts(kind);
    whole.Update(buf.data(), buf.size());
    size_t at = 0;
    while (at < buf.size()) {
      const size_t n = std::min<size_t>(buf.size() - at, gen() % 20000);
      parts.Update(buf.data() + at, n);
      at += n;
    }
    EXPECT_EQ(parts.value(), whole.value());
  }
  StreamChecksum crc(ChecksumKind::kCrc32c);
  crc.Update(buf.data(), buf.size());
  EXPECT_EQ(crc.value(), ReferenceCrc32c(buf.data(), buf.size()));
}

class ChecksumFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    // One folder per test and process: ctest runs this fixture's tests in parallel (-j), and
    // other builds' runs share the temporary folder.
    dir_ = ::testing::TempDir() + "/ptdp_checksum_files_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name() + "_" +
           std::to_string(::getpid());
    std::filesystem::remove_all(dir_);
    ASSERT_TRUE(MakeDirs(dir_).ok());
    bytes_ = RandomBytes(50000, 5);
    SyncedFile f;
    ASSERT_TRUE(f.Open(dir_ + "/a.safetensors").ok());
    ASSERT_TRUE(f.Write(bytes_.data(), bytes_.size()).ok());
    ASSERT_TRUE(f.Close().ok());
    crc_ = {"a.safetensors", f.bytes(), f.checksum_kind(), f.checksum()};
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  void FlipByte(int64_t at) {
    std::fstream s(dir_ + "/a.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    s.seekp(at);
    s.put(static_cast<char>(bytes_[size_t(at)] ^ 0x10));
  }
  // Both readers refuse the file with one line naming it and the checksum kind.
  void ExpectRefused(const CkptFile& f) {
    const std::string want =
        dir_ + "/a.safetensors: checksum mismatch (" + ChecksumKeyName(f.checksum_kind) + " ";
    const Status v = VerifyFile(dir_, f);
    EXPECT_NE(v.message().find(want), std::string::npos) << v.message();
    EXPECT_EQ(v.message().find('\n'), std::string::npos);
    auto m = MapVerifiedFile(dir_, f);
    ASSERT_FALSE(m.ok());
    EXPECT_NE(m.status().message().find(want), std::string::npos) << m.status().message();
  }
  std::string dir_;
  std::vector<unsigned char> bytes_;
  CkptFile crc_;
};

TEST_F(ChecksumFiles, Crc32cWrittenVerifiedAndAFlippedByteRefused) {
  EXPECT_EQ(crc_.checksum_kind, ChecksumKind::kCrc32c);
  EXPECT_EQ(crc_.checksum, ReferenceCrc32c(bytes_.data(), bytes_.size()));
  ASSERT_TRUE(VerifyFile(dir_, crc_).ok());
  auto m = MapVerifiedFile(dir_, crc_);
  ASSERT_TRUE(m.ok()) << m.status().message();
  ASSERT_EQ((*m)->size(), int64_t(bytes_.size()));
  EXPECT_EQ(std::memcmp((*m)->data(), bytes_.data(), bytes_.size()), 0);
  m->reset();
  FlipByte(31337);
  ExpectRefused(crc_);
}

// A manifest as the code before CRC32C wrote it ("fnv1a64", 16 hex digits), read from disk.
TEST_F(ChecksumFiles, OldFnvManifestStillLoadsAndAFlippedByteIsRefused) {
  const uint64_t fnv = Fnv1a64(kFnv1a64Init, bytes_.data(), bytes_.size());
  Manifest old;
  old.step = 2;
  old.adam_steps = 2;
  old.model.name = "t";
  old.model.layers = 1;
  old.model.hidden = 8;
  old.model.heads = 1;
  old.model.seq_len = 4;
  old.model.vocab = 16;
  OrderedJson j = ManifestToJson(old);
  // The files entry spelled out as the old writer spelled it, not through ManifestToJson.
  j["files"] = OrderedJson::array();
  j["files"].push_back({{"name", "a.safetensors"},
                        {"bytes", bytes_.size()},
                        {"fnv1a64", ChecksumHex(ChecksumKind::kFnv1a64, fnv)}});
  std::ofstream(dir_ + "/manifest.json") << j.dump(1) << "\n";
  auto m = ReadManifest(dir_);
  ASSERT_TRUE(m.ok()) << m.status().message();
  ASSERT_EQ(m->files.size(), 1u);
  EXPECT_EQ(m->files[0].checksum_kind, ChecksumKind::kFnv1a64);
  EXPECT_EQ(m->files[0].checksum, fnv);
  EXPECT_TRUE(VerifyCheckpoint(dir_, *m).ok());
  EXPECT_TRUE(MapVerifiedFile(dir_, m->files[0]).ok());
  FlipByte(49999);
  ExpectRefused(m->files[0]);
}

}  // namespace
}  // namespace ptdp::runtime
