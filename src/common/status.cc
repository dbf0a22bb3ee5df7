#include "drover/status.h"

namespace drover {

Status::Status(Code code, std::string message) : code_(code), message_(std::move(message)) {
  if (code_ == Code::kOk) message_.clear();
}

Status Status::WithContext(std::string_view context) const {
  if (ok()) return *this;
  std::string message(context);
  message += ": ";
  message += message_;
  return Status(code_, std::move(message));
}

std::string_view CodeName(Status::Code code) {
  switch (code) {
    case Status::Code::kOk:
      return "OK";
    case Status::Code::kInvalidArgument:
      return "InvalidArgument";
    case Status::Code::kNotFound:
      return "NotFound";
    case Status::Code::kWrongType:
      return "WrongType";
    case Status::Code::kDeadlineExceeded:
      return "DeadlineExceeded";
    case Status::Code::kUnavailable:
      return "Unavailable";
    case Status::Code::kAlreadyExists:
      return "AlreadyExists";
    case Status::Code::kPermissionDenied:
      return "PermissionDenied";
    case Status::Code::kIoError:
      return "IoError";
    case Status::Code::kInternal:
      return "Internal";
    case Status::Code::kFailedPrecondition:
      return "FailedPrecondition";
    case Status::Code::kCancelled:
      return "Cancelled";
  }
  return "Unknown";
}

std::string Status::ToString() const {
  if (ok()) return "OK";
  std::string out(CodeName(code_));
  out += ": ";
  out += message_;
  return out;
}

std::ostream& operator<<(std::ostream& os, const Status& status) {
  return os << status.ToString();
}

}  // namespace drover
