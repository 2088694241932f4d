#include "core/json.h"

#include <unistd.h>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>

namespace ptdp {

Result<Json> ParseJson(const std::string& text, const std::string& source) {
  try {
    return Json::parse(text);
  } catch (const Json::parse_error& e) {
    std::string what = e.what();
    // nlohmann's message starts with "[json.exception.parse_error.101] "; keep what follows.
    auto pos = what.find("] ");
    if (pos != std::string::npos) what = what.substr(pos + 2);
    return Status::Invalid(source + ": malformed JSON: " + what);
  }
}

Result<std::string> ReadTextFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Status::NotFound(path + ": cannot open file");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return Status::IoError(path + ": read failed");
  return ss.str();
}

Result<Json> ReadJsonFile(const std::string& path) {
  PTDP_ASSIGN_OR_RETURN(std::string text, ReadTextFile(path));
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
    *why = "integer out of range";
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

}  // namespace ptdp
