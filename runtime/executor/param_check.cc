// Parameter dumps and comparisons for the equivalence tests: a single-process run writes every
// tensor in full; a parallel run compares each of its shards with the matching slice.
//
// Dump format: "PTDPPRM1", uint32 tensor count, then per tensor: uint32 name length, name,
// uint32 rank, int64 dims, float32 values (row-major, native byte order).
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>

#include "core/json.h"
#include "runtime/comm/agree.h"
#include "runtime/executor/trainer.h"

namespace ptdp::runtime {
namespace {

template <typename T>
void Put(std::string& s, T v) {
  s.append(reinterpret_cast<const char*>(&v), sizeof(T));
}

struct RefTensor {
  std::vector<int64_t> shape;
  std::vector<float> values;
};

Result<std::map<std::string, RefTensor>> ReadDump(const std::string& path) {
  PTDP_ASSIGN_OR_RETURN(std::string s, ReadTextFile(path));
  size_t at = 0;
  auto need = [&](size_t n) -> Status {
    if (at + n > s.size()) return Status::IoError("parameter dump '" + path + "' is truncated");
    return Status::Ok();
  };
  auto get = [&](void* out, size_t n) -> Status {
    PTDP_RETURN_IF_ERROR(need(n));
    std::memcpy(out, s.data() + at, n);
    at += n;
    return Status::Ok();
  };
  PTDP_RETURN_IF_ERROR(need(8));
  if (s.compare(0, 8, "PTDPPRM1") != 0)
    return Status::Invalid("'" + path + "' is not a parameter dump");
  at = 8;
  uint32_t count = 0;
  PTDP_RETURN_IF_ERROR(get(&count, 4));
  std::map<std::string, RefTensor> out;
  for (uint32_t t = 0; t < count; ++t) {
    uint32_t len = 0, rank = 0;
    PTDP_RETURN_IF_ERROR(get(&len, 4));
    PTDP_RETURN_IF_ERROR(need(len));
    std::string name = s.substr(at, len);
    at += len;
    PTDP_RETURN_IF_ERROR(get(&rank, 4));
    RefTensor r;
    int64_t n = 1;
    for (uint32_t d = 0; d < rank; ++d) {
      int64_t dim = 0;
      PTDP_RETURN_IF_ERROR(get(&dim, 8));
      r.shape.push_back(dim);
      n *= dim;
    }
    r.values.resize(static_cast<size_t>(n));
    PTDP_RETURN_IF_ERROR(get(r.values.data(), static_cast<size_t>(n) * 4));
    out[name] = std::move(r);
  }
  return out;
}

}  // namespace

Status Trainer::WriteParamDump(const std::string& path) {
  if (world_->size() != 1) return Status::Invalid("--dump-params needs a single-process run");
  std::string s = "PTDPPRM1";
  Put<uint32_t>(s, static_cast<uint32_t>(params_->entries().size()));
  for (size_t i = 0; i < params_->entries().size(); ++i) {
    const ParamTensor& p = params_->entries()[i].spec;
    Put<uint32_t>(s, static_cast<uint32_t>(p.name.size()));
    s += p.name;
    Put<uint32_t>(s, static_cast<uint32_t>(p.global_shape.size()));
    for (int64_t d : p.global_shape) Put<int64_t>(s, d);
    const std::vector<float> values = params_->HostMaster(static_cast<int>(i));
    s.append(reinterpret_cast<const char*>(values.data()), values.size() * 4);
  }
  return WriteFileAtomic(path, s);
}

Result<Trainer::ParamDifference> Trainer::CompareParams(const std::string& dump_path) {
  // A sharded fp32 master is whole here only gathered (after the last step: the gradients are
  // spent), an fp32 weight arena once its overlapped gather is complete.
  PTDP_RETURN_IF_ERROR(WaitForWeights(-1));
  PTDP_RETURN_IF_ERROR(params_->GatherWhole(StateKind::kMaster, dp_.get(), edp_.get()));
  auto ref = ReadDump(dump_path);
  double worst = 0;
  std::string worst_name;
  Status local = ref.status();
  if (ref.ok()) {
    for (size_t i = 0; i < params_->entries().size() && local.ok(); ++i) {
      const ParamTensor& p = params_->entries()[i].spec;
      const std::string key = InitKeyName(p.name);  // a tied copy is the embedding
      auto it = ref->find(key);
      if (it == ref->end()) {
        local = Status::Invalid("parameter dump lacks '" + key + "'");
        break;
      }
      const bool vocab_rows = key == "embedding.word" || key == "output.weight";
      const int64_t row_elems = p.global_shape.size() == 2 ? p.global_shape[1] : 1;
      const std::vector<float> x = params_->HostMaster(static_cast<int>(i));
      double d2 = 0, r2 = 0;
      for (int64_t j = 0; j < p.LocalElements(); ++j) {
        const int64_t g = ParamStore::GlobalIndex(p, coord_.tp, j);
        if (vocab_rows && g / row_elems >= model_.vocab) continue;  // padding
        if (g >= static_cast<int64_t>(it->second.values.size())) {
          local = Status::Invalid("parameter dump's '" + key + "' is smaller than this model's");
          break;
        }
        const double r = it->second.values[static_cast<size_t>(g)];
        d2 += (x[j] - r) * (x[j] - r);
        r2 += r * r;
      }
      const double rel = r2 > 0 ? std::sqrt(d2 / r2) : std::sqrt(d2);
      if (rel > worst || worst_name.empty()) worst = rel, worst_name = p.name;
    }
  }
  PTDP_RETURN_IF_ERROR(params_->EndGather());
  PTDP_RETURN_IF_ERROR(AgreeStatus(*world_, local));
  PTDP_ASSIGN_OR_RETURN(std::vector<double> all, AllGatherDoubles(*world_, {worst}));
  PTDP_ASSIGN_OR_RETURN(std::vector<std::string> names, AllGatherStrings(*world_, worst_name));
  ParamDifference d;
  for (size_t r = 0; r < all.size(); ++r) {
    if (d.tensor.empty() || all[r] > d.worst) d = {all[r], names[r]};
  }
  return d;
}

}  // namespace ptdp::runtime
