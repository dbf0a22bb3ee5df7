#include "testing/raw_peer.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

namespace drover::testing {
namespace {

int RemainingMs(RawPeer::Deadline deadline) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
      deadline - std::chrono::steady_clock::now());
  if (left.count() <= 0) return 0;
  return static_cast<int>(std::min<int64_t>(left.count(), 1 << 30));
}

std::string Errno(const char* what) {
  return std::string(what) + ": " + std::strerror(errno);
}

}  // namespace

Result<RawPeer> RawPeer::Connect(uint16_t port, Deadline deadline) {
  while (true) {
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return Status::IoError(Errno("socket"));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      return RawPeer(fd);
    }
    std::string error = Errno("connect");
    ::close(fd);
    if (std::chrono::steady_clock::now() >= deadline) {
      return Status::DeadlineExceeded("connecting to 127.0.0.1:" + std::to_string(port) + ": " +
                                      error);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

RawPeer::RawPeer(RawPeer&& other) noexcept
    : fd_(other.fd_),
      reader_(std::move(other.reader_)),
      sealer_(std::move(other.sealer_)),
      opener_(std::move(other.opener_)),
      client_nonce_(std::move(other.client_nonce_)),
      server_nonce_(std::move(other.server_nonce_)) {
  other.fd_ = -1;
}

RawPeer& RawPeer::operator=(RawPeer&& other) noexcept {
  if (this != &other) {
    Close();
    fd_ = other.fd_;
    reader_ = std::move(other.reader_);
    sealer_ = std::move(other.sealer_);
    opener_ = std::move(other.opener_);
    client_nonce_ = std::move(other.client_nonce_);
    server_nonce_ = std::move(other.server_nonce_);
    other.fd_ = -1;
  }
  return *this;
}

RawPeer::~RawPeer() {
  Close();
}

void RawPeer::Close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void RawPeer::ShutdownWrite() {
  if (fd_ >= 0) ::shutdown(fd_, SHUT_WR);
}

Status RawPeer::SendBytes(std::string_view bytes) {
  while (!bytes.empty()) {
    ssize_t n = ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Status::Unavailable(Errno("send"));
    }
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return Status::Ok();
}

Status RawPeer::Send(wire::MessageType type, const google::protobuf::MessageLite& body) {
  if (sealer_) return SendBytes(sealer_->Seal(type, body));
  return SendBytes(wire::EncodeFrame(type, body));
}

std::string RawPeer::Seal(uint16_t type, std::string_view body) {
  std::array<char, wire::kHeaderBytes> header =
      wire::EncodeHeader(type, static_cast<uint32_t>(body.size()));
  wire::BodyDigest digest;
  digest.Update(body);
  std::string frame(header.data(), header.size());
  frame.append(body);
  frame += sealer_->Trailer(std::string_view(header.data(), header.size()), digest);
  return frame;
}

Status RawPeer::Fill(Deadline deadline) {
  while (true) {
    pollfd pfd{fd_, POLLIN, 0};
    int ready = ::poll(&pfd, 1, RemainingMs(deadline));
    if (ready < 0) {
      if (errno == EINTR) continue;
      return Status::IoError(Errno("poll"));
    }
    if (ready == 0) {
      return Status::DeadlineExceeded("no frame from the server before the deadline (" +
                                      std::to_string(reader_.buffered_bytes()) +
                                      " bytes buffered)");
    }
    char buffer[65536];
    ssize_t n = ::recv(fd_, buffer, sizeof(buffer), 0);
    if (n < 0) {
      if (errno == EINTR || errno == EAGAIN) continue;
      return Status::Unavailable("connection closed: " + Errno("recv"));
    }
    if (n == 0) {
      return Status::Unavailable("connection closed by the server (" +
                                 std::to_string(reader_.buffered_bytes()) +
                                 " bytes of an unfinished frame)");
    }
    reader_.Append(std::string_view(buffer, static_cast<size_t>(n)));
    return Status::Ok();
  }
}

Result<wire::Frame> RawPeer::ReadFrame(Deadline deadline) {
  while (true) {
    wire::Frame frame;
    wire::FrameError error;
    switch (reader_.Next(&frame, &error)) {
      case wire::FrameReader::Step::kFrame:
        if (opener_ && !opener_->Open(frame, &error)) {
          return Status::InvalidArgument("sealed frame from the server does not open: " +
                                         error.message);
        }
        return frame;
      case wire::FrameReader::Step::kError:
        return Status::InvalidArgument("bad frame from the server: " + error.message);
      case wire::FrameReader::Step::kNeedMore:
        break;
    }
    DROVER_RETURN_IF_ERROR(Fill(deadline));
  }
}

Status RawPeer::Read(wire::MessageType type, google::protobuf::MessageLite* body,
                     Deadline deadline) {
  DROVER_ASSIGN_OR_RETURN(wire::Frame frame, ReadFrame(deadline));
  if (frame.type() == wire::ERROR && type != wire::ERROR) {
    wire::Error error;
    error.ParseFromString(frame.body);
    return Status::Unavailable(wire::ErrorCode_Name(error.code()) + ": " + error.message());
  }
  if (frame.type() != type) {
    return Status::InvalidArgument("expected " + wire::MessageType_Name(type) + ", got " +
                                   wire::MessageType_Name(frame.type()));
  }
  wire::FrameError error;
  if (!wire::ParseBody(frame, body, &error)) return Status::InvalidArgument(error.message);
  return Status::Ok();
}

Result<wire::Error> RawPeer::ReadError(Deadline deadline) {
  wire::Error error;
  DROVER_RETURN_IF_ERROR(Read(wire::ERROR, &error, deadline));
  return error;
}

Status RawPeer::Handshake(const wire::Token& key, Deadline deadline, std::string name,
                          std::string executor_id) {
  DROVER_ASSIGN_OR_RETURN(std::string client_nonce, wire::RandomNonce());
  wire::Hello hello;
  hello.set_client_nonce(client_nonce);
  hello.set_name(std::move(name));
  hello.set_executor_id(std::move(executor_id));
  DROVER_RETURN_IF_ERROR(Send(wire::HELLO, hello));
  wire::Challenge challenge;
  DROVER_RETURN_IF_ERROR(Read(wire::CHALLENGE, &challenge, deadline));
  wire::Auth auth;
  auth.set_mac(wire::ClientMac(key, challenge.server_nonce(), client_nonce));
  DROVER_RETURN_IF_ERROR(Send(wire::AUTH, auth));
  wire::AuthOk ok;
  DROVER_RETURN_IF_ERROR(Read(wire::AUTH_OK, &ok, deadline));
  if (!wire::ConstantTimeEquals(ok.mac(),
                                wire::ServerMac(key, client_nonce, challenge.server_nonce()))) {
    return Status::PermissionDenied("the server's AUTH_OK proof does not match the token");
  }
  DROVER_ASSIGN_OR_RETURN(wire::Token session,
                          wire::DeriveSessionKey(key, client_nonce, challenge.server_nonce()));
  sealer_.emplace(session, wire::Direction::kClientToServer);
  opener_.emplace(session, wire::Direction::kServerToClient);
  reader_.set_sealed(true);
  client_nonce_ = client_nonce;
  server_nonce_ = challenge.server_nonce();
  return Status::Ok();
}

Status RawPeer::WaitForClose(Deadline deadline) {
  while (true) {
    Status status = Fill(deadline);
    if (status.code() == Status::Code::kUnavailable) return Status::Ok();
    if (!status.ok()) return status;
    // Discard whatever came; only the close matters.
    wire::Frame frame;
    wire::FrameError error;
    while (reader_.Next(&frame, &error) == wire::FrameReader::Step::kFrame) {
    }
  }
}

}  // namespace drover::testing
