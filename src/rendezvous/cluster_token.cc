#include "drover/rendezvous.h"
#include "wire/auth.h"

namespace drover {
namespace {

ClusterToken FromWire(const wire::Token& token) {
  return ClusterToken{std::vector<unsigned char>(token.begin(), token.end())};
}

Result<wire::Token> ToWire(const ClusterToken& token) {
  if (token.bytes.size() != wire::kTokenBytes) {
    return Status::InvalidArgument("a cluster token is " + std::to_string(wire::kTokenBytes) +
                                   " bytes, got " + std::to_string(token.bytes.size()));
  }
  wire::Token out;
  std::copy(token.bytes.begin(), token.bytes.end(), out.begin());
  return out;
}

}  // namespace

Result<ClusterToken> ClusterToken::Generate() {
  DROVER_ASSIGN_OR_RETURN(wire::Token token, wire::GenerateToken());
  return FromWire(token);
}

Result<ClusterToken> ClusterToken::ReadFile(const std::string& path) {
  DROVER_ASSIGN_OR_RETURN(wire::Token token, wire::ReadTokenFile(path));
  return FromWire(token);
}

Result<ClusterToken> ClusterToken::ReadOrCreateFile(const std::string& path, bool* created) {
  *created = false;
  Result<ClusterToken> existing = ReadFile(path);
  if (existing.ok() || existing.status().code() != Status::Code::kNotFound) return existing;
  DROVER_ASSIGN_OR_RETURN(ClusterToken token, Generate());
  DROVER_RETURN_IF_ERROR(token.WriteFile(path));
  *created = true;
  return token;
}

Result<ClusterToken> ClusterToken::FromHex(std::string_view hex) {
  DROVER_ASSIGN_OR_RETURN(wire::Token token, wire::ParseToken(hex));
  return FromWire(token);
}

Status ClusterToken::WriteFile(const std::string& path) const {
  DROVER_ASSIGN_OR_RETURN(wire::Token token, ToWire(*this));
  return wire::WriteTokenFile(path, token);
}

std::string ClusterToken::ToHex() const {
  return wire::HexEncode(
      std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
}

}  // namespace drover
