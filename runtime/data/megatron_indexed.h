// Megatron-LM's indexed datasets, the PREFIX.bin and PREFIX.idx that its tools/preprocess_data.py
// writes (megatron/core/datasets/indexed_dataset.py), as a token file (token_file.h): `ptdp
// tokenize --megatron PREFIX`. So a corpus already tokenized for Megatron-LM trains here as it is.
//
// PREFIX.idx, little-endian:
//   9 bytes "MMIDIDX\0\0", uint64 version (1), uint8 dtype code (1 uint8, 2 int8, 3 int16,
//   4 int32, 5 int64, 6 float64, 7 float32, 8 uint16), uint64 sequence count S, uint64 document
//   count D, then int32 lengths[S] (tokens per sequence), int64 pointers[S] (byte offsets into
//   PREFIX.bin), int64 document_indices[D] (0, then the sequence index ending each document, the
//   last S); a multimodal dataset adds int8 modes[S], which is refused.
// PREFIX.bin: the tokens, in the dtype, sequence i at pointers[i].
//
// The token file is every sequence's tokens in order, so the documents (and the end-of-document
// tokens preprocess_data.py appends with --append-eod) follow one another as they do in
// PREFIX.bin; ptdp then samples windows of seq_len + 1 tokens anywhere in it (SequenceStart),
// where Megatron-LM builds document-aligned samples and shuffles them. Tokens are 2 bytes wide for
// the uint8, int8, int16 and uint16 codes and 4 bytes for int32 and int64; a negative token, one of
// 2^32 or more, a float dtype, and any length or offset outside the files are refused by name.
// The conversion streams (memory does not grow with the dataset) and writes the output
// atomically (a temporary file, fsynced, renamed).
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"
#include "runtime/data/token_file.h"

namespace ptdp::runtime {

struct MegatronConversion {
  int dtype_code = 0;
  int64_t sequences = 0;
  int64_t documents = 0;  // D - 1: document_indices holds a leading 0
  int64_t tokens = 0;
  int token_bytes = 2;  // of the token file written
};

// Reads PREFIX.idx and PREFIX.bin and writes the token file `out`. Errors name the file, the field
// and the reason, and leave no `out` behind.
Result<MegatronConversion> ConvertMegatronDataset(const std::string& prefix,
                                                  const std::string& out);

// The dataset read in place, without a conversion (`ptdp train --data PREFIX`, as Megatron-LM's
// --data-path takes it): PREFIX.bin as the token stream the conversion would write, when its
// sequences lie back to back from byte 0 in the index's order (as Megatron-Core's builder writes
// them; else refused, naming the sequence). The index is checked as for a conversion; the tokens
// against `vocab` (> 0) as a token file's, and a negative or int64 id beyond 2^31 - 1 refused.
Result<TokenFile> OpenMegatronTokens(const std::string& prefix, int64_t vocab);

}  // namespace ptdp::runtime
