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

}  // namespace ptdp
