// drover.ClusterSpec: tf.train.ClusterSpec's Python behaviour over the C++ type.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bindings.h"
#include "drover/cluster_spec.h"

namespace py = pybind11;

namespace drover::python {
namespace {

[[noreturn]] void RaiseTypeError(const std::string& message) {
  throw py::type_error(message);
}

std::string Repr(py::handle value) {
  return py::repr(value).cast<std::string>();
}

// TensorFlow's compat.as_bytes: str and bytes are accepted, nothing else.
std::string TextOf(py::handle value, const char* what) {
  if (py::isinstance<py::str>(value)) return value.cast<std::string>();
  if (py::isinstance<py::bytes>(value)) return value.cast<std::string>();
  RaiseTypeError(std::string(what) + " " + Repr(value) + " must be bytes or unicode");
}

int IndexOf(py::handle key) {
  // TensorFlow calls int() on sparse keys, so "1" is task 1 and "x" a ValueError.
  long long index = py::int_(py::reinterpret_borrow<py::object>(key)).cast<long long>();
  if (index < 0 || index > INT32_MAX) {
    throw py::value_error("Task index " + std::to_string(index) + " must be in [0, 2**31)");
  }
  return static_cast<int>(index);
}

ClusterSpec FromDict(const py::dict& cluster) {
  ClusterSpec spec;
  for (auto [job_obj, tasks] : cluster) {
    std::string job = TextOf(job_obj, "Job name");
    ClusterSpec::TaskMap task_map;
    if (py::isinstance<py::list>(tasks) || py::isinstance<py::tuple>(tasks)) {
      int index = 0;
      for (py::handle address : tasks) task_map[index++] = TextOf(address, "Task address");
    } else if (py::isinstance<py::dict>(tasks)) {
      for (auto [key, address] : tasks.cast<py::dict>()) {
        task_map[IndexOf(key)] = TextOf(address, "Task address");
      }
    } else {
      RaiseTypeError("The tasks for job " + Repr(job_obj) +
                     " must be a list or a dictionary from integers to strings.");
    }
    Check(spec.AddSparseJob(std::move(job), std::move(task_map)));
  }
  return spec;
}

ClusterSpec FromPython(const py::object& cluster) {
  if (py::isinstance<ClusterSpec>(cluster)) return cluster.cast<ClusterSpec>();
  if (py::isinstance<py::dict>(cluster)) return FromDict(cluster.cast<py::dict>());
  // A real tf.train.ClusterDef (or any protobuf message of that shape).
  if (py::hasattr(cluster, "SerializeToString") && py::hasattr(cluster, "job")) {
    std::string bytes = cluster.attr("SerializeToString")().cast<std::string>();
    return Unwrap(ClusterSpec::FromClusterDef(bytes));
  }
  RaiseTypeError(
      "`cluster` must be a dictionary mapping one or more job names to lists of network "
      "addresses, or a `ClusterDef` protocol buffer");
}

py::object JobAsPython(const ClusterSpec& spec, const std::string& job) {
  ClusterSpec::TaskMap tasks = Unwrap(spec.job_task_map(job));
  if (spec.is_dense(job)) {
    py::list dense;
    for (const auto& [index, address] : tasks) dense.append(address);
    return dense;
  }
  py::dict sparse;
  for (const auto& [index, address] : tasks) sparse[py::int_(index)] = address;
  return sparse;
}

py::dict AsDict(const ClusterSpec& spec) {
  py::dict out;
  for (const std::string& job : spec.jobs()) out[py::str(job)] = JobAsPython(spec, job);
  return out;
}

}  // namespace

void RegisterSpec(py::module_& m) {
  py::class_<ClusterSpec>(m, "ClusterSpec",
                          "Represents a cluster as a set of tasks, organized into jobs.\n\n"
                          "Same behaviour as tf.train.ClusterSpec: each job is a list of\n"
                          "addresses or a sparse {task_index: address} dict.")
      .def(py::init([](const py::object& cluster) { return FromPython(cluster); }),
           py::arg("cluster"))
      .def_static(
          "from_cluster_def",
          [](const py::bytes& data) { return Unwrap(ClusterSpec::FromClusterDef(data)); },
          py::arg("cluster_def"), "Parses a serialized tensorflow.ClusterDef.")
      .def_static(
          "from_json", [](const std::string& text) { return Unwrap(ClusterSpec::FromJson(text)); },
          py::arg("text"), "Parses the JSON form (the 'cluster' of TF_CONFIG).")
      .def("as_dict", &AsDict, "Job name -> list of addresses (dense) or {index: address}.")
      .def(
          "as_cluster_def", [](const ClusterSpec& spec) { return py::bytes(spec.AsClusterDef()); },
          "The serialized tensorflow.ClusterDef (deterministic bytes).")
      .def("to_json", &ClusterSpec::ToJson, py::arg("indent") = -1)
      .def_property_readonly("jobs", &ClusterSpec::jobs, "The job names, in insertion order.")
      .def(
          "num_tasks",
          [](const ClusterSpec& spec, const std::string& job) {
            return Unwrap(spec.num_tasks(job));
          },
          py::arg("job_name"))
      .def(
          "task_indices",
          [](const ClusterSpec& spec, const std::string& job) {
            return Unwrap(spec.task_indices(job));
          },
          py::arg("job_name"))
      .def(
          "task_address",
          [](const ClusterSpec& spec, const std::string& job, int index) {
            return Unwrap(spec.task_address(job, index));
          },
          py::arg("job_name"), py::arg("task_index"))
      .def(
          "job_tasks",
          [](const ClusterSpec& spec, const std::string& job) {
            return Unwrap(spec.job_tasks(job));
          },
          py::arg("job_name"), "Addresses by task index, None where a sparse job has a gap.")
      .def("__bool__", [](const ClusterSpec& spec) { return !spec.empty(); })
      .def("__eq__",
           [](const ClusterSpec& a, const py::object& b) {
             return py::isinstance<ClusterSpec>(b) && a == b.cast<ClusterSpec>();
           })
      .def("__ne__",
           [](const ClusterSpec& a, const py::object& b) {
             return !(py::isinstance<ClusterSpec>(b) && a == b.cast<ClusterSpec>());
           })
      .def("__repr__", &ClusterSpec::DebugString)
      .def("__str__", &ClusterSpec::DebugString)
      .def(py::pickle([](const ClusterSpec& spec) { return py::bytes(spec.ToJson()); },
                      [](const py::bytes& state) {
                        return Unwrap(ClusterSpec::FromJson(state.cast<std::string>()));
                      }))
      .attr("__hash__") = py::none();
}

}  // namespace drover::python
