// Status and Result<T>: how every fallible drover call reports failure.
//
// A Status is either OK or a code plus a message that says what was expected,
// what came, and which node/job/task it concerns. Peer death and timeouts are
// expected events, so they are values, never exceptions. The code set is small
// on purpose; the Python bindings map it onto the exceptions TensorFlow raises
// (see ToPythonException in python/), and the CLI onto one line and an exit code.
//
// Status and Result are plain values: copyable, not thread-safe to mutate
// concurrently, safe to read from many threads.

#ifndef DROVER_STATUS_H_
#define DROVER_STATUS_H_

#include <cassert>
#include <optional>
#include <ostream>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace drover {

class Status {
 public:
  enum class Code {
    kOk = 0,
    kInvalidArgument,     // malformed input; Python ValueError
    kNotFound,            // unknown job, task, key, file; Python ValueError
    kWrongType,           // a value of the wrong type; Python TypeError
    kDeadlineExceeded,    // a wait ran out; Python TimeoutError
    kUnavailable,         // a peer is unreachable or died; Python RuntimeError
    kAlreadyExists,       // a duplicate key or task; Python KeyError
    kPermissionDenied,    // auth failed; Python PermissionError
    kIoError,             // the OS refused (open, read, bind); Python OSError
    kInternal,            // a broken invariant; Python RuntimeError
    kFailedPrecondition,  // not allowed in this state (a feed that ended); Python RuntimeError
    kCancelled,           // the other side gave up (a terminated feed); Python RuntimeError
  };

  Status() = default;
  Status(Code code, std::string message);

  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string message) {
    return Status(Code::kInvalidArgument, std::move(message));
  }
  static Status NotFound(std::string message) {
    return Status(Code::kNotFound, std::move(message));
  }
  static Status WrongType(std::string message) {
    return Status(Code::kWrongType, std::move(message));
  }
  static Status DeadlineExceeded(std::string message) {
    return Status(Code::kDeadlineExceeded, std::move(message));
  }
  static Status Unavailable(std::string message) {
    return Status(Code::kUnavailable, std::move(message));
  }
  static Status AlreadyExists(std::string message) {
    return Status(Code::kAlreadyExists, std::move(message));
  }
  static Status PermissionDenied(std::string message) {
    return Status(Code::kPermissionDenied, std::move(message));
  }
  static Status IoError(std::string message) { return Status(Code::kIoError, std::move(message)); }
  static Status Internal(std::string message) {
    return Status(Code::kInternal, std::move(message));
  }
  static Status FailedPrecondition(std::string message) {
    return Status(Code::kFailedPrecondition, std::move(message));
  }
  static Status Cancelled(std::string message) {
    return Status(Code::kCancelled, std::move(message));
  }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }

  // Returns a copy whose message is "<context>: <message>"; OK stays OK.
  Status WithContext(std::string_view context) const;

  // "OK" or "<CodeName>: <message>".
  std::string ToString() const;

  friend bool operator==(const Status& a, const Status& b) {
    return a.code_ == b.code_ && a.message_ == b.message_;
  }

 private:
  Code code_ = Code::kOk;
  std::string message_;
};

std::string_view CodeName(Status::Code code);
std::ostream& operator<<(std::ostream& os, const Status& status);

// Result<T> holds a T or a non-OK Status.
template <typename T>
class Result {
 public:
  Result(T value) : state_(std::move(value)) {}        // NOLINT: implicit by design
  Result(Status status) : state_(std::move(status)) {  // NOLINT
    assert(!std::get<Status>(state_).ok() && "Result needs a value or an error");
  }

  bool ok() const { return std::holds_alternative<T>(state_); }
  const Status& status() const {
    static const Status kOkStatus;
    return ok() ? kOkStatus : std::get<Status>(state_);
  }

  // REQUIRES: ok()
  const T& value() const& { return std::get<T>(state_); }
  T& value() & { return std::get<T>(state_); }
  T&& value() && { return std::get<T>(std::move(state_)); }
  const T& operator*() const& { return value(); }
  T& operator*() & { return value(); }
  const T* operator->() const { return &value(); }
  T* operator->() { return &value(); }

  T value_or(T fallback) const& { return ok() ? value() : std::move(fallback); }

 private:
  std::variant<T, Status> state_;
};

}  // namespace drover

// Evaluates an expression yielding Status; returns it from the caller if not OK.
#define DROVER_RETURN_IF_ERROR(expr)                 \
  do {                                               \
    ::drover::Status drover_status_ = (expr);        \
    if (!drover_status_.ok()) return drover_status_; \
  } while (false)

#define DROVER_CONCAT_INNER_(a, b) a##b
#define DROVER_CONCAT_(a, b) DROVER_CONCAT_INNER_(a, b)

// Declares `lhs` from a Result<T> expression, or returns its Status.
#define DROVER_ASSIGN_OR_RETURN(lhs, expr) \
  DROVER_ASSIGN_OR_RETURN_IMPL_(DROVER_CONCAT_(drover_result_, __LINE__), lhs, expr)
#define DROVER_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                                  \
  if (!tmp.ok()) return tmp.status();                 \
  lhs = std::move(tmp).value()

#endif  // DROVER_STATUS_H_
