#include "os/output_relay.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <map>
#include <mutex>

#include "os/fd_io.h"
#include "os/sigpipe_block.h"

namespace drover::os {
namespace {

constexpr char kMarker = '\x1e';
// A slow reader holds up the sources once this much waits for it.
constexpr size_t kBackedUp = 1 << 20;
// "\x1e" + kind + a 20-digit channel + " " + a 20-digit length + "\n": the
// most a header takes, marker and newline included. Both the wait for a
// header's newline and the check of a whole one use it, so a stream decodes
// the same whatever the pieces it arrives in.
constexpr size_t kMaxHeader = 44;

// Not strchr("oes", kind): that finds the terminating NUL for a '\0'.
bool IsFrameKind(char kind) {
  return kind == 'o' || kind == 'e' || kind == 's';
}

bool ParseNumber(std::string_view text, size_t* value) {
  if (text.empty()) return false;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), *value);
  return error == std::errc() && end == text.data() + text.size();
}

// Bytes waiting for one descriptor that may not take them all at once.
struct Sink {
  UniqueFd fd;
  std::string pending;
  size_t done = 0;
  bool end_when_flushed = false;

  size_t waiting() const { return pending.size() - done; }
  void Append(std::string_view bytes) {
    if (fd.valid()) pending.append(bytes);
  }
  // Writes what the descriptor takes now; drops everything once its reader
  // is gone; closes it once told to end and flushed, calling `before_close`
  // with it first (to take it out of a poll set while the number is ours).
  void Flush(const std::function<void(int)>& before_close = nullptr) {
    if (!fd.valid()) return;
    const bool reader_gone = !WriteAvailable(fd.get(), pending, &done);
    if (!reader_gone && done < pending.size()) return;
    pending.clear();
    done = 0;
    if (!reader_gone && !end_when_flushed) return;
    if (before_close) before_close(fd.get());
    fd.Reset();
  }
};

// Puts a sink's file status flags back as they came, if it is still open.
struct RestoreFlagsAtEnd {
  Sink& sink;
  int flags;
  ~RestoreFlagsAtEnd() {
    if (sink.fd.valid()) ::fcntl(sink.fd.get(), F_SETFL, flags);
  }
};

}  // namespace

std::string EncodeRelayFrame(char kind, size_t channel, std::string_view payload) {
  std::string frame;
  frame.reserve(kMaxHeader + payload.size());
  frame += kMarker;
  frame += kind;
  frame += std::to_string(channel);
  frame += ' ';
  frame += std::to_string(payload.size());
  frame += '\n';
  frame.append(payload);
  return frame;
}

void RelayDecoder::Feed(std::string_view bytes,
                        const std::function<void(const RelayFrame&)>& on_frame) {
  buffer_.append(bytes);
  size_t at = 0;
  auto raw = [&](size_t end) {
    on_frame(RelayFrame{'r', 0, std::string_view(buffer_).substr(at, end - at)});
    at = end;
  };
  while (at < buffer_.size()) {
    if (buffer_[at] != kMarker) {
      size_t next = buffer_.find(kMarker, at);
      raw(next == std::string::npos ? buffer_.size() : next);
      continue;
    }
    const size_t newline = buffer_.find('\n', at);
    if (newline == std::string::npos) {
      if (buffer_.size() - at < kMaxHeader) break;  // the header's rest is on its way
      raw(at + 1);
      continue;
    }
    const std::string_view header = std::string_view(buffer_).substr(at + 1, newline - at - 1);
    const size_t space = header.find(' ');
    size_t channel = 0;
    size_t length = 0;
    const bool good = header.size() + 2 <= kMaxHeader && space != std::string_view::npos &&
                      !header.empty() && IsFrameKind(header[0]) &&
                      ParseNumber(header.substr(1, space - 1), &channel) &&
                      ParseNumber(header.substr(space + 1), &length) && length <= kMaxPayload;
    if (!good) {
      raw(at + 1);  // a stray marker byte: the rest is looked at again
      continue;
    }
    if (buffer_.size() - (newline + 1) < length) break;  // the payload's rest is on its way
    on_frame(RelayFrame{header[0], channel, std::string_view(buffer_).substr(newline + 1, length)});
    at = newline + 1 + length;
  }
  buffer_.erase(0, at);
}

void RelayDecoder::Finish(const std::function<void(const RelayFrame&)>& on_frame) {
  if (!buffer_.empty()) on_frame(RelayFrame{'r', 0, buffer_});
  buffer_.clear();
}

Result<std::unique_ptr<OutputRelay>> OutputRelay::Start(size_t channels, UniqueFd out) {
  std::unique_ptr<OutputRelay> relay(new OutputRelay());
  DROVER_ASSIGN_OR_RETURN(relay->wake_, MakeEventFd());
  for (size_t i = 0; i <= channels; ++i) {
    DROVER_ASSIGN_OR_RETURN(Pipe pipe, MakePipe(O_CLOEXEC));
    SetNonBlocking(pipe.read.get());
    relay->readers_.push_back(std::move(pipe.read));
    if (i < channels) {
      relay->writers_.push_back(std::move(pipe.write));
    } else {
      relay->status_writer_ = std::move(pipe.write);
    }
  }
  relay->out_flags_ = ::fcntl(out.get(), F_GETFL);
  SetNonBlocking(out.get());
  relay->out_ = std::move(out);
  relay->thread_ = std::thread([raw = relay.get()] { raw->Loop(); });
  return relay;
}

OutputRelay::~OutputRelay() {
  Finish(std::chrono::milliseconds(0));
}

void OutputRelay::Finish(std::chrono::milliseconds timeout) {
  if (!thread_.joinable()) return;
  writers_.clear();
  status_writer_.Reset();
  finish_by_ = (std::chrono::steady_clock::now() + timeout).time_since_epoch().count();
  SignalEventFd(wake_.get());
  thread_.join();
}

void OutputRelay::Loop() {
  SigpipeBlock no_sigpipe;  // a driver gone: EPIPE, and the output is dropped
  Sink out{std::move(out_)};
  // The stream's file description may be shared (a terminal, when run by
  // hand): it goes back to blocking as it came, before its close.
  RestoreFlagsAtEnd restore{out, out_flags_};
  const size_t status = readers_.size() - 1;
  auto finish_by = std::chrono::steady_clock::time_point::max();
  for (;;) {
    std::vector<pollfd> fds{{wake_.get(), POLLIN, 0}};
    std::vector<size_t> polled;
    bool open = false;
    for (size_t i = 0; i < readers_.size(); ++i) {
      if (!readers_[i].valid()) continue;
      open = true;
      if (out.waiting() >= kBackedUp) continue;
      fds.push_back({readers_[i].get(), POLLIN, 0});
      polled.push_back(i);
    }
    if (out.waiting() > 0) fds.push_back({out.fd.get(), POLLOUT, 0});
    if (!open && out.waiting() == 0) return;
    const bool finishing = finish_by != std::chrono::steady_clock::time_point::max();
    if (finishing && std::chrono::steady_clock::now() >= finish_by) return;
    if (::poll(fds.data(), fds.size(), finishing ? PollTimeoutMs(finish_by) : -1) < 0 &&
        errno != EINTR) {
      return;
    }
    if (fds[0].revents != 0) {
      DrainEventFd(wake_.get());
      const auto since_epoch = std::chrono::steady_clock::duration(finish_by_.load());
      finish_by = std::chrono::steady_clock::time_point(since_epoch);
    }
    for (size_t k = 0; k < polled.size(); ++k) {
      if (fds[k + 1].revents == 0) continue;
      const size_t i = polled[k];
      std::string data;
      const bool more = ReadAvailable(readers_[i].get(), &data);
      for (size_t at = 0; at < data.size(); at += RelayDecoder::kMaxPayload) {
        std::string_view piece = std::string_view(data).substr(at, RelayDecoder::kMaxPayload);
        out.Append(EncodeRelayFrame(i == status ? 's' : 'o', i == status ? 0 : i, piece));
      }
      if (!more) {
        readers_[i].Reset();
        if (i != status) out.Append(EncodeRelayFrame('e', i, ""));
      }
    }
    out.Flush();
  }
}

namespace {

// One demux's state, touched only by the hub's thread (or under its lock).
struct DemuxState {
  int sources[2];           // the frames, then the launcher's own output; -1 once ended
  std::vector<Sink> sinks;  // channels, then the status pipe
  RelayDecoder decoder;
  // The events each fd is registered for in the hub's epoll (0: not registered).
  uint32_t source_events[2] = {0, 0};
  std::vector<uint32_t> sink_events;
  // Channel 0's end came while the launcher's own output may still come.
  bool channel0_ended = false;
  // Both sources ended: the status pipe ends once every channel has, so a
  // reader that takes the status pipe's end for the agent's sees all of its
  // output first, however much the channels still held.
  bool launcher_ended = false;

  size_t status() const { return sinks.size() - 1; }
  bool backed_up() const {
    for (const Sink& sink : sinks) {
      if (sink.waiting() >= kBackedUp) return true;
    }
    return false;
  }
  void Deliver(const RelayFrame& frame) {
    if (frame.kind == 's') {
      sinks[status()].Append(frame.payload);
    } else if (frame.kind == 'r' || frame.channel >= status()) {
      sinks[0].Append(frame.payload);
    } else if (frame.kind == 'o') {
      sinks[frame.channel].Append(frame.payload);
    } else if (frame.channel != 0 || sources[1] < 0) {
      sinks[frame.channel].end_when_flushed = true;
    } else {
      channel0_ended = true;  // ends with the launcher's own output
    }
  }
  void Read(int which) {
    std::string data;
    const bool more = ReadAvailable(sources[which], &data);
    auto deliver = [this](const RelayFrame& frame) { Deliver(frame); };
    if (which == 0) {
      decoder.Feed(data, deliver);
    } else {
      sinks[0].Append(data);
    }
    if (!more) sources[which] = -1;
    if (which == 1 && sources[1] < 0 && channel0_ended) sinks[0].end_when_flushed = true;
    if (sources[0] < 0 && sources[1] < 0) {
      // The launcher ended: a frame it cut short is shown as it came.
      decoder.Finish(deliver);
      for (size_t i = 0; i < status(); ++i) sinks[i].end_when_flushed = true;
      launcher_ended = true;
    }
  }
  // Once the launcher ended and every channel's pipe is closed.
  void EndStatusAfterChannels() {
    if (!launcher_ended) return;
    for (size_t i = 0; i < status(); ++i) {
      if (sinks[i].fd.valid()) return;
    }
    sinks[status()].end_when_flushed = true;
  }
  bool finished() const {
    for (const Sink& sink : sinks) {
      if (sink.fd.valid()) return false;
    }
    return true;
  }
};

// Every RelayDemux of the process is served by one thread polling one
// epoll set, so a driver of 500 hosts runs one demultiplexing thread, not
// 500. Level-triggered; a source whose sinks are backed up leaves the set
// until they drain (an ended source would otherwise report its hang-up on
// every wait).
class DemuxHub {
 public:
  static DemuxHub& Get() {
    static DemuxHub* hub = new DemuxHub();  // never destroyed: its thread runs to the end
    return *hub;
  }

  Result<uint64_t> Add(std::unique_ptr<DemuxState> state) {
    if (!epoll_.valid()) return Status::IoError("epoll_create1 failed; cannot relay output");
    std::lock_guard<std::mutex> lock(mutex_);
    const uint64_t id = next_id_++;
    DemuxState& added = *state;
    added.sink_events.assign(added.sinks.size(), 0);
    states_.emplace(id, std::move(state));
    Update(id, added);
    return id;
  }

  // Once it returns, the hub touches none of the demux's fds again.
  void Remove(uint64_t id) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto found = states_.find(id);
    if (found == states_.end()) return;
    Unregister(id, *found->second);
    states_.erase(found);
  }

 private:
  static constexpr uint64_t kIndexBits = 16;

  DemuxHub() : epoll_(::epoll_create1(EPOLL_CLOEXEC)) {
    if (epoll_.valid()) std::thread([this] { Loop(); }).detach();
  }

  // epoll's data: the demux and which of its fds (0, 1: sources; 2..: sinks).
  static uint64_t Key(uint64_t id, size_t index) { return id << kIndexBits | index; }

  void Watch(uint64_t id, size_t index, int fd, uint32_t wanted, uint32_t* registered) {
    if (wanted == *registered) return;
    epoll_event event{};
    event.events = wanted;
    event.data.u64 = Key(id, index);
    const int op = *registered == 0 ? EPOLL_CTL_ADD : wanted == 0 ? EPOLL_CTL_DEL : EPOLL_CTL_MOD;
    ::epoll_ctl(epoll_.get(), op, fd, &event);
    *registered = wanted;
  }

  // Registers each fd for what it waits for now: a source for input unless
  // its sinks are backed up, a sink for output while it holds bytes.
  void Update(uint64_t id, DemuxState& state) {
    const bool backed_up = state.backed_up();
    for (size_t i = 0; i < 2; ++i) {
      if (state.sources[i] < 0) {
        state.source_events[i] = 0;  // ended: its close took it out of the set
        continue;
      }
      Watch(id, i, state.sources[i], backed_up ? 0u : uint32_t{EPOLLIN}, &state.source_events[i]);
    }
    for (size_t i = 0; i < state.sinks.size(); ++i) {
      Sink& sink = state.sinks[i];
      if (!sink.fd.valid()) continue;
      Watch(id, 2 + i, sink.fd.get(), sink.waiting() > 0 ? uint32_t{EPOLLOUT} : 0u,
            &state.sink_events[i]);
    }
  }

  void Unregister(uint64_t id, DemuxState& state) {
    for (size_t i = 0; i < 2; ++i) {
      if (state.sources[i] >= 0) Watch(id, i, state.sources[i], 0, &state.source_events[i]);
    }
    for (size_t i = 0; i < state.sinks.size(); ++i) {
      if (state.sinks[i].fd.valid()) {
        Watch(id, 2 + i, state.sinks[i].fd.get(), 0, &state.sink_events[i]);
      }
    }
  }

  void Handle(uint64_t id, DemuxState& state, size_t index) {
    if (index < 2) {
      const int source = state.sources[index];
      if (source < 0) return;
      state.Read(static_cast<int>(index));
      if (state.sources[index] < 0) {
        Watch(id, index, source, 0, &state.source_events[index]);
      }
    }
    for (size_t i = 0; i < state.sinks.size(); ++i) {
      if (i == state.status()) state.EndStatusAfterChannels();
      // Out of the set before its close (the fd number may come back).
      state.sinks[i].Flush([&](int fd) { Watch(id, 2 + i, fd, 0, &state.sink_events[i]); });
    }
  }

  void Loop() {
    SigpipeBlock no_sigpipe;  // a reader gone: EPIPE, and its bytes are dropped
    epoll_event events[64];
    for (;;) {
      const int ready = ::epoll_wait(epoll_.get(), events, 64, -1);
      if (ready < 0) continue;  // EINTR
      std::lock_guard<std::mutex> lock(mutex_);
      for (int k = 0; k < ready; ++k) {
        const uint64_t id = events[k].data.u64 >> kIndexBits;
        const size_t index = events[k].data.u64 & ((uint64_t{1} << kIndexBits) - 1);
        auto found = states_.find(id);
        if (found == states_.end()) continue;  // removed since the wait
        Handle(id, *found->second, index);
      }
      for (auto it = states_.begin(); it != states_.end();) {
        if (it->second->finished()) {
          Unregister(it->first, *it->second);
          it = states_.erase(it);
        } else {
          Update(it->first, *it->second);
          ++it;
        }
      }
    }
  }

  UniqueFd epoll_;
  std::mutex mutex_;
  std::map<uint64_t, std::unique_ptr<DemuxState>> states_;
  uint64_t next_id_ = 1;
};

}  // namespace

Result<std::unique_ptr<RelayDemux>> RelayDemux::Start(int frames, int raw, size_t channels) {
  std::unique_ptr<RelayDemux> demux(new RelayDemux());
  auto state = std::make_unique<DemuxState>();
  state->sources[0] = frames;
  state->sources[1] = raw;
  for (size_t i = 0; i <= channels; ++i) {
    DROVER_ASSIGN_OR_RETURN(Pipe pipe, MakePipe(O_CLOEXEC | O_NONBLOCK));
    if (i < channels) {
      demux->readers_.push_back(std::move(pipe.read));
    } else {
      demux->status_reader_ = std::move(pipe.read);
    }
    state->sinks.push_back(Sink{std::move(pipe.write)});
  }
  DROVER_ASSIGN_OR_RETURN(demux->id_, DemuxHub::Get().Add(std::move(state)));
  return demux;
}

RelayDemux::~RelayDemux() {
  if (id_ != 0) DemuxHub::Get().Remove(id_);
}

}  // namespace drover::os
