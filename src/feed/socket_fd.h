// The feed socket: how the agent hands its channel's memfd to the feeder and
// to the program (docs/feed.md). A Unix stream socket in a 0700 directory;
// each side sends one JSON line, the agent's reply carries the descriptor
// (SCM_RIGHTS). The client keeps the connection open: the agent learns that
// a reader or feeder is gone when it closes.

#ifndef DROVER_FEED_SOCKET_FD_H_
#define DROVER_FEED_SOCKET_FD_H_

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "drover/status.h"
#include "feed/feed_plan.h"
#include "feed/shm_channel.h"
#include "os/unique_fd.h"

namespace drover::feed {

// A listening socket at `path` (unlinked first). kIoError naming the path.
Result<os::UniqueFd> ListenUnix(const std::string& path);
// A connected socket, retried until `deadline` while the path does not exist
// yet. kUnavailable naming the path when nobody listens.
Result<os::UniqueFd> ConnectUnix(const std::string& path, Deadline deadline);

// One '\n'-terminated message, with `fd` attached when >= 0.
Status SendMessage(int socket, const std::string& line, int fd = -1);
// Reads one '\n'-terminated message (at most 1 MiB) and the descriptor that
// came with it (none held if none). kDeadlineExceeded / kUnavailable (closed).
Status ReceiveMessage(int socket, Deadline deadline, std::string* line, os::UniqueFd* fd);

// The connecting process's pid and uid (SO_PEERCRED).
struct PeerCredentials {
  pid_t pid = 0;
  uid_t uid = 0;
};
Result<PeerCredentials> PeerOf(int socket);

// The handshake. The client says who it is: {"role": "reader"|"writer",
// "train_mode": bool, "external": bool}; the agent answers with a grant and
// the descriptor, or {"ok": false, "code": "...", "error": "..."}.
// "external" (absent: false) marks a writer from outside the agent
// (PartitionWriter); the agent's own `drover feeder` leaves it out. A plan
// feed refuses an external writer, an external feed a feeder.
enum class FeedRole { kReader, kWriter };

struct FeedGrant {
  std::string mode;    // "train" | "inference" | "external" (the program picks)
  std::string format;  // RecordFormatName()
  uint64_t record_bytes = 0;
  int64_t feed_timeout_ms = 0;
  std::string task;                     // "worker:0"
  std::vector<std::string> partitions;  // Partition::Name() per plan index
};
std::string EncodeGrant(const FeedGrant& grant);
std::string EncodeRefusal(const Status& status);
// Parses a client's hello line; *external (when given) gets the writer's
// "external" flag. kInvalidArgument for anything else (fuzzed).
Status DecodeHello(const std::string& line, FeedRole* role, bool* train_mode,
                   bool* external = nullptr);
// Parses the agent's answer: Ok with *grant filled (absent fields take their
// defaults), the refusal it carries with its code, or kUnavailable "bad
// answer" for a line that is neither, a field of the wrong type included
// (fuzzed).
Status DecodeAnswer(const std::string& line, FeedGrant* grant);

// After its hello a reader may ask the agent to record a commit point
// (DataFeed::Commit): {"commit": POSITION | null}, null when it has read
// nothing since it joined. The agent answers {"ok": true, "position":
// POSITION | null} with the position now on record (null: none, the share
// starts from the beginning), or a refusal (EncodeRefusal). POSITION is
// FeedPosition's JSON.
std::string EncodeCommitRequest(const std::optional<FeedPosition>& position);
// kInvalidArgument for anything else (fuzzed).
Status DecodeCommitRequest(const std::string& line, std::optional<FeedPosition>* position);
std::string EncodeCommitAnswer(const std::optional<FeedPosition>& position);
// The refusal it carries with its code, or kUnavailable "bad answer" (fuzzed).
Status DecodeCommitAnswer(const std::string& line, std::optional<FeedPosition>* position);

// A dynamic feed's feeder, after its hello, claims each of its feeds in turn:
// {"claim": SEQ}, SEQ its next feed_seq (a feeder started again asks again
// for the feed it was in, and gets the same one). The agent answers {"ok":
// true, "feed": [epoch, partition, first record] | null}, null once the
// queue is empty (the feed is over for this node), or a refusal.
std::string EncodeClaimRequest(uint32_t seq);
// kInvalidArgument for anything else (fuzzed).
Status DecodeClaimRequest(const std::string& line, uint32_t* seq);
std::string EncodeClaimAnswer(const std::optional<FeedUnit>& unit);
// The refusal it carries with its code, or kUnavailable "bad answer"
// (fuzzed). The unit's numbers are only checked to be in range of their
// types: the feeder checks them against its plan.
Status DecodeClaimAnswer(const std::string& line, std::optional<FeedUnit>* unit);
// Sends the request on `socket` and waits until `deadline` for the answer.
Result<std::optional<FeedUnit>> ClaimFeed(int socket, uint32_t seq, Deadline deadline);

// A joined feed: the connection (kept open: closing it tells the agent this
// side is gone), the grant and the mapped channel.
struct JoinedFeed {
  os::UniqueFd socket;
  FeedGrant grant;
  ShmChannel channel;
};
// Connects to the agent at `path` and joins as `role` (`external`: a writer
// from outside the agent). The agent's refusal comes back with its code
// (kAlreadyExists for a second reader or external writer).
Result<JoinedFeed> JoinFeed(const std::string& path, FeedRole role, bool train_mode,
                            Deadline deadline, bool external = false);

}  // namespace drover::feed

#endif  // DROVER_FEED_SOCKET_FD_H_
