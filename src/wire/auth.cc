#include "wire/auth.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

namespace drover::wire {
namespace {

constexpr std::string_view kClientLabel = "drover-auth-v1";
constexpr std::string_view kServerLabel = "drover-server-v1";

std::string Mac(const Token& token, std::string_view label, std::string_view first,
                std::string_view second) {
  std::string message;
  message.reserve(label.size() + first.size() + second.size());
  message.append(label).append(first).append(second);
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int out_length = 0;
  HMAC(EVP_sha256(), token.data(), static_cast<int>(token.size()),
       reinterpret_cast<const unsigned char*>(message.data()), message.size(), out, &out_length);
  return std::string(reinterpret_cast<const char*>(out), out_length);
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::string ErrnoText() {
  return std::strerror(errno);
}

}  // namespace

Result<Token> GenerateToken() {
  Token token;
  if (RAND_bytes(token.data(), static_cast<int>(token.size())) != 1) {
    return Status::Internal("OpenSSL RAND_bytes failed to produce a token");
  }
  return token;
}

Result<std::string> RandomNonce() {
  std::string nonce(kNonceBytes, '\0');
  if (RAND_bytes(reinterpret_cast<unsigned char*>(nonce.data()), kNonceBytes) != 1) {
    return Status::Internal("OpenSSL RAND_bytes failed to produce a nonce");
  }
  return nonce;
}

std::string HexEncode(std::string_view bytes) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string hex;
  hex.reserve(2 * bytes.size());
  for (unsigned char byte : bytes) {
    hex += kHex[byte >> 4];
    hex += kHex[byte & 0xf];
  }
  return hex;
}

std::string TokenToHex(const Token& token) {
  return HexEncode(std::string_view(reinterpret_cast<const char*>(token.data()), token.size()));
}

Result<Token> ParseToken(std::string_view hex) {
  while (!hex.empty() && std::isspace(static_cast<unsigned char>(hex.back()))) {
    hex.remove_suffix(1);
  }
  if (hex.size() != 2 * kTokenBytes) {
    return Status::InvalidArgument("a token is " + std::to_string(2 * kTokenBytes) +
                                   " hex characters, got " + std::to_string(hex.size()));
  }
  Token token;
  for (size_t i = 0; i < kTokenBytes; ++i) {
    int high = HexValue(hex[2 * i]);
    int low = HexValue(hex[2 * i + 1]);
    if (high < 0 || low < 0) {
      return Status::InvalidArgument("a token is hex characters only; position " +
                                     std::to_string(2 * i) + " is not");
    }
    token[i] = static_cast<unsigned char>(high * 16 + low);
  }
  return token;
}

Status WriteTokenFile(const std::string& path, const Token& token) {
  // Create with 0600 from the start: a chmod after writing would leave a window.
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return Status::IoError("cannot write token file " + path + ": " + ErrnoText());
  if (::fchmod(fd, 0600) != 0) {
    std::string reason = ErrnoText();
    ::close(fd);
    return Status::IoError("cannot chmod 600 token file " + path + ": " + reason);
  }
  std::string text = TokenToHex(token) + "\n";
  ssize_t written = ::write(fd, text.data(), text.size());
  std::string reason = ErrnoText();
  if (::close(fd) != 0 || written != static_cast<ssize_t>(text.size())) {
    return Status::IoError("cannot write token file " + path + ": " + reason);
  }
  return Status::Ok();
}

Result<Token> ReadTokenFile(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) {
    if (errno == ENOENT) return Status::NotFound("token file " + path + " does not exist");
    return Status::IoError("cannot read token file " + path + ": " + ErrnoText());
  }
  if ((info.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%04o", info.st_mode & 07777);
    return Status::PermissionDenied("token file " + path + " is readable by others (mode " + mode +
                                    "); run: chmod 600 " + path);
  }
  std::ifstream in(path);
  if (!in) return Status::IoError("cannot read token file " + path + ": " + ErrnoText());
  std::stringstream text;
  text << in.rdbuf();
  auto token = ParseToken(text.str());
  if (!token.ok()) return token.status().WithContext("token file " + path);
  return token;
}

std::string ClientMac(const Token& token, std::string_view server_nonce,
                      std::string_view client_nonce) {
  return Mac(token, kClientLabel, server_nonce, client_nonce);
}

std::string ServerMac(const Token& token, std::string_view client_nonce,
                      std::string_view server_nonce) {
  return Mac(token, kServerLabel, client_nonce, server_nonce);
}

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace drover::wire
