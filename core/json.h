// Strict JSON I/O. Every object is read through a JsonObjectReader, which checks each key's type
// and, on Finish(), rejects any key it was not asked for. Errors name the full key path
// ("cluster.links.inter_node.latency_us: expected a number, got string").
#pragma once

#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace ptdp {

using Json = nlohmann::json;  // keeps insertion order irrelevant; we never rely on it
using OrderedJson = nlohmann::ordered_json;  // for output that people read

// Limits on every JSON document we read, enforced while parsing (before anything recurses over
// the tree: nlohmann's parser is iterative, but copies, dumps and our readers are not):
//   - nesting depth at most kMaxJsonDepth objects/arrays (our deepest schema, a plan's
//     program, needs 6);
//   - no key twice in one object (nlohmann would keep the last silently);
//   - every number within the range of a double (1e400 is refused, not read as inf).
// Files must be regular files (not /dev/zero, a FIFO or a directory) no larger than the cap of
// their kind: kMaxJsonFileBytes for models, profiles and clusters, kMaxPlanFileBytes for plan
// files (which hold a whole Program: 4.5 MB for the gpt-1t plan).
inline constexpr int kMaxJsonDepth = 64;
inline constexpr int64_t kMaxJsonFileBytes = int64_t(64) << 20;   // 64 MiB
inline constexpr int64_t kMaxPlanFileBytes = int64_t(256) << 20;  // 256 MiB
inline constexpr int64_t kMaxTextFileBytes = int64_t(2) << 30;    // 2 GiB

// Parses text; `source` names it in errors (a file path, "--model").
Result<Json> ParseJson(const std::string& text, const std::string& source);
// Reads and parses a file of at most `max_bytes`.
Result<Json> ReadJsonFile(const std::string& path, int64_t max_bytes = kMaxJsonFileBytes);
// Reads a whole regular file of at most `max_bytes` as bytes.
Result<std::string> ReadTextFile(const std::string& path, int64_t max_bytes = kMaxTextFileBytes);
// Writes `content` to `path` through a temporary file and a rename, so that a failure never leaves
// a partial file behind.
Status WriteFileAtomic(const std::string& path, const std::string& content);

// "expected an integer, got string" style names of JSON types.
const char* JsonTypeName(const Json& j);

// A string key read outside a JsonObjectReader (a peek before choosing one): j[key] when j is an
// object with a string there, `fallback` when j is not an object or has no such key, and an error
// `source` + "." + key + ": expected a string, got ..." when the key holds something else
// (nlohmann's value() would throw instead).
Result<std::string> StringAt(const Json& j, const std::string& key, const std::string& fallback,
                             const std::string& source);

class JsonObjectReader {
 public:
  // `path` is the key path of `j` itself ("" for the document root).
  JsonObjectReader(const Json& j, std::string path);

  // Each reader records the first error and then does nothing; check status() or Finish().
  void Required(const std::string& key, int64_t* out);
  void Required(const std::string& key, int* out);
  void Required(const std::string& key, double* out);
  void Required(const std::string& key, bool* out);
  void Required(const std::string& key, std::string* out);
  void Optional(const std::string& key, int64_t* out);
  void Optional(const std::string& key, int* out);
  void Optional(const std::string& key, double* out);
  void Optional(const std::string& key, bool* out);
  void Optional(const std::string& key, std::string* out);
  // A list of numbers.
  void Optional(const std::string& key, std::vector<double>* out);
  void Required(const std::string& key, std::vector<double>* out);
  void Optional(const std::string& key, std::vector<int>* out);  // a list of integers

  bool Has(const std::string& key) const;
  // Marks `key` as known and returns its value, or nullptr (and an error if `required`).
  const Json* Child(const std::string& key, bool required);
  // Marks a key as known without reading it.
  void Allow(const std::string& key);

  // The full path of `key` under this object, for messages.
  std::string PathOf(const std::string& key) const;
  // Records an error about `key` (the first error wins).
  void Fail(const std::string& key, const std::string& reason);

  const Status& status() const { return status_; }
  // The first error, or an error naming the first unknown key, or ok.
  Status Finish();

 private:
  template <typename T>
  void Read(const std::string& key, T* out, bool required);

  const Json& j_;
  std::string path_;
  std::set<std::string> seen_;
  Status status_;
};

// A list of objects at `path` (a profile's points, say): `read` reads each element through its
// own reader at "path[i]", then the reader's Finish() refuses unknown keys. The first error wins:
// `list` not a list, an element not an object, `read`'s, or Finish()'s.
Status ReadObjectList(
    const Json& list, const std::string& path,
    const std::function<Status(JsonObjectReader& element, const std::string& element_path)>& read);

}  // namespace ptdp
