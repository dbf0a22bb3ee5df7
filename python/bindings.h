// Shared pieces of the Python bindings: turning Status into the exceptions
// TensorFlow raises, and the registration functions of each binding file.

#ifndef DROVER_PYTHON_BINDINGS_H_
#define DROVER_PYTHON_BINDINGS_H_

#include <pybind11/pybind11.h>

#include <chrono>
#include <cstdint>

#include "drover/rendezvous.h"
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

// Python's seconds (a float) as the milliseconds the C++ API takes.
inline std::chrono::milliseconds Ms(double seconds) {
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

// A NodeInfo as the dict the Python API hands out.
pybind11::dict NodeDict(const NodeInfo& node);

void RegisterSpec(pybind11::module_& m);
void RegisterResolvers(pybind11::module_& m);
void RegisterRendezvous(pybind11::module_& m);
void RegisterContext(pybind11::module_& m);
void RegisterFeed(pybind11::module_& m);
void RegisterDriver(pybind11::module_& m);
void RegisterPartitionWriter(pybind11::module_& m);
void RegisterReport(pybind11::module_& m);

}  // namespace drover::python

#endif  // DROVER_PYTHON_BINDINGS_H_
