// drover.NodeContext: a program's place in the cluster, read from the context
// file `drover agent` writes (docs/run.md). drover.context() (in
// python/drover/__init__.py) finds the file through DROVER_CONTEXT_FILE.
// The attribute names are TensorFlowOnSpark's TFNodeContext ones; release_port() and
// tmp_socket are added in Python (python/drover/__init__.py), which holds the port.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bindings.h"
#include "drover/node_context.h"

namespace py = pybind11;

namespace drover::python {

void RegisterContext(py::module_& m) {
  py::class_<NodeContext>(m, "NodeContext",
                          "A node's place in the cluster (TensorFlowOnSpark's TFNodeContext).\n\n"
                          "Inside a program started by `drover run` or `drover agent`, get it\n"
                          "with drover.context(). Read-only: it describes the cluster as formed.")
      .def_static(
          "load_file", [](const std::string& path) { return Unwrap(NodeContext::LoadFile(path)); },
          py::arg("path"), "Reads a context file; ValueError when it is missing or malformed.")
      .def_static(
          "from_json", [](const std::string& json) { return Unwrap(NodeContext::FromJson(json)); },
          py::arg("json"))
      .def("to_json", &NodeContext::ToJson, py::arg("indent") = -1)
      .def_readonly("executor_id", &NodeContext::executor_id)
      .def_readonly("job_name", &NodeContext::job_name)
      .def_readonly("task_index", &NodeContext::task_index)
      .def_readonly("cluster_spec", &NodeContext::cluster_spec)
      .def_readonly("cluster_id", &NodeContext::cluster_id)
      .def_readonly("port", &NodeContext::port)
      .def_readonly("ports", &NodeContext::ports)
      .def_readonly("default_fs", &NodeContext::default_fs)
      .def_readonly("defaultFS", &NodeContext::default_fs, "TensorFlowOnSpark's spelling.")
      .def_readonly("working_dir", &NodeContext::working_dir)
      .def_readonly("log_dir", &NodeContext::log_dir)
      .def_readonly("restart_count", &NodeContext::restart_count)
      .def_readonly("restart_reason", &NodeContext::restart_reason,
                    "Why the group was re-formed, e.g. 'worker:1 on 10.0.0.2: killed by\n"
                    "SIGKILL'; '' in the first round.")
      .def_readonly("num_workers", &NodeContext::num_workers)
      .def_readonly("is_chief", &NodeContext::is_chief)
      .def(
          "absolute_path",
          [](const NodeContext& ctx, const py::object& path) {
            // str or os.PathLike, as os.path functions take.
            return ctx.absolute_path(
                py::module_::import("os").attr("fspath")(path).cast<std::string>());
          },
          py::arg("path"),
          "A path with a scheme is returned as is; an absolute path gets default_fs in\n"
          "front; a relative one is resolved against default_fs + working_dir.")
      .def("__repr__", [](const NodeContext& ctx) {
        return "NodeContext(executor_id='" + ctx.executor_id + "', job_name='" + ctx.job_name +
               "', task_index=" + std::to_string(ctx.task_index) +
               ", port=" + std::to_string(ctx.port) + ")";
      });
}

}  // namespace drover::python
