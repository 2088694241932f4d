// ParamInit::kLoadFollows (runtime/model/params.h), the parameters of a plan switch's or a
// --load's new trainer: before the load every element the load must write is still the CPU
// device's fresh NaN (so an element a load ever missed would train as NaN, visibly), and the
// vocabulary padding rows hold kRandom's values; after loading a checkpoint that another layout
// wrote (t 1, p 1 into t 2, p 2: other shards, the tied copy, padding rows the writer lacked), the
// store equals, bit for bit, a kRandom store loaded from the same checkpoint (weights, Adam's
// moments, gradients, the bf16 compute copy). A checkpoint without one of the tensors is refused.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>

#include "runtime/checkpoint/manifest.h"
#include "runtime/checkpoint/param_io.h"
#include "runtime/checkpoint/pieces.h"
#include "runtime/checkpoint/safetensors.h"
#include "runtime/checkpoint/store.h"
#include "runtime/model/params.h"
#include "tests/runtime/param_store_fixture.h"

namespace ptdp::runtime {
namespace {

using test::PaddedTinyModel;
using test::WriteOneRankCheckpoint;

std::vector<float> HostCopy(Device* dev, TensorRef r) {
  std::vector<float> out(static_cast<size_t>(r.count));
  dev->Copy(out.data(), r.data, r.count * Bytes(sizeof(float)));
  return out;
}

// Whether local element j of entry `p` lies in a row a load must write (not vocabulary padding).
bool LoadWrites(const ParamTensor& p, int tp_rank, int64_t vocab, int64_t j) {
  const int64_t first = FirstPaddingRow(p, tp_rank, vocab);
  return first < 0 || j / p.local_shape[1] < first;
}

// Every local (pp, tp) rank of t 2, p 2, in `compute`: the kLoadFollows store before and after the
// load against a kRandom store loaded from the same checkpoint.
void CheckLoadFollows(const ModelSpec& model, const std::string& dir, const Manifest& man,
                      DType compute) {
  ParallelConfig c;
  c.tp = 2;
  c.pp = 2;
  for (int pp = 0; pp < c.pp; ++pp) {
    for (int tp = 0; tp < c.tp; ++tp) {
      CpuDevice dev;
      auto random = ParamStore::Create(&dev, model, c, pp, tp, compute);
      auto left = ParamStore::Create(&dev, model, c, pp, tp, compute, ParamInit::kLoadFollows);
      ASSERT_TRUE(random.ok() && left.ok());
      int64_t nan = 0, padding = 0;
      for (int i = 0; i < static_cast<int>(left->entries().size()); ++i) {
        const ParamTensor& p = left->entries()[i].spec;
        const std::vector<float> l[] = {left->HostMaster(i), HostCopy(&dev, left->adam_m(i)),
                                        HostCopy(&dev, left->adam_v(i))};
        const std::vector<float> r[] = {random->HostMaster(i), HostCopy(&dev, random->adam_m(i)),
                                        HostCopy(&dev, random->adam_v(i))};
        for (int k = 0; k < kStateKinds; ++k) {
          for (size_t j = 0; j < l[k].size(); ++j) {
            if (LoadWrites(p, tp, model.vocab, int64_t(j))) {
              ASSERT_TRUE(std::isnan(l[k][j])) << p.name << kStateSuffix[k] << " " << j;
              ++nan;
            } else {
              ASSERT_EQ(std::memcmp(&l[k][j], &r[k][j], 4), 0) << p.name << " " << j;
              ++padding;
            }
          }
        }
        for (float g : HostCopy(&dev, left->grad(i))) ASSERT_EQ(g, 0.0f) << p.name;
      }
      EXPECT_GT(nan, 0);
      // Rank tp 1 holds rows 256..511 of the word embedding (or its tied copy): 300..511 padding.
      if (tp == 1) {
        EXPECT_EQ(padding, kStateKinds * (512 - 300) * model.hidden);
      }
      ASSERT_TRUE(LoadCheckpointParams(&*random, dir, man, model.vocab).ok());
      const Status loaded = LoadCheckpointParams(&*left, dir, man, model.vocab);
      ASSERT_TRUE(loaded.ok()) << loaded.message();
      for (int i = 0; i < static_cast<int>(left->entries().size()); ++i) {
        const std::string& name = left->entries()[i].spec.name;
        const TensorRef l[] = {left->master(i), left->adam_m(i), left->adam_v(i), left->grad(i)};
        const TensorRef r[] = {random->master(i), random->adam_m(i), random->adam_v(i),
                               random->grad(i)};
        for (int k = 0; k < 4; ++k) {
          const std::vector<float> a = HostCopy(&dev, l[k]), b = HostCopy(&dev, r[k]);
          for (float x : a) ASSERT_TRUE(std::isfinite(x)) << name << " " << k;
          ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << name << " " << k;
        }
        const TensorRef lc = left->compute_copy(i), rc = random->compute_copy(i);
        ASSERT_EQ(lc.count, rc.count);
        const Bytes copy_bytes = lc.count * DTypeBytes(compute);
        std::vector<char> a(static_cast<size_t>(copy_bytes)), b(a.size());
        dev.Copy(a.data(), lc.data, copy_bytes);
        dev.Copy(b.data(), rc.data, copy_bytes);
        ASSERT_EQ(a, b) << name << " compute copy";
      }
    }
  }
}

TEST(ParamInit, LoadFollowsEqualsRandomOnceLoaded) {
  // Per process: other builds' test runs share the temporary folder.
  const std::string dir = ::testing::TempDir() + "/ptdp_param_init_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(MakeDirs(dir).ok());
  const ModelSpec model = PaddedTinyModel();
  const Manifest man = WriteOneRankCheckpoint(model, dir);
  CheckLoadFollows(model, dir, man, DType::kFp32);
  CheckLoadFollows(model, dir, man, DType::kBf16);
  // A checkpoint that lacks a tensor the store skipped is refused, not half loaded.
  Manifest lacking = man;
  lacking.tensors.erase("layer1.mlp.fc2.weight");
  ParallelConfig c;
  c.tp = 2;
  c.pp = 2;
  CpuDevice dev;
  auto left = ParamStore::Create(&dev, model, c, 1, 0, DType::kFp32, ParamInit::kLoadFollows);
  ASSERT_TRUE(left.ok());
  const Status s = LoadCheckpointParams(&*left, dir, lacking, model.vocab);
  EXPECT_NE(s.message().find("has no tensor 'layer1.mlp.fc2.weight'"), std::string::npos)
      << s.message();
  std::filesystem::remove_all(dir);
}

// The padding rows of each rank's vocabulary block (t 2, vocabulary 300 padded to 512).
TEST(ParamInit, FirstPaddingRow) {
  ParamTensor word;
  word.name = "embedding.word";
  word.local_shape = {256, 32};
  word.global_shape = {512, 32};
  word.sharding = Sharding::kRows;
  EXPECT_EQ(FirstPaddingRow(word, 0, 300), -1);
  EXPECT_EQ(FirstPaddingRow(word, 1, 300), 300 - 256);
  EXPECT_EQ(FirstPaddingRow(word, 1, 512), -1);
  word.name = "output.word_copy";
  EXPECT_EQ(FirstPaddingRow(word, 1, 200), 0);  // the whole block is padding
  word.name = "layer0.mlp.fc1.weight";
  EXPECT_EQ(FirstPaddingRow(word, 1, 300), -1);
}

}  // namespace
}  // namespace ptdp::runtime
