// drover.report(step=None, **metrics) and drover.flush_reports(): the Python
// face of include/drover/report.h.
#include <pybind11/pybind11.h>

#include <string>
#include <utility>
#include <vector>

#include "bindings.h"
#include "drover/report.h"

namespace py = pybind11;

namespace drover::python {
namespace {

// Any number Python can turn into a float: int, float, bool, NumPy and
// PyTorch scalars (a one-element tensor's __float__).
double MetricNumber(const std::string& name, const py::handle& value) {
  if (PyUnicode_Check(value.ptr()) || PyBytes_Check(value.ptr())) {
    throw py::type_error("drover.report: metric '" + name + "' must be a number, not " +
                         std::string(py::str(value.get_type().attr("__name__"))));
  }
  double number = PyFloat_AsDouble(value.ptr());
  if (number == -1.0 && PyErr_Occurred()) {
    PyErr_Clear();
    throw py::type_error("drover.report: metric '" + name + "' must be a number, not " +
                         std::string(py::str(value.get_type().attr("__name__"))));
  }
  return number;
}

void ReportFromPython(const py::object& step, const py::kwargs& metrics) {
  std::optional<int64_t> step_value;
  if (!step.is_none()) {
    if (PyFloat_Check(step.ptr())) throw py::type_error("drover.report: step must be an int");
    step_value = step.cast<int64_t>();
  }
  std::vector<std::pair<std::string, double>> values;
  values.reserve(metrics.size());
  for (const auto& [key, value] : metrics) {
    std::string name = key.cast<std::string>();
    double number = MetricNumber(name, value);
    values.emplace_back(std::move(name), number);
  }
  Check(Report(step_value, values));
}

}  // namespace

void RegisterReport(py::module_& m) {
  m.def("report", &ReportFromPython, py::arg("step") = py::none(),
        "report(step=None, **metrics)\n\n"
        "Tells the run how training goes: each keyword a metric's latest value\n"
        "(a number), at `step` (an int; None: the chart uses time). Shown on the\n"
        "status page, the progress line, /metrics and run.json. Costs about a\n"
        "microsecond and never blocks on I/O: values are sent to the node's agent\n"
        "every 250 ms. Outside drover it does nothing. ValueError for a bad name\n"
        "(1-64 characters of A-Z a-z 0-9 _ . : / -) or past 64 metrics.");
  m.def("flush_reports", &FlushReports,
        "Sends the reported values now, without waiting for the next 250 ms tick.");
  m.def("reports_enabled", &ReportsEnabled,
        "True when reports go somewhere: the program runs under a drover agent.");
}

}  // namespace drover::python
