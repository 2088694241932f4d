#include "core/json.h"

#include <sys/stat.h>
#include <unistd.h>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

namespace ptdp {

namespace {

// Builds the DOM from nlohmann's SAX events (its parser keeps its own stack, so it never
// recurses), refusing documents deeper than kMaxJsonDepth, duplicate keys and numbers beyond a
// double before any of them reaches code that recurses or silently drops data.
class CheckedDomBuilder {
 public:
  CheckedDomBuilder(Json* root, std::string source) : root_(root), source_(std::move(source)) {}

  bool null() { return Put(Json(nullptr)) != nullptr; }
  bool boolean(bool v) { return Put(Json(v)) != nullptr; }
  bool number_integer(Json::number_integer_t v) { return Put(Json(v)) != nullptr; }
  bool number_unsigned(Json::number_unsigned_t v) { return Put(Json(v)) != nullptr; }
  bool number_float(Json::number_float_t v, const std::string& text) {
    if (!std::isfinite(v))
      return Error(Path() + ": number " + text + " is outside the range of a double");
    return Put(Json(v)) != nullptr;
  }
  bool string(std::string& v) { return Put(Json(std::move(v))) != nullptr; }
  bool binary(Json::binary_t& v) { return Put(Json::binary(std::move(v))) != nullptr; }
  bool start_object(std::size_t /*n*/) { return Open(Json::object()); }
  bool key(std::string& k) {
    Level& top = stack_.back();
    top.key = k;
    if (top.node->contains(k)) return Error(Path() + ": duplicate key");
    top.slot = &(*top.node)[k];
    return true;
  }
  bool end_object() {
    stack_.pop_back();
    return true;
  }
  bool start_array(std::size_t /*n*/) { return Open(Json::array()); }
  bool end_array() {
    stack_.pop_back();
    return true;
  }
  bool parse_error(std::size_t /*pos*/, const std::string& token,
                   const nlohmann::detail::exception& e) {
    if (e.id == 406) {  // out_of_range.406: a number the lexer could not hold in a double
      return Error(Path() + ": number " + token + " is outside the range of a double");
    }
    std::string what = e.what();
    // nlohmann's message starts with "[json.exception.parse_error.101] "; keep what follows.
    auto pos = what.find("] ");
    if (pos != std::string::npos) what = what.substr(pos + 2);
    return Error("malformed JSON: " + what);
  }

  const Status& status() const { return status_; }

 private:
  struct Level {
    Json* node;
    Json* slot = nullptr;  // objects: the value of `key`, filled by the next event
    std::string key;
  };

  Json* Put(Json v) {
    if (stack_.empty()) {
      *root_ = std::move(v);
      return root_;
    }
    Level& top = stack_.back();
    if (top.node->is_array()) {
      top.node->push_back(std::move(v));
      return &top.node->back();
    }
    *top.slot = std::move(v);
    return top.slot;
  }
  bool Open(Json empty) {
    if (int(stack_.size()) >= kMaxJsonDepth) {
      std::string where = Path();
      // A hostile document's path is as deep as the limit; keep the message one short line.
      if (where.size() > 80) where = where.substr(0, 80) + "...";
      return Error(where + ": nested deeper than " + std::to_string(kMaxJsonDepth) + " levels");
    }
    Json* node = Put(std::move(empty));
    stack_.push_back(Level{node, nullptr, std::string()});
    return true;
  }
  // The key path of the value being read: "model.layers", "ranks[1].instrs[4]".
  std::string Path() const {
    std::string p;
    for (size_t i = 0; i < stack_.size(); ++i) {
      const Level& l = stack_[i];
      if (l.node->is_array()) {
        // Deeper levels are already appended; the value being read is the next element.
        size_t n = l.node->size();
        size_t idx = i + 1 < stack_.size() ? n - 1 : n;
        p += '[';
        p += std::to_string(idx);
        p += ']';
      } else if (!l.key.empty() || l.slot != nullptr) {
        if (!p.empty()) p += '.';
        p += l.key;
      }
    }
    return p.empty() ? "document" : p;
  }
  bool Error(const std::string& m) {
    if (status_.ok()) status_ = Status::Invalid(source_ + ": " + m);
    return false;
  }

  Json* root_;
  std::string source_;
  std::vector<Level> stack_;
  Status status_;
};

}  // namespace

Result<Json> ParseJson(const std::string& text, const std::string& source) {
  Json root;
  CheckedDomBuilder b(&root, source);
  bool ok = false;
  try {
    ok = Json::sax_parse(text, &b);
  } catch (const Json::exception& e) {
    // sax_parse reports through parse_error; anything thrown is unexpected but still bad input.
    return Status::Invalid(source + ": malformed JSON: " + e.what());
  }
  if (!b.status().ok()) return b.status();
  if (!ok) return Status::Invalid(source + ": malformed JSON");
  return root;
}

Result<std::string> ReadTextFile(const std::string& path, int64_t max_bytes) {
  // stat first: opening a FIFO would block, and /dev/zero never ends.
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return Status::NotFound(path + ": cannot open file");
  if (!S_ISREG(st.st_mode)) return Status::Invalid(path + ": not a regular file");
  if (st.st_size > max_bytes) {
    return Status::Invalid(path + ": " + std::to_string(st.st_size) + " bytes is over the " +
                           std::to_string(max_bytes) + "-byte limit for this kind of file");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound(path + ": cannot open file");
  // Read at most max_bytes + 1 so that a file growing under us is still bounded.
  std::string out;
  out.resize(size_t(st.st_size));
  in.read(out.data(), std::streamsize(out.size()));
  if (in.bad()) return Status::IoError(path + ": read failed");
  out.resize(size_t(in.gcount()));
  char extra[4096];
  while (in.read(extra, sizeof extra) || in.gcount() > 0) {
    out.append(extra, size_t(in.gcount()));
    if (int64_t(out.size()) > max_bytes) {
      return Status::Invalid(path + ": over the " + std::to_string(max_bytes) +
                             "-byte limit for this kind of file");
    }
  }
  if (in.bad()) return Status::IoError(path + ": read failed");
  return out;
}

Result<std::string> StringAt(const Json& j, const std::string& key, const std::string& fallback,
                             const std::string& source) {
  if (!j.is_object()) return fallback;
  const auto it = j.find(key);
  if (it == j.end()) return fallback;
  if (!it->is_string()) {
    return Status::Invalid(source + "." + key + ": expected a string, got " + JsonTypeName(*it));
  }
  return it->get<std::string>();
}

Result<Json> ReadJsonFile(const std::string& path, int64_t max_bytes) {
  PTDP_ASSIGN_OR_RETURN(std::string text, ReadTextFile(path, max_bytes));
  return ParseJson(text, path);
}

Status WriteFileAtomic(const std::string& path, const std::string& content) {
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return Status::IoError(path + ": cannot open for writing");
    out << content;
    out.flush();
    if (!out) {
      out.close();
      std::remove(tmp.c_str());
      return Status::IoError(path + ": write failed");
    }
  }
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) {
    std::remove(tmp.c_str());
    return Status::IoError(path + ": rename failed: " + ec.message());
  }
  return Status::Ok();
}

const char* JsonTypeName(const Json& j) {
  switch (j.type()) {
    case Json::value_t::null:
      return "null";
    case Json::value_t::object:
      return "object";
    case Json::value_t::array:
      return "array";
    case Json::value_t::string:
      return "string";
    case Json::value_t::boolean:
      return "boolean";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
      return "integer";
    case Json::value_t::number_float:
      return "number";
    default:
      return "value";
  }
}

JsonObjectReader::JsonObjectReader(const Json& j, std::string path)
    : j_(j), path_(std::move(path)) {
  if (!j_.is_object()) {
    status_ = Status::Invalid((path_.empty() ? std::string("document") : path_) +
                              ": expected an object, got " + JsonTypeName(j_));
  }
}

std::string JsonObjectReader::PathOf(const std::string& key) const {
  return path_.empty() ? key : path_ + "." + key;
}

void JsonObjectReader::Fail(const std::string& key, const std::string& reason) {
  if (status_.ok()) status_ = Status::Invalid(PathOf(key) + ": " + reason);
}

bool JsonObjectReader::Has(const std::string& key) const {
  return j_.is_object() && j_.contains(key);
}

void JsonObjectReader::Allow(const std::string& key) {
  seen_.insert(key);
}

const Json* JsonObjectReader::Child(const std::string& key, bool required) {
  seen_.insert(key);
  if (!j_.is_object()) return nullptr;
  auto it = j_.find(key);
  if (it == j_.end()) {
    if (required) Fail(key, "missing required key");
    return nullptr;
  }
  return &*it;
}

namespace {

bool Convert(const Json& v, int64_t* out, std::string* why) {
  if (v.is_number_integer()) {
    if (v.is_number_unsigned() &&
        v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max())) {
      *why = "integer out of range";
      return false;
    }
    *out = v.get<int64_t>();
    return true;
  }
  if (v.is_number_float()) {
    double d = v.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9.0e18) {
      *out = static_cast<int64_t>(d);
      return true;
    }
  }
  *why = std::string("expected an integer, got ") + JsonTypeName(v);
  return false;
}
bool Convert(const Json& v, int* out, std::string* why) {
  int64_t x = 0;
  if (!Convert(v, &x, why)) return false;
  if (x < std::numeric_limits<int>::min() || x > std::numeric_limits<int>::max()) {
    // The field's own range (checked after reading) is narrower; this only keeps the cast defined.
    *why = std::to_string(x) + " is outside [" + std::to_string(std::numeric_limits<int>::min()) +
           ", " + std::to_string(std::numeric_limits<int>::max()) + "]";
    return false;
  }
  *out = static_cast<int>(x);
  return true;
}
bool Convert(const Json& v, double* out, std::string* why) {
  if (!v.is_number()) {
    *why = std::string("expected a number, got ") + JsonTypeName(v);
    return false;
  }
  *out = v.get<double>();
  return true;
}
bool Convert(const Json& v, bool* out, std::string* why) {
  if (!v.is_boolean()) {
    *why = std::string("expected true or false, got ") + JsonTypeName(v);
    return false;
  }
  *out = v.get<bool>();
  return true;
}
bool Convert(const Json& v, std::string* out, std::string* why) {
  if (!v.is_string()) {
    *why = std::string("expected a string, got ") + JsonTypeName(v);
    return false;
  }
  *out = v.get<std::string>();
  return true;
}
bool Convert(const Json& v, std::vector<double>* out, std::string* why) {
  if (!v.is_array()) {
    *why = std::string("expected a list of numbers, got ") + JsonTypeName(v);
    return false;
  }
  out->clear();
  for (size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_number()) {
      *why = "element " + std::to_string(i) + ": expected a number, got " + JsonTypeName(v[i]);
      return false;
    }
    out->push_back(v[i].get<double>());
  }
  return true;
}

bool Convert(const Json& v, std::vector<int>* out, std::string* why) {
  if (!v.is_array()) {
    *why = std::string("expected a list of integers, got ") + JsonTypeName(v);
    return false;
  }
  out->clear();
  for (size_t i = 0; i < v.size(); ++i) {
    int x = 0;
    std::string element_why;
    if (!Convert(v[i], &x, &element_why)) {
      *why = "element " + std::to_string(i) + ": " + element_why;
      return false;
    }
    out->push_back(x);
  }
  return true;
}

}  // namespace

template <typename T>
void JsonObjectReader::Read(const std::string& key, T* out, bool required) {
  const Json* v = Child(key, required);
  if (v == nullptr || !status_.ok()) return;
  std::string why;
  if (!Convert(*v, out, &why)) Fail(key, why);
}

void JsonObjectReader::Required(const std::string& k, int64_t* o) {
  Read(k, o, true);
}
void JsonObjectReader::Required(const std::string& k, int* o) {
  Read(k, o, true);
}
void JsonObjectReader::Required(const std::string& k, double* o) {
  Read(k, o, true);
}
void JsonObjectReader::Required(const std::string& k, bool* o) {
  Read(k, o, true);
}
void JsonObjectReader::Required(const std::string& k, std::string* o) {
  Read(k, o, true);
}
void JsonObjectReader::Required(const std::string& k, std::vector<double>* o) {
  Read(k, o, true);
}
void JsonObjectReader::Optional(const std::string& k, int64_t* o) {
  Read(k, o, false);
}
void JsonObjectReader::Optional(const std::string& k, int* o) {
  Read(k, o, false);
}
void JsonObjectReader::Optional(const std::string& k, double* o) {
  Read(k, o, false);
}
void JsonObjectReader::Optional(const std::string& k, bool* o) {
  Read(k, o, false);
}
void JsonObjectReader::Optional(const std::string& k, std::string* o) {
  Read(k, o, false);
}
void JsonObjectReader::Optional(const std::string& k, std::vector<int>* o) {
  Read(k, o, false);
}
void JsonObjectReader::Optional(const std::string& k, std::vector<double>* o) {
  Read(k, o, false);
}

Status JsonObjectReader::Finish() {
  if (!status_.ok()) return status_;
  for (auto it = j_.begin(); it != j_.end(); ++it) {
    if (!seen_.count(it.key())) return Status::Invalid(PathOf(it.key()) + ": unknown key");
  }
  return Status::Ok();
}

Status ReadObjectList(
    const Json& list, const std::string& path,
    const std::function<Status(JsonObjectReader& element, const std::string& element_path)>& read) {
  if (!list.is_array()) {
    return Status::Invalid(path + ": expected a list, got " + JsonTypeName(list));
  }
  for (size_t i = 0; i < list.size(); ++i) {
    const Json& e = list[i];
    const std::string epath = path + "[" + std::to_string(i) + "]";
    if (!e.is_object()) {
      return Status::Invalid(epath + ": expected an object, got " + JsonTypeName(e));
    }
    JsonObjectReader element(e, epath);
    PTDP_RETURN_IF_ERROR(read(element, epath));
    PTDP_RETURN_IF_ERROR(element.Finish());
  }
  return Status::Ok();
}

}  // namespace ptdp
