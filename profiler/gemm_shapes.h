// `ptdp profile --gemm-shapes-of MODEL[,MODEL...] --gemm-shapes-mbs B1,B2,... [--gemm-shapes-tp
// T1,T2,...]`: every Linear GEMM those models run at those microbatch sizes and tensor-parallel
// degrees (core/gemm_points.h LinearGemmShapes: QKV, projection, fc1, fc2, logits), timed beside
// the grid by the same three backend calls with the same timing (forward, input gradient, weight
// gradient), into the profile's gemm_points, from which the cost model prices those shapes
// exactly (costmodel/gemm.h). A shape two models share is timed once.
#pragma once

#include <string>

#include "core/hardware.h"
#include "core/json.h"
#include "core/status.h"
#include "profiler/profiler.h"

namespace ptdp::profiler {

// The flags' arguments into o->gemm_shapes (sorted, each once) and o->gemm_shapes_of. Models are
// presets or model JSON files (core/model.h LoadModel); tp defaults to 1. One-line errors naming
// the flag: a list that is not comma-separated positive integers, --gemm-shapes-mbs or -tp without
// --gemm-shapes-of, -of without -mbs, a model that does not load, a t that does not divide a
// model's widths, a token count mbs s over 1e9.
Status ParseGemmShapes(const std::string& models, const std::string& mbs, const std::string& tp,
                       ProfileOptions* o);

// Times every shape of o.gemm_shapes with the three GEMM calls of `backend` into r->gemm_points.
// A backend that times no backward GEMM (answers 0) is refused: a point holds all three.
Status MeasureGemmPoints(ProfileBackend& backend, const TimingOptions& t, const ProfileOptions& o,
                         ProfileReport* r);

// r's points as p->gemm_points, each rate counted as 2 m n k FLOPs over its median time, the
// source `run_source` (the run) and what was timed; nothing when r has no points.
Status AddGemmPoints(const ProfileReport& r, const std::string& run_source, HardwareProfile* p);

// The raw timings (--raw) and the text table's lines of r's points.
OrderedJson GemmPointsRawJson(const ProfileReport& r);
std::string GemmPointsText(const ProfileReport& r);

}  // namespace ptdp::profiler
