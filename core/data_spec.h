// What `--data` and `--split` say (docs/data.md "Blends and splits"): one file or a blend of files
// with weights, and the shares of training, validation and test data cut from each, as
// Megatron-LM's `--data-path 0.3 A 0.7 B` and `--split 969,30,1` say them. The one grammar of
// those flags: `ptdp train` and `ptdp forward` (runtime/data/token_set.h) and `ptdp launch` read
// them here.
#pragma once

#include <array>
#include <string>
#include <vector>

#include "core/status.h"

namespace ptdp {

// The shares of training, validation and test data, normalised to add up to 1.
struct DataSplit {
  std::array<double, 3> share{1.0, 0.0, 0.0};
  std::string text = "1,0,0";  // as given, for messages
};
enum class SplitPart { kTrain = 0, kValid = 1, kTest = 2 };
const char* SplitPartName(SplitPart p);  // "training", "validation", "test"

// "969,30,1" (or "969/30/1"); as Megatron-LM, fewer than three shares are padded with 0, and the
// shares are normalised. Refuses, naming --split, anything else.
Result<DataSplit> ParseSplit(const std::string& text);

// The files of a blend with their weights (normalised to add up to 1).
struct BlendSpec {
  std::vector<double> weights;
  std::vector<std::string> paths;
};
// The words of a --data flag: one FILE, or WEIGHT FILE WEIGHT FILE ... (weights > 0, finite).
// `flag` names the flag in the refusals.
Result<BlendSpec> ParseBlend(const std::vector<std::string>& words, const std::string& flag);

}  // namespace ptdp
