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

Result<wire::Token> KeyToWire(const std::vector<unsigned char>& key) {
  if (key.size() != wire::kTokenBytes) {
    return Status::InvalidArgument("a credential's key is " + std::to_string(wire::kTokenBytes) +
                                   " bytes, got " + std::to_string(key.size()));
  }
  wire::Token out;
  std::copy(key.begin(), key.end(), out.begin());
  return out;
}

Credential FromWire(const wire::CredentialText& text) {
  Credential credential;
  switch (text.kind) {
    case wire::CredentialKind::kCluster:
      credential.kind = Credential::Kind::kCluster;
      break;
    case wire::CredentialKind::kNode:
      credential.kind = Credential::Kind::kNode;
      break;
    case wire::CredentialKind::kStatus:
      credential.kind = Credential::Kind::kStatus;
      break;
  }
  credential.executor_id = text.executor_id;
  credential.key.assign(text.key.begin(), text.key.end());
  return credential;
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

Credential Credential::Cluster(const ClusterToken& token) {
  Credential credential;
  credential.key = token.bytes;
  return credential;
}

Result<Credential> Credential::ForNode(const ClusterToken& token, const std::string& executor_id) {
  DROVER_ASSIGN_OR_RETURN(wire::Token cluster, ToWire(token));
  DROVER_RETURN_IF_ERROR(wire::ValidateCredentialId(executor_id));
  DROVER_ASSIGN_OR_RETURN(wire::Token key, wire::DeriveNodeKey(cluster, executor_id));
  return FromWire(wire::CredentialText{wire::CredentialKind::kNode, executor_id, key});
}

Result<Credential> Credential::ForStatus(const ClusterToken& token) {
  DROVER_ASSIGN_OR_RETURN(wire::Token cluster, ToWire(token));
  DROVER_ASSIGN_OR_RETURN(wire::Token key, wire::DeriveStatusKey(cluster));
  return FromWire(wire::CredentialText{wire::CredentialKind::kStatus, "", key});
}

Result<Credential> Credential::Parse(std::string_view text) {
  DROVER_ASSIGN_OR_RETURN(wire::CredentialText parsed, wire::ParseCredential(text));
  return FromWire(parsed);
}

Result<Credential> Credential::ReadFile(const std::string& path) {
  DROVER_ASSIGN_OR_RETURN(wire::CredentialText parsed, wire::ReadCredentialFile(path));
  return FromWire(parsed);
}

std::string Credential::ToText() const {
  wire::CredentialText text;
  switch (kind) {
    case Kind::kCluster:
      text.kind = wire::CredentialKind::kCluster;
      break;
    case Kind::kNode:
      text.kind = wire::CredentialKind::kNode;
      break;
    case Kind::kStatus:
      text.kind = wire::CredentialKind::kStatus;
      break;
  }
  text.executor_id = executor_id;
  std::copy_n(key.begin(), std::min(key.size(), text.key.size()), text.key.begin());
  return wire::FormatCredential(text);
}

Status Credential::WriteFile(const std::string& path) const {
  DROVER_RETURN_IF_ERROR(KeyToWire(key).status());
  if (kind == Kind::kNode) DROVER_RETURN_IF_ERROR(wire::ValidateCredentialId(executor_id));
  return wire::WriteSecretFile(path, ToText());
}

std::string Credential::KeyHex() const {
  return wire::HexEncode(std::string_view(reinterpret_cast<const char*>(key.data()), key.size()));
}

std::string Credential::Describe() const {
  switch (kind) {
    case Kind::kCluster:
      return "the cluster token";
    case Kind::kNode:
      return "the node credential of executor " + executor_id;
    case Kind::kStatus:
      return "the status key";
  }
  return "a credential";
}

}  // namespace drover
