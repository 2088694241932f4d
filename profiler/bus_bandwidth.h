// Algorithm and bus bandwidth of collectives, as nccl-tests defines them (doc/PERFORMANCE.md):
//   algbw = S / t, where S is the operation's size in bytes and t its time;
//   busbw = algbw * factor(n), the rate each rank's link must carry in a bandwidth-optimal
//           algorithm, comparable with a link's peak whatever the number of ranks n:
//     all-reduce      2 (n - 1) / n   (a reduce-scatter then an all-gather, each (n-1)/n of S)
//     all-gather      (n - 1) / n     (each rank receives the n - 1 blocks it lacks)
//     reduce-scatter  (n - 1) / n
//     send/recv       1
// S is the size of the whole result: for all-reduce the buffer, for all-gather the gathered
// buffer (n blocks), for reduce-scatter the input (n blocks), for send/recv the message.
#pragma once

#include <string>

#include "core/collective.h"
#include "core/units.h"

namespace ptdp::profiler {

using ::ptdp::BusBandwidthFactor;  // core/collective.h: the one definition (0 for n <= 1)
using ::ptdp::Collective;          // core/collective.h
using ::ptdp::CollectiveName;

// Bytes per second; REQUIRES: seconds > 0.
double AlgorithmBandwidth(Bytes size, Seconds seconds);
double BusBandwidth(Collective c, int n, Bytes size, Seconds seconds);

}  // namespace ptdp::profiler
