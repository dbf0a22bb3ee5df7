// Framing of drover's wire protocol (docs/protocol.md): a 12-byte
// little-endian header (magic "DRVR", version, type, length) and a protobuf
// body from drover.proto.
//
// FrameReader turns a byte stream into frames incrementally, checking every
// header before it buffers a body, so a peer can never make it allocate more
// than max_frame_bytes. Plain values and functions; a FrameReader belongs to
// one connection and is not thread-safe.

#ifndef DROVER_SRC_WIRE_FRAME_H_
#define DROVER_SRC_WIRE_FRAME_H_

#include <google/protobuf/message_lite.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "drover.pb.h"
#include "drover/status.h"

namespace drover::wire {

inline constexpr std::array<char, 4> kMagic = {'D', 'R', 'V', 'R'};
inline constexpr uint16_t kProtocolVersion = 1;
inline constexpr size_t kHeaderBytes = 12;
// Key-value store limits (docs/protocol.md).
inline constexpr uint32_t kMaxKvKeyBytes = 4u << 10;
inline constexpr uint32_t kMaxKvValueBytes = 1u << 20;
// Requests a server accepts are small, but must fit the largest valid one: a
// COMPARE_SET with a key and two values at their limits, plus framing.
inline constexpr uint32_t kServerMaxFrameBytes = 2 * kMaxKvValueBytes + kMaxKvKeyBytes + 4096;
// A cluster a client receives may be large.
inline constexpr uint32_t kClientMaxFrameBytes = 64u << 20;

struct FrameHeader {
  uint16_t version = kProtocolVersion;
  uint16_t type = 0;
  uint32_t length = 0;
};

struct Frame {
  FrameHeader header;
  std::string body;
  MessageType type() const { return static_cast<MessageType>(header.type); }
};

// Why a frame was refused: the code and message of the ERROR frame to send
// back before closing the connection.
struct FrameError {
  ErrorCode code = ERROR_CODE_UNSPECIFIED;
  std::string message;
};

bool IsKnownMessageType(uint16_t type);

// Bytes for a log line: printable ASCII as is, the rest as \xNN; cut after
// `max_bytes` with "...".
std::string PrintableBytes(std::string_view bytes, size_t max_bytes = SIZE_MAX);

// The 12 header bytes for a body of `length` bytes.
std::array<char, kHeaderBytes> EncodeHeader(uint16_t type, uint32_t length,
                                            uint16_t version = kProtocolVersion);

// Header plus serialized body. REQUIRES: the body is under 4 GiB.
std::string EncodeFrame(MessageType type, std::string_view body);
std::string EncodeFrame(MessageType type, const google::protobuf::MessageLite& body);
// An ERROR frame; always version 1 framing so any peer can read it.
std::string EncodeError(ErrorCode code, std::string_view message);

// Checks magic, version, type and length of a complete header.
// Returns true and fills `header`, or false and fills `error`.
bool DecodeHeader(std::string_view bytes, uint32_t max_frame_bytes, FrameHeader* header,
                  FrameError* error);

// Parses a frame's body as `message`; kMalformed-style error text on failure.
bool ParseBody(const Frame& frame, google::protobuf::MessageLite* message, FrameError* error);

class FrameReader {
 public:
  enum class Step { kFrame, kNeedMore, kError };

  explicit FrameReader(uint32_t max_frame_bytes) : max_frame_bytes_(max_frame_bytes) {}

  void Append(std::string_view bytes) { buffer_.append(bytes); }

  // kFrame: the next complete frame is in *frame. kNeedMore: feed more bytes.
  // kError: *error says why; the stream cannot be resynchronised, close it.
  Step Next(Frame* frame, FrameError* error);

  // Bytes of an unfinished frame are buffered (a close now cuts a frame short).
  bool mid_frame() const { return consumed_ < buffer_.size(); }
  size_t buffered_bytes() const { return buffer_.size() - consumed_; }
  uint32_t max_frame_bytes() const { return max_frame_bytes_; }

 private:
  uint32_t max_frame_bytes_;
  std::string buffer_;
  size_t consumed_ = 0;  // bytes of buffer_ already returned as frames
};

}  // namespace drover::wire

#endif  // DROVER_SRC_WIRE_FRAME_H_
