// Several pipes over one byte stream: how a host's agent started through ssh
// (one ssh, one stdout, for all the host's nodes) hands the driver each
// node's output and exit code apart (docs/ssh.md, "One agent a host").
//
// OutputRelay runs in the agent: each channel's pipe and the status pipe go
// into the stream as frames. RelayDemux runs in the driver: it splits the
// stream back into a pipe per channel and a status pipe, so the rest of the
// driver reads them as it reads a local host agent's pipes. Bytes that are
// not frames (ssh's own messages, a stream cut inside a frame) go to channel
// 0, as a local agent's own output goes with node 0's; so channel 0 ends
// when both its frames and the launcher's own output have.
//
// Frame: "\x1e" KIND CHANNEL " " LENGTH "\n" then LENGTH bytes; KIND 'o': a
// channel's output, 'e': its end (LENGTH 0), 's': status lines.
//
// Neither blocks on a slow reader: each stops reading its sources while a
// megabyte waits for that reader. An OutputRelay runs a thread of its own;
// every RelayDemux of a process shares one.

#ifndef DROVER_OS_OUTPUT_RELAY_H_
#define DROVER_OS_OUTPUT_RELAY_H_

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "drover/status.h"
#include "os/unique_fd.h"

namespace drover::os {

struct RelayFrame {
  char kind;  // 'o', 'e', 's'; 'r': bytes that were not a frame
  size_t channel;
  std::string_view payload;
};

// The frame header and `payload`, ready to write.
std::string EncodeRelayFrame(char kind, size_t channel, std::string_view payload);

// Splits a stream into frames, whatever the pieces it arrives in.
class RelayDecoder {
 public:
  static constexpr size_t kMaxPayload = 1 << 20;
  // Calls `on_frame` for every whole frame and run of other bytes so far.
  void Feed(std::string_view bytes, const std::function<void(const RelayFrame&)>& on_frame);
  // Hands on what is held back, as bytes that were not a frame: the stream
  // ended inside a frame.
  void Finish(const std::function<void(const RelayFrame&)>& on_frame);
  // Bytes held back for a frame that has not ended.
  size_t pending() const { return buffer_.size(); }

 private:
  std::string buffer_;
};

// The agent's side.
class OutputRelay {
 public:
  // Relays `channels` pipes and a status pipe onto `out` until Finish.
  static Result<std::unique_ptr<OutputRelay>> Start(size_t channels, UniqueFd out);
  ~OutputRelay();

  // The write end of channel `i`'s pipe, or the status pipe's; the caller
  // owns them (the channel ends when every copy is closed).
  UniqueFd TakeChannelWriter(size_t i) { return std::move(writers_[i]); }
  UniqueFd TakeStatusWriter() { return std::move(status_writer_); }
  // Relays what the channels still hold until each has ended, at most
  // `timeout`, then ends the thread. Call once every writer is closed.
  void Finish(std::chrono::milliseconds timeout);

 private:
  OutputRelay() = default;
  void Loop();

  UniqueFd out_;
  int out_flags_ = 0;  // out_'s file status flags as they came
  UniqueFd wake_;
  std::vector<UniqueFd> readers_;  // channels, then the status pipe
  std::vector<UniqueFd> writers_;
  UniqueFd status_writer_;
  // Set by Finish (steady_clock ticks), read by the thread once woken.
  std::atomic<std::chrono::steady_clock::rep> finish_by_{0};
  std::thread thread_;
};

// The driver's side: one thread serves every demux of the process.
class RelayDemux {
 public:
  // Splits `frames` (read, not owned: it must outlive the demux) into
  // `channels` pipes and a status pipe; `raw` (may be -1: the launcher's own
  // stderr) goes to channel 0 as it comes. Every fd must be non-blocking;
  // the read ends it makes are. Once the launcher ended, the status pipe
  // ends last: after every channel's pipe took what the demux held for it.
  static Result<std::unique_ptr<RelayDemux>> Start(int frames, int raw, size_t channels);
  // Stops relaying at once; what it held is dropped.
  ~RelayDemux();

  UniqueFd TakeChannelReader(size_t i) { return std::move(readers_[i]); }
  UniqueFd TakeStatusReader() { return std::move(status_reader_); }

 private:
  RelayDemux() = default;

  uint64_t id_ = 0;  // its place in the process's one demultiplexing thread
  std::vector<UniqueFd> readers_;
  UniqueFd status_reader_;
};

}  // namespace drover::os

#endif  // DROVER_OS_OUTPUT_RELAY_H_
