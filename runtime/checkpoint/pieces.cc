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

// Copies the intersection of piece `src` (data at `from`) into block `dst` (data at `to`),
// marking what it wrote in `covered`.
void CopyIntersection(const Dims2& src, const char* from, const Dims2& dst, float* to,
                      std::vector<char>& covered) {
  const int64_t r_lo = std::max(src.r0, dst.r0),
                r_hi = std::min(src.r0 + src.rows, dst.r0 + dst.rows);
  const int64_t c_lo = std::max(src.c0, dst.c0),
                c_hi = std::min(src.c0 + src.cols, dst.c0 + dst.cols);
  if (r_lo >= r_hi || c_lo >= c_hi) return;
  const int64_t n = c_hi - c_lo;
  for (int64_t r = r_lo; r < r_hi; ++r) {
    const int64_t s = (r - src.r0) * src.cols + (c_lo - src.c0);
    const int64_t d = (r - dst.r0) * dst.cols + (c_lo - dst.c0);
    std::memcpy(to + d, from + s * 4, static_cast<size_t>(n) * 4);
    std::fill(covered.begin() + d, covered.begin() + d + n, 1);
  }
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

std::string ShardFileName(int pp, int tp) {
  return "pp" + std::to_string(pp) + "-tp" + std::to_string(tp) + ".safetensors";
}

bool IsSavedBy(const ParamTensor& p, int tp_rank) {
  return !p.tied_copy && (p.sharding != Sharding::kReplicated || tp_rank == 0);
}

std::vector<int64_t> BlockOffset(const ParamTensor& p, int tp_rank) {
  std::vector<int64_t> o(p.local_shape.size(), 0);
  if (p.sharding == Sharding::kRows) o[0] = int64_t(tp_rank) * p.local_shape[0];
  if (p.sharding == Sharding::kCols) o[1] = int64_t(tp_rank) * p.local_shape[1];
  return o;
}

void AddPiecesOf(const ModelSpec& model, const ParallelConfig& c, int pp, int tp, Manifest* m) {
  for (int chunk = 0; chunk < c.vp; ++chunk) {
    for (const ParamTensor& p : ChunkParameters(model, c, pp, chunk)) {
      if (!IsSavedBy(p, tp)) continue;
      CkptTensor& t = m->tensors[p.name];
      t.shape = p.global_shape;
      t.pieces.push_back({ShardFileName(pp, tp), BlockOffset(p, tp), p.local_shape});
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
  PTDP_ASSIGN_OR_RETURN(s->bytes, ReadVerifiedFile(dir_, *f));
  PTDP_ASSIGN_OR_RETURN(s->header, ParseSafetensorsHeader(s->bytes, f->bytes, dir_ + "/" + file));
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
  std::vector<char> covered(static_cast<size_t>(dst.rows * dst.cols), 0);
  for (const CkptPiece& piece : t.pieces) {
    const Dims2 src = View(piece.offset, piece.shape);
    PTDP_ASSIGN_OR_RETURN(const ShardCache::Shard* shard, cache.Get(piece.file));
    for (int k = 0; k < kStateKinds; ++k) {
      const std::string name = key + kStateSuffix[k];
      const StTensor* st = shard->header.Find(name);
      if (st == nullptr || st->dtype != "F32" || st->shape != piece.shape) {
        return Status::Invalid(piece.file + ": no F32 tensor '" + name +
                               "' of the shape the manifest gives");
      }
      std::vector<char> mark(covered.size(), 0);
      CopyIntersection(src, shard->bytes.data() + shard->header.data_start + st->begin, dst,
                       out[k].data(), k == 0 ? covered : mark);
    }
  }
  for (int64_t r = 0; r < dst.rows; ++r) {
    if (dst.r0 + r >= real_rows) break;
    for (int64_t c = 0; c < dst.cols; ++c) {
      if (!covered[static_cast<size_t>(r * dst.cols + c)]) {
        return Status::Invalid("the checkpoint's pieces of '" + key + "' do not cover element (" +
                               std::to_string(dst.r0 + r) + ", " + std::to_string(dst.c0 + c) +
                               ")");
      }
    }
  }
  return Status::Ok();
}

}  // namespace ptdp::runtime
