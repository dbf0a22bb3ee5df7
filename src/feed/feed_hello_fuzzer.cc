// Fuzzes the feed socket's handshake (docs/shm_queue_format.md, "The feed
// socket handshake"): the hello line the agent reads from any process of its
// user (DecodeHello), and the answer line a client reads (DecodeAnswer);
// then a reader's commit request and its answer (DecodeCommitRequest,
// DecodeCommitAnswer), and a dynamic feeder's claim and its answer
// (DecodeClaimRequest, DecodeClaimAnswer).
// Each returns a status for any bytes, never throws; an answer that decodes
// decodes the same once encoded again. Aborts on any violation.

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>

#include "feed/socket_fd.h"

namespace {

void Check(bool condition, const char* what) {
  if (condition) return;
  std::fprintf(stderr, "invariant broken: %s\n", what);
  std::abort();
}

bool Same(const drover::feed::FeedGrant& a, const drover::feed::FeedGrant& b) {
  return a.mode == b.mode && a.format == b.format && a.record_bytes == b.record_bytes &&
         a.feed_timeout_ms == b.feed_timeout_ms && a.task == b.task && a.partitions == b.partitions;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace drover::feed;
  using Code = drover::Status::Code;
  const std::string line(reinterpret_cast<const char*>(data), size);
  try {
    FeedRole role = FeedRole::kReader;
    bool train_mode = false;
    bool external = false;
    drover::Status hello = DecodeHello(line, &role, &train_mode, &external);
    Check(hello.ok() || hello.code() == Code::kInvalidArgument, "hello: unexpected code");
    // What the agent sends back for a bad hello must encode whatever it says.
    if (!hello.ok()) {
      FeedGrant none;
      drover::Status refused = DecodeAnswer(EncodeRefusal(hello), &none);
      Check(refused.code() == Code::kInvalidArgument, "refusal lost its code");
    }

    // A reader's commit request and the agent's answer (DataFeed::Commit).
    std::optional<drover::FeedPosition> position;
    drover::Status request = DecodeCommitRequest(line, &position);
    Check(request.ok() || request.code() == Code::kInvalidArgument, "commit: unexpected code");
    if (request.ok()) {
      std::optional<drover::FeedPosition> again;
      Check(DecodeCommitRequest(EncodeCommitRequest(position), &again).ok() && again == position,
            "commit request changed through a round trip");
    }
    std::optional<drover::FeedPosition> answered;
    if (DecodeCommitAnswer(line, &answered).ok()) {
      std::optional<drover::FeedPosition> again;
      Check(DecodeCommitAnswer(EncodeCommitAnswer(answered), &again).ok() && again == answered,
            "commit answer changed through a round trip");
    }

    // A dynamic feeder's claim and the agent's answer.
    uint32_t seq = 0;
    drover::Status claim = DecodeClaimRequest(line, &seq);
    Check(claim.ok() || claim.code() == Code::kInvalidArgument, "claim: unexpected code");
    if (claim.ok()) {
      uint32_t again = 0;
      Check(DecodeClaimRequest(EncodeClaimRequest(seq), &again).ok() && again == seq,
            "claim request changed through a round trip");
    }
    std::optional<FeedUnit> unit;
    if (DecodeClaimAnswer(line, &unit).ok()) {
      std::optional<FeedUnit> again;
      Check(DecodeClaimAnswer(EncodeClaimAnswer(unit), &again).ok() && again == unit,
            "claim answer changed through a round trip");
    }

    FeedGrant grant;
    drover::Status answer = DecodeAnswer(line, &grant);
    if (answer.ok()) {
      FeedGrant again;
      Check(DecodeAnswer(EncodeGrant(grant), &again).ok(), "grant does not decode again");
      Check(Same(grant, again), "grant changed through a round trip");
    }
  } catch (...) {
    Check(false, "threw");
  }
  return 0;
}
