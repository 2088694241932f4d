// What `ptdp train` draws its sequences from (docs/data.md "Blends and splits"): one token file
// (or a Megatron-LM dataset, by its PREFIX or PREFIX.bin, read in place: megatron_indexed.h),
// or a blend of several with weights, as Megatron-LM's `--data-path 0.3 A 0.7 B`; each file cut
// by a split into a training, a validation and a test part, as its `--split 969,30,1`.
//
// Sequence `global_seq` of iteration `step` is global sample g = (step - 1) B + global_seq. The
// blend gives sample g to one file (BlendOrder, Megatron-Core's greedy rule), and the sequence
// starts in that file's part at SequenceStart's hash of (seed, g), uniform over the part. One
// file and the whole of it (no split) is exactly what a bare token file gave before blends. Every
// layout reads the same sequences: nothing depends on the rank that reads them.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/data_spec.h"
#include "core/status.h"
#include "runtime/data/token_file.h"

namespace ptdp::runtime {

// Megatron-Core's blending order (BlendedDataset, megatron/core/datasets/helpers.cpp
// build_blending_indices): sample g goes to the file furthest behind its share, the largest
// w_f max(g, 1) - n_f (n_f: the samples the file has had before g), the first on a tie. Every
// prefix of the order then holds each file within about a sample of its share (within two in
// the tests' blends of two and three files: BlendOrder.*). The order of a sample
// depends on all before it: the samples are assigned in windows of `window` (a global batch),
// each from the counts the previous window left, so that asking for a step's samples costs
// O(window) and going back (a resumed run, a new validation) replays from sample 0.
class BlendOrder {
 public:
  BlendOrder(std::vector<double> weights, int64_t window);
  // The file of sample g.
  int Source(int64_t sample);

 private:
  void Restart();
  void NextWindow();
  std::vector<double> weights_;
  int64_t window_ = 1;
  std::vector<int64_t> counts_;  // samples each file has had before window_begin_ + window_
  int64_t window_begin_ = 0;
  std::vector<int> sources_;  // of samples [window_begin_, window_begin_ + sources_.size())
};

// One of training, validation and test data: the blend's files, each cut to its part.
class TokenSet {
 public:
  // The files of `spec`, each opened and checked once (tokens below vocab), for all the parts
  // that are cut from them.
  using Files = std::vector<std::shared_ptr<const TokenFile>>;
  static Result<Files> OpenFiles(const BlendSpec& spec, int64_t vocab, const std::string& flag);
  // `part` of every file; each part must hold at least seq_len + 2 tokens (refused naming `flag`,
  // or --split when a split made it too short).
  static Result<TokenSet> Cut(const BlendSpec& spec, const Files& files, const DataSplit& split,
                              SplitPart part, int64_t seq_len, int64_t global_batch,
                              const std::string& flag);
  // Sequence `global_seq` (0 .. global_batch - 1) of iteration `step` (1-based): seq_len + 1
  // tokens, inputs and the shifted targets.
  Status ReadSequence(uint64_t seed, int64_t step, int64_t global_seq, int64_t seq_len,
                      int32_t* out);
  // "a.bin [0, 9690) 0.3 + b.bin [0, 96900) 0.7", for the start line.
  std::string Describe() const;
  size_t files() const { return parts_.size(); }
  // Tokens in all the parts (a checkpoint's check that a resumed run reads the same data).
  int64_t tokens() const;
  // The parts without their paths, "[0, 9690) 0.3 + [0, 96900) 0.7" (each weight exact): what a
  // checkpoint records, so that a resume with other weights or another split is refused while a
  // moved file is not.
  std::string Signature() const;

 private:
  struct Part {
    std::shared_ptr<const TokenFile> file;
    std::string path;
    int64_t begin = 0, end = 0;  // tokens [begin, end) of the file
    double weight = 1;
  };
  std::vector<Part> parts_;
  int64_t global_batch_ = 1;
  std::unique_ptr<BlendOrder> order_;  // null for one file
};

}  // namespace ptdp::runtime
