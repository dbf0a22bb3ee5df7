#include "testing/fake_engine.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <condition_variable>
#include <string_view>
#include <thread>
#include <utility>

#include "drover/rendezvous.h"
#include "os/unique_fd.h"

namespace drover::testing {

struct FakeEngine::Shared {
  std::mutex mu;
  std::vector<FakeNodeRecord> nodes;  // guarded by mu

  template <typename Change>
  void Update(size_t index, Change change) {
    std::lock_guard<std::mutex> lock(mu);
    change(nodes[index]);
  }
};

namespace {

// How long a fake agent waits for the barrier (the driver's reservation
// timeout ends it sooner: the server answers every waiting node).
constexpr auto kRegisterLimit = std::chrono::seconds(30);
constexpr auto kStopPoll = std::chrono::milliseconds(50);
constexpr auto kReportLimit = std::chrono::seconds(5);

// The value after `flag` in the agent's own flags (before "--"); "" if absent.
std::string FlagValue(const std::vector<std::string>& argv, std::string_view flag) {
  for (size_t i = 1; i + 1 < argv.size() && argv[i] != "--"; ++i) {
    if (argv[i] == flag) return argv[i + 1];
  }
  return "";
}

class FakeAgent : public AgentProcess {
 public:
  FakeAgent(std::shared_ptr<FakeEngine::Shared> shared, size_t record, FakeNodeScript script,
            AgentLaunch launch, os::UniqueFd read_fd, os::UniqueFd write_fd)
      : shared_(std::move(shared)),
        record_(record),
        script_(std::move(script)),
        launch_(std::move(launch)),
        read_fd_(std::move(read_fd)),
        write_fd_(std::move(write_fd)) {
    thread_ = std::thread([this] { Run(); });
  }

  ~FakeAgent() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      quit_ = true;
    }
    changed_.notify_all();
    thread_.join();
  }

  const std::string& executor_id() const override { return launch_.executor_id; }
  // Not a process; 0 would mean "not started" to the driver.
  int pid() const override { return -1; }
  int output_fd() const override { return read_fd_.get(); }
  void CloseOutput() override { read_fd_.Reset(); }

  std::optional<os::ExitStatus> Poll() override {
    std::optional<os::ExitStatus> status;
    {
      std::lock_guard<std::mutex> lock(mu_);
      status = status_;
    }
    if (status && !exit_seen_) {
      exit_seen_ = true;
      if (script_.once_exit_seen) script_.once_exit_seen();
    }
    return status;
  }

  void Signal(int signal) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (status_) return;
      if (!signal_) signal_ = signal;
      // SIGKILL ends a process at once, whatever it was doing.
      if (signal == SIGKILL) EndLocked(os::ExitStatus::Signaled(SIGKILL));
    }
    shared_->Update(record_, [signal](FakeNodeRecord& r) {
      if (!r.signal) r.signal = signal;
    });
    changed_.notify_all();
  }

 private:
  void Run() {
    if (!script_.registers) return EndBySignal();
    const std::string id = launch_.executor_id;
    Result<Credential> credential = Credential::ReadFile(FlagValue(launch_.argv, "--token-file"));
    if (!credential.ok()) return Fail(credential.status());
    RendezvousClientOptions options;
    options.address = FlagValue(launch_.argv, "--rendezvous");
    options.credential = *credential;
    options.name = "fake agent " + id;
    Result<std::unique_ptr<RendezvousClient>> client =
        RendezvousClient::Connect(options, Clock::now() + kRegisterLimit);
    if (!client.ok()) return Fail(client.status());
    NodeInfo node;
    node.executor_id = id;
    node.host = FlagValue(launch_.argv, "--host");
    node.ports = {static_cast<uint32_t>(20000 + std::stoi(id))};
    Result<FormedCluster> formed = (*client)->Register(node, Clock::now() + kRegisterLimit);
    if (!formed.ok()) return Fail(formed.status());
    const Placement& own = *formed->own();
    const std::string task = own.Task();
    shared_->Update(record_, [&](FakeNodeRecord& r) {
      r.job_name = own.job;
      r.task_index = own.index;
      r.heartbeat_interval = formed->heartbeat_interval;
    });
    (*client)->StartHeartbeats(formed->heartbeat_interval);
    for (const std::string& line : script_.lines) Print(line + "\n");
    if (script_.drops_connection) {
      client->reset();
      return EndBySignal();
    }
    if (script_.runs_until_stop) return RunUntilStop(**client);
    if (script_.exit_code == 0) return Leave(**client);
    const std::string message =
        task + " exited with exit code " + std::to_string(script_.exit_code);
    Status reported = (*client)->ReportError(id, message, script_.lines);
    if (reported.ok()) reported = (*client)->QueryState(Clock::now() + kReportLimit).status();
    if (!reported.ok()) Record(reported);
    End(os::ExitStatus::Exited(script_.exit_code));
  }

  void RunUntilStop(RendezvousClient& client) {
    for (;;) {
      if (std::optional<int> signal = PendingSignal())
        return End(os::ExitStatus::Exited(128 + *signal));
      Result<bool> stop = client.WaitForStop(Clock::now() + kStopPoll);
      if (!stop.ok()) return Fail(stop.status());
      if (*stop) {
        shared_->Update(record_, [](FakeNodeRecord& r) { r.stopped = true; });
        return Leave(client);
      }
    }
  }

  void Leave(RendezvousClient& client) {
    Status left = client.Leave();
    if (left.ok()) left = client.QueryState(Clock::now() + kReportLimit).status();
    if (!left.ok()) Record(left);
    End(os::ExitStatus::Exited(0));
  }

  // Hangs like a process that does nothing until the driver signals it.
  void EndBySignal() {
    std::unique_lock<std::mutex> lock(mu_);
    changed_.wait(lock, [this] { return signal_.has_value() || quit_; });
    EndLocked(os::ExitStatus::Exited(128 + signal_.value_or(SIGKILL)));
  }

  void Fail(const Status& status) {
    Record(status);
    End(os::ExitStatus::Exited(1));
  }

  void Record(const Status& status) {
    shared_->Update(record_, [&](FakeNodeRecord& r) { r.error = status.ToString(); });
  }

  std::optional<int> PendingSignal() {
    std::lock_guard<std::mutex> lock(mu_);
    if (quit_) return SIGKILL;
    return signal_;
  }

  void Print(const std::string& text) {
    std::lock_guard<std::mutex> lock(mu_);
    if (write_fd_.valid()) ::send(write_fd_.get(), text.data(), text.size(), MSG_NOSIGNAL);
  }

  void End(os::ExitStatus status) {
    std::lock_guard<std::mutex> lock(mu_);
    EndLocked(status);
  }

  // REQUIRES: mu_ held. The first end wins (a SIGKILL before the script's).
  void EndLocked(os::ExitStatus status) {
    if (!status_) status_ = status;
    write_fd_.Reset();  // the driver reads the end of the output
  }

  const std::shared_ptr<FakeEngine::Shared> shared_;
  const size_t record_;
  const FakeNodeScript script_;
  const AgentLaunch launch_;
  os::UniqueFd read_fd_;    // the driver's thread only
  bool exit_seen_ = false;  // the driver's thread only

  std::mutex mu_;
  std::condition_variable changed_;
  os::UniqueFd write_fd_;                 // guarded by mu_
  std::optional<int> signal_;             // guarded by mu_
  std::optional<os::ExitStatus> status_;  // guarded by mu_
  bool quit_ = false;                     // guarded by mu_
  std::thread thread_;
};

}  // namespace

FakeEngine::FakeEngine(FakeScriptFunction script)
    : script_(std::move(script)), shared_(std::make_shared<Shared>()) {}

FakeEngine::~FakeEngine() = default;

Result<std::unique_ptr<AgentProcess>> FakeEngine::Launch(const AgentLaunch& launch) {
  const std::string round_text = FlagValue(launch.argv, "--restart-count");
  const int round = round_text.empty() ? 0 : std::stoi(round_text);
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) != 0) {
    return Status::IoError("fake engine: socketpair failed");
  }
  os::UniqueFd read_end(fds[0]);
  os::UniqueFd write_end(fds[1]);
  ::shutdown(read_end.get(), SHUT_WR);
  // The driver reads agents' output without blocking.
  ::fcntl(read_end.get(), F_SETFL, ::fcntl(read_end.get(), F_GETFL) | O_NONBLOCK);
  size_t record;
  {
    std::lock_guard<std::mutex> lock(shared_->mu);
    record = shared_->nodes.size();
    FakeNodeRecord r;
    r.executor_id = launch.executor_id;
    r.round = round;
    r.argv = launch.argv;
    shared_->nodes.push_back(std::move(r));
  }
  return std::unique_ptr<AgentProcess>(
      new FakeAgent(shared_, record, script_(std::stoi(launch.executor_id), round), launch,
                    std::move(read_end), std::move(write_end)));
}

std::vector<FakeNodeRecord> FakeEngine::nodes() const {
  std::lock_guard<std::mutex> lock(shared_->mu);
  return shared_->nodes;
}

}  // namespace drover::testing
