// FeedService: the agent's side of feeding one node (docs/feed.md). It owns
// the node's shared-memory channel, serves it on a Unix socket in a private
// 0700 directory (DROVER_FEED_SOCKET), runs `drover feeder` for the node's
// share of the plan and starts it again, from the last published batch, when
// it is killed; in inference it writes the program's results, one line per
// record, to <output>/part-NNNNN, renamed into place once the partition is
// complete. In training, the program's reader may ask it to record a commit
// (DataFeed::Commit): it checks the position and hands it to record_commit
// (the agent: the driver's KV store), answering with the position on record.
// With a dynamic plan (`--balance dynamic`) the feeder claims each of its
// feeds through the service, which takes the next entry of the driver's
// queue (claim_feed) and remembers it, so a feeder started again gets the
// feed it was in.
//
// With an external plan (FeedPlan::external: drover.Cluster.train and
// inference) it runs no feeder and writes no results: writers from outside
// (feed/partition_writer.h) join the socket one at a time, push records into
// the input ring and read the results back from the output ring themselves.
// A second concurrent writer is refused (kAlreadyExists); once a writer has
// ended the feed (closed the input ring) later ones are refused
// (kFailedPrecondition). An external writer joining a plan feed, or the
// feeder joining an external one, is refused too (kFailedPrecondition).
//
// Threads: one loop thread (socket, feeder exit) and, in inference from a
// plan, one result-writer thread; on_failure is called once, from one of
// them.

#ifndef DROVER_AGENT_FEED_SERVICE_H_
#define DROVER_AGENT_FEED_SERVICE_H_

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "drover/cluster_spec.h"
#include "drover/rendezvous.h"
#include "drover/status.h"
#include "feed/feed_plan.h"

namespace drover {

struct FeedServiceOptions {
  feed::FeedPlan plan;
  std::string plan_path;  // handed to the feeder
  int share = 0;
  int shares = 1;
  std::string task;  // "worker:0"
  // An existing private (0700) directory to serve the socket in, as
  // <socket_dir>/feed.sock; "" : a new one under /tmp. Either way the
  // directory is removed at shutdown.
  std::string socket_dir;
  std::string drover_binary;  // runs `<drover_binary> feeder ...`
  // Where the feeder's stdout and stderr go; -1: the agent's own (a host's
  // agent gives each node's feeder that node's output).
  int output_fd = -1;
  // Prints one line of the service's own ("the feeder was killed ...").
  std::function<void(const std::string&)> say;
  // A feeder that dies of a crash signal (SIGSEGV, SIGBUS, SIGABRT, ...) more
  // than this many times in a row without feeding a batch, while the queue had room,
  // fails the feed. A feeder killed from outside (SIGKILL, SIGTERM) is
  // always started again, after a pause that doubles with each death
  // without progress (0.1 s up to 5 s): the program's feed timeout bounds
  // how long it waits for one that never feeds.
  int max_stalled_restarts = 3;
  // Records the program's commit (DataFeed::Commit) where the next round
  // finds it: the driver. Called on the service's loop thread; the reader
  // waits for it. Unset: commits are refused (kFailedPrecondition).
  std::function<Status(const feed::FeedPosition&)> record_commit;
  // A dynamic plan: takes the next entry of the round's queue in the driver
  // for this share's feed `seq` and records the claim there; the entry's
  // index into the plan's queue, nullopt once it is empty. Called on the
  // service's loop thread; the feeder waits for it. Unset: claims are
  // refused (kFailedPrecondition).
  std::function<Result<std::optional<uint64_t>>(uint32_t seq)> claim_feed;
  // Feeding failed for good (a bad record, the feed timeout, a feeder that
  // keeps dying): the program should be stopped and this reported.
  std::function<void(const Status&)> on_failure;
};

class FeedService {
 public:
  static Result<std::unique_ptr<FeedService>> Start(FeedServiceOptions options);
  ~FeedService();
  FeedService(const FeedService&) = delete;
  FeedService& operator=(const FeedService&) = delete;

  const std::string& socket_path() const;

  // The program exited 0. Training: stops the feeder. Inference: writes the
  // results still queued and checks that every partition of the share was
  // answered in full; kInvalidArgument naming the first one that was not.
  // External: stops serving (nothing to check).
  Status Finish();
  // Stops feeding now (the program failed or the node is stopping).
  void Stop(const std::string& reason);
  // Why feeding failed, if it did: what on_failure was or will be called
  // with, or what the program's reader gave up on. Ok otherwise. A program
  // that sees the feed's error exits before the service has reaped the
  // feeder that stopped it: its node fails with this, not its exit code.
  // Thread-safe. After Stop (not a failure itself) it keeps what on_failure
  // was called with, but no longer tells a reader's stop from the agent's.
  Status Failure() const;
  // What the program has read so far and how full its queue is (heartbeats).
  // Thread-safe.
  FeedProgress Progress() const;

 private:
  class Impl;
  explicit FeedService(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace drover

#endif  // DROVER_AGENT_FEED_SERVICE_H_
