// Authenticated frames (docs/protocol.md, "Authenticated frames"): after
// AUTH_OK every frame in each direction carries the next sequence number of
// that direction and a MAC under the connection's session key
// (DeriveSessionKey in auth.h):
//
//   MAC = HMAC-SHA256(session_key, direction | sequence | header | SHA-256(body))
//
// with direction one byte (1 client to server, 2 server to client), sequence
// 8 bytes little-endian (0 for the first sealed frame of a direction), header
// the frame's 12 header bytes. Hashing the body first lets a body many
// frames share (the formed cluster) be hashed once for every connection.
//
// A FrameSealer numbers and seals one direction's outgoing frames; a
// FrameOpener checks one direction's incoming frames. Each belongs to one
// connection and one thread (or one lock) at a time.

#ifndef DROVER_SRC_WIRE_SESSION_H_
#define DROVER_SRC_WIRE_SESSION_H_

#include <google/protobuf/message_lite.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "wire/auth.h"
#include "wire/frame.h"

struct evp_md_ctx_st;

namespace drover::wire {

enum class Direction : uint8_t { kClientToServer = 1, kServerToClient = 2 };

// SHA-256 of a frame body, fed in pieces. Copyable: a copy continues from
// the same state (a shared prefix hashed once, then each frame's own bytes).
class BodyDigest {
 public:
  BodyDigest();
  ~BodyDigest();
  BodyDigest(const BodyDigest& other);
  BodyDigest& operator=(const BodyDigest& other);

  void Update(std::string_view bytes);
  // The 32-byte digest of everything so far; the state is unchanged.
  std::string Finish() const;

 private:
  evp_md_ctx_st* ctx_;
};

// The 32-byte MAC above. REQUIRES: header is kHeaderBytes long.
std::string FrameMac(const Token& session_key, Direction direction, uint64_t sequence,
                     std::string_view header, const BodyDigest& body);

class FrameSealer {
 public:
  FrameSealer(const Token& session_key, Direction direction)
      : key_(session_key), direction_(direction) {}

  // The trailer (sequence, MAC) of the next frame, whose 12 header bytes
  // are `header` and whose body hashes to `body`; advances the sequence.
  std::string Trailer(std::string_view header, const BodyDigest& body);
  // The next frame whole: header, body, trailer.
  std::string Seal(MessageType type, std::string_view body);
  std::string Seal(MessageType type, const google::protobuf::MessageLite& body);
  std::string SealError(ErrorCode code, std::string_view message);

  uint64_t next_sequence() const { return next_; }

 private:
  Token key_;
  Direction direction_;
  uint64_t next_ = 0;
};

class FrameOpener {
 public:
  FrameOpener(const Token& session_key, Direction direction)
      : key_(session_key), direction_(direction) {}

  // Checks a sealed frame (FrameReader::set_sealed): its MAC, in constant
  // time, then that its sequence is the next one. False: *error
  // (FRAME_AUTH_FAILED) says which failed; the connection cannot go on.
  bool Open(const Frame& frame, FrameError* error);

  uint64_t next_sequence() const { return next_; }

 private:
  Token key_;
  Direction direction_;
  uint64_t next_ = 0;
};

}  // namespace drover::wire

#endif  // DROVER_SRC_WIRE_SESSION_H_
