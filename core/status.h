// Status and Result<T>: how library code reports failure. Only tools/ turns a Status into a
// message and an exit code. Invariant violations (bugs, not bad input) go through PTDP_CHECK,
// which throws ptdp::InternalError; library code never exits the process.
#pragma once

#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <variant>

namespace ptdp {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,  // bad input: malformed JSON, unknown key, wrong type, impossible layout
  kNotFound,         // unknown preset, missing file
  kDoesNotFit,       // a layout or model that cannot fit in memory
  kIoError,          // a file that cannot be read or written, a truncated file
  kInternal,         // a bug or an unexpected library failure
};

const char* StatusCodeName(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status Ok() { return Status(); }
  static Status Invalid(std::string m) {
    return Status(StatusCode::kInvalidArgument, std::move(m));
  }
  static Status NotFound(std::string m) { return Status(StatusCode::kNotFound, std::move(m)); }
  static Status DoesNotFit(std::string m) { return Status(StatusCode::kDoesNotFit, std::move(m)); }
  static Status IoError(std::string m) { return Status(StatusCode::kIoError, std::move(m)); }
  static Status Internal(std::string m) { return Status(StatusCode::kInternal, std::move(m)); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "invalid argument: <message>", or "ok".
  std::string ToString() const;
  // The same status with "<prefix>: " put before the message.
  Status WithPrefix(const std::string& prefix) const;
  // Bad-input statuses map to exit code 2, the others to 1 (see ARCHITECTURE.md, The CLI).
  int ExitCode() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

// A value or the Status that says why there is none. REQUIRES: a Result built from a Status is
// built from a non-ok one.
template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}        // NOLINT: implicit by design
  Result(Status status) : v_(std::move(status)) {  // NOLINT
    if (std::get<Status>(v_).ok()) v_ = Status::Internal("Result built from an ok Status");
  }
  bool ok() const { return std::holds_alternative<T>(v_); }
  Status status() const { return ok() ? Status::Ok() : std::get<Status>(v_); }
  const T& value() const& { return Checked(); }
  T& value() & { return const_cast<T&>(Checked()); }
  T&& value() && { return std::move(const_cast<T&>(Checked())); }
  const T& operator*() const& { return value(); }
  T& operator*() & { return value(); }
  const T* operator->() const { return &value(); }
  T* operator->() { return &value(); }

 private:
  const T& Checked() const;
  std::variant<T, Status> v_;
};

class InternalError : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

[[noreturn]] void CheckFailed(const char* file, int line, const char* cond, const std::string& msg);

template <typename T>
const T& Result<T>::Checked() const {
  if (!ok()) CheckFailed(__FILE__, __LINE__, "Result::ok()", std::get<Status>(v_).ToString());
  return std::get<T>(v_);
}

}  // namespace ptdp

// Invariant check: a failure is a bug in ptdp, reported with file and line.
#define PTDP_CHECK(cond)                                                        \
  do {                                                                          \
    if (!(cond)) ::ptdp::CheckFailed(__FILE__, __LINE__, #cond, std::string()); \
  } while (0)
#define PTDP_CHECK_MSG(cond, msg)                                       \
  do {                                                                  \
    if (!(cond)) ::ptdp::CheckFailed(__FILE__, __LINE__, #cond, (msg)); \
  } while (0)

#define PTDP_CONCAT_INNER(a, b) a##b
#define PTDP_CONCAT(a, b) PTDP_CONCAT_INNER(a, b)

#define PTDP_RETURN_IF_ERROR(expr)       \
  do {                                   \
    ::ptdp::Status _ptdp_st = (expr);    \
    if (!_ptdp_st.ok()) return _ptdp_st; \
  } while (0)

#define PTDP_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                               \
  if (!tmp.ok()) return tmp.status();              \
  lhs = std::move(tmp).value()

#define PTDP_ASSIGN_OR_RETURN(lhs, expr) \
  PTDP_ASSIGN_OR_RETURN_IMPL(PTDP_CONCAT(_ptdp_result_, __LINE__), lhs, expr)
