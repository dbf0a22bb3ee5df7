// The _drover extension module; the public package is python/drover/__init__.py.
#include <pybind11/pybind11.h>

#include "bindings.h"

namespace drover::python {

void RegisterSsh(pybind11::module_& m);  // ssh_bindings.cc

void ThrowStatus(const Status& status) {
  PyObject* type = PyExc_RuntimeError;
  switch (status.code()) {
    case Status::Code::kInvalidArgument:
    case Status::Code::kNotFound:
      type = PyExc_ValueError;
      break;
    case Status::Code::kWrongType:
      type = PyExc_TypeError;
      break;
    case Status::Code::kAlreadyExists:
      type = PyExc_KeyError;
      break;
    case Status::Code::kDeadlineExceeded:
      type = PyExc_TimeoutError;
      break;
    case Status::Code::kPermissionDenied:
      type = PyExc_PermissionError;
      break;
    case Status::Code::kIoError:
      type = PyExc_OSError;
      break;
    default:
      break;
  }
  PyErr_SetString(type, status.message().c_str());
  throw pybind11::error_already_set();
}

}  // namespace drover::python

PYBIND11_MODULE(_drover, m) {
  m.doc() =
      "drover's C++ core: ClusterSpec, cluster resolvers, framework environments, node context.";
  drover::python::RegisterSpec(m);
  drover::python::RegisterResolvers(m);
  drover::python::RegisterRendezvous(m);
  drover::python::RegisterContext(m);
  drover::python::RegisterFeed(m);
  drover::python::RegisterDriver(m);
  drover::python::RegisterPartitionWriter(m);
  drover::python::RegisterSsh(m);
  drover::python::RegisterReport(m);
}
