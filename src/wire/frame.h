// Framing of drover's wire protocol (docs/protocol.md): a 12-byte
// little-endian header (magic "DRVR", version, type, length), a protobuf
// body from drover.proto, and after the handshake a 40-byte trailer (the
// frame's sequence number and MAC; wire/session.h checks them).
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
inline constexpr uint16_t kProtocolVersion = 5;
// Unsealed ERROR frames (before authentication, and the answer to a version
// this drover does not speak) keep version 1's header, which every drover
// can read; readers accept version 1 for them alone.
inline constexpr uint16_t kErrorFrameVersion = 1;
inline constexpr size_t kHeaderBytes = 12;
// After the handshake every frame ends in its sequence number (uint64, LE)
// and its MAC (HMAC-SHA256): wire/session.h.
inline constexpr size_t kSequenceBytes = 8;
inline constexpr size_t kFrameMacBytes = 32;
inline constexpr size_t kTrailerBytes = kSequenceBytes + kFrameMacBytes;
// A HELLO's name (for logs) is at most this long; its executor_id is at most
// kMaxCredentialIdBytes (auth.h), 256 too.
inline constexpr size_t kMaxHelloNameBytes = 256;
// Until the handshake completes a reader takes frames of at most this size:
// the largest valid HELLO (a 32-byte nonce, a name and an executor id of
// 256 bytes each, 552 bytes encoded) fits, and an unauthenticated peer can
// make the server buffer no more than one read.
inline constexpr uint32_t kHandshakeMaxFrameBytes = 1024;
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
  // A sealed frame's trailer (FrameReader::set_sealed); unchecked until
  // FrameOpener::Open.
  uint64_t sequence = 0;
  std::string mac;
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

// Header plus serialized body (an unsealed frame: the handshake).
// REQUIRES: the body is under 4 GiB.
std::string EncodeFrame(MessageType type, std::string_view body);
std::string EncodeFrame(MessageType type, const google::protobuf::MessageLite& body);
// An unsealed ERROR frame; always version 1 framing so any peer can read it.
// After the handshake, errors go sealed (FrameSealer::SealError).
std::string EncodeError(ErrorCode code, std::string_view message);

// Checks magic, version, type and length of a complete header. Version 1 is
// accepted for an unsealed ERROR frame only (kErrorFrameVersion).
// Returns true and fills `header`, or false and fills `error`.
bool DecodeHeader(std::string_view bytes, uint32_t max_frame_bytes, FrameHeader* header,
                  FrameError* error, bool sealed = false);

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

  // From the next frame on: the limit on a body, and whether frames carry
  // the trailer (the handshake is done). Bytes already buffered are read
  // under the new rules.
  void set_max_frame_bytes(uint32_t max_frame_bytes) { max_frame_bytes_ = max_frame_bytes; }
  void set_sealed(bool sealed) { sealed_ = sealed; }
  bool sealed() const { return sealed_; }

 private:
  uint32_t max_frame_bytes_;
  bool sealed_ = false;
  std::string buffer_;
  size_t consumed_ = 0;  // bytes of buffer_ already returned as frames
};

}  // namespace drover::wire

#endif  // DROVER_SRC_WIRE_FRAME_H_
