// _drover._PartitionWriter: the feeding side of drover.Cluster.train and
// inference (python/drover/_feeding.py). A feeding task on the node's host
// joins the node's external feed and pushes one partition of pickled
// records through the shared-memory queue (src/feed/partition_writer.h);
// every wait runs with the GIL released.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "bindings.h"
#include "feed/partition_writer.h"

namespace py = pybind11;

namespace drover::python {
namespace {

class PyPartitionWriter {
 public:
  PyPartitionWriter(const std::string& socket_path, double connect_timeout, double feed_timeout) {
    feed::PartitionWriterOptions options;
    options.socket_path = socket_path;
    options.connect_timeout = Ms(connect_timeout);
    options.feed_timeout = Ms(feed_timeout);
    Result<std::unique_ptr<feed::PartitionWriter>> connected = [&] {
      py::gil_scoped_release release;
      return feed::PartitionWriter::Connect(options);
    }();
    writer_ = Unwrap(std::move(connected));
  }

  // records: a list of bytes. Returns the results (a list of bytes) in
  // inference, else None.
  py::object Feed(uint32_t partition, uint32_t epoch, const py::list& records, bool inference) {
    Open();
    std::vector<std::string_view> views;
    views.reserve(records.size());
    for (py::handle record : records) {
      if (!PyBytes_Check(record.ptr())) {
        throw py::type_error("feed: records must be bytes, got " +
                             std::string(Py_TYPE(record.ptr())->tp_name));
      }
      // `records` keeps the bytes alive while the GIL is released.
      views.emplace_back(PyBytes_AS_STRING(record.ptr()),
                         static_cast<size_t>(PyBytes_GET_SIZE(record.ptr())));
    }
    std::vector<std::string> results;
    Status status;
    {
      py::gil_scoped_release release;
      status = writer_->Feed(partition, epoch, views, inference ? &results : nullptr);
    }
    Check(status);
    if (!inference) return py::none();
    py::list out(results.size());
    for (size_t i = 0; i < results.size(); ++i) out[i] = py::bytes(results[i]);
    return out;
  }

  void WaitConsumed() {
    Open();
    Status status;
    {
      py::gil_scoped_release release;
      status = writer_->WaitConsumed();
    }
    Check(status);
  }

  void EndFeed() {
    Open();
    Status status;
    {
      py::gil_scoped_release release;
      status = writer_->EndFeed();
    }
    Check(status);
  }

  void Close() { writer_.reset(); }
  bool terminated() {
    Open();
    return writer_->terminated();
  }
  std::string task() {
    Open();
    return writer_->task();
  }

 private:
  void Open() const {
    if (!writer_) throw py::value_error("the partition writer is closed");
  }
  std::unique_ptr<feed::PartitionWriter> writer_;
};

}  // namespace

void RegisterPartitionWriter(py::module_& m) {
  py::class_<PyPartitionWriter>(m, "_PartitionWriter",
                                "Feeds a node's queue from outside its agent (internal: used by\n"
                                "drover.Cluster.train and inference).")
      .def(py::init<const std::string&, double, double>(), py::arg("socket_path"),
           py::arg("connect_timeout") = 30.0, py::arg("feed_timeout") = 600.0)
      .def("feed", &PyPartitionWriter::Feed, py::arg("partition"), py::arg("epoch"),
           py::arg("records"), py::arg("inference") = false)
      .def("wait_consumed", &PyPartitionWriter::WaitConsumed)
      .def("end_feed", &PyPartitionWriter::EndFeed)
      .def("close", &PyPartitionWriter::Close)
      .def_property_readonly("terminated", &PyPartitionWriter::terminated)
      .def_property_readonly("task", &PyPartitionWriter::task);
}

}  // namespace drover::python
