// A synthetic profile with round numbers, so that the tests' hand derivations stay simple:
// GEMMs at a flat 100 TFLOP/s, 1000 GB/s for memory-bound ops, no launch cost, no wave
// quantisation, intra-node busbw 200 GB/s (latency 10 us), inter-node 160 GB/s per node
// (latency 20 us) and 20 GB/s point-to-point per GPU, 80 GiB, 1 GiB workspace.
#pragma once

#include "core/hardware.h"
#include "core/model.h"

namespace ptdp::testing {

// An 8-layer GPT small enough for hand derivations (h 64, 4 heads, s 32, V 256).
inline ModelSpec TinyModel() {
  ModelSpec m;
  m.name = "tiny";
  m.layers = 8;
  m.hidden = 64;
  m.heads = 4;
  m.seq_len = 32;
  m.vocab = 256;
  return m;
}

inline Sourced S(double v) {
  return Sourced{v, "test"};
}

inline HardwareProfile RoundProfile(Precision precision = Precision::kFp16) {
  HardwareProfile p;
  p.name = "round";
  p.precision = precision;
  p.gpus_per_node = S(8);
  p.peak_tflops = S(200);
  p.memory_GiB = S(80);
  p.hbm_GBps = S(1250);
  p.memory_bound_GBps = S(1000);
  p.workspace_GiB = S(1);
  p.kernel_launch_us = S(0);
  p.precision_source = "test";
  p.gemm.dtype = IsHalf(precision) ? "fp16" : "fp32";
  p.gemm.source = "test";
  p.gemm.m = {1, 1e9};
  p.gemm.n = {1, 1e9};
  p.gemm.k = {1, 1e9};
  p.gemm.tflops.assign(8, 100.0);
  p.intra_node = {"intra", S(10), S(200), S(200), S(200), S(200)};
  p.inter_node = {"inter", S(20), S(160), S(160), S(160), S(20)};
  return p;
}

inline ClusterSpec RoundCluster(int gpus, int gpus_per_node = 8) {
  ClusterSpec c;
  c.name = "round";
  c.profile = RoundProfile();
  c.gpus_per_node = gpus_per_node;
  c.nodes = gpus / gpus_per_node;
  return c;
}

}  // namespace ptdp::testing
