#include "costmodel/gemm.h"

#include <algorithm>
#include <cmath>

#include "core/status.h"
#include "core/units.h"
#include "costmodel/log_axis.h"

namespace ptdp::costmodel {

namespace {

// One backward GEMM [m,n] = [m,k] [k,n] priced from the forward table: its FLOP time divided by
// the profile's backward efficiency (fitted by `ptdp calibrate`), its launch not; absent or 1, the
// forward table's time as it is, bit for bit. GemmBackwardTime's two GEMMs and
// GemmBackwardWeightTime's one are this term, so a weight gradient never costs more than the
// backward that holds it.
Seconds BackwardFromForwardTable(const HardwareProfile& hw, int64_t m, int64_t n, int64_t k,
                                 int64_t batch) {
  const Seconds forward_priced = GemmTime(hw, m, n, k, batch);
  const double efficiency = hw.gemm_backward_efficiency.value;
  if (!(efficiency > 0) || efficiency == 1.0) return forward_priced;
  const Seconds launch = hw.kernel_launch_us.value * kUs;
  return (forward_priced - launch) / efficiency + launch;
}

// A profile with both backward tables prices a Linear's backward GEMMs from them (never one from a
// table and the other from the forward's).
bool HasBackwardTables(const HardwareProfile& hw) {
  return !hw.gemm_backward_data.empty() && !hw.gemm_backward_weight.empty();
}

// One GEMM of 2 m n k FLOPs at a measured rate (a backward table's or an exact point's), with the
// profile's launch cost and no wave quantisation (the rate was timed at the Linear's layout).
Seconds AtRate(const HardwareProfile& hw, int64_t m, int64_t n, int64_t k, double tflops) {
  const double flops = 2.0 * double(m) * double(n) * double(k);
  return flops / (tflops * kTera) + hw.kernel_launch_us.value * kUs;
}

// One backward GEMM of the Linear whose forward is (m, n, k), from its measured table (keyed by
// the forward's coordinates).
// On a share of the device (HardwareProfile::device_share) the rate is the table's for R =
// DeviceCopies() copies side by side, each taking the whole time: R times the output tiles, which
// are the rows m of the input gradient [m,k] and the columns n of the weight gradient [k,n].
enum class BackwardKind { kData, kWeight };
Seconds FromBackwardTable(const HardwareProfile& hw, BackwardKind kind, int64_t m, int64_t n,
                          int64_t k) {
  const bool weight = kind == BackwardKind::kWeight;
  const GemmTable& table = weight ? hw.gemm_backward_weight : hw.gemm_backward_data;
  const double copies = hw.DeviceCopies();
  const double rate = GemmTflops(table, double(m) * (weight ? 1.0 : copies),
                                 double(n) * (weight ? copies : 1.0), double(k));
  return AtRate(hw, m, n, k, rate / copies);
}

// A derived table (one with wave quantisation, core/hardware.h: a measured table holds both its
// last wave and its memory traffic) knows nothing of the bytes a GEMM moves: its time is at least
// A, B and C once each at memory_bound_GBps (the roofline), in the table's element width. What
// binds are the attention products of the unfused 2021 kernels, k = d_head, which write or read
// a b a s^2 score matrix for 2 s^2 d_head FLOPs a head.
Seconds MemoryFloor(const HardwareProfile& hw, int64_t m, int64_t n, int64_t k, int64_t batch) {
  if (!(hw.sm_count.value > 0)) return 0.0;
  const double element = hw.gemm.dtype == "fp32" ? 4.0 : 2.0;
  const double bytes = element * double(batch) *
                       (double(m) * double(k) + double(k) * double(n) + double(m) * double(n));
  return hw.DeviceCopies() * bytes / GBpsToBytesPerSecond(hw.memory_bound_GBps.value);
}

// An exact point was timed on the whole device at that shape: not a share's rate.
const GemmPoint* PointFor(const HardwareProfile& hw, int64_t m, int64_t n, int64_t k) {
  return hw.DeviceCopies() == 1.0 ? hw.gemm_points.Find(m, n, k) : nullptr;
}

}  // namespace

double GemmTflops(const GemmTable& t, double m, double n, double k) {
  PTDP_CHECK(m > 0 && n > 0 && k > 0);
  // Below the grid, the time of the smallest size holds, so throughput scales with the size.
  double scale = 1.0;
  const double mc = std::max(m, t.m.front()), nc = std::max(n, t.n.front()),
               kc = std::max(k, t.k.front());
  scale = (m / mc) * (n / nc) * (k / kc);
  const AxisPos pm = Locate(t.m, mc), pn = Locate(t.n, nc), pk = Locate(t.k, kc);
  double acc = 0;
  for (int dm = 0; dm < 2; ++dm) {
    const double wm = dm ? pm.w : 1 - pm.w;
    if (wm == 0) continue;
    const size_t im = std::min(pm.lo + dm, t.m.size() - 1);
    for (int dn = 0; dn < 2; ++dn) {
      const double wn = dn ? pn.w : 1 - pn.w;
      if (wn == 0) continue;
      const size_t in = std::min(pn.lo + dn, t.n.size() - 1);
      for (int dk = 0; dk < 2; ++dk) {
        const double wk = dk ? pk.w : 1 - pk.w;
        if (wk == 0) continue;
        const size_t ik = std::min(pk.lo + dk, t.k.size() - 1);
        acc += wm * wn * wk * t.At(im, in, ik);
      }
    }
  }
  return acc * scale;
}

double WaveEfficiency(const HardwareProfile& hw, int64_t m, int64_t n, int64_t batch) {
  if (!(hw.sm_count.value > 0)) return 1.0;
  // A share of the device runs its waves on its share of the multiprocessors.
  const int64_t tm = int64_t(hw.gemm_tile_m.value), tn = int64_t(hw.gemm_tile_n.value),
                sms = std::max<int64_t>(1, std::llround(hw.sm_count.value / hw.DeviceCopies()));
  const int64_t tiles = ((m + tm - 1) / tm) * ((n + tn - 1) / tn) * batch;
  const int64_t waves = (tiles + sms - 1) / sms;
  return double(tiles) / double(waves * sms);
}

Seconds GemmTime(const HardwareProfile& hw, int64_t m, int64_t n, int64_t k, int64_t batch) {
  // A Linear's GEMM at an exact point: timed at that very shape, its last wave included.
  if (batch == 1) {
    if (const GemmPoint* p = PointFor(hw, m, n, k)) return AtRate(hw, m, n, k, p->forward_tflops);
  }
  // On a share of the device: the table's rate for `copies` times the rows, `copies` times as
  // long (HardwareProfile::device_share); 1 on a whole device, which leaves every product exact.
  const double copies = hw.DeviceCopies();
  const double flops = 2.0 * double(m) * double(n) * double(k) * double(batch);
  const double tflops =
      GemmTflops(hw.gemm, double(m) * double(batch) * copies, double(n), double(k)) *
      WaveEfficiency(hw, m, n, batch);
  return std::max(copies * flops / (tflops * kTera), MemoryFloor(hw, m, n, k, batch)) +
         hw.kernel_launch_us.value * kUs;
}

Seconds GemmBackwardTime(const HardwareProfile& hw, int64_t m, int64_t n, int64_t k,
                         int64_t batch) {
  // A Linear's backward (batch 1) is its two GEMMs as priced alone; the batched products of
  // unfused attention come from the forward table at the transposed shapes.
  if (batch == 1) return GemmBackwardDataTime(hw, m, n, k) + GemmBackwardWeightTime(hw, m, n, k);
  return BackwardFromForwardTable(hw, m, k, n, batch) +
         BackwardFromForwardTable(hw, k, n, m, batch);
}

Seconds GemmBackwardDataTime(const HardwareProfile& hw, int64_t m, int64_t n, int64_t k) {
  // From the table measured for it, when the profile has both backward tables (as
  // GemmBackwardWeightTime decides, so a backward is priced from one source or the other).
  // A point exists only beside both backward tables (core/hardware.cc), so it too is measured.
  if (const GemmPoint* p = PointFor(hw, m, n, k)) {
    return AtRate(hw, m, n, k, p->backward_data_tflops);
  }
  if (HasBackwardTables(hw)) return FromBackwardTable(hw, BackwardKind::kData, m, n, k);
  return BackwardFromForwardTable(hw, m, k, n, 1);
}

Seconds GemmBackwardWeightTime(const HardwareProfile& hw, int64_t m, int64_t n, int64_t k) {
  if (const GemmPoint* p = PointFor(hw, m, n, k)) {
    return AtRate(hw, m, n, k, p->backward_weight_tflops);
  }
  if (HasBackwardTables(hw)) return FromBackwardTable(hw, BackwardKind::kWeight, m, n, k);
  // The same term GemmBackwardTime adds for the weight gradient, so W <= B holds by construction
  // whatever the efficiency (priced at the forward rate while B was divided by an efficiency of
  // 3, W came out more than the whole backward, and the simulator refused the table).
  return BackwardFromForwardTable(hw, k, n, m, 1);
}

}  // namespace ptdp::costmodel
