// The per-pass costs the zero-bubble tests give the simulator (zero_bubble_test.cc, zbv_test.cc):
// the forward, the backward's input half and its weight half, the paper's T_F, T_B and T_W.
#pragma once

#include "core/units.h"

namespace ptdp::sim {

struct ZeroBubbleCosts {
  Nanoseconds f, b_input, w;  // T_F, T_B, T_W of the paper
};

}  // namespace ptdp::sim
