#include "core/data_spec.h"

#include <string>

namespace ptdp {
namespace {

// A number of the whole text, or nothing.
bool DataSpecNumber(const std::string& text, double* v) {
  if (text.empty()) return false;
  size_t pos = 0;
  try {
    *v = std::stod(text, &pos);
  } catch (...) {
    return false;
  }
  return pos == text.size();
}

std::string DataSpecTrim(const std::string& s) {
  const size_t b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  return s.substr(b, s.find_last_not_of(" \t") - b + 1);
}

}  // namespace

const char* SplitPartName(SplitPart p) {
  switch (p) {
    case SplitPart::kTrain:
      return "training";
    case SplitPart::kValid:
      return "validation";
    case SplitPart::kTest:
      return "test";
  }
  return "?";
}

Result<DataSplit> ParseSplit(const std::string& text) {
  const Status bad = Status::Invalid("--split: '" + text +
                                     "' is not up to three shares TRAIN,VALID,TEST of numbers >= "
                                     "0 adding up to more than 0 (e.g. 969,30,1)");
  std::vector<std::string> words;
  std::string word;
  for (char ch : text) {
    if (ch == ',' || ch == '/') {
      words.push_back(DataSpecTrim(word));
      word.clear();
    } else {
      word += ch;
    }
  }
  words.push_back(DataSpecTrim(word));
  if (words.size() > 3) return bad;
  DataSplit split;
  split.text = text;
  split.share = {0, 0, 0};
  double sum = 0;
  for (size_t i = 0; i < words.size(); ++i) {
    double v = 0;
    // NaN fails every comparison: test for the good range.
    if (!DataSpecNumber(words[i], &v) || !(v >= 0 && v <= 1e12)) return bad;
    split.share[i] = v;
    sum += v;
  }
  if (!(sum > 0)) return bad;
  for (double& s : split.share) s /= sum;
  return split;
}

Result<BlendSpec> ParseBlend(const std::vector<std::string>& words, const std::string& flag) {
  BlendSpec spec;
  if (words.size() == 1) {
    spec.weights = {1.0};
    spec.paths = {words[0]};
    return spec;
  }
  if (words.empty() || words.size() % 2 != 0) {
    return Status::Invalid(flag + ": " + std::to_string(words.size()) +
                           " words: give one FILE, or a blend WEIGHT FILE WEIGHT FILE ...");
  }
  double sum = 0;
  for (size_t i = 0; i < words.size(); i += 2) {
    double w = 0;
    if (!DataSpecNumber(words[i], &w)) {
      return Status::Invalid(flag + ": '" + words[i] +
                             "' is not a weight (a blend is WEIGHT FILE WEIGHT FILE ...)");
    }
    if (!(w > 0 && w <= 1e12)) {
      return Status::Invalid(flag + ": the weight of '" + words[i + 1] + "' is " + words[i] +
                             ", not a positive number");
    }
    spec.weights.push_back(w);
    spec.paths.push_back(words[i + 1]);
    sum += w;
  }
  for (double& w : spec.weights) w /= sum;
  return spec;
}

}  // namespace ptdp
