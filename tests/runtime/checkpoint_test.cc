// The checkpoint's parsers and resharding (runtime/checkpoint): safetensors headers built and read
// back, every malformed header refused with its reason (length over the cap or past the end,
// offsets outside the data, overflowing shapes, overlapping tensors), the manifest's round trip and
// its bounds, both parsers under random damage, and a tensor assembled from pieces another layout
// wrote.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <random>

#include "runtime/checkpoint/manifest.h"
#include "runtime/checkpoint/pieces.h"
#include "runtime/checkpoint/safetensors.h"
#include "runtime/checkpoint/store.h"

namespace ptdp::runtime {
namespace {

std::string LengthPrefixed(const std::string& json) {
  std::string out(8, '\0');
  uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + json;
}

std::string ParseError(const std::string& file) {
  auto h = ParseSafetensorsHeader(file, static_cast<int64_t>(file.size()), "f");
  return h.ok() ? "ok" : h.status().message();
}

TEST(Safetensors, RoundTrip) {
  std::vector<StTensor> t = {{"a", "F32", {2, 3}}, {"b#adam_m", "F16", {5}}};
  const std::string header = EncodeSafetensorsHeader(&t, {{"format", "x"}});
  EXPECT_EQ(header.size() % 8, 0u);
  EXPECT_EQ(t[1].begin, 24);
  EXPECT_EQ(t[1].end, 34);
  const std::string file = header + std::string(34, '\1');
  auto h = ParseSafetensorsHeader(file, static_cast<int64_t>(file.size()), "f");
  ASSERT_TRUE(h.ok()) << h.status().message();
  EXPECT_EQ(h->data_start, static_cast<int64_t>(header.size()));
  ASSERT_NE(h->Find("b#adam_m"), nullptr);
  EXPECT_EQ(h->Find("b#adam_m")->shape, std::vector<int64_t>{5});
  EXPECT_EQ(h->metadata.at("format"), "x");
}

TEST(Safetensors, RefusesMalformedHeaders) {
  std::string huge(8, '\0');
  huge[6] = 1;  // 2^48
  EXPECT_NE(ParseError(huge).find("over the cap"), std::string::npos);
  EXPECT_NE(ParseError(LengthPrefixed("{}").substr(0, 9)).find("past the end"), std::string::npos);
  EXPECT_NE(ParseError("abc").find("too short"), std::string::npos);
  const std::string outside =
      LengthPrefixed(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})") + "1234";
  EXPECT_NE(ParseError(outside).find("outside the 4 data bytes"), std::string::npos);
  const std::string overflow = LengthPrefixed(
      R"({"a":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,0]}})");
  EXPECT_NE(ParseError(overflow).find("overflows"), std::string::npos);
  const std::string overlap =
      LengthPrefixed(R"({"a":{"dtype":"U8","shape":[4],"data_offsets":[0,4]},)"
                     R"("b":{"dtype":"U8","shape":[4],"data_offsets":[2,6]}})") +
      "123456";
  EXPECT_NE(ParseError(overlap).find("overlap"), std::string::npos);
  const std::string wrong_size =
      LengthPrefixed(R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}})") + "1234";
  EXPECT_NE(ParseError(wrong_size).find("dtype and shape need 8"), std::string::npos);
  const std::string dtype =
      LengthPrefixed(R"({"a":{"dtype":"Q7","shape":[1],"data_offsets":[0,1]}})") + "1";
  EXPECT_NE(ParseError(dtype).find("unknown dtype"), std::string::npos);
  const std::string negative =
      LengthPrefixed(R"({"a":{"dtype":"U8","shape":[-1],"data_offsets":[0,0]}})");
  EXPECT_NE(ParseError(negative).find("not an integer >= 0"), std::string::npos);
  EXPECT_NE(ParseError(LengthPrefixed("[1]")).find("not a JSON object"), std::string::npos);
}

Manifest TinyManifest() {
  Manifest m;
  m.step = 4;
  m.model.name = "tiny";
  m.model.layers = 4;
  m.model.hidden = 64;
  m.model.heads = 4;
  m.model.seq_len = 32;
  m.model.vocab = 256;
  m.layout.tp = 2;
  m.layout.global_batch = 16;
  m.data_seed = 18446744073709551615ull;  // above 2^53: kept exactly as a string
  m.token_count = 1000;
  m.adam_steps = 3;
  m.skipped_steps = 1;
  m.loss_scale = 1024;
  // One file of each checksum kind: FNV-1a 64 as checkpoints before 2026-11-27 carry it.
  m.files = {{"x.safetensors", 100, ChecksumKind::kFnv1a64, 0x0123456789abcdefull},
             {"z.safetensors", 7, ChecksumKind::kCrc32c, 0xe3069283u}};
  m.tensors["w"] = {{4, 3}, {{"x.safetensors", {0, 0}, {2, 3}}}};
  return m;
}

Result<Manifest> Reparse(const OrderedJson& j) {
  auto parsed = ParseJson(j.dump(), "manifest.json");
  if (!parsed.ok()) return parsed.status();
  return ManifestFromJson(*parsed, "manifest.json");
}

TEST(Manifest, RoundTrip) {
  auto m = Reparse(ManifestToJson(TinyManifest()));
  ASSERT_TRUE(m.ok()) << m.status().message();
  EXPECT_EQ(m->step, 4);
  EXPECT_EQ(m->data_seed, 18446744073709551615ull);
  EXPECT_EQ(m->layout.tp, 2);
  EXPECT_EQ(m->layout.global_batch, 16);
  EXPECT_EQ(m->files[0].checksum_kind, ChecksumKind::kFnv1a64);
  EXPECT_EQ(m->files[0].checksum, 0x0123456789abcdefull);
  EXPECT_EQ(m->files[1].checksum_kind, ChecksumKind::kCrc32c);
  EXPECT_EQ(m->files[1].checksum, 0xe3069283u);
  EXPECT_EQ(m->tensors.at("w").pieces[0].shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(m->loss_scale, 1024);
  EXPECT_EQ(m->skipped_steps, 1);
}

TEST(Manifest, RefusesOutOfBounds) {
  auto error = [](const OrderedJson& j) {
    auto m = Reparse(j);
    return m.ok() ? std::string("ok") : m.status().message();
  };
  OrderedJson j = ManifestToJson(TinyManifest());
  j["tensors"]["w"]["pieces"][0]["offset"] = {3, 0};
  EXPECT_NE(error(j).find("extends past the tensor's shape"), std::string::npos);
  j = ManifestToJson(TinyManifest());
  j["files"][0]["name"] = "../etc/passwd";
  EXPECT_NE(error(j).find("not a plain file name"), std::string::npos);
  j = ManifestToJson(TinyManifest());
  j["tensors"]["w"]["pieces"][0]["file"] = "y.safetensors";
  EXPECT_NE(error(j).find("which files does not list"), std::string::npos);
  j = ManifestToJson(TinyManifest());
  j["files"][0]["fnv1a64"] = "xyz";
  EXPECT_NE(error(j).find("files[0].fnv1a64: 'xyz' is not 16 hex digits"), std::string::npos);
  j = ManifestToJson(TinyManifest());
  j["files"][1]["crc32c"] = "-1234567";  // strtoull would take the sign: refused
  EXPECT_NE(error(j).find("files[1].crc32c: '-1234567' is not 8 hex digits"), std::string::npos);
  j = ManifestToJson(TinyManifest());
  j["files"][1]["fnv1a64"] = "0123456789abcdef";  // both kinds: the second is unknown
  EXPECT_NE(error(j).find("crc32c"), std::string::npos) << error(j);
  j = ManifestToJson(TinyManifest());
  j["files"][1].erase("crc32c");
  EXPECT_NE(error(j).find("files[1].crc32c"), std::string::npos) << error(j);
  j = ManifestToJson(TinyManifest());
  j["tensors"]["w"]["shape"] = {1e300, 3};
  EXPECT_NE(error(j).find("is not an integer in"), std::string::npos);
  j = ManifestToJson(TinyManifest());
  j["version"] = 9;
  EXPECT_NE(error(j).find("is not ptdp-checkpoint 1"), std::string::npos);
  j = ManifestToJson(TinyManifest());
  j["surprise"] = 1;
  EXPECT_NE(error(j).find("surprise"), std::string::npos);
}

// Random damage to a valid header or manifest (fixed seed, so a failure reproduces): the parsers
// must return, never crash or throw, and whatever they accept must keep their promises (every
// tensor inside the file, every piece inside its tensor). Not a fuzzer, a cheap stand-in for one.
std::string Mutate(std::string s, std::mt19937_64& rng, size_t from) {
  static const char kAlphabet[] = "0123456789-+.eE,:{}[]\" aF\\";
  const int edits = 1 + static_cast<int>(rng() % 4);
  for (int e = 0; e < edits && s.size() > from; ++e) {
    const size_t at = from + rng() % (s.size() - from);
    switch (rng() % 4) {
      case 0:
        s[at] = static_cast<char>(rng());
        break;
      case 1:
        s[at] = kAlphabet[rng() % (sizeof(kAlphabet) - 1)];
        break;
      case 2:
        s.erase(at, 1 + rng() % 8);
        break;
      default:
        s.resize(at);
        break;
    }
  }
  return s;
}

TEST(Safetensors, SurvivesRandomDamage) {
  std::vector<StTensor> t = {{"a", "F32", {2, 3}}, {"b", "BF16", {4}}, {"c#adam_v", "U8", {3, 1}}};
  const std::string good = EncodeSafetensorsHeader(&t, {{"k", "v"}}) + std::string(35, '\7');
  std::mt19937_64 rng(12);
  int accepted = 0;
  for (int i = 0; i < 100000; ++i) {
    // Mostly the JSON (bytes 8..), sometimes the length prefix too.
    const std::string bad = Mutate(good, rng, i % 10 == 0 ? 0 : 8);
    auto h = ParseSafetensorsHeader(bad, static_cast<int64_t>(bad.size()), "f");
    if (!h.ok()) continue;
    ++accepted;
    for (const auto& x : h->tensors) {
      ASSERT_LE(x.begin, x.end);
      ASSERT_LE(h->data_start + x.end, static_cast<int64_t>(bad.size()));
    }
  }
  EXPECT_LT(accepted, 100000);
}

TEST(Manifest, SurvivesRandomDamage) {
  const std::string good = ManifestToJson(TinyManifest()).dump();
  std::mt19937_64 rng(34);
  for (int i = 0; i < 20000; ++i) {
    const std::string bad = Mutate(good, rng, 0);
    auto j = ParseJson(bad, "manifest.json");
    if (!j.ok()) continue;
    auto m = ManifestFromJson(*j, "manifest.json");
    if (!m.ok()) continue;
    for (const auto& [name, t] : m->tensors) {
      for (const auto& p : t.pieces) {
        for (size_t d = 0; d < t.shape.size(); ++d) ASSERT_LE(p.offset[d] + p.shape[d], t.shape[d]);
      }
    }
  }
}

// A 4 x 3 tensor written as two row blocks (a t = 2, row-sharded writer) is read back as the
// column block of a t = 3, column-sharded reader, for all three state kinds.
TEST(Pieces, AssemblesAcrossLayouts) {
  const std::string dir = ::testing::TempDir() + "/ptdp_ckpt_pieces";
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(MakeDirs(dir).ok());
  Manifest m = TinyManifest();
  m.files.clear();
  m.tensors.clear();
  auto value = [](int k, int64_t r, int64_t c) { return float(100 * k + 10 * r + c); };
  for (int part = 0; part < 2; ++part) {
    const std::string name = "p" + std::to_string(part) + ".safetensors";
    std::vector<StTensor> t;
    for (int k = 0; k < kStateKinds; ++k)
      t.push_back({std::string("w") + kStateSuffix[k], "F32", {2, 3}});
    SyncedFile f;
    ASSERT_TRUE(f.Open(dir + "/" + name).ok());
    const std::string header = EncodeSafetensorsHeader(&t, {});
    ASSERT_TRUE(f.Write(header.data(), header.size()).ok());
    for (int k = 0; k < kStateKinds; ++k) {
      for (int64_t r = 0; r < 2; ++r) {
        for (int64_t c = 0; c < 3; ++c) {
          const float v = value(k, 2 * part + r, c);
          ASSERT_TRUE(f.Write(&v, 4).ok());
        }
      }
    }
    ASSERT_TRUE(f.Close().ok());
    m.files.push_back({name, f.bytes(), f.checksum_kind(), f.checksum()});
    m.tensors["w"].shape = {4, 3};
    m.tensors["w"].pieces.push_back({name, {2 * part, 0}, {2, 3}});
  }
  ParamTensor p;
  p.name = "w";
  p.global_shape = {4, 3};
  p.local_shape = {4, 1};
  p.sharding = Sharding::kCols;
  ShardCache cache(dir, &m);
  std::array<std::vector<float>, kStateKinds> out;
  for (auto& o : out) o.assign(4, -1);
  ASSERT_TRUE(AssembleLocal(m, cache, p, /*tp_rank=*/2, /*real_rows=*/4, out).ok());
  for (int k = 0; k < kStateKinds; ++k) {
    for (int64_t r = 0; r < 4; ++r) EXPECT_EQ(out[k][r], value(k, r, 2));
  }
  // A piece missing: refused, naming the first element no piece covers.
  m.tensors["w"].pieces.pop_back();
  ShardCache partial(dir, &m);
  const Status st = AssembleLocal(m, partial, p, 2, 4, out);
  EXPECT_NE(st.message().find("do not cover element (2, 2)"), std::string::npos) << st.message();
  // The whole tensor on one rank from both pieces (whole rows copied); then without the first
  // piece, whose rows come first: element (0, 0) is the first one uncovered.
  ParamTensor whole = p;
  whole.local_shape = {4, 3};
  whole.sharding = Sharding::kReplicated;
  m.tensors["w"].pieces.push_back({"p1.safetensors", {2, 0}, {2, 3}});
  ShardCache both(dir, &m);
  for (auto& o : out) o.assign(12, -1);
  ASSERT_TRUE(AssembleLocal(m, both, whole, 0, 4, out).ok());
  for (int k = 0; k < kStateKinds; ++k) {
    for (int64_t i = 0; i < 12; ++i) EXPECT_EQ(out[k][i], value(k, i / 3, i % 3)) << k << " " << i;
  }
  m.tensors["w"].pieces.erase(m.tensors["w"].pieces.begin());
  ShardCache second(dir, &m);
  const Status gap = AssembleLocal(m, second, whole, 0, 4, out);
  EXPECT_NE(gap.message().find("do not cover element (0, 0)"), std::string::npos) << gap.message();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ptdp::runtime
