#include "wire/auth.h"

#include <fcntl.h>
#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/kdf.h>
#include <openssl/params.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "os/unique_fd.h"
#include "wire/frame.h"

namespace drover::wire {
namespace {

constexpr std::string_view kClientLabel = "drover-auth-v1";
constexpr std::string_view kServerLabel = "drover-server-v1";
constexpr std::string_view kClaimLabel = "drover-claim-v1";
constexpr std::string_view kNodeLabel = "drover-node-v1";
constexpr std::string_view kStatusLabel = "drover-status-v1";
constexpr std::string_view kSessionLabel = "drover-session-v2";

std::string_view AsText(const Token& key) {
  return std::string_view(reinterpret_cast<const char*>(key.data()), key.size());
}

Result<Token> DeriveKey(std::string_view ikm, std::string_view salt, std::string_view info) {
  DROVER_ASSIGN_OR_RETURN(std::string bytes, Hkdf(ikm, salt, info, kTokenBytes));
  Token key;
  std::copy(bytes.begin(), bytes.end(), key.begin());
  return key;
}

std::string Mac(const Token& token, std::string_view label, std::string_view first,
                std::string_view second) {
  std::string message;
  message.reserve(label.size() + first.size() + second.size());
  message.append(label).append(first).append(second);
  return HmacSha256(token, message);
}

// One HMAC-SHA256 context per thread, its digest set once; each MAC only
// keys it. HMAC() would look SHA-256 up in the provider store (under a
// lock) on every call, which costs more than hashing a small frame.
EVP_MAC_CTX* ThreadHmac() {
  struct Context {
    Context() {
      EVP_MAC* hmac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
      CheckOpenSsl(hmac != nullptr ? 1 : 0, "EVP_MAC_fetch(HMAC)");
      ctx = EVP_MAC_CTX_new(hmac);
      EVP_MAC_free(hmac);  // the context holds its own reference
      CheckOpenSsl(ctx != nullptr ? 1 : 0, "EVP_MAC_CTX_new");
      char digest[] = "SHA256";
      OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                             OSSL_PARAM_construct_end()};
      CheckOpenSsl(EVP_MAC_CTX_set_params(ctx, params), "HMAC digest");
    }
    ~Context() { EVP_MAC_CTX_free(ctx); }
    EVP_MAC_CTX* ctx;
  };
  thread_local Context context;
  return context.ctx;
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

Status WriteSecretFile(const std::string& path, std::string_view line) {
  // Create with 0600 from the start: a chmod after writing would leave a window.
  os::UniqueFd fd(
      ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600));
  if (!fd.valid()) return Status::IoError("cannot write token file " + path + ": " + ErrnoText());
  if (::fchmod(fd.get(), 0600) != 0) {
    return Status::IoError("cannot chmod 600 token file " + path + ": " + ErrnoText());
  }
  std::string text = std::string(line) + "\n";
  ssize_t written = ::write(fd.get(), text.data(), text.size());
  std::string reason = ErrnoText();
  // Closed by hand: a write error (NFS, quota) may only show in close's result.
  if (::close(fd.Release()) != 0 || written != static_cast<ssize_t>(text.size())) {
    return Status::IoError("cannot write token file " + path + ": " + reason);
  }
  return Status::Ok();
}

Status WriteTokenFile(const std::string& path, const Token& token) {
  return WriteSecretFile(path, TokenToHex(token));
}

Result<std::string> ReadSecretFile(const std::string& path) {
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
  return text.str();
}

Result<CredentialText> ReadCredentialFile(const std::string& path) {
  DROVER_ASSIGN_OR_RETURN(std::string text, ReadSecretFile(path));
  auto credential = ParseCredential(text);
  if (!credential.ok()) return credential.status().WithContext("token file " + path);
  return credential;
}

Result<Token> ReadTokenFile(const std::string& path) {
  DROVER_ASSIGN_OR_RETURN(CredentialText credential, ReadCredentialFile(path));
  switch (credential.kind) {
    case CredentialKind::kCluster:
      return credential.key;
    case CredentialKind::kNode:
      return Status::InvalidArgument("token file " + path +
                                     " holds the node credential of executor " +
                                     credential.executor_id + ", not the cluster token");
    case CredentialKind::kStatus:
      return Status::InvalidArgument("token file " + path +
                                     " holds the status page's key, not the cluster token");
  }
  return Status::Internal("unknown credential kind");
}

Status ValidateCredentialId(std::string_view id) {
  if (id.empty() || id.size() > kMaxCredentialIdBytes) {
    return Status::InvalidArgument("an executor id in a node credential is 1 to " +
                                   std::to_string(kMaxCredentialIdBytes) + " bytes; got " +
                                   std::to_string(id.size()));
  }
  for (unsigned char c : id) {
    if (c <= 0x20 || c == 0x7f) {
      return Status::InvalidArgument(
          "an executor id in a node credential has no spaces or "
          "control characters; got '" +
          PrintableBytes(id, 64) + "'");
    }
  }
  return Status::Ok();
}

Result<CredentialText> ParseCredential(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) {
    text.remove_suffix(1);
  }
  CredentialText out;
  auto take_word = [&text]() {
    size_t space = text.find(' ');
    std::string_view word = text.substr(0, space);
    text.remove_prefix(space == std::string_view::npos ? text.size() : space + 1);
    return word;
  };
  if (text.starts_with(kNodeLabel) && text.substr(kNodeLabel.size()).starts_with(' ')) {
    take_word();
    out.kind = CredentialKind::kNode;
    out.executor_id = std::string(take_word());
    DROVER_RETURN_IF_ERROR(ValidateCredentialId(out.executor_id));
  } else if (text.starts_with(kStatusLabel) && text.substr(kStatusLabel.size()).starts_with('-')) {
    // One word, so that it is the bearer token as it stands (a browser's
    // #token=, Prometheus' credentials_file).
    text.remove_prefix(kStatusLabel.size() + 1);
    out.kind = CredentialKind::kStatus;
  }
  auto key = ParseToken(text);
  if (!key.ok()) {
    std::string form = out.kind == CredentialKind::kCluster ? "a cluster token"
                       : out.kind == CredentialKind::kNode  ? "\"drover-node-v1 ID KEY\""
                                                            : "\"drover-status-v1-KEY\"";
    return key.status().WithContext(form);
  }
  out.key = *key;
  return out;
}

std::string FormatCredential(const CredentialText& credential) {
  switch (credential.kind) {
    case CredentialKind::kNode:
      return std::string(kNodeLabel) + " " + credential.executor_id + " " +
             TokenToHex(credential.key);
    case CredentialKind::kStatus:
      return std::string(kStatusLabel) + "-" + TokenToHex(credential.key);
    case CredentialKind::kCluster:
      break;
  }
  return TokenToHex(credential.key);
}

Result<std::string> Hkdf(std::string_view ikm, std::string_view salt, std::string_view info,
                         size_t length) {
  // Fetched once: a provider lookup per connection would cost more than the HMACs.
  static EVP_KDF* const kdf = EVP_KDF_fetch(nullptr, "HKDF", nullptr);
  if (kdf == nullptr) return Status::Internal("OpenSSL has no HKDF");
  EVP_KDF_CTX* ctx = EVP_KDF_CTX_new(kdf);
  if (ctx == nullptr) return Status::Internal("OpenSSL EVP_KDF_CTX_new failed");
  char digest[] = "SHA256";
  OSSL_PARAM params[5];
  size_t n = 0;
  params[n++] = OSSL_PARAM_construct_utf8_string(OSSL_KDF_PARAM_DIGEST, digest, 0);
  params[n++] = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_KEY, const_cast<char*>(ikm.data()),
                                                  ikm.size());
  if (!salt.empty()) {
    params[n++] = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_SALT,
                                                    const_cast<char*>(salt.data()), salt.size());
  }
  params[n++] = OSSL_PARAM_construct_octet_string(OSSL_KDF_PARAM_INFO,
                                                  const_cast<char*>(info.data()), info.size());
  params[n] = OSSL_PARAM_construct_end();
  std::string out(length, '\0');
  int ok = EVP_KDF_derive(ctx, reinterpret_cast<unsigned char*>(out.data()), out.size(), params);
  EVP_KDF_CTX_free(ctx);
  if (ok != 1) return Status::Internal("OpenSSL HKDF-SHA256 failed");
  return out;
}

Result<Token> DeriveNodeKey(const Token& cluster_token, std::string_view executor_id) {
  std::string info(kNodeLabel);
  info.push_back('\0');
  info.append(executor_id);
  return DeriveKey(AsText(cluster_token), "", info);
}

Result<Token> DeriveStatusKey(const Token& cluster_token) {
  return DeriveKey(AsText(cluster_token), "", kStatusLabel);
}

Result<Token> DeriveSessionKey(const Token& credential_key, std::string_view client_nonce,
                               std::string_view server_nonce) {
  std::string salt;
  salt.reserve(client_nonce.size() + server_nonce.size());
  salt.append(client_nonce).append(server_nonce);
  return DeriveKey(AsText(credential_key), salt, kSessionLabel);
}

void CheckOpenSsl(int ok, const char* what) {
  if (ok != 1) {
    std::fprintf(stderr, "drover: OpenSSL %s failed\n", what);
    std::abort();
  }
}

std::string HmacSha256(const Token& key, std::string_view message) {
  EVP_MAC_CTX* ctx = ThreadHmac();
  CheckOpenSsl(EVP_MAC_init(ctx, key.data(), key.size(), nullptr), "HMAC-SHA256 init");
  CheckOpenSsl(
      EVP_MAC_update(ctx, reinterpret_cast<const unsigned char*>(message.data()), message.size()),
      "HMAC-SHA256 update");
  unsigned char out[EVP_MAX_MD_SIZE];
  size_t length = 0;
  CheckOpenSsl(EVP_MAC_final(ctx, out, &length, sizeof(out)), "HMAC-SHA256 final");
  return std::string(reinterpret_cast<const char*>(out), length);
}

std::string ClientMac(const Token& token, std::string_view server_nonce,
                      std::string_view client_nonce) {
  return Mac(token, kClientLabel, server_nonce, client_nonce);
}

std::string ServerMac(const Token& token, std::string_view client_nonce,
                      std::string_view server_nonce) {
  return Mac(token, kServerLabel, client_nonce, server_nonce);
}

std::string ClaimMac(const Token& node_key, std::string_view server_nonce,
                     std::string_view client_nonce) {
  return Mac(node_key, kClaimLabel, server_nonce, client_nonce);
}

bool ConstantTimeEquals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace drover::wire
