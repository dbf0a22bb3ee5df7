#include "feed/socket_fd.h"

#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <thread>

namespace drover::feed {
namespace {

constexpr size_t kMaxMessage = 1 << 20;

Result<sockaddr_un> AddressOf(const std::string& path) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof(address.sun_path)) {
    return Status::InvalidArgument("bad feed socket path '" + path + "' (empty or longer than " +
                                   std::to_string(sizeof(address.sun_path) - 1) + " bytes)");
  }
  std::memcpy(address.sun_path, path.data(), path.size());
  return address;
}

int MillisecondsLeft(Deadline deadline) {
  auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
  return static_cast<int>(std::clamp<int64_t>(left, 0, 1'000'000));
}

}  // namespace

Result<os::UniqueFd> ListenUnix(const std::string& path) {
  DROVER_ASSIGN_OR_RETURN(sockaddr_un address, AddressOf(path));
  os::UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return Status::IoError(std::string("socket: ") + std::strerror(errno));
  ::unlink(path.c_str());
  if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      ::listen(fd.get(), 16) != 0) {
    return Status::IoError("cannot listen on the feed socket " + path + ": " +
                           std::strerror(errno));
  }
  return fd;
}

Result<os::UniqueFd> ConnectUnix(const std::string& path, Deadline deadline) {
  DROVER_ASSIGN_OR_RETURN(sockaddr_un address, AddressOf(path));
  for (;;) {
    os::UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (!fd.valid()) return Status::IoError(std::string("socket: ") + std::strerror(errno));
    if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0) {
      return fd;
    }
    int saved = errno;
    fd.Reset();
    bool retry = saved == ENOENT || saved == ECONNREFUSED || saved == EAGAIN;
    if (!retry || Clock::now() >= deadline) {
      return Status::Unavailable("cannot reach the drover agent's feed socket " + path + ": " +
                                 std::strerror(saved));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

Status SendMessage(int socket, const std::string& line, int fd) {
  std::string data = line + "\n";
  iovec iov{data.data(), data.size()};
  msghdr message{};
  message.msg_iov = &iov;
  message.msg_iovlen = 1;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  if (fd >= 0) {
    message.msg_control = control;
    message.msg_controllen = sizeof(control);
    cmsghdr* header = CMSG_FIRSTHDR(&message);
    header->cmsg_level = SOL_SOCKET;
    header->cmsg_type = SCM_RIGHTS;
    header->cmsg_len = CMSG_LEN(sizeof(int));
    std::memcpy(CMSG_DATA(header), &fd, sizeof(int));
  }
  ssize_t sent;
  do {
    sent = ::sendmsg(socket, &message, MSG_NOSIGNAL);
  } while (sent < 0 && errno == EINTR);
  if (sent < 0) return Status::Unavailable(std::string("feed socket: ") + std::strerror(errno));
  size_t done = static_cast<size_t>(sent);
  while (done < data.size()) {  // the descriptor went with the first part
    ssize_t n = ::send(socket, data.data() + done, data.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Status::Unavailable(std::string("feed socket: ") + std::strerror(errno));
    done += static_cast<size_t>(n);
  }
  return Status::Ok();
}

Status ReceiveMessage(int socket, Deadline deadline, std::string* line, os::UniqueFd* fd) {
  line->clear();
  fd->Reset();
  for (;;) {
    pollfd p{socket, POLLIN, 0};
    int ready = ::poll(&p, 1, MillisecondsLeft(deadline));
    if (ready < 0 && errno == EINTR) continue;
    if (ready == 0) return Status::DeadlineExceeded("no answer on the feed socket");
    char buffer[4096];
    iovec iov{buffer, sizeof(buffer)};
    msghdr message{};
    message.msg_iov = &iov;
    message.msg_iovlen = 1;
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
    message.msg_control = control;
    message.msg_controllen = sizeof(control);
    // Byte by byte up to the newline would be slow; messages are small and
    // the peer sends nothing after its one line until we answer.
    ssize_t n = ::recvmsg(socket, &message, MSG_CMSG_CLOEXEC);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      fd->Reset();
      return Status::Unavailable("the feed socket closed");
    }
    for (cmsghdr* header = CMSG_FIRSTHDR(&message); header != nullptr;
         header = CMSG_NXTHDR(&message, header)) {
      if (header->cmsg_level == SOL_SOCKET && header->cmsg_type == SCM_RIGHTS) {
        int received;
        std::memcpy(&received, CMSG_DATA(header), sizeof(int));
        fd->Reset(received);
      }
    }
    line->append(buffer, static_cast<size_t>(n));
    size_t newline = line->find('\n');
    if (newline != std::string::npos) {
      line->resize(newline);
      return Status::Ok();
    }
    if (line->size() > kMaxMessage) {
      fd->Reset();
      return Status::InvalidArgument("feed socket message over 1 MiB");
    }
  }
}

Result<PeerCredentials> PeerOf(int socket) {
  ucred credentials{};
  socklen_t length = sizeof(credentials);
  if (::getsockopt(socket, SOL_SOCKET, SO_PEERCRED, &credentials, &length) != 0) {
    return Status::IoError(std::string("SO_PEERCRED: ") + std::strerror(errno));
  }
  return PeerCredentials{credentials.pid, credentials.uid};
}

namespace {

const char* RefusalCode(Status::Code code) {
  switch (code) {
    case Status::Code::kAlreadyExists:
      return "already_exists";
    case Status::Code::kInvalidArgument:
      return "invalid_argument";
    case Status::Code::kNotFound:
      return "not_found";
    case Status::Code::kPermissionDenied:
      return "permission_denied";
    case Status::Code::kFailedPrecondition:
      return "failed_precondition";
    default:
      return "unavailable";
  }
}

constexpr char kBadAnswer[] = "bad answer from the feed socket";

Status StatusFromCode(const std::string& code, std::string message) {
  if (code == "already_exists") return Status::AlreadyExists(std::move(message));
  if (code == "invalid_argument") return Status::InvalidArgument(std::move(message));
  if (code == "not_found") return Status::NotFound(std::move(message));
  if (code == "permission_denied") return Status::PermissionDenied(std::move(message));
  if (code == "failed_precondition") return Status::FailedPrecondition(std::move(message));
  return Status::Unavailable(std::move(message));
}

}  // namespace

// Names and messages may carry bytes that are not UTF-8 (a file name).
std::string Dump(const nlohmann::json& json) {
  return json.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string EncodeGrant(const FeedGrant& grant) {
  nlohmann::json json = {{"ok", true},
                         {"mode", grant.mode},
                         {"format", grant.format},
                         {"record_bytes", grant.record_bytes},
                         {"feed_timeout_ms", grant.feed_timeout_ms},
                         {"task", grant.task},
                         {"partitions", grant.partitions}};
  return Dump(json);
}

std::string EncodeRefusal(const Status& status) {
  nlohmann::json json = {
      {"ok", false}, {"code", RefusalCode(status.code())}, {"error", status.message()}};
  return Dump(json);
}

Status DecodeAnswer(const std::string& line, FeedGrant* grant) {
  const Status bad = Status::Unavailable(kBadAnswer);
  const nlohmann::json reply = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!reply.is_object() || !reply.contains("ok") || !reply["ok"].is_boolean()) return bad;
  // json::value() throws for a field of another type: check each first.
  auto string = [&](const char* key, std::string fallback, std::string* out) {
    auto it = reply.find(key);
    if (it == reply.end()) {
      *out = std::move(fallback);
      return true;
    }
    if (!it->is_string()) return false;
    *out = it->get<std::string>();
    return true;
  };
  if (!reply["ok"].get<bool>()) {
    std::string code, error;
    if (!string("code", "", &code) || !string("error", "refused", &error)) return bad;
    return StatusFromCode(code, std::move(error));
  }
  FeedGrant decoded;
  if (!string("mode", "train", &decoded.mode) || !string("format", "csv", &decoded.format) ||
      !string("task", "", &decoded.task)) {
    return bad;
  }
  if (auto it = reply.find("record_bytes"); it != reply.end()) {
    if (!it->is_number_unsigned()) return bad;
    decoded.record_bytes = it->get<uint64_t>();
  }
  decoded.feed_timeout_ms = 600'000;
  if (auto it = reply.find("feed_timeout_ms"); it != reply.end()) {
    if (!it->is_number_integer()) return bad;
    decoded.feed_timeout_ms = it->get<int64_t>();
  }
  if (auto it = reply.find("partitions"); it != reply.end() && it->is_array()) {
    for (const auto& name : *it) {
      decoded.partitions.push_back(name.is_string() ? name.get<std::string>() : "?");
    }
  }
  *grant = std::move(decoded);
  return Status::Ok();
}

namespace {

nlohmann::json PositionOrNull(const std::optional<FeedPosition>& position) {
  return position ? nlohmann::json::parse(FeedPositionToJson(*position)) : nlohmann::json();
}

// `json` (null or a position) into *position.
Status PositionFrom(const nlohmann::json& json, std::optional<FeedPosition>* position) {
  if (json.is_null()) {
    position->reset();
    return Status::Ok();
  }
  DROVER_ASSIGN_OR_RETURN(FeedPosition parsed, FeedPositionFromJson(Dump(json)));
  *position = parsed;
  return Status::Ok();
}

// An answer to a request after the handshake: the object when it says ok,
// else the refusal it carries, or kUnavailable "bad answer".
Result<nlohmann::json> OkAnswer(const std::string& line) {
  nlohmann::json reply = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!reply.is_object() || !reply.contains("ok") || !reply["ok"].is_boolean()) {
    return Status::Unavailable(kBadAnswer);
  }
  if (reply["ok"].get<bool>()) return reply;
  FeedGrant unused;
  Status refused = DecodeAnswer(line, &unused);
  return refused.ok() ? Status::Unavailable(kBadAnswer) : refused;
}

}  // namespace

std::string EncodeCommitRequest(const std::optional<FeedPosition>& position) {
  return Dump({{"commit", PositionOrNull(position)}});
}

Status DecodeCommitRequest(const std::string& line, std::optional<FeedPosition>* position) {
  const nlohmann::json json = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object() || json.size() != 1 || !json.contains("commit")) {
    return Status::InvalidArgument("bad feed request: expected {\"commit\": position or null}");
  }
  return PositionFrom(json["commit"], position);
}

std::string EncodeCommitAnswer(const std::optional<FeedPosition>& position) {
  return Dump({{"ok", true}, {"position", PositionOrNull(position)}});
}

Status DecodeCommitAnswer(const std::string& line, std::optional<FeedPosition>* position) {
  DROVER_ASSIGN_OR_RETURN(const nlohmann::json reply, OkAnswer(line));
  if (!reply.contains("position") || !PositionFrom(reply["position"], position).ok()) {
    return Status::Unavailable(kBadAnswer);
  }
  return Status::Ok();
}

std::string EncodeClaimRequest(uint32_t seq) {
  return Dump({{"claim", seq}});
}

Status DecodeClaimRequest(const std::string& line, uint32_t* seq) {
  const nlohmann::json json = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object() || json.size() != 1 || !json.contains("claim") ||
      !json["claim"].is_number_unsigned() ||
      json["claim"].get<uint64_t>() > std::numeric_limits<uint32_t>::max()) {
    return Status::InvalidArgument("bad feed request: expected {\"claim\": feed number}");
  }
  *seq = json["claim"].get<uint32_t>();
  return Status::Ok();
}

std::string EncodeClaimAnswer(const std::optional<FeedUnit>& unit) {
  nlohmann::json feed;  // null
  if (unit) feed = nlohmann::json::array({unit->epoch, unit->partition, unit->first_record});
  return Dump({{"ok", true}, {"feed", feed}});
}

Status DecodeClaimAnswer(const std::string& line, std::optional<FeedUnit>* unit) {
  DROVER_ASSIGN_OR_RETURN(const nlohmann::json reply, OkAnswer(line));
  if (!reply.contains("feed")) return Status::Unavailable(kBadAnswer);
  const nlohmann::json& feed = reply["feed"];
  if (feed.is_null()) {
    unit->reset();
    return Status::Ok();
  }
  constexpr uint64_t kMaxInt = std::numeric_limits<int>::max();
  if (!feed.is_array() || feed.size() != 3 || !feed[0].is_number_unsigned() ||
      !feed[1].is_number_unsigned() || !feed[2].is_number_unsigned() ||
      feed[0].get<uint64_t>() > kMaxInt || feed[1].get<uint64_t>() > kMaxInt) {
    return Status::Unavailable(kBadAnswer);
  }
  *unit = FeedUnit{feed[0].get<int>(), feed[1].get<int>(), feed[2].get<uint64_t>()};
  return Status::Ok();
}

Result<std::optional<FeedUnit>> ClaimFeed(int socket, uint32_t seq, Deadline deadline) {
  DROVER_RETURN_IF_ERROR(SendMessage(socket, EncodeClaimRequest(seq)));
  std::string line;
  os::UniqueFd ignored;
  DROVER_RETURN_IF_ERROR(ReceiveMessage(socket, deadline, &line, &ignored));
  std::optional<FeedUnit> unit;
  DROVER_RETURN_IF_ERROR(DecodeClaimAnswer(line, &unit));
  return unit;
}

Status DecodeHello(const std::string& line, FeedRole* role, bool* train_mode, bool* external) {
  nlohmann::json json = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!json.is_object() || !json.contains("role") || !json["role"].is_string()) {
    return Status::InvalidArgument("bad feed hello: expected {\"role\": \"reader\"|\"writer\"}");
  }
  std::string name = json["role"].get<std::string>();
  if (name != "reader" && name != "writer") {
    return Status::InvalidArgument("bad feed hello: unknown role '" + name + "'");
  }
  *role = name == "reader" ? FeedRole::kReader : FeedRole::kWriter;
  *train_mode = !json.contains("train_mode") || json["train_mode"] == true;
  if (external != nullptr) *external = json.contains("external") && json["external"] == true;
  return Status::Ok();
}

Result<JoinedFeed> JoinFeed(const std::string& path, FeedRole role, bool train_mode,
                            Deadline deadline, bool external) {
  DROVER_ASSIGN_OR_RETURN(os::UniqueFd socket, ConnectUnix(path, deadline));
  nlohmann::json hello = {{"role", role == FeedRole::kReader ? "reader" : "writer"},
                          {"train_mode", train_mode}};
  if (external) hello["external"] = true;
  if (Status sent = SendMessage(socket.get(), hello.dump()); !sent.ok()) return sent;
  std::string line;
  os::UniqueFd fd;
  if (Status got = ReceiveMessage(socket.get(), deadline, &line, &fd); !got.ok()) {
    return got.WithContext("joining the feed at " + path);
  }
  FeedGrant grant;
  if (Status answer = DecodeAnswer(line, &grant); !answer.ok()) {
    return answer.message() == kBadAnswer ? Status::Unavailable(kBadAnswer + (" " + path)) : answer;
  }
  if (!fd.valid()) return Status::Unavailable("the agent sent no feed channel");
  Result<ShmChannel> channel = ShmChannel::Map(std::move(fd));
  if (!channel.ok()) return channel.status();
  return JoinedFeed{std::move(socket), std::move(grant), std::move(channel).value()};
}

}  // namespace drover::feed
