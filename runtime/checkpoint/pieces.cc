#include "runtime/checkpoint/pieces.h"

#include <algorithm>
#include <cstring>

#include "runtime/checkpoint/store.h"
#include "runtime/model/params.h"

namespace ptdp::runtime {
namespace {

// Rows x cols view of a tensor's shape (1-D: n x 1).
struct Dims2 {
  int64_t r0 = 0, c0 = 0, rows = 1, cols = 1;
};
Dims2 View(const std::vector<int64_t>& offset, const std::vector<int64_t>& shape) {
  Dims2 d;
  d.r0 = offset.empty() ? 0 : offset[0];
  d.rows = shape.empty() ? 1 : shape[0];
  if (shape.size() >= 2) {
    d.c0 = offset[1];
    d.cols = shape[1];
  }
  return d;
}

// The intersection of two blocks in global coordinates (rows or cols 0 when they do not meet).
Dims2 Intersect(const Dims2& a, const Dims2& b) {
  Dims2 x;
  x.r0 = std::max(a.r0, b.r0);
  x.c0 = std::max(a.c0, b.c0);
  x.rows = std::max<int64_t>(0, std::min(a.r0 + a.rows, b.r0 + b.rows) - x.r0);
  x.cols = std::max<int64_t>(0, std::min(a.c0 + a.cols, b.c0 + b.cols) - x.c0);
  return x;
}

// Copies block `x` (inside both) from piece `src` (data at `from`) into block `dst` (data at `to`),
// one memcpy per row.
void CopyRows(const Dims2& x, const Dims2& src, const char* from, const Dims2& dst, float* to) {
  for (int64_t r = x.r0; r < x.r0 + x.rows; ++r) {
    const int64_t s = (r - src.r0) * src.cols + (x.c0 - src.c0);
    const int64_t d = (r - dst.r0) * dst.cols + (x.c0 - dst.c0);
    std::memcpy(to + d, from + s * 4, static_cast<size_t>(x.cols) * 4);
  }
}

// The first element (row-major) of rows [dst.r0, row_end) of `dst` that no block of `parts` covers,
// or {-1, -1}. Bands of rows between the blocks' edges are covered alike, so each band is checked
// once by sweeping its blocks' column ranges (a few pieces: no per-element marks).
std::pair<int64_t, int64_t> FirstUncovered(const Dims2& dst, int64_t row_end,
                                           const std::vector<Dims2>& parts) {
  if (row_end <= dst.r0) return {-1, -1};  // the block is all vocabulary padding
  std::vector<int64_t> edges = {dst.r0, row_end};
  for (const Dims2& p : parts) {
    if (p.r0 > dst.r0 && p.r0 < row_end) edges.push_back(p.r0);
    if (p.r0 + p.rows > dst.r0 && p.r0 + p.rows < row_end) edges.push_back(p.r0 + p.rows);
  }
  std::sort(edges.begin(), edges.end());
  edges.erase(std::unique(edges.begin(), edges.end()), edges.end());
  for (size_t e = 0; e + 1 < edges.size(); ++e) {
    const int64_t row = edges[e];
    std::vector<std::pair<int64_t, int64_t>> cols;
    for (const Dims2& p : parts) {
      if (p.r0 <= row && row < p.r0 + p.rows) cols.push_back({p.c0, p.c0 + p.cols});
    }
    std::sort(cols.begin(), cols.end());
    int64_t reach = dst.c0;
    for (const auto& [lo, hi] : cols) {
      if (lo > reach) break;
      reach = std::max(reach, hi);
    }
    if (reach < dst.c0 + dst.cols) return {row, reach};
  }
  return {-1, -1};
}

// The tensor names whose stored rows may differ from the loader's by vocabulary padding.
bool VocabRows(const std::string& key) {
  return key == "embedding.word" || key == "output.weight";
}

Status CheckGlobalShape(const std::string& key, const CkptTensor& t, const ParamTensor& p,
                        int64_t real_rows) {
  bool ok = t.shape.size() == p.global_shape.size();
  for (size_t d = 0; ok && d < t.shape.size(); ++d) {
    const bool padded_rows = d == 0 && VocabRows(key);
    ok = padded_rows ? t.shape[0] >= real_rows : t.shape[d] == p.global_shape[d];
  }
  if (ok) return Status::Ok();
  auto str = [](const std::vector<int64_t>& s) {
    std::string o = "[";
    for (size_t i = 0; i < s.size(); ++i) o += (i ? ", " : "") + std::to_string(s[i]);
    return o + "]";
  };
  return Status::Invalid("tensor '" + key + "' has shape " + str(t.shape) +
                         " in the checkpoint but " + str(p.global_shape) + " in this model");
}

}  // namespace

std::string ShardFileName(int pp, int tp, int ep_rank) {
  const std::string ep = ep_rank > 0 ? "-ep" + std::to_string(ep_rank) : "";
  return "pp" + std::to_string(pp) + "-tp" + std::to_string(tp) + ep + ".safetensors";
}

bool IsSavedBy(const ParamTensor& p, int tp_rank, int ep_rank) {
  return !p.tied_copy && (p.sharding != Sharding::kReplicated || tp_rank == 0) &&
         (ep_rank == 0 || p.expert);
}

std::vector<int64_t> BlockOffset(const ParamTensor& p, int tp_rank) {
  std::vector<int64_t> o(p.local_shape.size(), 0);
  if (p.sharding == Sharding::kRows) o[0] = int64_t(tp_rank) * p.local_shape[0];
  if (p.sharding == Sharding::kCols) o[1] = int64_t(tp_rank) * p.local_shape[1];
  return o;
}

void AddPiecesOf(const ModelSpec& model, const ParallelConfig& c, int pp, int tp, Manifest* m,
                 int ep_rank) {
  for (int chunk = 0; chunk < c.vp; ++chunk) {
    for (const ParamTensor& p : ChunkParameters(model, c, pp, chunk, ep_rank)) {
      if (!IsSavedBy(p, tp, ep_rank)) continue;
      CkptTensor& t = m->tensors[p.name];
      t.shape = p.global_shape;
      t.pieces.push_back({ShardFileName(pp, tp, ep_rank), BlockOffset(p, tp), p.local_shape});
    }
  }
}

Result<const ShardCache::Shard*> ShardCache::Get(const std::string& file) {
  auto it = shards_.find(file);
  if (it != shards_.end()) return it->second.get();
  const CkptFile* f = nullptr;
  for (const auto& x : m_->files) {
    if (x.name == file) f = &x;
  }
  if (f == nullptr) return Status::Invalid(dir_ + "/manifest.json: no file '" + file + "'");
  auto s = std::make_unique<Shard>();
  PTDP_ASSIGN_OR_RETURN(s->file, MapVerifiedFile(dir_, *f));
  // The parser takes the 8-byte length and the header it announces (or less, which it refuses).
  const char* data = s->file->data();
  const size_t size = static_cast<size_t>(s->file->size());
  size_t prefix = std::min<size_t>(size, 8);
  if (prefix == 8) {
    uint64_t n = 0;
    for (int i = 0; i < 8; ++i) n |= uint64_t(static_cast<unsigned char>(data[i])) << (8 * i);
    if (n <= uint64_t(kMaxSafetensorsHeader) && n <= size - 8) prefix = size_t(8 + n);
  }
  PTDP_ASSIGN_OR_RETURN(
      s->header, ParseSafetensorsHeader(std::string(data, prefix), f->bytes, dir_ + "/" + file));
  const Shard* out = s.get();
  shards_[file] = std::move(s);
  return out;
}

Status AssembleLocal(const Manifest& m, ShardCache& cache, const ParamTensor& p, int tp_rank,
                     int64_t real_rows, std::array<std::vector<float>, kStateKinds>& out) {
  const std::string key = InitKeyName(p.name);
  auto it = m.tensors.find(key);
  if (it == m.tensors.end()) return Status::Invalid("the checkpoint has no tensor '" + key + "'");
  const CkptTensor& t = it->second;
  if (!VocabRows(key)) real_rows = p.global_shape[0];
  PTDP_RETURN_IF_ERROR(CheckGlobalShape(key, t, p, real_rows));
  const Dims2 dst = View(BlockOffset(p, tp_rank), p.local_shape);
  std::vector<Dims2> parts;  // what the pieces wrote
  for (const CkptPiece& piece : t.pieces) {
    const Dims2 src = View(piece.offset, piece.shape);
    const Dims2 x = Intersect(src, dst);
    if (x.rows == 0 || x.cols == 0) continue;  // another rank's block: its file is not read here
    PTDP_ASSIGN_OR_RETURN(const ShardCache::Shard* shard, cache.Get(piece.file));
    for (int k = 0; k < kStateKinds; ++k) {
      const std::string name = key + kStateSuffix[k];
      const StTensor* st = shard->header.Find(name);
      if (st == nullptr || st->dtype != "F32" || st->shape != piece.shape) {
        return Status::Invalid(piece.file + ": no F32 tensor '" + name +
                               "' of the shape the manifest gives");
      }
      CopyRows(x, src, shard->file->data() + shard->header.data_start + st->begin, dst,
               out[k].data());
    }
    parts.push_back(x);
  }
  const auto [row, col] = FirstUncovered(dst, std::min(dst.r0 + dst.rows, real_rows), parts);
  if (row >= 0) {
    return Status::Invalid("the checkpoint's pieces of '" + key + "' do not cover element (" +
                           std::to_string(row) + ", " + std::to_string(col) + ")");
  }
  return Status::Ok();
}

}  // namespace ptdp::runtime
