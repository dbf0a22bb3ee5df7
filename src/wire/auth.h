// The cluster token and the HMAC-SHA256 challenge-response of
// docs/protocol.md ("Handshake and authentication").
//
// A Token is 32 secret bytes, stored as 64 hex characters in a file only its
// owner may read (mode 0600). Functions are pure or touch only the named
// file; thread-safe.

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

// Fresh random bytes from OpenSSL's CSPRNG.
Result<Token> GenerateToken();
Result<std::string> RandomNonce();

// Writes the token as hex into `path` with mode 0600, replacing any file
// there. kIoError naming the path on failure.
Status WriteTokenFile(const std::string& path, const Token& token);

// Reads a token file. Refuses a file that group or others may read
// (kPermissionDenied, "chmod 600 PATH"), a missing file (kNotFound) and
// anything but 64 hex characters and optional trailing whitespace
// (kInvalidArgument).
Result<Token> ReadTokenFile(const std::string& path);

// Parses 64 hex characters (a token given on the command line or in a variable).
Result<Token> ParseToken(std::string_view hex);
std::string TokenToHex(const Token& token);
// Lower-case hex of arbitrary bytes.
std::string HexEncode(std::string_view bytes);

// The client's proof: HMAC-SHA256(token, "drover-auth-v1" | server_nonce | client_nonce).
std::string ClientMac(const Token& token, std::string_view server_nonce,
                      std::string_view client_nonce);
// The server's proof: HMAC-SHA256(token, "drover-server-v1" | client_nonce | server_nonce).
std::string ServerMac(const Token& token, std::string_view client_nonce,
                      std::string_view server_nonce);

// Compares without leaking where the first difference is.
bool ConstantTimeEquals(std::string_view a, std::string_view b);

}  // namespace drover::wire

#endif  // DROVER_SRC_WIRE_AUTH_H_
