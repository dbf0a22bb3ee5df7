#include "wire/session.h"

#include <openssl/evp.h>

#include <array>

namespace drover::wire {
namespace {

void PutLe64(char* out, uint64_t value) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((value >> (8 * i)) & 0xff);
}

// Fetched once: EVP_sha256() looks the algorithm up in the provider store
// (under a lock) on every use, which costs more than hashing a small frame.
const EVP_MD* Sha256() {
  static EVP_MD* const md = EVP_MD_fetch(nullptr, "SHA256", nullptr);
  CheckOpenSsl(md != nullptr ? 1 : 0, "EVP_MD_fetch(SHA256)");
  return md;
}

}  // namespace

BodyDigest::BodyDigest() : ctx_(EVP_MD_CTX_new()) {
  CheckOpenSsl(ctx_ != nullptr ? 1 : 0, "EVP_MD_CTX_new");
  CheckOpenSsl(EVP_DigestInit_ex(ctx_, Sha256(), nullptr), "SHA-256 init");
}

BodyDigest::~BodyDigest() {
  EVP_MD_CTX_free(ctx_);
}

BodyDigest::BodyDigest(const BodyDigest& other) : ctx_(EVP_MD_CTX_new()) {
  CheckOpenSsl(ctx_ != nullptr ? 1 : 0, "EVP_MD_CTX_new");
  CheckOpenSsl(EVP_MD_CTX_copy_ex(ctx_, other.ctx_), "EVP_MD_CTX_copy_ex");
}

BodyDigest& BodyDigest::operator=(const BodyDigest& other) {
  if (this != &other) CheckOpenSsl(EVP_MD_CTX_copy_ex(ctx_, other.ctx_), "EVP_MD_CTX_copy_ex");
  return *this;
}

void BodyDigest::Update(std::string_view bytes) {
  if (!bytes.empty())
    CheckOpenSsl(EVP_DigestUpdate(ctx_, bytes.data(), bytes.size()), "SHA-256 update");
}

std::string BodyDigest::Finish() const {
  BodyDigest copy(*this);
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  CheckOpenSsl(EVP_DigestFinal_ex(copy.ctx_, out, &length), "SHA-256 final");
  return std::string(reinterpret_cast<const char*>(out), length);
}

std::string FrameMac(const Token& session_key, Direction direction, uint64_t sequence,
                     std::string_view header, const BodyDigest& body) {
  std::array<char, 1 + kSequenceBytes + kHeaderBytes + 32> message{};
  message[0] = static_cast<char>(direction);
  PutLe64(message.data() + 1, sequence);
  header.copy(message.data() + 1 + kSequenceBytes, kHeaderBytes);
  std::string digest = body.Finish();
  digest.copy(message.data() + 1 + kSequenceBytes + kHeaderBytes, 32);
  return HmacSha256(session_key, std::string_view(message.data(), message.size()));
}

std::string FrameSealer::Trailer(std::string_view header, const BodyDigest& body) {
  std::string trailer(kSequenceBytes, '\0');
  PutLe64(trailer.data(), next_);
  trailer += FrameMac(key_, direction_, next_, header, body);
  ++next_;
  return trailer;
}

std::string FrameSealer::Seal(MessageType type, std::string_view body) {
  std::string frame = EncodeFrame(type, body);
  BodyDigest digest;
  digest.Update(body);
  frame += Trailer(std::string_view(frame).substr(0, kHeaderBytes), digest);
  return frame;
}

std::string FrameSealer::Seal(MessageType type, const google::protobuf::MessageLite& body) {
  return Seal(type, body.SerializeAsString());
}

std::string FrameSealer::SealError(ErrorCode code, std::string_view message) {
  Error error;
  error.set_code(code);
  error.set_message(std::string(message));
  return Seal(ERROR, error);
}

bool FrameOpener::Open(const Frame& frame, FrameError* error) {
  std::array<char, kHeaderBytes> header =
      EncodeHeader(frame.header.type, frame.header.length, frame.header.version);
  BodyDigest digest;
  digest.Update(frame.body);
  std::string expected = FrameMac(key_, direction_, frame.sequence,
                                  std::string_view(header.data(), header.size()), digest);
  std::string type = IsKnownMessageType(frame.header.type)
                         ? std::string(MessageType_Name(frame.type()))
                         : "type " + std::to_string(frame.header.type);
  if (!ConstantTimeEquals(frame.mac, expected)) {
    *error = {FRAME_AUTH_FAILED, "frame MAC check failed (" + type + ", sequence " +
                                     std::to_string(frame.sequence) +
                                     "): altered on the way, or not from this session's peer"};
    return false;
  }
  if (frame.sequence != next_) {
    *error = {FRAME_AUTH_FAILED, "frame out of order (" + type + "): sequence " +
                                     std::to_string(frame.sequence) + ", expected " +
                                     std::to_string(next_) + " (replayed, dropped or reordered)"};
    return false;
  }
  ++next_;
  return true;
}

}  // namespace drover::wire
