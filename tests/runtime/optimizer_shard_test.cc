// The distributed optimizer's store (runtime/model/params.h OptimizerShard): on each of d = 3 data
// ranks (an odd d, so the last shard holds padding) of every (pp, tp) rank of t 2, p 2, the
// shards' owned ranges partition the arena, the bytes allocated per tag are the ledger's sharded
// figures (core/ledger.h OptimizerShardsOf), and the state of the owned elements and the whole
// compute copy equal, bit for bit, those of an unsharded store: initialised alike, and after a
// load of the same checkpoint into a kLoadFollows store. The same for a mixture of experts with
// ep = 2 over d = 6: the dense region sharded over the 6 data ranks, each expert-parallel rank's
// experts over its 3 (ExpertWeightReplicas), in a region of their own.
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

// The sharded store `s` against the unsharded `u`: the owned state and the whole compute copy,
// entry by entry (with ep > 1 the regions' padding puts the experts at other offsets).
void ExpectShareOfWhole(Device* sdev, ParamStore& s, Device* udev, ParamStore& u,
                        const std::string& what) {
  ASSERT_EQ(s.entries().size(), u.entries().size()) << what;
  for (StateKind k : {StateKind::kMaster, StateKind::kAdamM, StateKind::kAdamV}) {
    for (int i = 0; i < static_cast<int>(s.entries().size()); ++i) {
      for (const ElementRange& mine : s.owned()) {
        const ElementRange o = Intersect(s.range(i), mine);
        if (o.count() == 0) continue;
        const int64_t at = u.range(i).begin + (o.begin - s.range(i).begin);
        const auto a = ShardHostCopy<float>(sdev, s.state(k, o));
        const auto b = ShardHostCopy<float>(udev, u.state(k, {at, at + o.count()}));
        ASSERT_EQ(std::memcmp(a.data(), b.data(), a.size() * 4), 0)
            << what << " kind " << int(k) << " of " << s.entries()[i].spec.name;
      }
    }
  }
  for (int i = 0; i < static_cast<int>(s.entries().size()); ++i) {
    if (s.compute_copy(i).empty()) break;
    ASSERT_EQ(ShardHostCopy<uint16_t>(sdev, s.compute_copy(i)),
              ShardHostCopy<uint16_t>(udev, u.compute_copy(i)))
        << what << " compute copy of " << s.entries()[i].spec.name;
  }
}

// Data rank r of `c` (expert-parallel rank r % ep) against an unsharded store of the same experts.
void CheckShards(const ModelSpec& model, const ParallelConfig& layout, const std::string& dir,
                 const Manifest& man, DType compute) {
  ParallelConfig c = layout;
  c.distributed_optimizer = true;
  c.precision = compute == DType::kFp32 ? Precision::kFp32 : Precision::kBf16;
  const std::string prec = compute == DType::kFp32 ? "fp32" : "bf16";
  for (int pp = 0; pp < c.pp; ++pp) {
    for (int tp = 0; tp < c.tp; ++tp) {
      const MemoryLedger ledger = ParameterMemory(model, c, pp);
      int64_t dense_covered = 0, dense = 0;
      for (int ep_rank = 0; ep_rank < c.ep; ++ep_rank) {
        CpuDevice udev;
        auto whole =
            ParamStore::Create(&udev, model, c, pp, tp, compute, ParamInit::kRandom, {}, ep_rank);
        ASSERT_TRUE(whole.ok());
        ASSERT_TRUE(LoadCheckpointParams(&*whole, dir, man, model.vocab).ok());
        CpuDevice fresh_dev;  // kRandom, compared before the load
        auto fresh_whole = ParamStore::Create(&fresh_dev, model, c, pp, tp, compute,
                                              ParamInit::kRandom, {}, ep_rank);
        ASSERT_TRUE(fresh_whole.ok());
        ASSERT_EQ(whole->regions().size(), c.ep > 1 ? 2u : 1u);
        dense = whole->regions()[0].elements;
        int64_t expert_covered = 0;
        for (int r = ep_rank; r < c.dp; r += c.ep) {
          const std::string what = prec + " pp " + std::to_string(pp) + " tp " +
                                   std::to_string(tp) + " shard " + std::to_string(r);
          const OptimizerShard shard =
              c.ep > 1 ? OptimizerShard{c.dp, r, c.ExpertWeightReplicas(), r / c.ep}
                       : OptimizerShard{c.dp, r};
          CpuDevice sdev;
          auto s = ParamStore::Create(&sdev, model, c, pp, tp, compute, ParamInit::kRandom, shard,
                                      ep_rank);
          ASSERT_TRUE(s.ok());
          EXPECT_EQ(sdev.stats().current[int(MemTag::kWeights)], ledger.weights) << what;
          EXPECT_EQ(sdev.stats().current[int(MemTag::kGrads)], ledger.grads) << what;
          EXPECT_EQ(sdev.stats().current[int(MemTag::kOptimizer)], ledger.optimizer) << what;
          const StateRegion& d = s->regions()[0];
          EXPECT_EQ(s->owned()[0].begin, std::min(d.elements, r * d.shard)) << what;
          dense_covered += s->owned()[0].count();
          if (c.ep > 1) expert_covered += s->owned()[1].count();
          ExpectShareOfWhole(&sdev, *s, &fresh_dev, *fresh_whole, what + " initialised");
          CpuDevice ldev;
          auto loaded = ParamStore::Create(&ldev, model, c, pp, tp, compute,
                                           ParamInit::kLoadFollows, shard, ep_rank);
          ASSERT_TRUE(loaded.ok());
          const Status st = LoadCheckpointParams(&*loaded, dir, man, model.vocab);
          ASSERT_TRUE(st.ok()) << st.message();
          ExpectShareOfWhole(&ldev, *loaded, &udev, *whole, what + " loaded");
          for (float g : ShardHostCopy<float>(&ldev, loaded->all_grads())) {
            ASSERT_EQ(g, 0.0f) << what;
          }
        }
        if (c.ep > 1) {
          EXPECT_EQ(expert_covered, whole->regions()[1].elements);
        }
      }
      EXPECT_EQ(dense_covered, dense);
    }
  }
}

ParallelConfig Layout(int dp, int ep) {
  ParallelConfig c;
  c.tp = 2;
  c.pp = 2;
  c.dp = dp;
  c.ep = ep;
  return c;
}

TEST(OptimizerShard, EachRankHoldsItsShareOfTheWholeStore) {
  const std::string dir =
      ::testing::TempDir() + "/ptdp_optimizer_shard_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(MakeDirs(dir).ok());
  const ModelSpec model = test::PaddedTinyModel();
  const Manifest man = test::WriteOneRankCheckpoint(model, dir);
  CheckShards(model, Layout(3, 1), dir, man, DType::kFp32);
  CheckShards(model, Layout(3, 1), dir, man, DType::kBf16);
  std::filesystem::remove_all(dir);
}

TEST(OptimizerShard, ExpertsAreShardedOverTheirOwnReplicas) {
  const std::string dir =
      ::testing::TempDir() + "/ptdp_optimizer_shard_moe_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(MakeDirs(dir).ok());
  const ModelSpec model = test::PaddedTinyMoeModel();
  ASSERT_TRUE(model.Validate("tiny-moe").ok()) << model.Validate("tiny-moe").ToString();
  const Manifest man = test::WriteOneRankCheckpoint(model, dir);
  CheckShards(model, Layout(6, 2), dir, man, DType::kFp32);
  CheckShards(model, Layout(6, 2), dir, man, DType::kBf16);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ptdp::runtime
