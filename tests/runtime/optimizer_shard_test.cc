// The distributed optimizer's store (runtime/model/params.h OptimizerShard): on each of d = 3 data
// ranks (an odd d, so the last shard holds padding) of every (pp, tp) rank of t 2, p 2, the
// shards' owned ranges partition the arena, the bytes allocated per tag are the ledger's sharded
// figures (core/ledger.h OptimizerShardsOf), and the state of the owned elements and the whole
// compute copy equal, bit for bit, those of an unsharded store: initialised alike, and after a
// load of the same checkpoint into a kLoadFollows store.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "core/ledger.h"
#include "runtime/checkpoint/param_io.h"
#include "runtime/model/params.h"
#include "tests/runtime/param_store_fixture.h"

namespace ptdp::runtime {
namespace {

template <typename T>
std::vector<T> ShardHostCopy(Device* dev, TensorRef r) {
  std::vector<T> out(static_cast<size_t>(r.count * DTypeBytes(r.dtype) / Bytes(sizeof(T))));
  dev->Copy(out.data(), r.data, r.count * DTypeBytes(r.dtype));
  return out;
}

// The sharded store `s` against the unsharded `u`: the owned state and the whole compute copy.
void ExpectShareOfWhole(Device* sdev, ParamStore& s, Device* udev, ParamStore& u,
                        const std::string& what) {
  const ElementRange mine = s.owned();
  for (StateKind k : {StateKind::kMaster, StateKind::kAdamM, StateKind::kAdamV}) {
    if (mine.count() == 0) break;
    const auto a = ShardHostCopy<float>(sdev, s.state(k, mine));
    const auto b = ShardHostCopy<float>(udev, u.state(k, mine));
    ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0) << what << " kind " << int(k);
  }
  for (int i = 0; i < static_cast<int>(s.entries().size()); ++i) {
    if (s.compute_copy(i).empty()) break;
    ASSERT_EQ(ShardHostCopy<uint16_t>(sdev, s.compute_copy(i)),
              ShardHostCopy<uint16_t>(udev, u.compute_copy(i)))
        << what << " compute copy of " << s.entries()[i].spec.name;
  }
}

void CheckShards(const ModelSpec& model, const std::string& dir, const Manifest& man,
                 DType compute) {
  ParallelConfig c;
  c.tp = 2;
  c.pp = 2;
  c.dp = 3;
  c.distributed_optimizer = true;
  c.precision = compute == DType::kFp32 ? Precision::kFp32 : Precision::kBf16;
  const std::string prec = compute == DType::kFp32 ? "fp32" : "bf16";
  for (int pp = 0; pp < c.pp; ++pp) {
    for (int tp = 0; tp < c.tp; ++tp) {
      CpuDevice udev;
      auto whole = ParamStore::Create(&udev, model, c, pp, tp, compute);
      ASSERT_TRUE(whole.ok());
      ASSERT_TRUE(LoadCheckpointParams(&*whole, dir, man, model.vocab).ok());
      CpuDevice fresh_dev;  // kRandom, compared before the load
      auto fresh_whole = ParamStore::Create(&fresh_dev, model, c, pp, tp, compute);
      ASSERT_TRUE(fresh_whole.ok());
      const MemoryLedger ledger = ParameterMemory(model, c, pp);
      int64_t covered = 0;
      for (int r = 0; r < c.dp; ++r) {
        const std::string what = prec + " pp " + std::to_string(pp) + " tp " + std::to_string(tp) +
                                 " shard " + std::to_string(r);
        CpuDevice sdev;
        auto s = ParamStore::Create(&sdev, model, c, pp, tp, compute, ParamInit::kRandom,
                                    OptimizerShard{c.dp, r});
        ASSERT_TRUE(s.ok());
        EXPECT_EQ(sdev.stats().current[int(MemTag::kWeights)], ledger.weights) << what;
        EXPECT_EQ(sdev.stats().current[int(MemTag::kGrads)], ledger.grads) << what;
        EXPECT_EQ(sdev.stats().current[int(MemTag::kOptimizer)], ledger.optimizer) << what;
        EXPECT_EQ(s->owned().begin, std::min(s->size(), r * s->shard_elements())) << what;
        covered += s->owned().count();
        ExpectShareOfWhole(&sdev, *s, &fresh_dev, *fresh_whole, what + " initialised");
        CpuDevice ldev;
        auto loaded = ParamStore::Create(&ldev, model, c, pp, tp, compute, ParamInit::kLoadFollows,
                                         OptimizerShard{c.dp, r});
        ASSERT_TRUE(loaded.ok());
        const Status st = LoadCheckpointParams(&*loaded, dir, man, model.vocab);
        ASSERT_TRUE(st.ok()) << st.message();
        ExpectShareOfWhole(&ldev, *loaded, &udev, *whole, what + " loaded");
        for (float g : ShardHostCopy<float>(&ldev, loaded->all_grads())) ASSERT_EQ(g, 0.0f) << what;
      }
      EXPECT_EQ(covered, whole->size());
    }
  }
}

TEST(OptimizerShard, EachRankHoldsItsShareOfTheWholeStore) {
  const std::string dir =
      ::testing::TempDir() + "/ptdp_optimizer_shard_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(MakeDirs(dir).ok());
  const ModelSpec model = test::PaddedTinyModel();
  const Manifest man = test::WriteOneRankCheckpoint(model, dir);
  CheckShards(model, dir, man, DType::kFp32);
  CheckShards(model, dir, man, DType::kBf16);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ptdp::runtime
