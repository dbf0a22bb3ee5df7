// EtcdFeedLedger: a dynamic feed's state in etcd (docs/feed.md, "Feeding
// through etcd"), for runs whose nodes form through etcd. The driver is on
// no path of the feed: the plan, each round's queue, the claims and the
// commit points are keys, and every change is a transaction.
//
// Keys, under the run's prefix P:
//   P/feed/plan                     the plan, as the run was started with it
//   P/feed/queue/R                  the plan round R feeds (its queue: what
//                                   the rounds before left)
//   P/feed/sealed/R                 round R's claims and commits are closed
//   P/feed/r/R/claimed              how many queue entries round R handed out
//   P/feed/r/R/claim/SHARE/SEQ      the entry share SHARE took as feed SEQ
//   P/feed/r/R/commit/SHARE         share SHARE's last commit (FeedPosition)
//
// A round's queue is worked out by the first of its nodes to start feeding:
// it seals the last round that fed (claims and commits then fail, so none
// lands after it was read), reads that round's claims and commits, and
// writes QueueAfterRound's answer, if no node of the round wrote one first.
// A claim takes the next entry and records who took it in one transaction.
//
// Thread-safe (EtcdClient is).

#ifndef DROVER_FEED_ETCD_FEED_LEDGER_H_
#define DROVER_FEED_ETCD_FEED_LEDGER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "drover/status.h"
#include "etcd/etcd_client.h"
#include "feed/feed_plan.h"

namespace drover::feed {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

class EtcdFeedLedger {
 public:
  // `prefix`: the run's ("/RUN"). Calls go on while etcd is unavailable
  // (no quorum, no member) for at most `unavailable_timeout`.
  EtcdFeedLedger(std::unique_ptr<etcd::EtcdClient> etcd, std::string prefix,
                 std::chrono::milliseconds unavailable_timeout);

  // Stores `plan` (dynamic, from files) as the run's, unless it holds one:
  // then it must be the same plan (kInvalidArgument naming the difference's
  // place otherwise: a second driver or agent started with other input).
  Status Publish(const FeedPlan& plan, Deadline deadline);
  // The run's plan; nullopt for a run that is not fed.
  Result<std::optional<FeedPlan>> StoredPlan(Deadline deadline);

  struct RoundPlan {
    FeedPlan plan;  // with its queue set
    // Set when this call worked the queue out from an earlier round's
    // commits: "N of M queued feeds left (K from a record mid-partition)".
    std::string resumed;
  };
  // The plan round `round` feeds (see above). kFailedPrecondition when a
  // later round already feeds (this node is behind), kNotFound for a run
  // that is not fed.
  Result<RoundPlan> PlanOfRound(int round, Deadline deadline);

  // Takes round `round`'s next queue entry as feed `seq` of share `share`:
  // its index, or nullopt when all `queue_size` entries are taken.
  // kFailedPrecondition once the round is sealed.
  Result<std::optional<uint64_t>> Claim(int round, int share, uint32_t seq, uint64_t queue_size,
                                        Deadline deadline);
  // Records share `share`'s commit in round `round`. kFailedPrecondition
  // once the round is sealed: the commit does not count.
  Status Commit(int round, int share, const FeedPosition& position, Deadline deadline);

  std::string Where() const { return etcd_->Describe() + " " + prefix_; }

 private:
  std::string Key(const std::string& rest) const { return prefix_ + "/feed/" + rest; }
  std::string QueueKey(int round) const { return Key("queue/" + std::to_string(round)); }
  std::string SealedKey(int round) const { return Key("sealed/" + std::to_string(round)); }
  std::string RoundDir(int round) const { return Key("r/" + std::to_string(round) + "/"); }
  Status Sealed(int round) const;
  // The queue after round `fed` (whose plan is `fed_plan`), from its claims
  // and commits; seals it first.
  Result<RoundPlan> QueueAfter(int fed, const FeedPlan& fed_plan, Deadline deadline);
  template <typename Call>
  auto Retrying(Call call, Deadline deadline) -> decltype(call());

  std::unique_ptr<etcd::EtcdClient> etcd_;
  const std::string prefix_;
  const std::chrono::milliseconds unavailable_timeout_;
};

}  // namespace drover::feed

#endif  // DROVER_FEED_ETCD_FEED_LEDGER_H_
