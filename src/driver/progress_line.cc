#include "driver/progress_line.h"

#include <sys/ioctl.h>
#include <unistd.h>

#include <streambuf>

namespace drover {
namespace {

constexpr char kEraseLine[] = "\r\033[K";
constexpr int kDefaultColumns = 100;

int TerminalColumns() {
  winsize size{};
  if (::ioctl(STDERR_FILENO, TIOCGWINSZ, &size) == 0 && size.ws_col > 0) return size.ws_col;
  return kDefaultColumns;
}

}  // namespace

// Passes everything to `target`, erasing the progress line first.
class ProgressLine::ErasingBuffer : public std::streambuf {
 public:
  ErasingBuffer(ProgressLine& owner, std::streambuf* target) : owner_(owner), target_(target) {}

 protected:
  int_type overflow(int_type c) override {
    if (traits_type::eq_int_type(c, traits_type::eof())) return traits_type::not_eof(c);
    owner_.Erase();
    return target_->sputc(traits_type::to_char_type(c));
  }
  std::streamsize xsputn(const char* data, std::streamsize count) override {
    owner_.Erase();
    return target_->sputn(data, count);
  }
  int sync() override { return target_->pubsync(); }

 private:
  ProgressLine& owner_;
  std::streambuf* target_;
};

ProgressLine::ProgressLine(std::ostream& out, std::ostream& err, ProgressOptions options)
    : real_out_(out), real_err_(err), options_(options) {
  if (options_.mode != ProgressMode::kTerminal) return;
  if (options_.terminal_columns <= 0) options_.terminal_columns = TerminalColumns();
  out_buffer_ = std::make_unique<ErasingBuffer>(*this, out.rdbuf());
  err_buffer_ = std::make_unique<ErasingBuffer>(*this, err.rdbuf());
  out_ = std::make_unique<std::ostream>(out_buffer_.get());
  err_ = std::make_unique<std::ostream>(err_buffer_.get());
}

ProgressLine::~ProgressLine() {
  Clear();
}

std::ostream& ProgressLine::out() {
  return out_ ? *out_ : real_out_;
}
std::ostream& ProgressLine::err() {
  return err_ ? *err_ : real_err_;
}

void ProgressLine::Erase() {
  if (!shown_) return;
  shown_ = false;
  real_out_.flush();
  real_err_ << kEraseLine << std::flush;
}

void ProgressLine::Clear() {
  if (out_) out_->flush();
  if (err_) err_->flush();
  Erase();
}

void ProgressLine::Show(const std::string& text, std::chrono::steady_clock::time_point now) {
  switch (options_.mode) {
    case ProgressMode::kOff:
      return;
    case ProgressMode::kPlain:
      if (text.empty() || text == last_plain_) return;
      // The first line only once the work has taken an interval: short runs
      // (and fast rendezvous) print none.
      if (!first_shown_at_) first_shown_at_ = now;
      if (now - *first_shown_at_ < options_.plain_interval) return;
      if (last_plain_at_ && now - *last_plain_at_ < options_.plain_interval) return;
      last_plain_ = text;
      last_plain_at_ = now;
      real_err_ << text << "\n" << std::flush;
      return;
    case ProgressMode::kTerminal: {
      out_->flush();
      err_->flush();
      Erase();
      if (text.empty()) return;
      // A line longer than the terminal wraps, and \r then erases only its end.
      const size_t width = static_cast<size_t>(options_.terminal_columns - 1);
      std::string shown = text.size() > width ? text.substr(0, width - 3) + "..." : text;
      real_out_.flush();
      real_err_ << kEraseLine << shown << std::flush;
      shown_ = true;
      return;
    }
  }
}

}  // namespace drover
