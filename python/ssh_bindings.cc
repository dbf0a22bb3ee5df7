// drover._drover._SSHCluster: the C++ SshCluster (src/ssh/ssh_cluster.h)
// under drover.ssh.SSHCluster, which adds subprocess.Popen, start() and
// terminate() in Python. close() stops the ssh ControlMasters and removes
// their directory early; the destructor does it otherwise.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bindings.h"
#include "ssh/ssh_cluster.h"

namespace py = pybind11;

namespace drover::python {
namespace {

using ssh::SshCluster;

class PySshCluster {
 public:
  PySshCluster(const std::string& path, std::optional<std::string> ssh_config, bool check_host_keys,
               std::vector<std::string> ssh_options, double timeout) {
    SshCluster::Options options;
    if (ssh_config) options.ssh.config_file = *ssh_config;
    options.ssh.check_host_keys = check_host_keys;
    options.ssh.extra_options = std::move(ssh_options);
    options.timeout_s = timeout < 1 ? 1 : static_cast<int>(timeout);
    cluster_ = Unwrap(SshCluster::Create(path, std::move(options), ProcessEnvironment()));
  }

  const SshCluster& get() const {
    if (!cluster_) {
      Check(Status::FailedPrecondition("the SSHCluster is closed"));
    }
    return *cluster_;
  }

  void Close() {
    py::gil_scoped_release release;
    cluster_.reset();
  }
  bool closed() const { return cluster_ == nullptr; }

 private:
  std::unique_ptr<SshCluster> cluster_;
};

}  // namespace

void RegisterSsh(py::module_& m) {
  py::class_<PySshCluster>(m, "_SSHCluster",
                           "The C++ side of drover.ssh.SSHCluster (AutoDist's SSHCluster).")
      .def(py::init<const std::string&, std::optional<std::string>, bool, std::vector<std::string>,
                    double>(),
           py::arg("resource_spec_path"), py::arg("ssh_config") = py::none(),
           py::arg("check_host_keys") = true, py::arg("ssh_options") = std::vector<std::string>{},
           py::arg("timeout") = 300.0)
      .def(
          "is_chief",
          [](const PySshCluster& c, std::optional<std::string> address) {
            return c.get().is_chief(address);
          },
          py::arg("address") = py::none())
      .def(
          "get_address_from_task",
          [](const PySshCluster& c, const std::string& job, int index) {
            return Unwrap(c.get().get_address_from_task(job, index));
          },
          py::arg("job_name"), py::arg("task_index"))
      .def("get_local_address", [](const PySshCluster& c) { return c.get().get_local_address(); })
      .def("get_local_worker_task_index",
           [](const PySshCluster& c) { return Unwrap(c.get().get_local_worker_task_index()); })
      .def("get_local_session_target",
           [](const PySshCluster& c) { return Unwrap(c.get().get_local_session_target()); })
      .def(
          "ssh_argv",
          [](const PySshCluster& c, const std::string& hostname, const std::string& command) {
            return Unwrap(c.get().SshArgvFor(hostname, command));
          },
          py::arg("hostname"), py::arg("command"),
          "argv of `ssh ... HOST -- COMMAND` with this cluster's options and ControlMaster.")
      .def(
          "remote_exec_command",
          [](const PySshCluster& c, const std::vector<std::string>& args,
             const std::string& hostname) {
            return Unwrap(c.get().RemoteExecCommand(args, hostname));
          },
          py::arg("args"), py::arg("hostname"))
      .def(
          "remote_file_write",
          [](const PySshCluster& c, const std::string& remote_path, py::bytes data,
             const std::string& hostname) {
            const SshCluster& cluster = c.get();
            std::string bytes = data;
            Status status;
            {
              py::gil_scoped_release release;
              status = cluster.RemoteFileWrite(remote_path, bytes, hostname);
            }
            Check(status);
          },
          py::arg("remote_path"), py::arg("data"), py::arg("hostname"))
      .def(
          "remote_copy",
          [](const PySshCluster& c, const std::string& local_path, const std::string& remote_path,
             const std::string& hostname) {
            const SshCluster& cluster = c.get();
            Status status;
            {
              py::gil_scoped_release release;
              status = cluster.RemoteCopy(local_path, remote_path, hostname);
            }
            Check(status);
          },
          py::arg("local_path"), py::arg("remote_path"), py::arg("hostname"))
      .def_property_readonly("addresses", [](const PySshCluster& c) { return c.get().addresses(); })
      .def_property_readonly(
          "control_dir", [](const PySshCluster& c) { return c.get().ssh_options().control_dir; })
      .def_property_readonly("closed", &PySshCluster::closed)
      .def("close", &PySshCluster::Close);
}

}  // namespace drover::python
