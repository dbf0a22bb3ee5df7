#include "wire/frame.h"

#include <cstring>

namespace drover::wire {
namespace {

void PutLe16(char* out, uint16_t value) {
  out[0] = static_cast<char>(value & 0xff);
  out[1] = static_cast<char>(value >> 8);
}

void PutLe32(char* out, uint32_t value) {
  for (int i = 0; i < 4; ++i) out[i] = static_cast<char>((value >> (8 * i)) & 0xff);
}

uint16_t GetLe16(const char* in) {
  return static_cast<uint16_t>(static_cast<uint8_t>(in[0]) |
                               (static_cast<uint16_t>(static_cast<uint8_t>(in[1])) << 8));
}

uint32_t GetLe32(const char* in) {
  uint32_t value = 0;
  for (int i = 3; i >= 0; --i) value = (value << 8) | static_cast<uint8_t>(in[i]);
  return value;
}

uint64_t GetLe64(const char* in) {
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = (value << 8) | static_cast<uint8_t>(in[i]);
  return value;
}

FrameError BadMagic(std::string_view got) {
  return {BAD_FRAME,
          "not a drover frame: expected magic \"DRVR\", got \"" + PrintableBytes(got) + "\""};
}

}  // namespace

std::string PrintableBytes(std::string_view bytes, size_t max_bytes) {
  std::string out;
  for (size_t i = 0; i < bytes.size() && i < max_bytes; ++i) {
    unsigned char c = static_cast<unsigned char>(bytes[i]);
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      static constexpr char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 0xf];
    }
  }
  if (bytes.size() > max_bytes) out += "...";
  return out;
}

bool IsKnownMessageType(uint16_t type) {
  return type != MESSAGE_TYPE_UNSPECIFIED && MessageType_IsValid(type);
}

std::array<char, kHeaderBytes> EncodeHeader(uint16_t type, uint32_t length, uint16_t version) {
  std::array<char, kHeaderBytes> header{};
  std::memcpy(header.data(), kMagic.data(), kMagic.size());
  PutLe16(header.data() + 4, version);
  PutLe16(header.data() + 6, type);
  PutLe32(header.data() + 8, length);
  return header;
}

std::string EncodeFrame(MessageType type, std::string_view body) {
  std::array<char, kHeaderBytes> header =
      EncodeHeader(static_cast<uint16_t>(type), static_cast<uint32_t>(body.size()));
  std::string frame(header.data(), header.size());
  frame.append(body);
  return frame;
}

std::string EncodeFrame(MessageType type, const google::protobuf::MessageLite& body) {
  return EncodeFrame(type, body.SerializeAsString());
}

std::string EncodeError(ErrorCode code, std::string_view message) {
  Error error;
  error.set_code(code);
  error.set_message(std::string(message));
  std::string body = error.SerializeAsString();
  std::array<char, kHeaderBytes> header =
      EncodeHeader(ERROR, static_cast<uint32_t>(body.size()), kErrorFrameVersion);
  return std::string(header.data(), header.size()) + body;
}

bool DecodeHeader(std::string_view bytes, uint32_t max_frame_bytes, FrameHeader* header,
                  FrameError* error, bool sealed) {
  if (bytes.size() < kHeaderBytes) {
    *error = {MALFORMED, "frame header cut short at " + std::to_string(bytes.size()) + " of " +
                             std::to_string(kHeaderBytes) + " bytes"};
    return false;
  }
  if (std::memcmp(bytes.data(), kMagic.data(), kMagic.size()) != 0) {
    *error = BadMagic(bytes.substr(0, kMagic.size()));
    return false;
  }
  header->version = GetLe16(bytes.data() + 4);
  header->type = GetLe16(bytes.data() + 6);
  header->length = GetLe32(bytes.data() + 8);
  const bool readable_error =
      !sealed && header->version == kErrorFrameVersion && header->type == ERROR;
  if (header->version != kProtocolVersion && !readable_error) {
    *error = {UNSUPPORTED_VERSION, "peer speaks protocol version " +
                                       std::to_string(header->version) + "; this drover speaks " +
                                       std::to_string(kProtocolVersion)};
    return false;
  }
  if (header->length > max_frame_bytes) {
    *error = {FRAME_TOO_LARGE, "frame of " + std::to_string(header->length) +
                                   " bytes is over the limit of " +
                                   std::to_string(max_frame_bytes) + " bytes"};
    return false;
  }
  if (!IsKnownMessageType(header->type)) {
    *error = {UNKNOWN_MESSAGE, "unknown message type " + std::to_string(header->type)};
    return false;
  }
  return true;
}

bool ParseBody(const Frame& frame, google::protobuf::MessageLite* message, FrameError* error) {
  if (message->ParseFromString(frame.body)) return true;
  *error = {MALFORMED, "malformed " + std::string(MessageType_Name(frame.type())) + " body (" +
                           std::to_string(frame.body.size()) + " bytes)"};
  return false;
}

FrameReader::Step FrameReader::Next(Frame* frame, FrameError* error) {
  std::string_view pending(buffer_.data() + consumed_, buffer_.size() - consumed_);
  if (pending.size() < kHeaderBytes) {
    // Reject garbage as soon as the magic is wrong, without waiting for 12 bytes.
    size_t prefix = std::min(pending.size(), kMagic.size());
    if (std::memcmp(pending.data(), kMagic.data(), prefix) != 0) {
      *error = BadMagic(pending.substr(0, prefix));
      return Step::kError;
    }
    return Step::kNeedMore;
  }
  if (!DecodeHeader(pending, max_frame_bytes_, &frame->header, error, sealed_)) {
    return Step::kError;
  }
  const size_t trailer = sealed_ ? kTrailerBytes : 0;
  if (pending.size() - kHeaderBytes < frame->header.length + trailer) return Step::kNeedMore;
  frame->body.assign(pending.substr(kHeaderBytes, frame->header.length));
  if (sealed_) {
    std::string_view end = pending.substr(kHeaderBytes + frame->header.length, kTrailerBytes);
    frame->sequence = GetLe64(end.data());
    frame->mac.assign(end.substr(kSequenceBytes));
  } else {
    frame->sequence = 0;
    frame->mac.clear();
  }
  consumed_ += kHeaderBytes + frame->header.length + trailer;
  // Compact once the consumed prefix dominates, so buffer_ does not grow forever.
  if (consumed_ > 4096 && consumed_ * 2 > buffer_.size()) {
    buffer_.erase(0, consumed_);
    consumed_ = 0;
  }
  return Step::kFrame;
}

}  // namespace drover::wire
