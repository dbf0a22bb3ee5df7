#include "agent/feed_service.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <tuple>

#include "common/mutex.h"
#include "drover/cluster_spec.h"
#include "feed/shm_channel.h"
#include "feed/socket_fd.h"
#include "os/duration_text.h"
#include "os/fd_io.h"
#include "os/subprocess.h"
#include "os/unique_fd.h"

namespace drover {
namespace {

namespace fs = std::filesystem;
using feed::Clock;
using feed::RunState;

constexpr auto kHelloTimeout = std::chrono::seconds(5);
constexpr auto kPollInterval = std::chrono::milliseconds(100);
// A feeder killed again and again before it feeds anything is started again
// after a pause that doubles each time, up to this.
constexpr auto kFirstRestartDelay = std::chrono::milliseconds(100);
constexpr auto kMaxRestartDelay = std::chrono::seconds(5);
// SIGKILL ends any process at once but one stuck in uninterruptible sleep.
constexpr auto kFeederKillWait = std::chrono::seconds(10);

// Signals a process raises on itself when it faults: a feeder that dies of
// one is likely to die the same way on the same input again. Any other
// signal (SIGKILL from an operator or the OOM killer, SIGTERM) came from
// outside and says nothing about the input.
bool IsCrashSignal(int signal) {
  switch (signal) {
    case SIGSEGV:
    case SIGBUS:
    case SIGILL:
    case SIGFPE:
    case SIGABRT:
    case SIGSYS:
    case SIGTRAP:
      return true;
    default:
      return false;
  }
}

std::chrono::milliseconds RestartDelay(int stalled_restarts) {
  if (stalled_restarts <= 0) return std::chrono::milliseconds(0);
  auto delay = kFirstRestartDelay;
  for (int i = 1; i < stalled_restarts && delay < kMaxRestartDelay; ++i) delay *= 2;
  return std::min<std::chrono::milliseconds>(delay, kMaxRestartDelay);
}

std::string Seconds(std::chrono::milliseconds delay) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f s", static_cast<double>(delay.count()) / 1000.0);
  return text;
}

// Whether the peer of a connected socket has closed it (readable, and
// nothing left to read); a pending request is not a close.
bool PeerClosed(int fd) {
  char byte;
  const ssize_t got = ::recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  return got == 0 || (got < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

std::string PartName(uint32_t partition) {
  char name[32];
  std::snprintf(name, sizeof(name), "part-%05u", partition);
  return name;
}

// One partition's results file, written while its results arrive.
struct ResultFile {
  os::UniqueFd fd;
  uint64_t results = 0;
  bool complete = false;
};

}  // namespace

class FeedService::Impl {
 public:
  explicit Impl(FeedServiceOptions options) : options_(std::move(options)) {}
  ~Impl() { Shutdown(); }

  Status Start();
  const std::string& socket_path() const { return socket_path_; }
  Status Finish();
  void Stop(const std::string& reason);
  FeedProgress ReadProgress() const;
  Status Failure() const;

 private:
  void Wake() { os::SignalEventFd(event_fd_.get()); }
  void Say(const std::string& message) {
    if (options_.say) options_.say(message);
  }
  void Fail(const Status& status);
  // Why the program's reader stopped the feed, when it did (records it could
  // not read: an extent's file cut short or replaced); Ok otherwise.
  Status ReaderFailure() const;
  void Shutdown();
  Status SpawnFeeder();
  void Loop();
  void Accept();
  void OnFeederExit(const os::ExitStatus& status);
  // Starts the feeder again once the pause after its last death is over.
  void RestartFeederWhenDue();
  std::optional<feed::CommitPoint> Progress();
  // Whether a writer closed the input ring (an external feed that ended).
  bool InputEnded();
  std::string DescribeCommit(const std::optional<feed::CommitPoint>& commit) const;
  // The reader sent a request (a commit); answers it.
  void AnswerReader();
  // The feeder sent a request (a claim) or left.
  void AnswerFeeder();
  Result<std::optional<feed::FeedUnit>> ClaimFeed(uint32_t seq);
  bool dynamic() const { return options_.plan.balance == feed::Balance::kDynamic; }
  Status RecordCommit(const feed::FeedPosition& position);

  void WriteResults();
  Status WriteBatch(const feed::BatchView& batch);
  Status CheckResults();

  FeedServiceOptions options_;
  std::optional<feed::ShmChannel> channel_;
  // What Fail reported first (written by the loop or results thread, read
  // by the agent's).
  mutable Mutex failure_mutex_;
  Status failure_ GUARDED_BY(failure_mutex_);
  // The share's feeds: fixed at the start, or as claimed so far (dynamic:
  // appended by the loop thread, read by any).
  mutable Mutex feeds_mutex_;
  std::vector<feed::FeedUnit> feeds_ GUARDED_BY(feeds_mutex_);
  std::vector<feed::FeedUnit> queue_;  // dynamic: the round's queue
  bool queue_empty_ = false;           // dynamic: a claim found nothing left (loop thread)
  // The program's last commit on record (loop thread): this round's, else
  // the plan's start for the share.
  std::optional<feed::FeedPosition> committed_;
  std::string dir_;
  std::string socket_path_;
  os::UniqueFd listen_fd_;
  os::UniqueFd event_fd_;
  std::thread loop_;
  std::thread results_;
  std::atomic<bool> quit_{false};
  std::atomic<bool> finishing_{false};
  std::atomic<bool> failed_{false};
  // The agent stopped the channel itself (Stop, Shutdown): a stop it did
  // not make is the program's reader giving up (ReaderFailure).
  std::atomic<bool> stopped_here_{false};
  std::atomic<uint32_t> feeder_restarts_{0};
  bool shut_down_ = false;

  // Loop thread only.
  os::UniqueFd reader_fd_;
  pid_t reader_pid_ = 0;
  uint64_t accepted_ = 0;  // readers and writers joined so far
  os::UniqueFd writer_fd_;
  std::optional<os::Subprocess> feeder_;
  bool feeder_done_ = false;
  bool input_ended_ = false;
  int stalled_restarts_ = 0;  // in a row, by any signal
  int stalled_crashes_ = 0;   // in a row, by a crash signal
  std::optional<Clock::time_point> restart_at_;
  std::optional<feed::CommitPoint> progress_at_start_;

  // Results thread only (and Finish, after joining it).
  std::map<uint32_t, ResultFile> result_files_;
  Status results_status_;
};

Status FeedService::Impl::Start() {
  const feed::FeedPlan& plan = options_.plan;
  if (dynamic()) {
    queue_ = feed::DynamicQueue(plan);
  } else {
    DROVER_ASSIGN_OR_RETURN(std::vector<feed::FeedUnit> feeds,
                            feed::FeedsOfShare(plan, options_.share, options_.shares));
    MutexLock lock(feeds_mutex_);
    feeds_ = std::move(feeds);
  }
  if (static_cast<size_t>(options_.share) < plan.starts.size()) {
    committed_ = plan.starts[static_cast<size_t>(options_.share)];
  }
  if (!options_.socket_dir.empty()) {
    dir_ = options_.socket_dir;
  } else {
    char dir[] = "/tmp/drover-feed-XXXXXX";
    if (::mkdtemp(dir) == nullptr) {
      return Status::IoError(std::string("cannot make the feed socket directory: ") +
                             std::strerror(errno));
    }
    dir_ = dir;
  }
  socket_path_ = dir_ + "/feed.sock";
  DROVER_ASSIGN_OR_RETURN(feed::ShmChannel channel, feed::ShmChannel::Create(plan.queue_bytes));
  channel_.emplace(std::move(channel));
  DROVER_ASSIGN_OR_RETURN(listen_fd_, feed::ListenUnix(socket_path_));
  DROVER_ASSIGN_OR_RETURN(event_fd_, os::MakeEventFd());
  if (plan.mode == feed::FeedMode::kInference && !plan.external) {
    std::error_code error;
    fs::create_directories(plan.output_dir, error);
    if (error) {
      return Status::IoError("cannot create the output directory " + plan.output_dir + ": " +
                             error.message());
    }
    results_ = std::thread([this] { WriteResults(); });
  }
  // The feeder is started by the loop thread: a child's parent-death signal
  // follows the thread that started it.
  loop_ = std::thread([this] { Loop(); });
  return Status::Ok();
}

FeedProgress FeedService::Impl::ReadProgress() const {
  const feed::FeedPlan& plan = options_.plan;
  FeedProgress progress = feed::ReadRingProgress(*channel_, /*input_ring=*/true);
  progress.feeder_restarts = feeder_restarts_.load(std::memory_order_relaxed);
  if (std::optional<feed::Ingest> ingest = feed::IngestOfWord(feed::ReadRingIngest(*channel_))) {
    progress.ingest = feed::IngestName(*ingest);
  }
  if (!plan.external) {
    MutexLock lock(feeds_mutex_);
    progress.partitions_total = static_cast<uint32_t>(feeds_.size());
    progress.epochs = static_cast<uint32_t>(plan.epochs);
    // A dynamic share's size is known only once the queue is empty: no
    // share bytes, so no estimate of the time left.
    for (const feed::FeedUnit& unit : feeds_) {
      if (dynamic()) break;
      if (unit.epoch != 0) break;
      const feed::Partition& partition = plan.partitions[static_cast<size_t>(unit.partition)];
      progress.share_bytes += partition.end - partition.begin;
    }
  }
  if (plan.mode == feed::FeedMode::kInference || plan.external) {
    progress.results = feed::ReadRingProgress(*channel_, /*input_ring=*/false).records;
  }
  return progress;
}

void FeedService::Impl::Fail(const Status& status) {
  {
    MutexLock lock(failure_mutex_);
    if (failure_.ok()) failure_ = status;
  }
  stopped_here_ = true;
  channel_->SetError(status.message());
  channel_->AdvanceState(RunState::kStopped);
  if (!failed_.exchange(true) && options_.on_failure) options_.on_failure(status);
}

Status FeedService::Impl::SpawnFeeder() {
  os::SubprocessOptions spawn;
  spawn.argv = {options_.drover_binary,
                "feeder",
                "--socket",
                socket_path_,
                "--plan",
                options_.plan_path,
                "--share",
                std::to_string(options_.share),
                "--shares",
                std::to_string(options_.shares),
                "--task",
                options_.task};
  spawn.output_fd = options_.output_fd;
  DROVER_ASSIGN_OR_RETURN(os::Subprocess feeder, os::Subprocess::Spawn(spawn));
  feeder_.emplace(std::move(feeder));
  progress_at_start_ = Progress();
  return Status::Ok();
}

std::optional<feed::CommitPoint> FeedService::Impl::Progress() {
  feed::RingWriter probe(*channel_, /*input_ring=*/true);
  Result<std::optional<feed::CommitPoint>> commit = probe.LastCommit();
  return commit.ok() ? *commit : std::nullopt;
}

bool FeedService::Impl::InputEnded() {
  if (input_ended_) return true;
  // The ring's closed flag counts once everything before it is read, so a
  // probe reads (never releases) up to the published end; only the program
  // releases, and no writer is joined while this runs.
  feed::RingReader probe(*channel_, /*input_ring=*/true);
  for (;;) {
    Result<std::optional<feed::BatchView>> next = probe.TryNext();
    if (!next.ok() || !next->has_value()) break;
  }
  input_ended_ = probe.closed_and_drained();
  return input_ended_;
}

std::string FeedService::Impl::DescribeCommit(
    const std::optional<feed::CommitPoint>& commit) const {
  MutexLock lock(feeds_mutex_);
  if (!commit || commit->feed_seq >= feeds_.size()) return "from the start";
  const feed::FeedUnit unit = feeds_[commit->feed_seq];
  lock.Unlock();
  std::string partition = options_.plan.partitions[static_cast<size_t>(unit.partition)].Name();
  if (commit->flags & feed::kEndOfPartition) {
    return "after the end of " + partition + " (epoch " + std::to_string(unit.epoch + 1) + " of " +
           std::to_string(options_.plan.epochs) + ")";
  }
  return "at record " + std::to_string(commit->records_through) + " of " + partition + " (epoch " +
         std::to_string(unit.epoch + 1) + " of " + std::to_string(options_.plan.epochs) + ")";
}

void FeedService::Impl::OnFeederExit(const os::ExitStatus& status) {
  feeder_.reset();
  if (quit_) return;
  if (channel_->state() == RunState::kStopped) {
    // The feeder stopped because the program could not read its records:
    // the node fails with that, as with a feeder's own error. (A feeder that
    // had finished is no news: the program's exit says it, Finish.)
    if (Status failure = ReaderFailure(); !failure.ok() && !status.success()) Fail(failure);
    return;
  }
  if (status.success()) {
    feeder_done_ = true;
    return;
  }
  if (!status.signaled()) {
    std::string why = channel_->error();
    Fail(Status::Unavailable("feeding " + options_.task + " failed: " +
                             (why.empty() ? "the feeder " + status.ToString() : why)));
    return;
  }
  std::optional<feed::CommitPoint> now = Progress();
  bool moved = now.has_value() != progress_at_start_.has_value() ||
               (now && (now->feed_seq != progress_at_start_->feed_seq ||
                        now->records_through != progress_at_start_->records_through ||
                        now->flags != progress_at_start_->flags));
  // A feeder waiting on a full queue makes no progress either; only one
  // that could have fed and did not counts towards giving up.
  feed::RingWriter probe(*channel_, /*input_ring=*/true);
  const bool queue_full = probe.unread_bytes() > channel_->max_batch_bytes();
  const bool stalled = !moved && !queue_full;
  stalled_restarts_ = stalled ? stalled_restarts_ + 1 : 0;
  stalled_crashes_ = !stalled ? 0 : stalled_crashes_ + (IsCrashSignal(status.signal()) ? 1 : 0);
  if (stalled_crashes_ > options_.max_stalled_restarts) {
    Fail(Status::Unavailable("the feeder of " + options_.task + " crashed (" + status.ToString() +
                             ") " + std::to_string(stalled_crashes_) +
                             " times in a row without feeding a batch"));
    return;
  }
  const std::chrono::milliseconds delay = RestartDelay(stalled_restarts_);
  Say("the feeder was " + status.ToString() + "; resuming " + DescribeCommit(now) +
      (delay.count() == 0 ? ""
                          : " in " + Seconds(delay) + " (it fed nothing since its last start, " +
                                std::to_string(stalled_restarts_) + " time(s) in a row)"));
  feeder_restarts_.fetch_add(1, std::memory_order_relaxed);
  restart_at_ = Clock::now() + delay;
}

void FeedService::Impl::RestartFeederWhenDue() {
  if (!restart_at_ || Clock::now() < *restart_at_) return;
  restart_at_.reset();
  if (Status spawned = SpawnFeeder(); !spawned.ok()) {
    Fail(spawned.WithContext("restarting the feeder of " + options_.task));
  }
}

void FeedService::Impl::Accept() {
  os::UniqueFd fd(::accept4(listen_fd_.get(), nullptr, nullptr, SOCK_CLOEXEC));
  if (!fd.valid()) return;
  auto refuse = [&](const Status& status) {
    (void)feed::SendMessage(fd.get(), feed::EncodeRefusal(status));
  };
  Result<feed::PeerCredentials> peer = feed::PeerOf(fd.get());
  if (!peer.ok() || peer->uid != ::getuid()) {
    return refuse(Status::PermissionDenied("the feed of " + options_.task +
                                           " is served to its own user only"));
  }
  std::string line;
  os::UniqueFd ignored_fd;
  Status got = feed::ReceiveMessage(fd.get(), Clock::now() + kHelloTimeout, &line, &ignored_fd);
  feed::FeedRole role;
  bool train_mode = true;
  bool external_writer = false;
  if (got.ok()) got = feed::DecodeHello(line, &role, &train_mode, &external_writer);
  if (!got.ok()) return refuse(got);
  const feed::FeedPlan& plan = options_.plan;
  const bool writer = role == feed::FeedRole::kWriter;
  if (writer && external_writer != plan.external) {
    return refuse(Status::FailedPrecondition(
        plan.external ? "the feed of " + options_.task +
                            " is fed from outside (drover.Cluster.train), not by a feeder"
                      : "the feed of " + options_.task +
                            " is fed from its plan (drover run --input), not from outside"));
  }
  os::UniqueFd& slot = writer ? writer_fd_ : reader_fd_;
  if (slot.valid() && (!writer || plan.external) && PeerClosed(slot.get())) {
    slot.Reset();  // a reader or writer that just left, not noticed yet
  }
  if (slot.valid()) {
    return refuse(Status::AlreadyExists(
        !writer ? "the feed of " + options_.task + " already has a reader (pid " +
                      std::to_string(reader_pid_) + "): one process reads a node's feed"
        : plan.external ? "the feed of " + options_.task + " already has a writer"
                        : "the feed of " + options_.task + " already has a feeder"));
  }
  if (writer && plan.external && InputEnded()) {
    return refuse(Status::FailedPrecondition("the feed of " + options_.task + " has ended"));
  }
  feed::FeedGrant grant;
  grant.mode = plan.external                             ? "external"
               : plan.mode == feed::FeedMode::kInference ? "inference"
                                                         : "train";
  grant.format = std::string(feed::RecordFormatName(plan.read.format));
  grant.record_bytes = plan.read.record_bytes;
  grant.feed_timeout_ms = plan.feed_timeout_ms;
  grant.task = options_.task;
  for (const feed::Partition& partition : plan.partitions) {
    grant.partitions.push_back(partition.Name());
  }
  if (!feed::SendMessage(fd.get(), feed::EncodeGrant(grant), channel_->fd()).ok()) return;
  slot = std::move(fd);
  ++accepted_;
  if (role == feed::FeedRole::kReader) reader_pid_ = peer->pid;
}

void FeedService::Impl::AnswerReader() {
  std::string line;
  os::UniqueFd ignored_fd;
  std::optional<feed::FeedPosition> handed;
  Status request =
      feed::ReceiveMessage(reader_fd_.get(), Clock::now() + kHelloTimeout, &line, &ignored_fd);
  if (request.ok()) request = feed::DecodeCommitRequest(line, &handed);
  if (!request.ok()) {
    // A reader that speaks out of turn loses its connection, as a bad hello.
    (void)feed::SendMessage(reader_fd_.get(), feed::EncodeRefusal(request));
    reader_fd_.Reset();
    return;
  }
  Status recorded = handed ? RecordCommit(*handed) : Status::Ok();
  (void)feed::SendMessage(reader_fd_.get(), recorded.ok() ? feed::EncodeCommitAnswer(committed_)
                                                          : feed::EncodeRefusal(recorded));
}

void FeedService::Impl::AnswerFeeder() {
  if (PeerClosed(writer_fd_.get())) {
    writer_fd_.Reset();
    return;
  }
  std::string line;
  os::UniqueFd ignored_fd;
  uint32_t seq = 0;
  Status request =
      feed::ReceiveMessage(writer_fd_.get(), Clock::now() + kHelloTimeout, &line, &ignored_fd);
  if (request.ok()) request = feed::DecodeClaimRequest(line, &seq);
  Result<std::optional<feed::FeedUnit>> claimed =
      request.ok() ? ClaimFeed(seq) : Result<std::optional<feed::FeedUnit>>(request);
  if (!claimed.ok()) {
    // A writer that speaks out of turn loses its connection, as a bad hello.
    (void)feed::SendMessage(writer_fd_.get(), feed::EncodeRefusal(claimed.status()));
    writer_fd_.Reset();
    return;
  }
  (void)feed::SendMessage(writer_fd_.get(), feed::EncodeClaimAnswer(*claimed));
}

Result<std::optional<feed::FeedUnit>> FeedService::Impl::ClaimFeed(uint32_t seq) {
  if (!dynamic() || options_.plan.external) {
    return Status::FailedPrecondition("the feed of " + options_.task +
                                      " is not dynamic: there is nothing to claim");
  }
  {
    MutexLock lock(feeds_mutex_);
    if (seq < feeds_.size()) return std::optional(feeds_[seq]);  // a feeder started again
    if (seq > feeds_.size()) {
      return Status::InvalidArgument("claim: feed " + std::to_string(seq) + " before feed " +
                                     std::to_string(feeds_.size()));
    }
  }
  if (queue_empty_) return std::optional<feed::FeedUnit>();
  if (!options_.claim_feed) {
    return Status::FailedPrecondition("claim: this feed has no driver to claim from");
  }
  DROVER_ASSIGN_OR_RETURN(std::optional<uint64_t> entry, options_.claim_feed(seq));
  if (!entry) {
    queue_empty_ = true;
    return std::optional<feed::FeedUnit>();
  }
  if (*entry >= queue_.size()) {
    return Status::Internal("the driver handed out entry " + std::to_string(*entry) +
                            " of a queue of " + std::to_string(queue_.size()));
  }
  MutexLock lock(feeds_mutex_);
  feeds_.push_back(queue_[*entry]);
  return std::optional(feeds_.back());
}

Status FeedService::Impl::RecordCommit(const feed::FeedPosition& position) {
  MutexLock lock(feeds_mutex_);
  if (position.feed >= feeds_.size()) {
    return Status::InvalidArgument("commit: feed " + std::to_string(position.feed) + " of " +
                                   std::to_string(feeds_.size()) + " does not exist");
  }
  const feed::Partition& partition =
      options_.plan.partitions[static_cast<size_t>(feeds_[position.feed].partition)];
  lock.Unlock();
  if (partition.records && position.record > *partition.records) {
    return Status::InvalidArgument("commit: " + partition.Name() + " has " +
                                   std::to_string(*partition.records) + " records, not " +
                                   std::to_string(position.record));
  }
  auto order = [](const feed::FeedPosition& p) { return std::tuple(p.feed, p.done, p.record); };
  if (committed_ && order(position) < order(*committed_)) {
    return Status::InvalidArgument("commit: a position before the last commit");
  }
  if (!options_.record_commit) {
    return Status::FailedPrecondition("commit: this feed has no driver to record commits in");
  }
  DROVER_RETURN_IF_ERROR(options_.record_commit(position));
  committed_ = position;
  return Status::Ok();
}

void FeedService::Impl::Loop() {
  if (options_.plan.external) {
    // Writers come from outside.
  } else if (Status spawned = SpawnFeeder(); !spawned.ok()) {
    Fail(spawned.WithContext("starting the feeder of " + options_.task));
  }
  while (!quit_) {
    pollfd fds[5];
    int count = 0;
    fds[count++] = {event_fd_.get(), POLLIN, 0};
    fds[count++] = {listen_fd_.get(), POLLIN, 0};
    const int reader_slot = reader_fd_.valid() ? count : -1;
    if (reader_fd_.valid()) fds[count++] = {reader_fd_.get(), POLLIN, 0};
    const int writer_slot = writer_fd_.valid() ? count : -1;
    if (writer_fd_.valid()) fds[count++] = {writer_fd_.get(), POLLIN, 0};
    if (feeder_ && feeder_->exit_fd() >= 0) fds[count++] = {feeder_->exit_fd(), POLLIN, 0};
    auto timeout = kPollInterval;
    if (restart_at_) {
      timeout =
          std::clamp(std::chrono::ceil<std::chrono::milliseconds>(*restart_at_ - Clock::now()),
                     std::chrono::milliseconds(0), kPollInterval);
    }
    ::poll(fds, static_cast<nfds_t>(count), static_cast<int>(timeout.count()));
    uint64_t events;
    while (::read(event_fd_.get(), &events, sizeof(events)) > 0) {
    }
    if (quit_) break;
    // What poll saw of a reader or writer that Accept replaces is not news
    // of the new one.
    const uint64_t accepted_before = accepted_;
    if (fds[1].revents & POLLIN) Accept();
    const bool same_clients = accepted_ == accepted_before;
    // A writer may claim a feed (dynamic), a reader ask for a commit.
    if (same_clients && writer_slot >= 0 && fds[writer_slot].revents != 0) AnswerFeeder();
    if (same_clients && reader_slot >= 0 && fds[reader_slot].revents != 0) {
      if (PeerClosed(reader_fd_.get())) {
        reader_fd_.Reset();
      } else {
        AnswerReader();
      }
    }
    if (feeder_) {
      if (std::optional<os::ExitStatus> exited = feeder_->Poll()) OnFeederExit(*exited);
    }
    if (!feeder_ && !quit_ && channel_->state() != RunState::kStopped) RestartFeederWhenDue();
  }
  if (feeder_) {
    feeder_->SignalGroup(SIGKILL);
    if (!feeder_->Wait(Clock::now() + kFeederKillWait)) {
      const pid_t pid = feeder_->Release();
      Say("the feeder (pid " + std::to_string(pid) + ") did not end within " +
          os::SecondsText(kFeederKillWait) +
          " of SIGKILL: it is stuck in the kernel (uninterruptible I/O, such as a hung network "
          "filesystem) and ends when that I/O does; not waiting for it");
    }
    feeder_.reset();
  }
  reader_fd_.Reset();
  writer_fd_.Reset();
}

void FeedService::Impl::WriteResults() {
  feed::RingReader reader(*channel_, /*input_ring=*/false);
  for (;;) {
    Result<std::optional<feed::BatchView>> next = channel_->state() == RunState::kRunning
                                                      ? reader.Next(Clock::now() + kPollInterval)
                                                      : reader.TryNext();
    if (!next.ok() && next.status().code() != Status::Code::kDeadlineExceeded) {
      results_status_ = next.status();
      Fail(next.status().WithContext("reading the results of " + options_.task));
      return;
    }
    if (next.ok() && next->has_value()) {
      Status written = WriteBatch(**next);
      reader.Release((*next)->end);
      if (!written.ok()) {
        results_status_ = written;
        Fail(written);
        return;
      }
      continue;
    }
    // Nothing queued: done once the program is finished or feeding stopped.
    if (finishing_ || quit_ || channel_->state() == RunState::kStopped) return;
    if (channel_->state() != RunState::kRunning) {
      std::this_thread::sleep_for(kPollInterval);
    }
  }
}

Status FeedService::Impl::WriteBatch(const feed::BatchView& batch) {
  const feed::FeedPlan& plan = options_.plan;
  const uint32_t partition = batch.info.partition;
  if (partition >= plan.partitions.size()) {
    return Status::Internal("a result names partition " + std::to_string(partition));
  }
  ResultFile& file = result_files_[partition];
  const std::string name = plan.partitions[partition].Name();
  if (file.complete || batch.info.first_record != file.results) {
    // A reader that left without answering its last batch: its successor
    // starts after those records (docs/feed.md).
    return Status::Internal(
        "results of " + name + " arrived out of order: " +
        (file.complete ? std::string("after its last record")
                       : "for record " + std::to_string(batch.info.first_record) +
                             " where record " + std::to_string(file.results) + " was due") +
        " (were records handed to a reader that left unanswered?)");
  }
  const std::string temp = plan.output_dir + "/." + PartName(partition) + ".tmp";
  if (!file.fd.valid()) {
    file.fd.Reset(::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (!file.fd.valid()) {
      return Status::IoError("cannot write " + temp + ": " + std::strerror(errno));
    }
  }
  std::string text;
  text.reserve(batch.bytes + batch.info.record_count);
  feed::ForEachRecord(batch, [&](std::string_view result) {
    text.append(result);
    text.push_back('\n');
  });
  for (size_t done = 0; done < text.size();) {
    ssize_t n = ::write(file.fd.get(), text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return Status::IoError("cannot write " + temp + ": " + std::strerror(errno));
    done += static_cast<size_t>(n);
  }
  file.results += batch.info.record_count;
  if (batch.info.flags & feed::kEndOfPartition) {
    file.fd.Reset();
    const std::string final_path = plan.output_dir + "/" + PartName(partition);
    if (std::rename(temp.c_str(), final_path.c_str()) != 0) {
      return Status::IoError("cannot rename " + temp + ": " + std::strerror(errno));
    }
    file.complete = true;
  }
  return Status::Ok();
}

Status FeedService::Impl::CheckResults() {
  if (!results_status_.ok()) return results_status_;
  std::set<int> partitions;
  {
    MutexLock lock(feeds_mutex_);
    for (const feed::FeedUnit& unit : feeds_) partitions.insert(unit.partition);
  }
  int unanswered = 0;
  std::string first;
  for (int partition : partitions) {
    auto found = result_files_.find(static_cast<uint32_t>(partition));
    if (found != result_files_.end() && found->second.complete) continue;
    ++unanswered;
    if (first.empty()) {
      const std::string name = options_.plan.partitions[static_cast<size_t>(partition)].Name();
      uint64_t results = found == result_files_.end() ? 0 : found->second.results;
      first = results == 0 ? "partition " + name + " got no results"
                           : "partition " + name + " got results for its first " +
                                 std::to_string(results) + " records only";
    }
  }
  if (unanswered == 0) return Status::Ok();
  if (channel_->state() == RunState::kTerminating) {
    Say("the program terminated the feed; " + std::to_string(unanswered) +
        " partition(s) of its share have no complete results");
    return Status::Ok();
  }
  return Status::InvalidArgument(
      "inference: " + options_.task + " exited 0 but " + first +
      (unanswered > 1 ? " (" + std::to_string(unanswered) + " partitions incomplete)" : ""));
}

Status FeedService::Impl::ReaderFailure() const {
  if (failed_ || stopped_here_ || channel_->state() != RunState::kStopped) return Status::Ok();
  const std::string why = channel_->error();
  if (why.empty()) return Status::Ok();
  return Status::Unavailable("feeding " + options_.task + " failed: " + why);
}

Status FeedService::Impl::Failure() const {
  {
    MutexLock lock(failure_mutex_);
    if (!failure_.ok()) return failure_;
  }
  return ReaderFailure();
}

Status FeedService::Impl::Finish() {
  finishing_ = true;
  if (results_.joinable()) results_.join();
  const feed::FeedPlan& plan = options_.plan;
  // A program that ends its loop on should_stop() exits 0 after its reader
  // stopped the feed: the records it could not read fail the node.
  Status checked = ReaderFailure();
  if (checked.ok() && plan.mode == feed::FeedMode::kInference && !plan.external && !failed_) {
    checked = CheckResults();
  }
  Shutdown();
  return checked;
}

void FeedService::Impl::Stop(const std::string& reason) {
  stopped_here_ = true;
  if (channel_) {
    channel_->SetError(reason);
    channel_->AdvanceState(RunState::kStopped);
  }
  Shutdown();
}

void FeedService::Impl::Shutdown() {
  if (shut_down_) return;
  shut_down_ = true;
  quit_ = true;
  finishing_ = true;
  stopped_here_ = true;
  if (channel_) channel_->AdvanceState(RunState::kStopped);
  if (event_fd_.valid()) Wake();
  if (loop_.joinable()) loop_.join();
  if (results_.joinable()) results_.join();
  for (auto& [partition, file] : result_files_) file.fd.Reset();
  listen_fd_.Reset();
  event_fd_.Reset();
  if (!dir_.empty()) {
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }
}

FeedService::FeedService(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
FeedService::~FeedService() = default;

Result<std::unique_ptr<FeedService>> FeedService::Start(FeedServiceOptions options) {
  auto impl = std::make_unique<Impl>(std::move(options));
  DROVER_RETURN_IF_ERROR(impl->Start());
  return std::unique_ptr<FeedService>(new FeedService(std::move(impl)));
}

Status FeedService::Failure() const {
  return impl_->Failure();
}

FeedProgress FeedService::Progress() const {
  return impl_->ReadProgress();
}

const std::string& FeedService::socket_path() const {
  return impl_->socket_path();
}
Status FeedService::Finish() {
  return impl_->Finish();
}
void FeedService::Stop(const std::string& reason) {
  impl_->Stop(reason);
}

}  // namespace drover
