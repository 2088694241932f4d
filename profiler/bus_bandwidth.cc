#include "profiler/bus_bandwidth.h"

#include "core/status.h"

namespace ptdp::profiler {

double BusBandwidthFactor(Collective c, int n) {
  PTDP_CHECK(n >= 1);
  switch (c) {
    case Collective::kAllReduce:
      return 2.0 * (n - 1) / n;
    case Collective::kAllGather:
    case Collective::kReduceScatter:
      return static_cast<double>(n - 1) / n;
    case Collective::kSendRecv:
      return 1.0;
  }
  return 1.0;
}

double AlgorithmBandwidth(Bytes size, Seconds seconds) {
  PTDP_CHECK(seconds > 0);
  return static_cast<double>(size) / seconds;
}

double BusBandwidth(Collective c, int n, Bytes size, Seconds seconds) {
  return AlgorithmBandwidth(size, seconds) * BusBandwidthFactor(c, n);
}

}  // namespace ptdp::profiler
