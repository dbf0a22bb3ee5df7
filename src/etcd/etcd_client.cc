#include "etcd/etcd_client.h"

#include <httplib.h>
#include <openssl/evp.h>
#include <poll.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <functional>
#include <nlohmann/json.hpp>
#include <string_view>
#include <thread>
#include <utility>

#include "common/mutex.h"
#include "drover/host_port.h"
#include "os/sigpipe_block.h"

namespace drover::etcd {
namespace {

using json = nlohmann::json;

constexpr std::string_view kScheme = "etcd://";
// How long one watch request may sit idle before WatchPrefix looks at its
// deadline and wake_fd again (a blocked read cannot be interrupted).
constexpr Milliseconds kWatchTick{1'000};

std::string Base64Encode(std::string_view bytes) {
  std::string out(4 * ((bytes.size() + 2) / 3) + 1, '\0');
  int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(bytes.data()),
                          static_cast<int>(bytes.size()));
  out.resize(n);
  return out;
}

std::optional<std::string> Base64Decode(std::string_view text) {
  if (text.size() % 4 != 0) return std::nullopt;
  std::string out(3 * text.size() / 4 + 1, '\0');
  int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                          reinterpret_cast<const unsigned char*>(text.data()),
                          static_cast<int>(text.size()));
  if (n < 0) return std::nullopt;
  // EVP_DecodeBlock counts the padding as zero bytes.
  size_t padding = 0;
  for (size_t i = text.size(); i > 0 && text[i - 1] == '=' && padding < 2; --i) ++padding;
  out.resize(static_cast<size_t>(n) - padding);
  return out;
}

// The end of the range of keys that start with `prefix`; "\0" (no end) for
// the empty prefix and for one made of 0xff bytes only.
std::string PrefixEnd(std::string prefix) {
  while (!prefix.empty() && static_cast<unsigned char>(prefix.back()) == 0xff) prefix.pop_back();
  if (prefix.empty()) return std::string(1, '\0');
  prefix.back() = static_cast<char>(static_cast<unsigned char>(prefix.back()) + 1);
  return prefix;
}

// The "key" (and "range_end" for a prefix) fields of a range or delete.
json KeyRange(const std::string& key, bool prefix) {
  json request = json::object();
  if (!prefix) {
    request["key"] = Base64Encode(key);
    return request;
  }
  // etcd reads key "\0" with range_end "\0" as every key.
  request["key"] = Base64Encode(key.empty() ? std::string(1, '\0') : key);
  request["range_end"] = Base64Encode(PrefixEnd(key));
  return request;
}

// The gateway writes int64 fields as strings and leaves out zeros.
int64_t Int64(const json& object, const char* field) {
  if (!object.is_object()) return 0;
  auto it = object.find(field);
  if (it == object.end()) return 0;
  if (it->is_number_integer()) return it->get<int64_t>();
  if (it->is_string()) {
    try {
      return std::stoll(it->get<std::string>());
    } catch (const std::exception&) {
      return 0;
    }
  }
  return 0;
}

std::string String(const json& object, const char* field) {
  if (!object.is_object()) return "";
  auto it = object.find(field);
  return it != object.end() && it->is_string() ? it->get<std::string>() : "";
}

const json& Member(const json& object, const char* field) {
  static const json kNull;
  if (!object.is_object()) return kNull;
  auto it = object.find(field);
  return it == object.end() ? kNull : *it;
}

Result<std::string> Bytes(const json& object, const char* field) {
  std::optional<std::string> bytes = Base64Decode(String(object, field));
  if (!bytes) {
    return Status::Internal("etcd: the gateway sent a " + std::string(field) +
                            " that is not base64: " + object.dump());
  }
  return *std::move(bytes);
}

Result<KeyValue> ParseKeyValue(const json& kv) {
  KeyValue out;
  DROVER_ASSIGN_OR_RETURN(out.key, Bytes(kv, "key"));
  DROVER_ASSIGN_OR_RETURN(out.value, Bytes(kv, "value"));
  out.create_revision = Int64(kv, "create_revision");
  out.mod_revision = Int64(kv, "mod_revision");
  out.version = Int64(kv, "version");
  out.lease = Int64(kv, "lease");
  return out;
}

Result<RangeResult> ParseRange(const json& response, int64_t fallback_revision) {
  RangeResult out;
  out.revision = Int64(Member(response, "header"), "revision");
  if (out.revision == 0) out.revision = fallback_revision;
  const json& kvs = Member(response, "kvs");
  if (kvs.is_array()) {
    for (const json& kv : kvs) {
      DROVER_ASSIGN_OR_RETURN(KeyValue parsed, ParseKeyValue(kv));
      out.kvs.push_back(std::move(parsed));
    }
  }
  out.count = Int64(response, "count");
  return out;
}

json CompareJson(const Compare& compare) {
  json out = {{"key", Base64Encode(compare.key)}};
  switch (compare.result) {
    case Compare::Result::kEqual:
      out["result"] = "EQUAL";
      break;
    case Compare::Result::kNotEqual:
      out["result"] = "NOT_EQUAL";
      break;
    case Compare::Result::kGreater:
      out["result"] = "GREATER";
      break;
    case Compare::Result::kLess:
      out["result"] = "LESS";
      break;
  }
  std::string number = std::to_string(compare.number);
  switch (compare.target) {
    case Compare::Target::kCreateRevision:
      out["target"] = "CREATE";
      out["create_revision"] = number;
      break;
    case Compare::Target::kModRevision:
      out["target"] = "MOD";
      out["mod_revision"] = number;
      break;
    case Compare::Target::kVersion:
      out["target"] = "VERSION";
      out["version"] = number;
      break;
    case Compare::Target::kValue:
      out["target"] = "VALUE";
      out["value"] = Base64Encode(compare.value);
      break;
  }
  return out;
}

json OpJson(const TxnOp& op) {
  switch (op.kind) {
    case TxnOp::Kind::kPut: {
      json put = {{"key", Base64Encode(op.key)}, {"value", Base64Encode(op.value)}};
      if (op.lease != 0) put["lease"] = std::to_string(op.lease);
      return {{"request_put", std::move(put)}};
    }
    case TxnOp::Kind::kDeleteKey:
      return {{"request_delete_range", KeyRange(op.key, false)}};
    case TxnOp::Kind::kDeletePrefix:
      return {{"request_delete_range", KeyRange(op.key, true)}};
    case TxnOp::Kind::kGet:
      return {{"request_range", KeyRange(op.key, false)}};
    case TxnOp::Kind::kGetPrefix:
      return {{"request_range", KeyRange(op.key, true)}};
    case TxnOp::Kind::kCount:
    case TxnOp::Kind::kCountPrefix: {
      json range = KeyRange(op.key, op.kind == TxnOp::Kind::kCountPrefix);
      range["count_only"] = true;
      return {{"request_range", std::move(range)}};
    }
  }
  return json::object();
}

bool IsRead(const TxnOp& op) {
  return op.kind == TxnOp::Kind::kGet || op.kind == TxnOp::Kind::kGetPrefix ||
         op.kind == TxnOp::Kind::kCount || op.kind == TxnOp::Kind::kCountPrefix;
}

// An error etcd answered: a gRPC code and etcd's message.
struct EtcdError {
  int code = 2;  // unknown
  std::string message;
};

// A unary error answer is {"error":"...","message":"...","code":N} (any HTTP
// status); an error inside a stream (watch, keepalive) comes with status 200
// as {"error":{"grpc_code":N,"message":"..."}}.
std::optional<EtcdError> ErrorIn(const json& answer) {
  const json& error = Member(answer, "error");
  if (error.is_object()) {
    return EtcdError{static_cast<int>(Int64(error, "grpc_code")), String(error, "message")};
  }
  // LeaseGrantResponse has an "error" string of its own, without a code.
  if (error.is_string() && answer.contains("code")) {
    std::string message = String(answer, "message");
    return EtcdError{static_cast<int>(Int64(answer, "code")),
                     message.empty() ? error.get<std::string>() : message};
  }
  return std::nullopt;
}

bool Contains(const std::string& text, std::string_view part) {
  return text.find(part) != std::string::npos;
}

// Errors of a member that cannot serve the request now, while another might.
bool IsQuorumError(const EtcdError& error) {
  return error.code == 14 || error.code == 4 || Contains(error.message, "no leader") ||
         Contains(error.message, "request timed out") ||
         Contains(error.message, "leader changed") || Contains(error.message, "timed out");
}

// The token expired (simple tokens live --auth-token-ttl seconds unused) or
// the auth store changed under it: log in again.
bool IsTokenError(const EtcdError& error) {
  return Contains(error.message, "invalid auth token") ||
         Contains(error.message, "revision of auth store is old");
}

// A watch's "cancel_reason": "rpc error: code = Unauthenticated desc = ...".
EtcdError CancelReason(const std::string& reason) {
  static const std::pair<std::string_view, int> kCodes[] = {
      {"Canceled", 1},           {"InvalidArgument", 3},  {"DeadlineExceeded", 4},
      {"NotFound", 5},           {"PermissionDenied", 7}, {"ResourceExhausted", 8},
      {"FailedPrecondition", 9}, {"Unavailable", 14},     {"Unauthenticated", 16},
  };
  EtcdError error{2, reason};
  size_t code_at = reason.find("code = ");
  if (code_at != std::string::npos) {
    std::string_view rest = std::string_view(reason).substr(code_at + 7);
    for (const auto& [name, code] : kCodes) {
      if (rest.substr(0, name.size()) == name) error.code = code;
    }
  }
  size_t desc_at = reason.find("desc = ");
  if (desc_at != std::string::npos) error.message = reason.substr(desc_at + 7);
  return error;
}

bool WakeFdReadable(int wake_fd) {
  if (wake_fd < 0) return false;
  pollfd pfd{wake_fd, POLLIN, 0};
  return ::poll(&pfd, 1, 0) > 0 && (pfd.revents & (POLLIN | POLLHUP | POLLERR)) != 0;
}

Milliseconds CeilMs(Clock::duration d) {
  return std::chrono::ceil<Milliseconds>(std::max(d, Clock::duration::zero()));
}

// cpp-httplib's error, said so that the user knows what to check.
std::string DescribeHttpError(httplib::Error error) {
  switch (error) {
    case httplib::Error::Connection:
      return "connection refused or unreachable";
    case httplib::Error::Read:
      return "the connection closed without an HTTP answer (a TLS member? give --etcd-cacert)";
    case httplib::Error::SSLConnection:
      return "the TLS handshake failed (check --etcd-cacert, and --etcd-cert/--etcd-key if "
             "etcd asks for a client certificate)";
    case httplib::Error::SSLServerVerification:
      return "etcd's certificate is not signed by --etcd-cacert's CA or does not name this "
             "address";
    default:
      return httplib::to_string(error);
  }
}

// What one member did with one request.
struct Exchange {
  httplib::Error error = httplib::Error::Success;
  int status = -1;  // HTTP status; -1 when no answer came
  std::string body;
  Clock::duration took{};
};

// How a call goes on after one member's exchange.
struct Judgement {
  enum class Kind {
    kAnswer,       // `answer` holds etcd's answer
    kUnreachable,  // the member could not be reached; try the next
    kNoQuorum,     // the member answered that it cannot serve now; try the next
    kBadToken,     // log in again and retry
    kFailed,       // `error`: etcd refused the request
  };
  Kind kind = Kind::kFailed;
  json answer;
  std::string why;
  EtcdError error;
};

Judgement Judge(const Exchange& exchange, Milliseconds timeout) {
  Judgement out;
  if (exchange.status > 0 && !exchange.body.empty()) {
    // A unary answer is one line; a stream (keepalive) starts with one.
    std::string_view first = exchange.body;
    first = first.substr(0, first.find('\n'));
    json answer = json::parse(first, nullptr, false);
    // The gateway ends an error answer with an HTTP trailer, which
    // cpp-httplib 0.11 cannot read: it reports Error::Read after handing over
    // the whole body. A body that parses is complete, so it counts.
    if (!answer.is_discarded() && answer.is_object()) {
      if (std::optional<EtcdError> error = ErrorIn(answer)) {
        out.error = *std::move(error);
        out.why = out.error.message;
        out.kind = IsQuorumError(out.error)  ? Judgement::Kind::kNoQuorum
                   : IsTokenError(out.error) ? Judgement::Kind::kBadToken
                                             : Judgement::Kind::kFailed;
        return out;
      }
      if (exchange.status == 200) {
        out.kind = Judgement::Kind::kAnswer;
        out.answer = std::move(answer);
        return out;
      }
    }
  }
  if (exchange.status > 0 &&
      (exchange.error == httplib::Error::Success || exchange.status != 200)) {
    out.kind = Judgement::Kind::kFailed;
    out.error.message = "HTTP status " + std::to_string(exchange.status) + " with an answer " +
                        "that is not etcd's: " + exchange.body.substr(0, 200);
    return out;
  }
  if (exchange.error == httplib::Error::Read && exchange.took >= timeout * 9 / 10) {
    // It took the request and said nothing: typical of a member without a
    // leader, which holds a write until etcd's own timeout.
    out.kind = Judgement::Kind::kNoQuorum;
    out.why = "no answer within " + std::to_string(timeout.count()) + " ms";
    return out;
  }
  out.kind = Judgement::Kind::kUnreachable;
  out.why = DescribeHttpError(exchange.error);
  return out;
}

// Splits a watch stream into its newline-delimited JSON objects.
class StreamSplitter {
 public:
  // `on_message` returns false to end the stream.
  explicit StreamSplitter(std::function<bool(const json&)> on_message)
      : on_message_(std::move(on_message)) {}

  bool Feed(std::string_view data) {
    buffer_.append(data);
    size_t end;
    while ((end = buffer_.find('\n')) != std::string::npos) {
      std::string line = buffer_.substr(0, end);
      buffer_.erase(0, end + 1);
      if (!Deliver(line)) return false;
    }
    return true;
  }
  // The last object when the stream ended without a newline.
  void Finish() {
    if (!buffer_.empty()) Deliver(std::exchange(buffer_, ""));
  }
  bool unreadable() const { return unreadable_; }
  const std::string& unreadable_text() const { return unreadable_text_; }

 private:
  bool Deliver(std::string_view line) {
    if (line.find_first_not_of(" \r\t") == std::string_view::npos) return true;
    json message = json::parse(line, nullptr, false);
    if (message.is_discarded() || !message.is_object()) {
      unreadable_ = true;
      unreadable_text_ = std::string(line.substr(0, 200));
      return false;
    }
    return on_message_(message);
  }

  std::function<bool(const json&)> on_message_;
  std::string buffer_;
  bool unreadable_ = false;
  std::string unreadable_text_;
};

}  // namespace

bool IsEtcdAddress(const std::string& address) {
  return address.compare(0, kScheme.size(), kScheme) == 0;
}

Result<EtcdAddress> ParseEtcdAddress(const std::string& address) {
  auto bad = [&](const std::string& why) {
    return Status::InvalidArgument("etcd address \"" + address + "\": " + why +
                                   " (expected etcd://HOST:PORT[,HOST:PORT...]/PREFIX)");
  };
  if (!IsEtcdAddress(address)) return bad("does not start with etcd://");
  std::string rest = address.substr(kScheme.size());
  size_t slash = rest.find('/');
  if (slash == std::string::npos) return bad("no /PREFIX after the members");
  EtcdAddress out;
  std::string members = rest.substr(0, slash);
  if (members.empty()) return bad("no member");
  size_t begin = 0;
  while (true) {
    size_t comma = members.find(',', begin);
    std::string endpoint = members.substr(begin, comma - begin);
    if (endpoint.empty()) return bad("an empty member in the list");
    Result<std::pair<std::string, int>> split = SplitHostPort(endpoint);
    if (!split.ok()) return bad(split.status().message());
    out.endpoints.push_back(endpoint);
    if (comma == std::string::npos) break;
    begin = comma + 1;
  }
  std::string prefix = rest.substr(slash);
  while (prefix.size() > 1 && prefix.back() == '/') prefix.pop_back();
  if (prefix == "/") return bad("an empty prefix");
  for (char c : prefix) {
    if (std::isspace(static_cast<unsigned char>(c)) ||
        std::iscntrl(static_cast<unsigned char>(c))) {
      return bad("the prefix holds a space or a control character");
    }
  }
  out.prefix = std::move(prefix);
  return out;
}

Compare Compare::Absent(std::string key) {
  Compare out;
  out.key = std::move(key);
  out.target = Target::kCreateRevision;
  out.number = 0;
  return out;
}

Compare Compare::ValueIs(std::string key, std::string value) {
  Compare out;
  out.key = std::move(key);
  out.target = Target::kValue;
  out.value = std::move(value);
  return out;
}

Compare Compare::ModRevisionIs(std::string key, int64_t revision) {
  Compare out;
  out.key = std::move(key);
  out.target = Target::kModRevision;
  out.number = revision;
  return out;
}

namespace {

// An operation that names a key (or a prefix) and nothing else.
TxnOp KeyOnly(TxnOp::Kind kind, std::string key) {
  TxnOp out;
  out.kind = kind;
  out.key = std::move(key);
  return out;
}

}  // namespace

TxnOp TxnOp::Put(std::string key, std::string value, int64_t lease) {
  TxnOp out;
  out.kind = Kind::kPut;
  out.key = std::move(key);
  out.value = std::move(value);
  out.lease = lease;
  return out;
}

TxnOp TxnOp::DeleteKey(std::string key) {
  return KeyOnly(Kind::kDeleteKey, std::move(key));
}

TxnOp TxnOp::DeletePrefix(std::string prefix) {
  return KeyOnly(Kind::kDeletePrefix, std::move(prefix));
}

TxnOp TxnOp::Get(std::string key) {
  return KeyOnly(Kind::kGet, std::move(key));
}

TxnOp TxnOp::GetPrefix(std::string prefix) {
  return KeyOnly(Kind::kGetPrefix, std::move(prefix));
}

TxnOp TxnOp::Count(std::string key) {
  return KeyOnly(Kind::kCount, std::move(key));
}

TxnOp TxnOp::CountPrefix(std::string prefix) {
  return KeyOnly(Kind::kCountPrefix, std::move(prefix));
}

class EtcdClient::Impl {
 public:
  Impl(EtcdOptions options, std::vector<std::pair<std::string, int>> members)
      : options_(std::move(options)), members_(std::move(members)) {
    for (const std::string& endpoint : options_.endpoints) {
      if (!endpoint_list_.empty()) endpoint_list_ += ",";
      endpoint_list_ += endpoint;
    }
  }

  const EtcdOptions& options() const { return options_; }
  const std::string& endpoint_list() const { return endpoint_list_; }
  size_t member_count() const { return members_.size(); }
  void set_current(size_t member) { current_.store(member, std::memory_order_relaxed); }

  ~Impl() {
    // A TLS client's teardown may write (see Send).
    std::optional<os::SigpipeBlock> sigpipe_block;
    if (!options_.ca_file.empty()) sigpipe_block.emplace();
    MutexLock lock(pool_mu_);
    idle_.clear();
  }

  // One HTTP POST (GET when `body` is empty) of `path` to one member. With
  // `on_data` (a watch: a long request of its own), the answer's bytes go
  // there (false ends the request) instead of into the Exchange. Other
  // requests reuse an idle connection to the member when there is one (no
  // TCP or TLS handshake per call), and go again once on a fresh connection
  // when a reused one fails at once: the member may have closed it while it
  // idled.
  Exchange Send(size_t member, const std::string& path, const std::string& body,
                Milliseconds timeout, const std::string& token,
                const std::function<bool(std::string_view)>& on_data = nullptr) {
    // OpenSSL writes with write(2), which raises SIGPIPE on a closed
    // connection (cpp-httplib's own sends use MSG_NOSIGNAL). Declared first:
    // it must outlive the clients, whose teardown may write.
    std::optional<os::SigpipeBlock> sigpipe_block;
    if (!options_.ca_file.empty()) sigpipe_block.emplace();
    const bool pooled = !on_data;
    std::unique_ptr<httplib::ClientImpl> client = pooled ? TakeIdle(member) : nullptr;
    const bool reused = client != nullptr;
    if (!client) client = NewClient(member);
    Exchange exchange = SendOn(*client, path, body, timeout, token, on_data, pooled);
    // A connection the member closed fails at once; one that timed out is
    // the member's answer (no quorum), not the connection's age.
    const bool stale = exchange.took < std::min<Clock::duration>(timeout / 2, Milliseconds(1'000));
    if (reused && exchange.error != httplib::Error::Success && stale) {
      client = NewClient(member);
      exchange = SendOn(*client, path, body, timeout, token, on_data, pooled);
    }
    if (pooled && exchange.error == httplib::Error::Success) GiveBack(member, std::move(client));
    return exchange;
  }

  // Sends `request` to the members, from the one that answered last, until
  // one answers; logs in again once when the token has expired.
  Result<json> Call(const std::string& path, const json& request, const std::string& what) {
    std::string body = request.dump();
    bool bad_token = false;
    Result<json> answer = Attempt(path, body, what, Token(), &bad_token);
    if (!bad_token || options_.user.empty()) return answer;
    DROVER_RETURN_IF_ERROR(Authenticate());
    return Attempt(path, body, what, Token(), &bad_token);
  }

  // Logs in as options_.user; every error but kUnavailable is
  // kPermissionDenied.
  Status Authenticate() {
    json request = {{"name", options_.user}, {"password", options_.password}};
    bool bad_token = false;
    Result<json> answer =
        Attempt("/v3/auth/authenticate", request.dump(), "log in", "", &bad_token);
    if (!answer.ok()) {
      if (answer.status().code() == Status::Code::kUnavailable) return answer.status();
      if (answer.status().code() == Status::Code::kPermissionDenied) return answer.status();
      std::string message = answer.status().message();
      if (message.rfind("etcd: ", 0) == 0) message.erase(0, 6);
      return Status::PermissionDenied("etcd: permission denied for user " + options_.user + ": " +
                                      message);
    }
    std::string token = String(*answer, "token");
    if (token.empty()) {
      return Status::PermissionDenied("etcd: permission denied for user " + options_.user +
                                      ": the login answer holds no token: " + answer->dump());
    }
    MutexLock lock(token_mu_);
    token_ = std::move(token);
    return Status::Ok();
  }

  std::string Token() {
    MutexLock lock(token_mu_);
    return token_;
  }

  // The Status for an error etcd answered to `what`.
  Status ErrorStatus(const EtcdError& error, const std::string& what) const {
    std::string message = what + ": " + error.message;
    std::string user = options_.user.empty() ? "(none given)" : options_.user;
    if (Contains(error.message, "user name is empty")) {
      return Status::PermissionDenied("etcd: permission denied for user " + user + ": " + message);
    }
    switch (error.code) {
      case 3:
        return Status::InvalidArgument("etcd: " + message);
      case 5:
        return Status::NotFound("etcd: " + message);
      case 7:
      case 16:
        return Status::PermissionDenied("etcd: permission denied for user " + user + ": " +
                                        message);
      case 9:
        return Status::FailedPrecondition("etcd: " + message);
      default:
        return Status::Internal("etcd: " + message);
    }
  }

  // The error when no member served a call: kNoQuorum when one answered that
  // it cannot, else kUnreachable.
  Status NoMember(bool no_quorum, const std::string& last_error) const {
    if (no_quorum) {
      return Status::Unavailable("etcd: no quorum at " + endpoint_list_ + " (" + last_error + ")");
    }
    return Status::Unavailable("etcd: cannot reach any member of " + endpoint_list_ + " (" +
                               last_error + ")");
  }

  Result<RangeResult> Range(const std::string& key, bool prefix) {
    DROVER_ASSIGN_OR_RETURN(json answer, Call("/v3/kv/range", KeyRange(key, prefix),
                                              (prefix ? "get prefix " : "get ") + key));
    return ParseRange(answer, 0);
  }

  Result<int64_t> Delete(const std::string& key, bool prefix) {
    DROVER_ASSIGN_OR_RETURN(json answer, Call("/v3/kv/deleterange", KeyRange(key, prefix),
                                              (prefix ? "delete prefix " : "delete ") + key));
    return Int64(answer, "deleted");
  }

  Result<WatchResult> Watch(const std::string& prefix, int64_t from, Deadline deadline,
                            int wake_fd);

 private:
  Result<json> Attempt(const std::string& path, const std::string& body, const std::string& what,
                       const std::string& token, bool* bad_token) {
    bool no_quorum = false;
    std::string last_error;
    size_t start = current_.load(std::memory_order_relaxed);
    for (size_t n = 0; n < members_.size(); ++n) {
      size_t member = (start + n) % members_.size();
      Exchange exchange = Send(member, path, body, options_.request_timeout, token);
      Judgement judgement = Judge(exchange, options_.request_timeout);
      const std::string& endpoint = options_.endpoints[member];
      switch (judgement.kind) {
        case Judgement::Kind::kAnswer:
          set_current(member);
          return std::move(judgement.answer);
        case Judgement::Kind::kNoQuorum:
          // A member that answered "no quorum" says more than one that could
          // not be reached: keep its words for the message.
          no_quorum = true;
          last_error = what + " at " + endpoint + ": " + judgement.why;
          break;
        case Judgement::Kind::kUnreachable:
          if (!no_quorum) last_error = what + " at " + endpoint + ": " + judgement.why;
          break;
        case Judgement::Kind::kBadToken:
          *bad_token = true;
          return ErrorStatus(judgement.error, what);
        case Judgement::Kind::kFailed:
          set_current(member);
          return ErrorStatus(judgement.error, what);
      }
    }
    return NoMember(no_quorum, last_error);
  }

  std::unique_ptr<httplib::ClientImpl> NewClient(size_t member) const {
    const auto& [host, port] = members_[member];
    if (options_.ca_file.empty()) return std::make_unique<httplib::ClientImpl>(host, port);
    auto tls = options_.cert_file.empty() ? std::make_unique<httplib::SSLClient>(host, port)
                                          : std::make_unique<httplib::SSLClient>(
                                                host, port, options_.cert_file, options_.key_file);
    tls->set_ca_cert_path(options_.ca_file);
    tls->enable_server_certificate_verification(true);
    return tls;
  }

  Exchange SendOn(httplib::ClientImpl& client, const std::string& path, const std::string& body,
                  Milliseconds timeout, const std::string& token,
                  const std::function<bool(std::string_view)>& on_data, bool keep_alive) const {
    client.set_connection_timeout(timeout);
    client.set_read_timeout(timeout);
    client.set_write_timeout(timeout);
    client.set_keep_alive(keep_alive);
    // A request goes out in two writes (headers, body): without this, on a
    // reused connection the second waits for the first's delayed ACK.
    client.set_tcp_nodelay(true);
    httplib::Request request;
    request.method = body.empty() ? "GET" : "POST";
    request.path = path;
    request.body = body;
    request.headers.emplace("Content-Type", "application/json");
    if (!token.empty()) request.headers.emplace("Authorization", token);
    Exchange exchange;
    // Always through a receiver: it sees the body of an error answer that
    // cpp-httplib then reports as a failed read (see Judge).
    request.content_receiver = [&](const char* data, size_t size, uint64_t, uint64_t) {
      if (on_data) return on_data(std::string_view(data, size));
      exchange.body.append(data, size);
      return true;
    };
    httplib::Response response;
    Clock::time_point start = Clock::now();
    client.send(request, response, exchange.error);
    exchange.took = Clock::now() - start;
    exchange.status = response.status;
    return exchange;
  }

  std::unique_ptr<httplib::ClientImpl> TakeIdle(size_t member) {
    MutexLock lock(pool_mu_);
    if (idle_.size() <= member || idle_[member].empty()) return nullptr;
    std::unique_ptr<httplib::ClientImpl> client = std::move(idle_[member].back());
    idle_[member].pop_back();
    return client;
  }

  void GiveBack(size_t member, std::unique_ptr<httplib::ClientImpl> client) {
    // Enough for the threads of one process that call at once (a node's
    // keep-alive, its watcher, its feed); more are closed.
    constexpr size_t kIdlePerMember = 4;
    MutexLock lock(pool_mu_);
    if (idle_.size() <= member) idle_.resize(members_.size());
    if (idle_[member].size() < kIdlePerMember) idle_[member].push_back(std::move(client));
  }

  const EtcdOptions options_;
  const std::vector<std::pair<std::string, int>> members_;
  std::string endpoint_list_;
  std::atomic<size_t> current_{0};
  Mutex token_mu_;
  std::string token_ GUARDED_BY(token_mu_);
  // Idle keep-alive connections, by member.
  Mutex pool_mu_;
  std::vector<std::vector<std::unique_ptr<httplib::ClientImpl>>> idle_ GUARDED_BY(pool_mu_);
};

Result<WatchResult> EtcdClient::Impl::Watch(const std::string& prefix, int64_t from,
                                            Deadline deadline, int wake_fd) {
  const std::string what = "watch " + prefix + " from revision " + std::to_string(from);
  WatchResult result;
  result.revision = from - 1;
  // Where the next request starts; a request that saw nothing ends after a
  // tick and the next replays from the same revision, so nothing is lost.
  int64_t start = from;
  bool logged_in_again = false;
  while (true) {
    if (WakeFdReadable(wake_fd) || Clock::now() >= deadline) return result;
    bool held = false;  // a member held the watch open
    bool no_quorum = false;
    std::string last_error;
    size_t first = current_.load(std::memory_order_relaxed);
    for (size_t n = 0; n < members_.size() && !held; ++n) {
      size_t member = (first + n) % members_.size();
      // Without a wake_fd only the deadline ends the wait: one request for
      // all of it (a thousand waiting nodes re-opening their watches every
      // tick is a load of its own on etcd).
      const Milliseconds limit = wake_fd >= 0 ? kWatchTick : Milliseconds(600'000);
      Milliseconds tick = std::clamp(CeilMs(deadline - Clock::now()), Milliseconds(1), limit);
      json create = KeyRange(prefix, true);
      if (start > 0) create["start_revision"] = std::to_string(start);
      std::string body = json{{"create_request", std::move(create)}}.dump();

      bool created = false;
      int64_t created_revision = 0;
      std::vector<WatchEvent> events;
      std::optional<Status> failure;
      std::optional<EtcdError> error;
      StreamSplitter splitter([&](const json& message) {
        if ((error = ErrorIn(message))) return false;
        const json& response = Member(message, "result");
        if (Member(response, "canceled").is_boolean() && response["canceled"].get<bool>()) {
          int64_t compacted = Int64(response, "compact_revision");
          if (compacted > 0) {
            failure = Status::FailedPrecondition(
                "etcd: " + what + ": that revision is compacted (the oldest left is " +
                std::to_string(compacted) + ")");
          } else {
            error = CancelReason(String(response, "cancel_reason"));
          }
          return false;
        }
        if (Member(response, "created").is_boolean() && response["created"].get<bool>()) {
          created = true;
          created_revision = Int64(Member(response, "header"), "revision");
        }
        const json& list = Member(response, "events");
        if (!list.is_array() || list.empty()) return true;  // created, or progress
        for (const json& event : list) {
          WatchEvent out;
          out.type = String(event, "type") == "DELETE" ? WatchEvent::Type::kDelete
                                                       : WatchEvent::Type::kPut;
          Result<KeyValue> kv = ParseKeyValue(Member(event, "kv"));
          if (!kv.ok()) {
            failure = kv.status();
            return false;
          }
          out.kv = *std::move(kv);
          events.push_back(std::move(out));
        }
        return false;  // the first batch is the answer
      });
      Exchange exchange = Send(member, "/v3/watch", body, tick, Token(),
                               [&](std::string_view d) { return splitter.Feed(d); });
      // A stream that ended, or an error answer (see Judge), may end
      // without a newline; a stream cut by the tick may end mid-object.
      if (exchange.error == httplib::Error::Success || exchange.status != 200) splitter.Finish();

      if (failure) return *failure;
      if (!events.empty()) {
        set_current(member);
        result.events = std::move(events);
        // Not the header's revision: a replay sends at most 1000 revisions
        // at once under the store's current revision.
        for (const WatchEvent& event : result.events) {
          result.revision = std::max(result.revision, event.kv.mod_revision);
        }
        return result;
      }
      if (splitter.unreadable()) {
        return Status::Internal("etcd: " + what + ": unreadable answer from " +
                                options_.endpoints[member] + ": " + splitter.unreadable_text());
      }
      if (error) {
        if (IsTokenError(*error) && !options_.user.empty() && !logged_in_again) {
          logged_in_again = true;
          DROVER_RETURN_IF_ERROR(Authenticate());
          held = true;  // go round again at once
          break;
        }
        if (!IsQuorumError(*error)) return ErrorStatus(*error, what);
        no_quorum = true;
        last_error = what + " at " + options_.endpoints[member] + ": " + error->message;
        continue;
      }
      if (created) {
        // Idle for a tick: go round to look at the deadline and wake_fd.
        held = true;
        set_current(member);
        if (start <= 0 && created_revision > 0) {
          start = created_revision + 1;
          result.revision = created_revision;
        }
        break;
      }
      if (exchange.status > 0 && exchange.status != 200) {
        // Not etcd's error answer (the splitter read those): a proxy's?
        return Status::Internal("etcd: " + what + ": HTTP status " +
                                std::to_string(exchange.status) + " from " +
                                options_.endpoints[member]);
      }
      if (Clock::now() >= deadline) return result;
      if (!no_quorum) {
        last_error = what + " at " + options_.endpoints[member] + ": " +
                     (exchange.error == httplib::Error::Read
                          ? "no answer within " + std::to_string(tick.count()) + " ms"
                          : httplib::to_string(exchange.error));
      }
    }
    if (!held) return NoMember(no_quorum, last_error);
  }
}

EtcdClient::EtcdClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
EtcdClient::~EtcdClient() = default;

Result<std::unique_ptr<EtcdClient>> EtcdClient::Connect(EtcdOptions options, Deadline deadline) {
  if (options.endpoints.empty()) return Status::InvalidArgument("etcd: no member given");
  if (options.request_timeout <= Milliseconds::zero()) {
    return Status::InvalidArgument("etcd: request_timeout must be positive");
  }
  if (options.cert_file.empty() != options.key_file.empty()) {
    return Status::InvalidArgument(
        "etcd: a client certificate needs both cert_file and key_file (got \"" + options.cert_file +
        "\" and \"" + options.key_file + "\")");
  }
  std::vector<std::pair<std::string, int>> members;
  for (const std::string& endpoint : options.endpoints) {
    Result<std::pair<std::string, int>> split = SplitHostPort(endpoint);
    if (!split.ok()) return split.status().WithContext("etcd");
    members.push_back(*std::move(split));
  }
  auto impl = std::make_unique<Impl>(std::move(options), std::move(members));

  // maintenance/status answers without a leader and without a login: it
  // says that the member is up, not that the cluster has a quorum.
  std::string last_error;
  bool answered = false;
  while (!answered) {
    for (size_t member = 0; member < impl->member_count() && !answered; ++member) {
      Milliseconds timeout = std::min(std::max(CeilMs(deadline - Clock::now()), Milliseconds(100)),
                                      impl->options().request_timeout);
      Exchange exchange = impl->Send(member, "/v3/maintenance/status", "{}", timeout, "");
      Judgement judgement = Judge(exchange, timeout);
      if (judgement.kind == Judgement::Kind::kAnswer) {
        impl->set_current(member);
        answered = true;
        break;
      }
      last_error =
          impl->options().endpoints[member] + ": " +
          (judgement.kind == Judgement::Kind::kFailed ? judgement.error.message : judgement.why);
    }
    if (answered) break;
    Clock::duration left = deadline - Clock::now();
    if (left <= Clock::duration::zero()) {
      return Status::Unavailable("etcd: cannot reach any member of " + impl->endpoint_list() +
                                 " (" + last_error + ")");
    }
    std::this_thread::sleep_for(std::min<Clock::duration>(left, Milliseconds(200)));
  }
  if (!impl->options().user.empty()) DROVER_RETURN_IF_ERROR(impl->Authenticate());
  return std::unique_ptr<EtcdClient>(new EtcdClient(std::move(impl)));
}

std::string EtcdClient::Describe() const {
  return "etcd at " + impl_->endpoint_list();
}

Result<RangeResult> EtcdClient::Get(const std::string& key) {
  return impl_->Range(key, false);
}

Result<RangeResult> EtcdClient::GetPrefix(const std::string& prefix) {
  return impl_->Range(prefix, true);
}

Result<int64_t> EtcdClient::Put(const std::string& key, const std::string& value, int64_t lease) {
  json request = {{"key", Base64Encode(key)}, {"value", Base64Encode(value)}};
  if (lease != 0) request["lease"] = std::to_string(lease);
  DROVER_ASSIGN_OR_RETURN(json answer, impl_->Call("/v3/kv/put", request, "put " + key));
  return Int64(Member(answer, "header"), "revision");
}

Result<int64_t> EtcdClient::DeleteKey(const std::string& key) {
  return impl_->Delete(key, false);
}

Result<int64_t> EtcdClient::DeletePrefix(const std::string& prefix) {
  return impl_->Delete(prefix, true);
}

Result<TxnResult> EtcdClient::Txn(const std::vector<Compare>& compares,
                                  const std::vector<TxnOp>& success,
                                  const std::vector<TxnOp>& failure) {
  json request = {
      {"compare", json::array()}, {"success", json::array()}, {"failure", json::array()}};
  for (const Compare& compare : compares) request["compare"].push_back(CompareJson(compare));
  for (const TxnOp& op : success) request["success"].push_back(OpJson(op));
  for (const TxnOp& op : failure) request["failure"].push_back(OpJson(op));
  std::string what = "transaction";
  if (!compares.empty()) {
    what += " on " + compares.front().key;
  } else if (!success.empty()) {
    what += " on " + success.front().key;
  }
  DROVER_ASSIGN_OR_RETURN(json answer, impl_->Call("/v3/kv/txn", request, what));

  TxnResult out;
  const json& succeeded = Member(answer, "succeeded");
  out.succeeded = succeeded.is_boolean() && succeeded.get<bool>();
  out.revision = Int64(Member(answer, "header"), "revision");
  const std::vector<TxnOp>& ran = out.succeeded ? success : failure;
  const json& responses = Member(answer, "responses");
  for (size_t i = 0; i < ran.size(); ++i) {
    if (!IsRead(ran[i])) continue;
    const json& response =
        responses.is_array() && i < responses.size() ? responses[i] : json::object();
    DROVER_ASSIGN_OR_RETURN(RangeResult range,
                            ParseRange(Member(response, "response_range"), out.revision));
    out.ranges.push_back(std::move(range));
  }
  return out;
}

Result<int64_t> EtcdClient::GrantLease(std::chrono::seconds ttl) {
  if (ttl.count() < 1) {
    return Status::InvalidArgument("etcd: a lease needs a TTL of at least 1 s, not " +
                                   std::to_string(ttl.count()) + " s");
  }
  json request = {{"TTL", ttl.count()}};
  DROVER_ASSIGN_OR_RETURN(json answer,
                          impl_->Call("/v3/lease/grant", request,
                                      "grant a lease of " + std::to_string(ttl.count()) + " s"));
  std::string error = String(answer, "error");
  if (!error.empty()) return Status::Internal("etcd: grant a lease: " + error);
  int64_t id = Int64(answer, "ID");
  if (id == 0) return Status::Internal("etcd: grant a lease: no ID in " + answer.dump());
  return id;
}

Result<int64_t> EtcdClient::KeepAlive(int64_t lease) {
  json request = {{"ID", std::to_string(lease)}};
  DROVER_ASSIGN_OR_RETURN(json answer,
                          impl_->Call("/v3/lease/keepalive", request,
                                      "keep lease " + std::to_string(lease) + " alive"));
  return Int64(Member(answer, "result"), "TTL");
}

Status EtcdClient::RevokeLease(int64_t lease) {
  json request = {{"ID", std::to_string(lease)}};
  Result<json> answer =
      impl_->Call("/v3/lease/revoke", request, "revoke lease " + std::to_string(lease));
  return answer.status();
}

Result<WatchResult> EtcdClient::WatchPrefix(const std::string& prefix, int64_t from,
                                            Deadline deadline, int wake_fd) {
  return impl_->Watch(prefix, from, deadline, wake_fd);
}

}  // namespace drover::etcd
