#include "core/status.h"

#include <sstream>

namespace ptdp {

const char* StatusCodeName(StatusCode code) {
  switch (code) {
    case StatusCode::kOk:
      return "ok";
    case StatusCode::kInvalidArgument:
      return "invalid argument";
    case StatusCode::kNotFound:
      return "not found";
    case StatusCode::kDoesNotFit:
      return "does not fit";
    case StatusCode::kIoError:
      return "I/O error";
    case StatusCode::kInternal:
      return "internal error";
  }
  return "unknown";
}

std::string Status::ToString() const {
  if (ok()) return "ok";
  return std::string(StatusCodeName(code_)) + ": " + message_;
}

Status Status::WithPrefix(const std::string& prefix) const {
  if (ok()) return *this;
  return Status(code_, prefix + ": " + message_);
}

int Status::ExitCode() const {
  switch (code_) {
    case StatusCode::kOk:
      return 0;
    case StatusCode::kInternal:
      return 1;
    default:
      return 2;
  }
}

void CheckFailed(const char* file, int line, const char* cond, const std::string& msg) {
  std::ostringstream os;
  os << "PTDP_CHECK failed at " << file << ":" << line << ": " << cond;
  if (!msg.empty()) os << " (" << msg << ")";
  throw InternalError(os.str());
}

}  // namespace ptdp
