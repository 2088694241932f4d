#include "runtime/data/token_set.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "runtime/data/megatron_indexed.h"

namespace ptdp::runtime {
namespace {

// Whether `path` is a ptdp token file by its first bytes (a PREFIX.bin beside a PREFIX.idx may
// also be one: a conversion's output named so).
bool StartsWithTokenMagic(const std::string& path) {
  char head[sizeof(kTokenMagic)] = {};
  std::ifstream f(path, std::ios::binary);
  f.read(head, sizeof(head));
  return f.gcount() == std::streamsize(sizeof(head)) &&
         std::equal(head, head + sizeof(head), kTokenMagic);
}

}  // namespace

BlendOrder::BlendOrder(std::vector<double> weights, int64_t window)
    : weights_(std::move(weights)), window_(std::max<int64_t>(window, 1)) {
  Restart();
}

void BlendOrder::Restart() {
  counts_.assign(weights_.size(), 0);
  window_begin_ = 0;
  sources_.clear();
  NextWindow();
}

// Assigns the samples of the window after the current one (the first, after Restart).
void BlendOrder::NextWindow() {
  window_begin_ += static_cast<int64_t>(sources_.size());
  sources_.resize(static_cast<size_t>(window_));
  for (int64_t i = 0; i < window_; ++i) {
    const double g = static_cast<double>(std::max<int64_t>(window_begin_ + i, 1));
    size_t best = 0;
    double best_behind = weights_[0] * g - static_cast<double>(counts_[0]);
    for (size_t f = 1; f < weights_.size(); ++f) {
      const double behind = weights_[f] * g - static_cast<double>(counts_[f]);
      if (behind > best_behind) {
        best = f;
        best_behind = behind;
      }
    }
    ++counts_[best];
    sources_[static_cast<size_t>(i)] = static_cast<int>(best);
  }
}

int BlendOrder::Source(int64_t sample) {
  if (sample < window_begin_) Restart();
  while (sample >= window_begin_ + window_) NextWindow();
  return sources_[static_cast<size_t>(sample - window_begin_)];
}

Result<TokenSet::Files> TokenSet::OpenFiles(const BlendSpec& spec, int64_t vocab,
                                            const std::string& flag) {
  Files files;
  for (const std::string& path : spec.paths) {
    // A Megatron-LM dataset by its prefix (as its --data-path names it), or by its PREFIX.bin.
    std::string prefix;
    if (std::filesystem::exists(path + ".idx") && !std::filesystem::exists(path)) {
      prefix = path;
    } else if (path.size() > 4 && path.compare(path.size() - 4, 4, ".bin") == 0 &&
               std::filesystem::exists(path.substr(0, path.size() - 4) + ".idx") &&
               !StartsWithTokenMagic(path)) {
      prefix = path.substr(0, path.size() - 4);
    }
    auto tf = prefix.empty() ? TokenFile::Open(path, vocab) : OpenMegatronTokens(prefix, vocab);
    if (!tf.ok()) return tf.status().WithPrefix(flag);
    files.push_back(std::make_shared<const TokenFile>(std::move(tf).value()));
  }
  return files;
}

Result<TokenSet> TokenSet::Cut(const BlendSpec& spec, const Files& files, const DataSplit& split,
                               SplitPart part, int64_t seq_len, int64_t global_batch,
                               const std::string& flag) {
  TokenSet set;
  set.global_batch_ = global_batch;
  const int k = static_cast<int>(part);
  double lo = 0;
  for (int i = 0; i < k; ++i) lo += split.share[static_cast<size_t>(i)];
  const double hi = k == 2 ? 1.0 : lo + split.share[static_cast<size_t>(k)];
  const bool whole = lo == 0 && hi >= 1.0;
  for (size_t i = 0; i < files.size(); ++i) {
    const int64_t n = files[i]->count();
    Part p{files[i], spec.paths[i], 0, n, spec.weights[i]};
    if (!whole) {  // Megatron-LM's bounds: round(share * size), on tokens here
      p.begin = std::min<int64_t>(n, static_cast<int64_t>(std::llround(lo * double(n))));
      p.end = std::min<int64_t>(n, static_cast<int64_t>(std::llround(hi * double(n))));
      if (k == 2) p.end = n;
    }
    if (p.end - p.begin < seq_len + 2) {
      const std::string where = whole ? flag + ": '" + p.path + "'"
                                      : "--split " + split.text + ": the " + SplitPartName(part) +
                                            " part of " + flag + " '" + p.path + "'";
      return Status::Invalid(where + " has " + std::to_string(p.end - p.begin) +
                             " tokens, fewer than seq_len + 2 = " + std::to_string(seq_len + 2));
    }
    set.parts_.push_back(std::move(p));
  }
  if (set.parts_.size() > 1) {
    set.order_ = std::make_unique<BlendOrder>(spec.weights, global_batch);
  }
  return set;
}

Status TokenSet::ReadSequence(uint64_t seed, int64_t step, int64_t global_seq, int64_t seq_len,
                              int32_t* out) {
  const int64_t sample = (step - 1) * global_batch_ + global_seq;
  const Part& p = parts_[static_cast<size_t>(order_ ? order_->Source(sample) : 0)];
  const int64_t start =
      p.begin + SequenceStart(seed, step - 1, global_batch_, global_seq, p.end - p.begin, seq_len);
  return p.file->Read(start, seq_len + 1, out);
}

int64_t TokenSet::tokens() const {
  int64_t n = 0;
  for (const Part& p : parts_) n += p.end - p.begin;
  return n;
}

std::string TokenSet::Signature() const {
  std::ostringstream s;
  for (size_t i = 0; i < parts_.size(); ++i) {
    char w[40];
    std::snprintf(w, sizeof(w), "%.17g", parts_[i].weight);
    s << (i ? " + " : "") << "[" << parts_[i].begin << ", " << parts_[i].end << ") " << w;
  }
  return s.str();
}

std::string TokenSet::Describe() const {
  std::ostringstream s;
  for (size_t i = 0; i < parts_.size(); ++i) {
    const Part& p = parts_[i];
    char w[32];
    std::snprintf(w, sizeof(w), "%.4g", p.weight);
    s << (i ? " + " : "") << p.path << " [" << p.begin << ", " << p.end << ")";
    if (parts_.size() > 1) s << " weight " << w;
  }
  return s.str();
}

}  // namespace ptdp::runtime
