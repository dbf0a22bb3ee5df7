// Shared pieces of the Python bindings: turning Status into the exceptions
// TensorFlow raises, and the registration functions of each binding file.

#ifndef DROVER_PYTHON_BINDINGS_H_
#define DROVER_PYTHON_BINDINGS_H_

#include <pybind11/pybind11.h>

#include "drover/status.h"

namespace drover::python {

// Raises the Python exception for a non-OK status (docs/errors.md).
[[noreturn]] void ThrowStatus(const Status& status);

inline void Check(const Status& status) {
  if (!status.ok()) ThrowStatus(status);
}

template <typename T>
T Unwrap(Result<T> result) {
  if (!result.ok()) ThrowStatus(result.status());
  return std::move(result).value();
}

void RegisterSpec(pybind11::module_& m);
void RegisterResolvers(pybind11::module_& m);
void RegisterRendezvous(pybind11::module_& m);
void RegisterContext(pybind11::module_& m);
void RegisterFeed(pybind11::module_& m);
void RegisterDriver(pybind11::module_& m);
void RegisterPartitionWriter(pybind11::module_& m);

}  // namespace drover::python

#endif  // DROVER_PYTHON_BINDINGS_H_
