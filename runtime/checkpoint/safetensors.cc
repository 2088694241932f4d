#include "runtime/checkpoint/safetensors.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <unordered_map>
#include <utility>

#include "core/checked.h"
#include "core/json.h"

namespace ptdp::runtime {
namespace {

// A non-negative JSON integer that fits int64, else false.
bool ReadCount(const Json& j, int64_t* out) {
  if (j.is_number_unsigned()) {
    const uint64_t v = j.get<uint64_t>();
    if (v > uint64_t(INT64_MAX)) return false;
    *out = static_cast<int64_t>(v);
    return true;
  }
  if (j.is_number_integer()) {
    const int64_t v = j.get<int64_t>();
    if (v < 0) return false;
    *out = v;
    return true;
  }
  return false;
}

Result<StTensor> ParseEntry(const std::string& name, const Json& j, int64_t data_size,
                            const std::string& where) {
  StTensor t;
  t.name = name;
  if (!j.is_object() || j.size() != 3 || !j.contains("dtype") || !j.contains("shape") ||
      !j.contains("data_offsets")) {
    return Status::Invalid(where + ": expected exactly {dtype, shape, data_offsets}");
  }
  if (!j["dtype"].is_string()) return Status::Invalid(where + ".dtype: expected a string");
  t.dtype = j["dtype"].get<std::string>();
  const int esize = StDTypeBytes(t.dtype);
  if (esize == 0) return Status::Invalid(where + ".dtype: unknown dtype '" + t.dtype + "'");
  const Json& shape = j["shape"];
  if (!shape.is_array() || shape.size() > 8) {
    return Status::Invalid(where + ".shape: expected an array of at most 8 sizes");
  }
  int64_t bytes = esize;
  for (const Json& d : shape) {
    int64_t v = 0;
    if (!ReadCount(d, &v)) return Status::Invalid(where + ".shape: a size is not an integer >= 0");
    if (!CheckedMul(bytes, v, &bytes)) return Status::Invalid(where + ".shape: overflows int64");
    t.shape.push_back(v);
  }
  const Json& off = j["data_offsets"];
  if (!off.is_array() || off.size() != 2 || !ReadCount(off[0], &t.begin) ||
      !ReadCount(off[1], &t.end)) {
    return Status::Invalid(where + ".data_offsets: expected [begin, end], integers >= 0");
  }
  if (t.begin > t.end || t.end > data_size) {
    return Status::Invalid(where + ".data_offsets: [" + std::to_string(t.begin) + ", " +
                           std::to_string(t.end) + "] outside the " + std::to_string(data_size) +
                           " data bytes (truncated file?)");
  }
  if (t.end - t.begin != bytes) {
    return Status::Invalid(where + ": " + std::to_string(t.end - t.begin) +
                           " bytes, but dtype and shape need " + std::to_string(bytes));
  }
  return t;
}

}  // namespace

const StTensor* StHeader::Find(const std::string& name) const {
  for (const auto& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

int StDTypeBytes(const std::string& d) {
  if (d == "F32" || d == "I32" || d == "U32") return 4;
  if (d == "F16" || d == "BF16" || d == "I16" || d == "U16") return 2;
  if (d == "F64" || d == "I64" || d == "U64") return 8;
  if (d == "U8" || d == "I8" || d == "BOOL" || d == "F8_E4M3") return 1;
  return 0;
}

std::string EncodeSafetensorsHeader(std::vector<StTensor>* tensors,
                                    const std::map<std::string, std::string>& metadata) {
  // The object written key by key in order (an OrderedJson's inserts are linear each: a 90,000-
  // tensor header, DeepSeek-V3's, took seconds); a repeated name keeps its first place and takes
  // the last entry, as OrderedJson's operator[] did.
  std::vector<std::pair<std::string, std::string>> entries;
  std::unordered_map<std::string, size_t> slot;
  if (!metadata.empty()) entries.emplace_back(Json("__metadata__").dump(), Json(metadata).dump());
  int64_t at = 0;
  for (StTensor& t : *tensors) {
    int64_t n = StDTypeBytes(t.dtype);
    for (int64_t d : t.shape) n *= d;
    t.begin = at;
    t.end = at + n;
    at = t.end;
    OrderedJson e = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {t.begin, t.end}}};
    const auto [it, fresh] = slot.emplace(t.name, entries.size());
    if (fresh) {
      entries.emplace_back(Json(t.name).dump(), e.dump());
    } else {
      entries[it->second].second = e.dump();
    }
  }
  std::string json = "{";
  for (size_t i = 0; i < entries.size(); ++i) {
    json += (i > 0 ? "," : "") + entries[i].first + ":" + entries[i].second;
  }
  json += "}";
  while ((8 + json.size()) % 8 != 0) json += ' ';
  std::string out(8, '\0');
  uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + json;
}

Result<StHeader> ParseSafetensorsHeader(const std::string& prefix, int64_t file_size,
                                        const std::string& source) {
  if (file_size < 8 || prefix.size() < 8) {
    return Status::Invalid(source + ": " + std::to_string(file_size) +
                           " bytes, too short for a safetensors header (truncated?)");
  }
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(static_cast<unsigned char>(prefix[i])) << (8 * i);
  if (n > uint64_t(kMaxSafetensorsHeader)) {
    return Status::Invalid(source + ": header length " + std::to_string(n) + " over the cap of " +
                           std::to_string(kMaxSafetensorsHeader) + " bytes");
  }
  if (int64_t(n) > file_size - 8 || int64_t(prefix.size()) < 8 + int64_t(n)) {
    return Status::Invalid(source + ": header length " + std::to_string(n) +
                           " runs past the end of the file (truncated?)");
  }
  PTDP_ASSIGN_OR_RETURN(Json j, ParseJson(prefix.substr(8, n), source));
  if (!j.is_object()) return Status::Invalid(source + ": header is not a JSON object");
  StHeader h;
  h.data_start = 8 + int64_t(n);
  const int64_t data_size = file_size - h.data_start;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object()) return Status::Invalid(source + ": __metadata__ is not an object");
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string()) {
          return Status::Invalid(source + ": __metadata__." + m.key() + " is not a string");
        }
        h.metadata[m.key()] = m->get<std::string>();
      }
      continue;
    }
    PTDP_ASSIGN_OR_RETURN(StTensor t,
                          ParseEntry(it.key(), *it, data_size, source + ": '" + it.key() + "'"));
    h.tensors.push_back(std::move(t));
  }
  // No two tensors may share bytes (a crafted header could alias them).
  std::vector<const StTensor*> by_begin;
  for (const auto& t : h.tensors) by_begin.push_back(&t);
  std::sort(by_begin.begin(), by_begin.end(),
            [](const StTensor* a, const StTensor* b) { return a->begin < b->begin; });
  for (size_t i = 1; i < by_begin.size(); ++i) {
    if (by_begin[i]->begin < by_begin[i - 1]->end) {
      return Status::Invalid(source + ": tensors '" + by_begin[i - 1]->name + "' and '" +
                             by_begin[i]->name + "' overlap");
    }
  }
  return h;
}

}  // namespace ptdp::runtime
