// Test fixtures shared by the parameter-store tests (param_init_test.cc, optimizer_shard_test.cc):
// a tiny model whose vocabulary needs padding rows, and a one-rank checkpoint of it.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "runtime/checkpoint/manifest.h"
#include "runtime/checkpoint/pieces.h"
#include "runtime/checkpoint/safetensors.h"
#include "runtime/checkpoint/store.h"
#include "runtime/model/params.h"

namespace ptdp::runtime::test {

inline ModelSpec PaddedTinyModel() {
  ModelSpec m;
  m.name = "tiny";
  m.layers = 2;
  m.hidden = 32;
  m.heads = 4;
  m.seq_len = 16;
  m.vocab = 300;  // padded to 384 at t 1 and 512 at t 2: rows 384..511 are no writer's
  return m;
}

// The same with a mixture of experts on its second layer (4 SwiGLU experts, top 2; no biases, as
// the experts need).
inline ModelSpec PaddedTinyMoeModel() {
  ModelSpec m = PaddedTinyModel();
  m.name = "tiny-moe";
  m.swiglu = true;
  m.linear_bias = false;
  m.moe_experts = 4;
  m.moe_topk = 2;
  m.moe_ffn_hidden = 24;
  m.moe_dense_layers = 1;
  return m;
}

// A one-rank (t 1, p 1) checkpoint in `dir`: a kRandom store's weights, and Adam moments that
// differ per element (a fresh store's are zero, which would not tell a load from an init).
inline Manifest WriteOneRankCheckpoint(const ModelSpec& model, const std::string& dir) {
  CpuDevice dev;
  ParallelConfig one;
  auto w = ParamStore::Create(&dev, model, one, 0, 0, DType::kFp32);
  EXPECT_TRUE(w.ok()) << w.status().message();
  std::vector<StTensor> tensors;
  std::vector<std::vector<float>> data;
  for (int i = 0; i < static_cast<int>(w->entries().size()); ++i) {
    const ParamTensor& p = w->entries()[i].spec;
    std::vector<float> master = w->HostMaster(i), m(master.size()), v(master.size());
    for (size_t j = 0; j < master.size(); ++j) {
      m[j] = 1e-3f * float(j % 97) - 0.05f;
      v[j] = 1e-4f * float(1 + j % 89);
    }
    data.insert(data.end(), {master, m, v});
    for (int k = 0; k < kStateKinds; ++k) {
      tensors.push_back({p.name + kStateSuffix[k], "F32", p.local_shape});
    }
  }
  const std::string header = EncodeSafetensorsHeader(&tensors, {{"format", kCheckpointFormat}});
  SyncedFile f;
  EXPECT_TRUE(f.Open(dir + "/" + ShardFileName(0, 0)).ok());
  EXPECT_TRUE(f.Write(header.data(), header.size()).ok());
  for (const auto& d : data) EXPECT_TRUE(f.Write(d.data(), d.size() * sizeof(float)).ok());
  EXPECT_TRUE(f.Close().ok());
  Manifest man;
  man.model = model;
  man.layout = one;
  man.files.push_back({ShardFileName(0, 0), f.bytes(), f.checksum_kind(), f.checksum()});
  AddPiecesOf(model, one, 0, 0, &man);
  return man;
}

}  // namespace ptdp::runtime::test
