#include "feed/etcd_feed_ledger.h"

#include <charconv>
#include <map>

namespace drover::feed {
namespace {

using etcd::Compare;
using etcd::KeyValue;
using etcd::TxnOp;

std::optional<uint64_t> ParseNumber(std::string_view text) {
  uint64_t value = 0;
  auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

Result<FeedPlan> ParseStoredPlan(const std::string& text, const std::string& key) {
  Result<FeedPlan> plan = FeedPlan::FromJson(text);
  if (!plan.ok()) return plan.status().WithContext("etcd holds a malformed feed plan at " + key);
  return plan;
}

std::string Describe(const FeedPlan& plan) {
  return std::to_string(plan.partitions.size()) + " partitions" +
         (plan.partitions.empty() ? "" : " from " + plan.partitions.front().path) + ", " +
         std::to_string(plan.epochs) + (plan.epochs == 1 ? " epoch" : " epochs");
}

// A round's claims and commits, as QueueAfterRound takes them: each share's
// claims from feed 0 up to the first gap (a claim that was never recorded
// ends what the share is known to have taken).
struct RoundLedger {
  std::vector<std::vector<uint64_t>> claims;
  std::vector<std::optional<FeedPosition>> commits;
  bool committed = false;
};

RoundLedger ParseRoundLedger(const std::vector<KeyValue>& kvs, const std::string& dir) {
  std::map<uint64_t, std::map<uint64_t, uint64_t>> claims;  // share -> seq -> entry
  std::map<uint64_t, FeedPosition> commits;
  for (const KeyValue& kv : kvs) {
    std::string_view rest = std::string_view(kv.key).substr(dir.size());
    if (rest.rfind("claim/", 0) == 0) {
      rest.remove_prefix(6);
      const size_t slash = rest.find('/');
      if (slash == std::string_view::npos) continue;
      std::optional<uint64_t> share = ParseNumber(rest.substr(0, slash));
      std::optional<uint64_t> seq = ParseNumber(rest.substr(slash + 1));
      std::optional<uint64_t> entry = ParseNumber(kv.value);
      if (share && seq && entry) claims[*share][*seq] = *entry;
    } else if (rest.rfind("commit/", 0) == 0) {
      std::optional<uint64_t> share = ParseNumber(rest.substr(7));
      Result<FeedPosition> position = FeedPositionFromJson(kv.value);
      // A commit that does not parse comes from the programs' side: ignored,
      // as the built-in driver does.
      if (share && position.ok()) commits[*share] = *position;
    }
  }
  RoundLedger ledger;
  uint64_t shares = 0;
  if (!claims.empty()) shares = claims.rbegin()->first + 1;
  if (!commits.empty()) shares = std::max(shares, commits.rbegin()->first + 1);
  shares = std::min<uint64_t>(shares, 1 << 20);  // bounds what a stray key can cost
  ledger.claims.resize(shares);
  ledger.commits.resize(shares);
  for (auto& [share, by_seq] : claims) {
    if (share >= shares) break;
    for (uint64_t seq = 0; by_seq.count(seq) > 0; ++seq)
      ledger.claims[share].push_back(by_seq[seq]);
  }
  for (auto& [share, position] : commits) {
    if (share >= shares) break;
    ledger.commits[share] = position;
    ledger.committed = true;
  }
  return ledger;
}

}  // namespace

EtcdFeedLedger::EtcdFeedLedger(std::unique_ptr<etcd::EtcdClient> etcd, std::string prefix,
                               std::chrono::milliseconds unavailable_timeout)
    : etcd_(std::move(etcd)),
      prefix_(std::move(prefix)),
      unavailable_timeout_(unavailable_timeout) {}

template <typename Call>
auto EtcdFeedLedger::Retrying(Call call, Deadline deadline) -> decltype(call()) {
  return etcd::RetryWhileUnavailable(call, deadline, unavailable_timeout_);
}

Status EtcdFeedLedger::Sealed(int round) const {
  return Status::FailedPrecondition("round " + std::to_string(round) +
                                    "'s feed is closed (the cluster re-formed): what it "
                                    "claims or commits now does not count");
}

Status EtcdFeedLedger::Publish(const FeedPlan& plan, Deadline deadline) {
  if (plan.external || plan.balance != Balance::kDynamic) {
    return Status::InvalidArgument(
        "a run through etcd feeds files with --balance dynamic (its membership may change)");
  }
  const std::string key = Key("plan");
  DROVER_ASSIGN_OR_RETURN(etcd::TxnResult txn, Retrying(
                                                   [&] {
                                                     return etcd_->Txn(
                                                         {Compare::Absent(key)},
                                                         {TxnOp::Put(key, plan.ToJson())},
                                                         {TxnOp::Get(key)});
                                                   },
                                                   deadline));
  if (txn.succeeded || txn.ranges.empty() || txn.ranges[0].kvs.empty()) return Status::Ok();
  DROVER_ASSIGN_OR_RETURN(FeedPlan stored, ParseStoredPlan(txn.ranges[0].kvs[0].value, key));
  // As stored: what the JSON leaves out (the split size) does not count.
  if (stored.ToJson() == plan.ToJson()) return Status::Ok();
  return Status::InvalidArgument("the run at " + Where() + " is fed another plan (" +
                                 Describe(stored) + "; this one: " + Describe(plan) +
                                 "): give the same input, or a new RUN");
}

Result<std::optional<FeedPlan>> EtcdFeedLedger::StoredPlan(Deadline deadline) {
  const std::string key = Key("plan");
  DROVER_ASSIGN_OR_RETURN(etcd::RangeResult got,
                          Retrying([&] { return etcd_->Get(key); }, deadline));
  if (got.kvs.empty()) return std::optional<FeedPlan>();
  DROVER_ASSIGN_OR_RETURN(FeedPlan plan, ParseStoredPlan(got.kvs[0].value, key));
  return std::optional<FeedPlan>(std::move(plan));
}

Result<EtcdFeedLedger::RoundPlan> EtcdFeedLedger::PlanOfRound(int round, Deadline deadline) {
  const std::string queues = Key("queue/");
  for (;;) {
    DROVER_ASSIGN_OR_RETURN(
        etcd::TxnResult read,
        Retrying(
            [&] {
              return etcd_->Txn({}, {TxnOp::Get(Key("plan")), TxnOp::GetPrefix(queues)});
            },
            deadline));
    if (read.ranges.size() != 2) return Status::Internal("etcd answered 2 reads with fewer");
    if (read.ranges[0].kvs.empty())
      return Status::NotFound("the run at " + Where() + " is not fed");
    // The newest queue: this round's, or the last round's that fed.
    int latest = -1;
    const KeyValue* latest_kv = nullptr;
    for (const KeyValue& kv : read.ranges[1].kvs) {
      std::optional<uint64_t> number = ParseNumber(std::string_view(kv.key).substr(queues.size()));
      if (number && static_cast<int64_t>(*number) > latest) {
        latest = static_cast<int>(*number);
        latest_kv = &kv;
      }
    }
    if (latest > round) {
      return Status::FailedPrecondition("round " + std::to_string(round) +
                                        "'s feed is over: round " + std::to_string(latest) +
                                        " feeds now");
    }
    if (latest == round) {
      DROVER_ASSIGN_OR_RETURN(FeedPlan plan, ParseStoredPlan(latest_kv->value, latest_kv->key));
      return RoundPlan{std::move(plan), ""};
    }
    RoundPlan next;
    std::vector<Compare> unchanged = {Compare::Absent(QueueKey(round))};
    std::vector<TxnOp> writes;
    if (latest_kv == nullptr) {
      DROVER_ASSIGN_OR_RETURN(
          next.plan, ParseStoredPlan(read.ranges[0].kvs[0].value, read.ranges[0].kvs[0].key));
      next.plan.queue = DynamicQueue(next.plan);
    } else {
      DROVER_ASSIGN_OR_RETURN(FeedPlan fed, ParseStoredPlan(latest_kv->value, latest_kv->key));
      DROVER_ASSIGN_OR_RETURN(next, QueueAfter(latest, fed, deadline));
      unchanged.push_back(Compare::ModRevisionIs(latest_kv->key, latest_kv->mod_revision));
      // The round before is history now; its seal stays, for its stragglers.
      writes.push_back(TxnOp::DeleteKey(latest_kv->key));
      writes.push_back(TxnOp::DeletePrefix(RoundDir(latest)));
    }
    writes.insert(writes.begin(), TxnOp::Put(QueueKey(round), next.plan.ToJson()));
    DROVER_ASSIGN_OR_RETURN(etcd::TxnResult wrote,
                            Retrying([&] { return etcd_->Txn(unchanged, writes); }, deadline));
    if (wrote.succeeded) return next;
    // Another node of the round wrote it first (or our own write landed at a
    // member that then timed out): read what is there.
    if (Clock::now() >= deadline) {
      return Status::DeadlineExceeded("the feed queue of round " + std::to_string(round) +
                                      " kept changing at " + Where());
    }
  }
}

Result<EtcdFeedLedger::RoundPlan> EtcdFeedLedger::QueueAfter(int fed, const FeedPlan& fed_plan,
                                                             Deadline deadline) {
  // Sealed first, so that no claim or commit of that round lands after the
  // read below.
  DROVER_RETURN_IF_ERROR(
      Retrying([&] { return etcd_->Put(SealedKey(fed), ""); }, deadline).status());
  const std::string dir = RoundDir(fed);
  DROVER_ASSIGN_OR_RETURN(etcd::RangeResult got,
                          Retrying([&] { return etcd_->GetPrefix(dir); }, deadline));
  RoundLedger ledger = ParseRoundLedger(got.kvs, dir);
  RoundPlan next;
  next.plan = fed_plan;
  const std::vector<FeedUnit> queue = DynamicQueue(fed_plan);
  // Without a commit nothing was consumed for good: the same queue again.
  if (!ledger.committed) return next;
  next.plan.queue = QueueAfterRound(queue, ledger.claims, ledger.commits);
  size_t partial = 0;
  for (const FeedUnit& unit : *next.plan.queue) partial += unit.first_record > 0 ? 1 : 0;
  next.resumed = std::to_string(next.plan.queue->size()) + " of " + std::to_string(queue.size()) +
                 " queued feeds left" +
                 (partial > 0 ? " (" + std::to_string(partial) + " from a record mid-partition)"
                              : std::string());
  return next;
}

Result<std::optional<uint64_t>> EtcdFeedLedger::Claim(int round, int share, uint32_t seq,
                                                      uint64_t queue_size, Deadline deadline) {
  const std::string counter = RoundDir(round) + "claimed";
  const std::string own =
      RoundDir(round) + "claim/" + std::to_string(share) + "/" + std::to_string(seq);
  for (;;) {
    DROVER_ASSIGN_OR_RETURN(etcd::TxnResult read,
                            Retrying(
                                [&] {
                                  return etcd_->Txn({}, {TxnOp::Get(SealedKey(round)),
                                                         TxnOp::Get(counter), TxnOp::Get(own)});
                                },
                                deadline));
    if (read.ranges.size() != 3) return Status::Internal("etcd answered 3 reads with fewer");
    if (!read.ranges[0].kvs.empty()) return Sealed(round);
    // A claim whose write landed at a member that then timed out, retried.
    if (!read.ranges[2].kvs.empty()) {
      if (std::optional<uint64_t> entry = ParseNumber(read.ranges[2].kvs[0].value)) return entry;
    }
    uint64_t taken = 0;
    Compare unchanged = Compare::Absent(counter);
    if (!read.ranges[1].kvs.empty()) {
      std::optional<uint64_t> parsed = ParseNumber(read.ranges[1].kvs[0].value);
      if (!parsed) return Status::Internal("etcd holds a malformed claim counter at " + counter);
      taken = *parsed;
      unchanged = Compare::ModRevisionIs(counter, read.ranges[1].kvs[0].mod_revision);
    }
    if (taken >= queue_size) return std::optional<uint64_t>();
    DROVER_ASSIGN_OR_RETURN(etcd::TxnResult wrote,
                            Retrying(
                                [&] {
                                  return etcd_->Txn({unchanged, Compare::Absent(SealedKey(round))},
                                                    {TxnOp::Put(counter, std::to_string(taken + 1)),
                                                     TxnOp::Put(own, std::to_string(taken))});
                                },
                                deadline));
    if (wrote.succeeded) return std::optional<uint64_t>(taken);
    if (Clock::now() >= deadline) {
      return Status::DeadlineExceeded("claiming a partition of round " + std::to_string(round) +
                                      " kept racing at " + Where());
    }
  }
}

Status EtcdFeedLedger::Commit(int round, int share, const FeedPosition& position,
                              Deadline deadline) {
  const std::string key = RoundDir(round) + "commit/" + std::to_string(share);
  DROVER_ASSIGN_OR_RETURN(etcd::TxnResult wrote,
                          Retrying(
                              [&] {
                                return etcd_->Txn({Compare::Absent(SealedKey(round))},
                                                  {TxnOp::Put(key, FeedPositionToJson(position))});
                              },
                              deadline));
  if (!wrote.succeeded) return Sealed(round);
  return Status::Ok();
}

}  // namespace drover::feed
