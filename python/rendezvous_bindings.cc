// drover.ClusterToken, drover.Credential, drover.RendezvousServer,
// drover.RendezvousClient:
// forming a cluster from Python (a hand-launched node, a test, a notebook).
// Blocking calls release the GIL and take `timeout` in seconds.
#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <unistd.h>

#include "bindings.h"
#include "drover/rendezvous.h"

namespace py = pybind11;

namespace drover::python {
namespace {

Deadline After(double seconds) {
  return Clock::now() +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

}  // namespace

py::dict NodeDict(const NodeInfo& node) {
  py::dict out;
  out["executor_id"] = node.executor_id;
  out["host"] = node.host;
  out["ports"] = node.ports;
  out["pid"] = node.pid;
  out["gpus"] = node.gpus;
  out["agent_address"] = node.agent_address;
  out["feed_socket"] = node.feed_socket;
  out["job_name"] = node.job_name;
  out["task_index"] = node.task_index;
  return out;
}

namespace {

py::dict ClusterDict(const FormedCluster& cluster) {
  py::list nodes;
  for (const NodeInfo& node : cluster.nodes) nodes.append(NodeDict(node));
  py::dict out;
  out["cluster_id"] = cluster.cluster_id;
  out["cluster_spec"] = cluster.spec;
  out["nodes"] = nodes;
  // Without the node list (node_list="never", or "auto" past the server's
  // limit) `nodes` holds this node alone and cluster_spec is empty.
  out["node_count"] = cluster.node_count;
  out["has_node_list"] = cluster.has_node_list;
  // The receiving node's own place; "" and -1 on the driver.
  const Placement* own = cluster.own();
  out["job_name"] = own != nullptr ? own->job : std::string();
  out["task_index"] = own != nullptr ? own->index : -1;
  return out;
}

py::dict StateDict(const ClusterState& state) {
  py::list nodes;
  for (const NodeStatus& status : state.nodes) {
    py::dict node = NodeDict(status.node);
    node["alive"] = status.alive;
    node["left"] = status.left;  // finished and said so: not alive, not dead
    node["last_heartbeat_age"] = status.last_heartbeat_age.count() / 1000.0;
    node["error"] = status.error;
    node["last_log_lines"] = status.last_log_lines;
    nodes.append(node);
  }
  py::dict out;
  out["phase"] = state.phase;
  out["registered"] = state.registered;
  out["expected"] = state.expected;
  out["nodes"] = nodes;
  return out;
}

// A node this process registers (its pid is this process's).
NodeInfo LocalNode(std::string executor_id, std::string host, std::vector<uint32_t> ports,
                   std::vector<int32_t> gpus, std::string agent_address) {
  NodeInfo node;
  node.executor_id = std::move(executor_id);
  node.host = std::move(host);
  node.ports = std::move(ports);
  node.pid = static_cast<int32_t>(::getpid());
  node.gpus = std::move(gpus);
  node.agent_address = std::move(agent_address);
  return node;
}

template <typename T, typename F>
T WithoutGil(F&& call) {
  Result<T> result = [&] {
    py::gil_scoped_release release;
    return call();
  }();
  return Unwrap(std::move(result));
}

void BindToken(py::module_& m) {
  py::class_<ClusterToken>(m, "ClusterToken", "The 32-byte secret every node of a cluster shares.")
      .def_static("generate", [] { return Unwrap(ClusterToken::Generate()); })
      .def_static(
          "read_file", [](const std::string& path) { return Unwrap(ClusterToken::ReadFile(path)); },
          py::arg("path"))
      .def_static(
          "from_hex", [](const std::string& hex) { return Unwrap(ClusterToken::FromHex(hex)); },
          py::arg("hex"))
      .def(
          "write_file",
          [](const ClusterToken& token, const std::string& path) { Check(token.WriteFile(path)); },
          py::arg("path"), "Writes the token as hex into a file of mode 0600.")
      .def(
          "node_credential",
          [](const ClusterToken& token, const std::string& executor_id) {
            return Unwrap(Credential::ForNode(token, executor_id));
          },
          py::arg("executor_id"),
          "The credential with which executor_id's node, and only it, joins the cluster: it "
          "registers that slot alone and cannot stop other nodes (docs/security.md).")
      .def(
          "status_key",
          [](const ClusterToken& token) { return Unwrap(Credential::ForStatus(token)); },
          "The status server's bearer token, which reads the status and nothing else.");

  py::class_<Credential>(m, "Credential",
                         "What a client authenticates with: the cluster token, or a credential "
                         "derived from it for one purpose (ClusterToken.node_credential). Its "
                         "text is one line: 64 hex characters (the cluster token), "
                         "'drover-node-v1 ID HEX' or 'drover-status-v1-HEX'.")
      .def(py::init([](const ClusterToken& token) { return Credential::Cluster(token); }),
           py::arg("token"))
      .def_static(
          "read_file", [](const std::string& path) { return Unwrap(Credential::ReadFile(path)); },
          py::arg("path"), "Reads a credential file; refuses one others may read.")
      .def_static(
          "parse", [](const std::string& text) { return Unwrap(Credential::Parse(text)); },
          py::arg("text"))
      .def(
          "write_file",
          [](const Credential& credential, const std::string& path) {
            Check(credential.WriteFile(path));
          },
          py::arg("path"), "Writes the credential's text into a file of mode 0600.")
      .def("to_text", &Credential::ToText)
      .def_property_readonly("kind",
                             [](const Credential& credential) {
                               switch (credential.kind) {
                                 case Credential::Kind::kCluster:
                                   return "cluster";
                                 case Credential::Kind::kNode:
                                   return "node";
                                 case Credential::Kind::kStatus:
                                   return "status";
                               }
                               return "unknown";
                             })
      .def_property_readonly("executor_id",
                             [](const Credential& credential) { return credential.executor_id; })
      .def("__repr__", [](const Credential& credential) {
        return "<drover.Credential: " + credential.Describe() + ">";  // never the key
      });
  // Wherever a credential is taken, the cluster token is one.
  py::implicitly_convertible<ClusterToken, Credential>();
}

void BindServer(py::module_& m) {
  py::class_<RendezvousServer>(m, "RendezvousServer",
                               "The reservation server: waits for num_nodes registrations and "
                               "hands every node the cluster.")
      .def(py::init([](int num_nodes, const ClusterToken& token, int num_ps,
                       std::optional<std::string> master_node, bool eval_node,
                       const std::string& bind_address, int port, double reservation_timeout,
                       double heartbeat_interval) {
             RendezvousServerOptions options;
             options.cluster = {num_nodes, num_ps, std::move(master_node), eval_node};
             options.token = token;
             options.bind_address = bind_address;
             options.port = static_cast<uint16_t>(port);
             options.reservation_timeout = Ms(reservation_timeout);
             options.heartbeat_interval = Ms(heartbeat_interval);
             Check(options.cluster.Validate());
             return Unwrap(RendezvousServer::Start(std::move(options)));
           }),
           py::arg("num_nodes"), py::arg("token"), py::arg("num_ps") = 0,
           py::arg("master_node") = py::none(), py::arg("eval_node") = false,
           py::arg("bind_address") = "127.0.0.1", py::arg("port") = 0,
           py::arg("reservation_timeout") = 600.0, py::arg("heartbeat_interval") = 1.0)
      .def_property_readonly("port", &RendezvousServer::port)
      .def(
          "wait_for_cluster",
          [](RendezvousServer& server, double timeout) {
            return ClusterDict(
                WithoutGil<FormedCluster>([&] { return server.WaitForCluster(After(timeout)); }));
          },
          py::arg("timeout") = 600.0)
      .def("query_state", [](RendezvousServer& server) { return StateDict(server.QueryState()); })
      .def("stop_node", [](RendezvousServer& server,
                           const std::string& executor_id) { Check(server.StopNode(executor_id)); })
      .def("stop_all", &RendezvousServer::StopAll)
      .def("shutdown", &RendezvousServer::Shutdown, py::call_guard<py::gil_scoped_release>());
}

void BindClient(py::module_& m) {
  py::class_<RendezvousClient>(m, "RendezvousClient",
                               "One node's authenticated connection to the rendezvous server.")
      .def(py::init([](const std::string& address, const Credential& token, const std::string& name,
                       double timeout, const std::string& node_list,
                       std::vector<Credential> host_credentials) {
             RendezvousClientOptions options;
             options.address = address;
             options.credential = token;
             options.host_credentials = std::move(host_credentials);
             options.name = name;
             options.node_list = Unwrap(ParseNodeList(node_list));
             return WithoutGil<std::unique_ptr<RendezvousClient>>(
                 [&] { return RendezvousClient::Connect(std::move(options), After(timeout)); });
           }),
           py::arg("address"), py::arg("token"), py::arg("name") = "", py::arg("timeout") = 60.0,
           py::arg("node_list") = "auto", py::arg("host_credentials") = std::vector<Credential>{})
      .def(
          "register",
          [](RendezvousClient& client, const std::string& executor_id, const std::string& host,
             std::vector<uint32_t> ports, std::vector<int32_t> gpus,
             const std::string& agent_address, double timeout) {
            NodeInfo node =
                LocalNode(executor_id, host, std::move(ports), std::move(gpus), agent_address);
            return ClusterDict(
                WithoutGil<FormedCluster>([&] { return client.Register(node, After(timeout)); }));
          },
          py::arg("executor_id"), py::arg("host"), py::arg("ports"),
          py::arg("gpus") = std::vector<int32_t>{}, py::arg("agent_address") = "",
          py::arg("timeout") = 600.0)
      .def(
          "register_host",
          [](RendezvousClient& client, const std::vector<py::dict>& nodes, double timeout) {
            std::vector<NodeInfo> infos;
            for (const py::dict& entry : nodes) {
              infos.push_back(LocalNode(
                  entry["executor_id"].cast<std::string>(), entry["host"].cast<std::string>(),
                  entry["ports"].cast<std::vector<uint32_t>>(),
                  entry.contains("gpus") ? entry["gpus"].cast<std::vector<int32_t>>()
                                         : std::vector<int32_t>{},
                  entry.contains("agent_address") ? entry["agent_address"].cast<std::string>()
                                                  : std::string()));
            }
            std::vector<FormedCluster> formed = WithoutGil<std::vector<FormedCluster>>(
                [&] { return client.RegisterHost(infos, After(timeout)); });
            py::list views;
            for (const FormedCluster& view : formed) views.append(ClusterDict(view));
            return views;
          },
          py::arg("nodes"), py::arg("timeout") = 600.0,
          "A host's agent: registers each of `nodes` (dicts with executor_id, host, ports, and "
          "optionally gpus and agent_address) on this one connection; returns each node's "
          "cluster, in the order given. Needs the cluster token, or each node's credential: the "
          "one the client was made with and the others in its host_credentials.")
      .def(
          "leave_node",
          [](RendezvousClient& client, const std::string& executor_id) {
            Check(client.LeaveNode(executor_id));
          },
          py::arg("executor_id"))
      .def("start_heartbeats",
           [](RendezvousClient& client, double interval) { client.StartHeartbeats(Ms(interval)); })
      .def("start_host_heartbeats",
           [](RendezvousClient& client, double interval) {
             Check(client.StartHostHeartbeats(Ms(interval)));
           })
      .def(
          "report_error",
          [](RendezvousClient& client, const std::string& executor_id, const std::string& message,
             const std::vector<std::string>& lines) {
            Check(client.ReportError(executor_id, message, lines));
          },
          py::arg("executor_id"), py::arg("message"),
          py::arg("last_log_lines") = std::vector<std::string>{})
      .def(
          "query_state",
          [](RendezvousClient& client, double timeout) {
            return StateDict(
                WithoutGil<ClusterState>([&] { return client.QueryState(After(timeout)); }));
          },
          py::arg("timeout") = 10.0)
      .def("stop_all", [](RendezvousClient& client) { Check(client.StopAll()); })
      .def(
          "wait_for_stop",
          [](RendezvousClient& client, double timeout) {
            return WithoutGil<bool>([&] { return client.WaitForStop(After(timeout)); });
          },
          py::arg("timeout"))
      .def(
          "set",
          [](RendezvousClient& client, const std::string& key, const py::bytes& value,
             double timeout) {
            std::string bytes = value;
            Status status;
            {
              py::gil_scoped_release release;
              status = client.Set(key, bytes, After(timeout));
            }
            Check(status);
          },
          py::arg("key"), py::arg("value"), py::arg("timeout") = 10.0)
      .def(
          "get",
          [](RendezvousClient& client, const std::string& key, double timeout) -> py::object {
            auto value = WithoutGil<std::optional<std::string>>(
                [&] { return client.Get(key, After(timeout)); });
            if (!value) return py::none();
            return py::bytes(*value);
          },
          py::arg("key"), py::arg("timeout") = 10.0)
      .def(
          "add",
          [](RendezvousClient& client, const std::string& key, int64_t delta, double timeout) {
            return WithoutGil<int64_t>([&] { return client.Add(key, delta, After(timeout)); });
          },
          py::arg("key"), py::arg("delta"), py::arg("timeout") = 10.0)
      .def(
          "wait",
          [](RendezvousClient& client, const std::vector<std::string>& keys, double timeout) {
            Status status;
            {
              py::gil_scoped_release release;
              status = client.Wait(keys, After(timeout));
            }
            Check(status);
          },
          py::arg("keys"), py::arg("timeout") = 300.0)
      .def(
          "compare_set",
          [](RendezvousClient& client, const std::string& key, const py::bytes& expected,
             const py::bytes& desired, double timeout) {
            std::string expected_bytes = expected;
            std::string desired_bytes = desired;
            return py::bytes(WithoutGil<std::string>([&] {
              return client.CompareSet(key, expected_bytes, desired_bytes, After(timeout));
            }));
          },
          py::arg("key"), py::arg("expected"), py::arg("desired"), py::arg("timeout") = 10.0)
      .def(
          "delete",
          [](RendezvousClient& client, const std::string& key, double timeout) {
            return WithoutGil<bool>([&] { return client.Delete(key, After(timeout)); });
          },
          py::arg("key"), py::arg("timeout") = 10.0);
}

}  // namespace

void RegisterRendezvous(py::module_& m) {
  BindToken(m);
  BindServer(m);
  BindClient(m);
}

}  // namespace drover::python
