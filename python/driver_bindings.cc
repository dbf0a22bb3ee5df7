// _drover._ClusterDriver: the C++ driver of `drover run`, run on a thread of
// the Python process for drover.Cluster (python/drover/cluster.py). It forms
// the cluster through the rendezvous, relays and logs every node's output,
// supervises the nodes and stops them all on every exit path, exactly as the
// command does; Python waits on it and reads what happened.
//
// Agents are started by the C++ local engine, or by a Python engine object
// (drover.engines.Dask) whose launch() returns a process object; the
// adapters below call into it with the GIL held. Through etcd
// (_ClusterDriver.through_etcd) the thread runs `drover run
// --rendezvous etcd://`'s watch instead (driver/etcd_run.h): the agents run
// detached, so the run outlives this process.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <csignal>
#include <iostream>
#include <map>
#include <set>
#include <streambuf>
#include <thread>

#include "bindings.h"
#include "common/mutex.h"
#include "driver/driver.h"
#include "driver/etcd_run.h"
#include "driver/live_runs.h"
#include "drover/environment.h"
#include "drover/placement.h"
#include "engine/local_engine.h"
#include "os/unique_fd.h"

namespace py = pybind11;

namespace drover::python {
namespace {

// An agent started by a Python engine. The object it wraps has pid (int:
// -1 until known), output_fd() (-1: none yet or closed), close_output(),
// poll() (None while running, else the exit code, -N for signal N),
// signal(sig) and kill() (stop everything it started; called once, last).
class PyAgentProcess : public AgentProcess {
 public:
  PyAgentProcess(std::string executor_id, py::object process)
      : executor_id_(std::move(executor_id)), process_(std::move(process)) {}
  ~PyAgentProcess() override {
    py::gil_scoped_acquire gil;
    try {
      process_.attr("kill")();
    } catch (py::error_already_set& error) {
      error.discard_as_unraisable("drover: stopping a remote agent");
    }
    process_ = py::object();
  }

  const std::string& executor_id() const override { return executor_id_; }
  int pid() const override { return Call<int>("pid", /*attribute=*/true, -1); }
  int output_fd() const override { return Call<int>("output_fd", false, -1); }
  void CloseOutput() override { Call<py::object>("close_output", false, py::none()); }
  std::optional<os::ExitStatus> Poll() override {
    py::gil_scoped_acquire gil;
    try {
      py::object code = process_.attr("poll")();
      if (code.is_none()) return std::nullopt;
      int value = code.cast<int>();
      return value < 0 ? os::ExitStatus::Signaled(-value) : os::ExitStatus::Exited(value);
    } catch (py::error_already_set& error) {
      error.discard_as_unraisable("drover: polling a remote agent");
      return std::nullopt;
    }
  }
  void Signal(int signal) override {
    py::gil_scoped_acquire gil;
    try {
      process_.attr("signal")(signal);
    } catch (py::error_already_set& error) {
      error.discard_as_unraisable("drover: signalling a remote agent");
    }
  }

 private:
  template <typename T>
  T Call(const char* name, bool attribute, T fallback) const {
    py::gil_scoped_acquire gil;
    try {
      py::object value = attribute ? process_.attr(name) : process_.attr(name)();
      if constexpr (std::is_same_v<T, py::object>) {
        return value;
      } else {
        return value.is_none() ? fallback : value.cast<T>();
      }
    } catch (py::error_already_set& error) {
      error.discard_as_unraisable((std::string("drover: remote agent ") + name).c_str());
      return fallback;
    }
  }

  std::string executor_id_;
  py::object process_;
};

// An Engine implemented in Python: name, rendezvous_host(), agent_host(i),
// launch(executor_id, argv) -> process object. Executors listed in `local`
// (driver_ps_nodes) run on this host through the C++ local engine.
class PyEngine : public Engine {
 public:
  PyEngine(py::object engine, std::set<std::string> local, std::string local_host)
      : engine_(std::move(engine)),
        local_ids_(std::move(local)),
        local_(LocalEngineOptions{local_host, {}}) {
    name_ = engine_.attr("name").cast<std::string>();
    rendezvous_host_ = engine_.attr("rendezvous_host")().cast<std::string>();
  }
  ~PyEngine() override {
    py::gil_scoped_acquire gil;
    engine_ = py::object();
  }

  std::string name() const override { return name_; }
  std::string rendezvous_host() const override { return rendezvous_host_; }
  std::string agent_host(int index) const override {
    if (local_ids_.count(std::to_string(index))) return local_.agent_host(index);
    py::gil_scoped_acquire gil;
    return engine_.attr("agent_host")(index).cast<std::string>();
  }
  Result<std::unique_ptr<AgentProcess>> Launch(const AgentLaunch& launch) override {
    if (local_ids_.count(launch.executor_id)) return local_.Launch(launch);
    py::gil_scoped_acquire gil;
    try {
      py::object process = engine_.attr("launch")(launch.executor_id, launch.argv);
      return std::unique_ptr<AgentProcess>(
          new PyAgentProcess(launch.executor_id, std::move(process)));
    } catch (py::error_already_set& error) {
      std::string message = error.what();
      return Status::Unavailable("cannot start executor " + launch.executor_id + " on the " +
                                 name_ + " engine: " + message);
    }
  }

 private:
  py::object engine_;
  std::set<std::string> local_ids_;
  LocalEngine local_;
  std::string name_;
  std::string rendezvous_host_;
};

// Writes to std::cerr and keeps a copy for the Python exception messages.
// The driver's thread writes through an ostream while Python may read
// captured() at any time, so every write takes mu_ too (no put area: each
// write reaches xsputn or overflow; the driver writes little).
class TeeBuffer : public std::streambuf {
 public:
  std::string captured() {
    MutexLock lock(mu_);
    return captured_ + pending_;
  }

 protected:
  std::streamsize xsputn(const char* data, std::streamsize size) override {
    MutexLock lock(mu_);
    pending_.append(data, static_cast<size_t>(size));
    return size;
  }
  int_type overflow(int_type c) override {
    if (traits_type::eq_int_type(c, traits_type::eof())) return traits_type::not_eof(c);
    MutexLock lock(mu_);
    pending_.push_back(traits_type::to_char_type(c));
    return c;
  }
  int sync() override {
    MutexLock lock(mu_);
    std::cerr << pending_ << std::flush;
    captured_ += pending_;
    pending_.clear();
    return 0;
  }

 private:
  Mutex mu_;
  std::string captured_ GUARDED_BY(mu_);  // already on std::cerr
  std::string pending_ GUARDED_BY(mu_);   // until the next flush
};

// The rendezvous dict plus TensorFlowOnSpark's port and addr, and the node's
// placement (drover/placement.h): chief, rank and feed_share (None for a node
// that has no rank or input, or none when `placement` is null).
py::dict ClusterNodeDict(const NodeInfo& node, const Placement* placement) {
  py::dict out = NodeDict(node);
  const uint32_t port = node.ports.empty() ? 0 : node.ports.front();
  out["port"] = port;
  out["addr"] = node.host + ":" + std::to_string(port);
  out["chief"] = placement != nullptr && placement->chief;
  out["rank"] = placement != nullptr && placement->rank
                    ? py::object(py::int_(placement->rank->rank))
                    : py::object(py::none());
  out["feed_share"] = placement != nullptr && placement->feed
                          ? py::object(py::int_(placement->feed->share))
                          : py::object(py::none());
  return out;
}

// A driver on a thread of this process: the built-in one (Driver) or the
// watch of an etcd run (RunThroughEtcd). Python waits on it and reads what
// happened through the same calls for both.
class ClusterDriver {
 public:
  virtual ~ClusterDriver() = default;

  void Start() {
    if (thread_.joinable()) Check(Status::FailedPrecondition("the driver was already started"));
    Prepare();
    thread_ = std::thread([this] {
      int code = RunDriver();
      MutexLock lock(mu_);
      exit_code_ = code;
      changed_.notify_all();
    });
  }

  // Waits until the cluster formed or the driver ended; true once formed.
  bool WaitFormed(double timeout_s) {
    py::gil_scoped_release release;
    MutexLock lock(mu_);
    changed_.wait_for(mu_, std::chrono::duration<double>(timeout_s), [this] {
      mu_.AssertHeld();
      return formed_.has_value() || exit_code_.has_value();
    });
    return formed_.has_value();
  }
  // Waits until the driver ended; true once it has.
  bool Join(double timeout_s) {
    {
      py::gil_scoped_release release;
      MutexLock lock(mu_);
      if (!changed_.wait_for(mu_, std::chrono::duration<double>(timeout_s), [this] {
            mu_.AssertHeld();
            return exit_code_.has_value();
          })) {
        return false;
      }
    }
    if (thread_.joinable()) {
      py::gil_scoped_release release;
      thread_.join();
    }
    return true;
  }
  virtual void SetOthersGrace(double seconds) = 0;
  virtual void RequestStop() = 0;

  py::object Formed() {
    MutexLock lock(mu_);
    if (!formed_) return py::none();
    py::dict out;
    out["cluster_id"] = formed_->cluster_id;
    out["cluster_spec"] = formed_->spec;
    py::list nodes;
    for (size_t i = 0; i < formed_->nodes.size(); ++i) {
      nodes.append(ClusterNodeDict(formed_->nodes[i], &formed_->placements[i]));
    }
    out["nodes"] = nodes;
    return out;
  }
  py::object Failure() {
    MutexLock lock(mu_);
    if (!failure_) return py::none();
    py::dict out;
    out["executor_id"] = failure_->executor_id;
    out["task"] = failure_->task;
    out["host"] = failure_->host;
    out["reason"] = failure_->reason;
    out["last_lines"] = failure_->last_lines;
    return out;
  }
  py::object ExitCode() {
    MutexLock lock(mu_);
    return exit_code_ ? py::object(py::int_(*exit_code_)) : py::none();
  }
  std::string Messages() { return tee_.captured(); }
  py::object StatusUrl() {
    MutexLock lock(mu_);
    return status_url_.empty() ? py::none() : py::object(py::str(status_url_));
  }
  // /api/cluster's JSON text (docs/status.md); "null" before start.
  std::string StatusJson() {
    const RunStatus* status = CurrentStatus();
    if (status == nullptr) return "null";
    return SnapshotToJson(status->Snapshot())
        .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }

 protected:
  ClusterDriver() : err_(&tee_) {}

  // Called on the Python thread before the driver's thread starts.
  virtual void Prepare() = 0;
  // The driver's thread: runs the cluster to its end; the exit code.
  virtual int RunDriver() = 0;
  virtual const RunStatus* CurrentStatus() = 0;
  // Joins the driver's thread (stopped first) before members go.
  void StopAndJoin() {
    if (thread_.joinable()) {
      RequestStop();
      py::gil_scoped_release release;
      thread_.join();
    }
  }

  // The status URL, when there is one, is set first: Python reads it once
  // the cluster formed.
  void SetFormed(const FormedCluster& cluster) {
    MutexLock lock(mu_);
    formed_ = cluster;
    changed_.notify_all();
  }
  void SetFailure(const NodeFailure& failure) {
    MutexLock lock(mu_);
    if (!failure_) failure_ = failure;
  }
  void SetStatusUrl(const std::string& url) {
    MutexLock lock(mu_);
    status_url_ = url;
  }

  std::ostream& err() { return err_; }

 private:
  TeeBuffer tee_;
  std::ostream err_;
  std::thread thread_;
  Mutex mu_;
  std::condition_variable_any changed_;
  std::optional<FormedCluster> formed_ GUARDED_BY(mu_);
  std::optional<NodeFailure> failure_ GUARDED_BY(mu_);
  std::optional<int> exit_code_ GUARDED_BY(mu_);
  std::string status_url_ GUARDED_BY(mu_);
};

// The built-in rendezvous: `drover run`'s Driver, agents started by an engine.
class BuiltinClusterDriver : public ClusterDriver {
 public:
  BuiltinClusterDriver(DriverOptions options, py::object engine,
                       std::set<std::string> local_executors, std::string local_host)
      : options_(std::move(options)) {
    stop_fd_.Reset(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    if (!stop_fd_.valid()) Check(Status::IoError("eventfd failed"));
    options_.stop_fd = stop_fd_.get();
    options_.on_formed = [this](const FormedCluster& cluster) {
      SetStatusUrl(driver_->status_url());
      SetFormed(cluster);
    };
    options_.on_failure = [this](const NodeFailure& failure) { SetFailure(failure); };
    if (engine.is_none()) {
      engine_ = std::make_unique<LocalEngine>(LocalEngineOptions{local_host, {}});
    } else {
      engine_ =
          std::make_unique<PyEngine>(std::move(engine), std::move(local_executors), local_host);
    }
  }
  ~BuiltinClusterDriver() override {
    StopAndJoin();
    // The engine may hold Python objects; drop them with the GIL held.
    engine_.reset();
  }

  void SetOthersGrace(double seconds) override {
    if (driver_) driver_->SetOthersGrace(Ms(seconds));
  }
  void RequestStop() override {
    uint64_t one = 1;
    ssize_t ignored = ::write(stop_fd_.get(), &one, sizeof(one));
    (void)ignored;
  }

 protected:
  void Prepare() override {
    driver_ = std::make_unique<Driver>(options_, *engine_, std::cout, err());
  }
  int RunDriver() override { return driver_->Run(); }
  const RunStatus* CurrentStatus() override { return driver_ ? &driver_->status() : nullptr; }

 private:
  DriverOptions options_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<Driver> driver_;
  os::UniqueFd stop_fd_;
};

// An etcd rendezvous (docs/run.md, "A driver that can die"): the agents run
// detached on this host and form through etcd; this only watches the run,
// so the run outlives this process (`drover run --attach` takes it up).
class EtcdClusterDriver : public ClusterDriver {
 public:
  explicit EtcdClusterDriver(EtcdDriverOptions options) : options_(std::move(options)) {
    options_.stop_signal = &stop_signal_;
    options_.status = &status_;
    options_.on_formed = [this](const FormedCluster& cluster) { SetFormed(cluster); };
    options_.on_failure = [this](const NodeFailure& failure) { SetFailure(failure); };
    options_.on_status_page = [this](const std::string& url) { SetStatusUrl(url); };
  }
  ~EtcdClusterDriver() override { StopAndJoin(); }

  // The ps and evaluator nodes end with the run (the nodes decide, in etcd).
  void SetOthersGrace(double) override {}
  void RequestStop() override { stop_signal_ = SIGTERM; }

 protected:
  void Prepare() override {}
  int RunDriver() override { return RunThroughEtcd(options_, std::cout, err()); }
  const RunStatus* CurrentStatus() override { return &status_; }

 private:
  EtcdDriverOptions options_;
  std::atomic<int> stop_signal_{0};
  RunStatus status_;
};

// train()'s plan: writers push pickled records into each node's feed socket.
feed::FeedPlan ExternalPlan(const py::dict& external_feed) {
  feed::FeedPlan plan;
  plan.external = true;
  plan.read.format = feed::RecordFormat::kPickle;
  plan.queue_bytes = external_feed["queue_bytes"].cast<uint64_t>();
  plan.feed_timeout_ms = static_cast<int64_t>(external_feed["feed_timeout"].cast<double>() * 1000);
  return plan;
}

}  // namespace

void RegisterDriver(py::module_& m) {
  py::class_<ClusterDriver>(m, "_ClusterDriver",
                            "drover run's driver on a thread (internal: use drover.Cluster).")
      .def(py::init([](int num_nodes, int num_ps, std::optional<std::string> master_node,
                       bool eval_node, std::vector<std::string> command, std::string agent_binary,
                       std::string log_dir, double reservation_timeout, double grace,
                       double others_grace, int last_lines, std::string cluster_id,
                       std::optional<py::dict> external_feed, py::object engine,
                       std::set<std::string> local_executors, std::string host, int status_port) {
             DriverOptions options;
             options.cluster.num_nodes = num_nodes;
             options.cluster.num_ps = num_ps;
             options.cluster.master_node = std::move(master_node);
             options.cluster.eval_node = eval_node;
             Check(options.cluster.Validate());
             options.command = std::move(command);
             options.agent_binary = std::move(agent_binary);
             options.log_dir = std::move(log_dir);
             options.reservation_timeout = Ms(reservation_timeout);
             options.grace = Ms(grace);
             options.others_grace = Ms(others_grace);
             options.last_lines = last_lines;
             options.cluster_id = std::move(cluster_id);
             options.status_port = status_port;
             options.live_runs_dir = LiveRunsDir(ProcessEnvironment());
             if (external_feed) options.feed = ExternalPlan(*external_feed);
             // As `drover run`: one agent for every node of the local engine.
             options.host_agent = engine.is_none();
             return std::unique_ptr<ClusterDriver>(
                 new BuiltinClusterDriver(std::move(options), std::move(engine),
                                          std::move(local_executors), std::move(host)));
           }),
           py::arg("num_nodes"), py::arg("num_ps"), py::arg("master_node"), py::arg("eval_node"),
           py::arg("command"), py::arg("agent_binary"), py::arg("log_dir"),
           py::arg("reservation_timeout"), py::arg("grace"), py::arg("others_grace"),
           py::arg("last_lines"), py::arg("cluster_id"), py::arg("external_feed"),
           py::arg("engine"), py::arg("local_executors"), py::arg("host"),
           py::arg("status_port") = -1)
      .def_static(
          "through_etcd",
          [](std::string address, int num_nodes, int num_ps, std::optional<std::string> master_node,
             bool eval_node, std::vector<std::string> command, std::string agent_binary,
             std::string run_dir, double grace, std::optional<py::dict> external_feed,
             std::string host, int status_port, std::optional<double> driver_timeout,
             std::map<std::string, std::string> etcd) {
            EtcdDriverOptions options;
            options.address = std::move(address);
            options.etcd.cluster.num_nodes = num_nodes;
            options.etcd.cluster.num_ps = num_ps;
            options.etcd.cluster.master_node = std::move(master_node);
            options.etcd.cluster.eval_node = eval_node;
            Check(options.etcd.cluster.Validate());
            options.etcd.ca_file = etcd["cacert"];
            options.etcd.cert_file = etcd["cert"];
            options.etcd.key_file = etcd["key"];
            options.etcd.user = etcd["user"];
            options.etcd.password = etcd["password"];
            options.command = std::move(command);
            options.drover_binary = std::move(agent_binary);
            options.run_dir = std::move(run_dir);
            options.host = std::move(host);
            options.grace = Ms(grace);
            options.status_port = status_port;
            options.live_runs_dir = LiveRunsDir(ProcessEnvironment());
            if (driver_timeout) options.driver_timeout = Ms(*driver_timeout);
            if (external_feed) options.feed = ExternalPlan(*external_feed);
            return std::unique_ptr<ClusterDriver>(new EtcdClusterDriver(std::move(options)));
          },
          py::arg("address"), py::arg("num_nodes"), py::arg("num_ps"), py::arg("master_node"),
          py::arg("eval_node"), py::arg("command"), py::arg("agent_binary"), py::arg("run_dir"),
          py::arg("grace"), py::arg("external_feed"), py::arg("host"), py::arg("status_port"),
          py::arg("driver_timeout"), py::arg("etcd"))
      .def("start", &ClusterDriver::Start)
      .def("wait_formed", &ClusterDriver::WaitFormed, py::arg("timeout"))
      .def("join", &ClusterDriver::Join, py::arg("timeout"))
      .def("request_stop", &ClusterDriver::RequestStop)
      .def("set_others_grace", &ClusterDriver::SetOthersGrace, py::arg("seconds"))
      .def_property_readonly("formed", &ClusterDriver::Formed)
      .def_property_readonly("failure", &ClusterDriver::Failure)
      .def_property_readonly("exit_code", &ClusterDriver::ExitCode)
      .def_property_readonly("messages", &ClusterDriver::Messages)
      .def_property_readonly("status_url", &ClusterDriver::StatusUrl)
      .def("status_json", &ClusterDriver::StatusJson);
}

}  // namespace drover::python
