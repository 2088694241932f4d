// The layers' view of a ParamStore: a layer's weights and gradients by core/shapes.h's names, and
// the architecture a ModelSpec gives its layers. Shared by the trainer and ForwardLogits.
#pragma once

#include "core/model.h"
#include "runtime/model/gpt_layers.h"
#include "runtime/model/params.h"

namespace ptdp::runtime {

// Layer `layer` of local chunk `chunk`. A bias the model does not have (linear_bias false, or
// RMSNorm's) is an empty view; every weight must be in the store.
LayerWeights LayerWeightsOf(const ParamStore& s, int chunk, int layer);
LayerGrads LayerGradsOf(ParamStore& s, int chunk, int layer);
// The same for the layer whose tensors' names start with `prefix` ("layer3.", or a multi-token
// prediction depth's "mtp0.": core/shapes.h AppendHead).
LayerWeights LayerWeightsOf(const ParamStore& s, int chunk, const std::string& prefix);
LayerGrads LayerGradsOf(ParamStore& s, int chunk, const std::string& prefix);

LayerArch ArchOf(const ModelSpec& m);

}  // namespace ptdp::runtime
