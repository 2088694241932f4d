// The collectives ptdp prices and measures, and their names in a hardware profile's bus-bandwidth
// curves (core/hardware.h BusbwCurve::collective; nccl-tests' operations). One list for the cost
// model (costmodel/collectives.h), the profiler (profiler/bus_bandwidth.h) and the profile reader.
#pragma once

namespace ptdp {

enum class Collective { kAllReduce, kAllGather, kReduceScatter, kSendRecv };
inline constexpr Collective kCollectives[] = {Collective::kAllReduce, Collective::kAllGather,
                                              Collective::kReduceScatter, Collective::kSendRecv};

// "all_reduce" | "all_gather" | "reduce_scatter" | "send_recv".
const char* CollectiveName(Collective c);

// nccl-tests' bus-bandwidth factor busbw / algbw for n ranks (doc/PERFORMANCE.md): the share of
// the operation's size S each rank's link carries in a bandwidth-optimal algorithm. All-reduce
// 2 (n - 1) / n, all-gather and reduce-scatter (n - 1) / n, send/recv 1; a group of one (n <= 1)
// moves nothing: 0, for every collective. The one definition for the cost model's transfer times
// and the profiler's measured bus bandwidths.
double BusBandwidthFactor(Collective c, int n);

}  // namespace ptdp
