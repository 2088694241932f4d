// What the Linears' fused elementwise work adds to their GEMMs, as `ptdp profile` times the
// runtime's ops (backend.h TimeGeluEpilogue, TimeBiasGrad): at the fc1 and fc2 shapes of the model
// the --attention shape stands for (T = b s tokens, h = heads d, f = 4h; the gpt-1.3b layers at
// the default cuda shape 4 x 2048, 16 x 128), the GeLU-aux epilogue (fc1 forward) and the dGeLU
// epilogue (fc2 input gradient) each against the same op without it, and fc1's bias gradient.
// The profile keys (core/hardware.h) are rates per element of the GeLU (T f) and of the summed
// gradient (T f): the epilogues' added time, not the fused op's, is what the layers' GEMM table
// leaves out.
#pragma once

#include <string>

#include "core/hardware.h"
#include "core/json.h"
#include "core/status.h"
#include "profiler/profiler.h"

namespace ptdp::profiler {

// Times the epilogues and the bias gradient at r's attention shape (r->att_* set) into r.
Status MeasureEpilogues(ProfileBackend& backend, const TimingOptions& t, ProfileReport* r);

// The added seconds of an epilogue (fused less plain) when it is a rate a profile may state
// (above 0 and at most kMaxEpilogueGelemsPerSecond over `elements`), else 0: a difference within
// the timing noise says nothing of the epilogue's price.
Seconds EpilogueAddedSeconds(const EpilogueTimes& t, double elements);

// Writes gelu_epilogue_Gelems_per_s and dgelu_epilogue_Gelems_per_s (both, where both added
// times resolve) and bias_grad_Gelems_per_s (where timed) into p, each source `run_source` and
// what was timed.
void AddEpilogueKeys(const ProfileReport& r, const std::string& run_source, HardwareProfile* p);

// The raw timings ("epilogues" of --raw; null when nothing was timed) and the text report's lines
// (empty when nothing was timed), which say when an epilogue did not resolve.
OrderedJson EpiloguesJson(const ProfileReport& r);
std::string EpiloguesText(const ProfileReport& r);

}  // namespace ptdp::profiler
