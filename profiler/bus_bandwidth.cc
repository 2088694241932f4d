#include "profiler/bus_bandwidth.h"

#include "core/status.h"

namespace ptdp::profiler {

double AlgorithmBandwidth(Bytes size, Seconds seconds) {
  PTDP_CHECK(seconds > 0);
  return static_cast<double>(size) / seconds;
}

double BusBandwidth(Collective c, int n, Bytes size, Seconds seconds) {
  PTDP_CHECK(n >= 1);
  return AlgorithmBandwidth(size, seconds) * BusBandwidthFactor(c, n);
}

}  // namespace ptdp::profiler
