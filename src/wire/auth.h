// The cluster token, the keys derived from it, and the HMAC-SHA256
// challenge-response of docs/protocol.md ("Handshake and authentication");
// what each key authorises is docs/security.md.
//
// A Token is 32 secret bytes, stored as 64 hex characters in a file only its
// owner may read (mode 0600). Every other key is HKDF-SHA256 of it with a
// label of its own, so a key for one purpose (a node, the status page, one
// connection) reveals nothing of the token or of the others. Credential files
// say which key they hold (ParseCredential). Functions are pure or touch only
// the named file; thread-safe.

#ifndef DROVER_SRC_WIRE_AUTH_H_
#define DROVER_SRC_WIRE_AUTH_H_

#include <array>
#include <string>
#include <string_view>

#include "drover/status.h"

namespace drover::wire {

inline constexpr size_t kTokenBytes = 32;
inline constexpr size_t kNonceBytes = 32;
inline constexpr size_t kMacBytes = 32;

using Token = std::array<unsigned char, kTokenBytes>;
// An executor id in a node credential: 1 to this many bytes, none of them
// whitespace or control characters (the credential is one line of text).
inline constexpr size_t kMaxCredentialIdBytes = 256;

// Fresh random bytes from OpenSSL's CSPRNG.
Result<Token> GenerateToken();
Result<std::string> RandomNonce();

// Writes the token as hex into `path` with mode 0600, replacing any file
// there. kIoError naming the path on failure.
Status WriteTokenFile(const std::string& path, const Token& token);

// Reads a token file. Refuses a file that group or others may read
// (kPermissionDenied, "chmod 600 PATH"), a missing file (kNotFound) and
// anything but 64 hex characters and optional trailing whitespace
// (kInvalidArgument; a node credential or status key says so).
Result<Token> ReadTokenFile(const std::string& path);

// Parses 64 hex characters (a token given on the command line or in a variable).
Result<Token> ParseToken(std::string_view hex);
std::string TokenToHex(const Token& token);
// Lower-case hex of arbitrary bytes.
std::string HexEncode(std::string_view bytes);

// HMAC-SHA256(key, message), 32 bytes: the handshake's proofs and every
// sealed frame's MAC. Aborts if OpenSSL fails (CheckOpenSsl).
std::string HmacSha256(const Token& key, std::string_view message);
// Aborts, naming `what`, unless an OpenSSL call returned 1. For the calls
// that fail only when out of memory or misconfigured, without which a
// session cannot go on: a wrong MAC must never be sent.
void CheckOpenSsl(int ok, const char* what);

// The client's proof: HMAC-SHA256(token, "drover-auth-v1" | server_nonce | client_nonce).
std::string ClientMac(const Token& token, std::string_view server_nonce,
                      std::string_view client_nonce);
// The server's proof: HMAC-SHA256(token, "drover-server-v1" | client_nonce | server_nonce).
std::string ServerMac(const Token& token, std::string_view client_nonce,
                      std::string_view server_nonce);

// A host connection's proof that it holds another node's credential too
// (docs/protocol.md, "Host connections"): HMAC-SHA256(node_key,
// "drover-claim-v1" | server_nonce | client_nonce), the nonces of the
// connection's own handshake, so a proof seen on one connection is worth
// nothing on another.
std::string ClaimMac(const Token& node_key, std::string_view server_nonce,
                     std::string_view client_nonce);

// HKDF-SHA256 (RFC 5869): `length` bytes from the input key material, the
// salt ("" : none) and the info. kInternal if OpenSSL fails.
Result<std::string> Hkdf(std::string_view ikm, std::string_view salt, std::string_view info,
                         size_t length);

// The purpose keys. Each is HKDF-SHA256 with no salt and its own info:
//  node credential  info "drover-node-v1" 0x00 executor_id: authenticates as
//                   that executor only (docs/security.md);
//  status key       info "drover-status-v1": the status server's bearer token.
// REQUIRES for DeriveNodeKey: ValidateCredentialId(executor_id) is OK.
Result<Token> DeriveNodeKey(const Token& cluster_token, std::string_view executor_id);
Result<Token> DeriveStatusKey(const Token& cluster_token);
// A connection's session key (docs/protocol.md, "Authenticated frames"): HKDF
// of the key the client authenticated with, salt client_nonce | server_nonce,
// info "drover-session-v2". Fresh nonces make it fresh per connection.
Result<Token> DeriveSessionKey(const Token& credential_key, std::string_view client_nonce,
                               std::string_view server_nonce);

// kInvalidArgument unless `id` can name a node credential (kMaxCredentialIdBytes).
Status ValidateCredentialId(std::string_view id);

// A credential file's content: one line, which says what the key is.
//   <64 hex>                          the cluster token
//   drover-node-v1 <executor id> <64 hex>   a node credential
//   drover-status-v1-<64 hex>         the status key (one word: the bearer token)
enum class CredentialKind { kCluster, kNode, kStatus };
struct CredentialText {
  CredentialKind kind = CredentialKind::kCluster;
  std::string executor_id;  // kNode only
  Token key{};
};
// Trailing whitespace is ignored; anything else that is not one of the three
// forms is kInvalidArgument saying which form was expected.
Result<CredentialText> ParseCredential(std::string_view text);
std::string FormatCredential(const CredentialText& credential);  // without a newline

// Writes `line` + "\n" into `path`, created with mode 0600 (replacing any
// file there). kIoError naming the path on failure.
Status WriteSecretFile(const std::string& path, std::string_view line);
// Reads a secret file, refusing one that group or others may read
// (kPermissionDenied, "chmod 600 PATH") and a missing one (kNotFound).
Result<std::string> ReadSecretFile(const std::string& path);
Result<CredentialText> ReadCredentialFile(const std::string& path);

// Compares without leaking where the first difference is.
bool ConstantTimeEquals(std::string_view a, std::string_view b);

}  // namespace drover::wire

#endif  // DROVER_SRC_WIRE_AUTH_H_
