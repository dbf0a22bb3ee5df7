// drover.DataFeed: TensorFlowOnSpark's TFNode.DataFeed over drover::DataFeed,
// for programs started by `drover run --input ...` (docs/feed.md).
//
// next_batch returns the records as bytes, or, given a schema or an
// input_mapping, a dict of NumPy arrays that feed::DecodeColumns fills with
// the GIL released: no Python object per record on that path. The schema and
// the mapping are checked when the feed is made; how they map onto records
// depends on the run's --format, so the layout is fixed once connected.
//
// drover::DataFeed is not thread-safe and next_batch releases the GIL while it
// waits, so a mutex serializes the calls into it; it is only ever locked with
// the GIL released.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "bindings.h"
#include "common/mutex.h"
#include "drover/data_feed.h"
#include "feed/columns.h"
#include "feed/record_io.h"
#include "feed/share_layout.h"

namespace py = pybind11;

namespace drover::python {
namespace {

constexpr char kDTypeNames[] = "float32, float64, int32, int64 or uint8";

std::string Repr(py::handle value) {
  return py::repr(value).cast<std::string>();
}

// ---- schema and input_mapping, as given from Python ----

feed::DType DTypeOf(py::handle dtype, const std::string& field_name) {
  const std::string where = "schema field '" + field_name + "': ";
  if (py::isinstance<py::str>(dtype)) {
    Result<feed::DType> parsed = feed::ParseDType(dtype.cast<std::string>());
    if (parsed.ok()) return *parsed;
  }
  // NumPy's np.dtype() also reads np.float32, np.dtype('<f4') and "f4";
  // None would silently mean float64 there.
  py::object numpy_dtype;
  if (!dtype.is_none()) {
    try {
      numpy_dtype = py::module_::import("numpy").attr("dtype")(dtype);
    } catch (py::error_already_set& e) {
      if (!e.matches(PyExc_TypeError) && !e.matches(PyExc_ValueError)) throw;
    }
  }
  if (!numpy_dtype) {
    if (py::isinstance<py::str>(dtype)) {
      throw py::value_error(where + "unknown dtype " + Repr(dtype) + ": expected " + kDTypeNames);
    }
    throw py::type_error(where + "dtype must be a NumPy dtype or its name (" + kDTypeNames +
                         "), got " + Repr(dtype));
  }
  if (!numpy_dtype.attr("isnative").cast<bool>()) {
    throw py::value_error(where + "dtype " + Repr(numpy_dtype) +
                          " is not in native byte order; records are decoded as little-endian");
  }
  Result<feed::DType> parsed = feed::ParseDType(numpy_dtype.attr("name").cast<std::string>());
  if (!parsed.ok()) throw py::value_error(where + parsed.status().message());
  return *parsed;
}

size_t WidthOf(py::handle width, const std::string& field_name) {
  const std::string where = "schema field '" + field_name + "': ";
  if (py::isinstance<py::bool_>(width) || !PyIndex_Check(width.ptr())) {
    throw py::type_error(where + "width must be an int, got " + Repr(width));
  }
  long long value = py::reinterpret_steal<py::int_>(PyNumber_Index(width.ptr())).cast<long long>();
  if (value < 1) {
    throw py::value_error(where + "width must be at least 1, got " + std::to_string(value));
  }
  return static_cast<size_t>(value);
}

std::string FieldNameOf(py::handle name) {
  if (!py::isinstance<py::str>(name)) {
    throw py::type_error("schema field names must be str, got " + Repr(name));
  }
  return name.cast<std::string>();
}

bool IsSequence(py::handle value) {
  return py::isinstance<py::list>(value) || py::isinstance<py::tuple>(value);
}

// [(name, dtype), (name, dtype, width), ...] or {name: dtype or (dtype, width)}.
std::vector<feed::Field> ParseSchema(py::handle schema) {
  std::vector<feed::Field> fields;
  auto add = [&](std::string name, py::handle dtype, py::handle width) {
    feed::Field field;
    field.dtype = DTypeOf(dtype, name);
    field.width = width ? WidthOf(width, name) : 1;
    field.name = std::move(name);
    fields.push_back(std::move(field));
  };
  if (py::isinstance<py::dict>(schema)) {
    for (auto [key, value] : schema.cast<py::dict>()) {
      std::string name = FieldNameOf(key);
      if (IsSequence(value)) {
        py::sequence spec = value.cast<py::sequence>();
        if (spec.size() != 2) {
          throw py::value_error("schema field '" + name +
                                "': expected dtype or (dtype, width), got " + Repr(value));
        }
        add(std::move(name), spec[0], spec[1]);
      } else {
        add(std::move(name), value, py::handle());
      }
    }
  } else if (IsSequence(schema)) {
    for (py::handle item : schema) {
      if (!IsSequence(item) || (py::len(item) != 2 && py::len(item) != 3)) {
        throw py::type_error(
            "schema entries must be (name, dtype) or (name, dtype, width) tuples, got " +
            Repr(item));
      }
      py::sequence spec = py::reinterpret_borrow<py::sequence>(item);
      add(FieldNameOf(spec[0]), spec[1], spec.size() == 3 ? py::handle(spec[2]) : py::handle());
    }
  } else {
    throw py::type_error(
        "schema must be a list of (name, dtype[, width]) tuples or a dict {name: dtype or (dtype, "
        "width)}, got " +
        Repr(schema));
  }
  if (fields.empty()) throw py::value_error("schema has no fields");
  std::set<std::string_view> names;
  for (const feed::Field& field : fields) {
    if (!names.insert(field.name).second) {
      throw py::value_error("schema names field '" + field.name + "' twice");
    }
  }
  return fields;
}

struct MappingEntry {
  std::string source;  // a schema field, a JSONL key or a CSV column index
  std::string output;  // the key in next_batch's dict
};

// TensorFlowOnSpark's input_mapping: {source: output_name}.
std::vector<MappingEntry> ParseInputMapping(py::handle mapping) {
  if (!py::isinstance<py::dict>(mapping)) {
    throw py::type_error("input_mapping must be a dict {source: output_name}, got " +
                         Repr(mapping));
  }
  std::vector<MappingEntry> entries;
  std::set<std::string> outputs;
  for (auto [key, value] : mapping.cast<py::dict>()) {
    MappingEntry entry;
    if (py::isinstance<py::str>(key)) {
      entry.source = key.cast<std::string>();
    } else if (py::isinstance<py::int_>(key) && !py::isinstance<py::bool_>(key)) {
      long long column = key.cast<long long>();
      if (column < 0) {
        throw py::value_error("input_mapping: column " + std::to_string(column) + " is negative");
      }
      entry.source = std::to_string(column);
    } else {
      throw py::type_error("input_mapping keys must be str or int (a CSV column), got " +
                           Repr(key));
    }
    if (!py::isinstance<py::str>(value)) {
      throw py::type_error("input_mapping values must be str (output names), got " + Repr(value));
    }
    entry.output = value.cast<std::string>();
    if (!outputs.insert(entry.output).second) {
      throw py::value_error("input_mapping names output '" + entry.output + "' twice");
    }
    entries.push_back(std::move(entry));
  }
  if (entries.empty()) throw py::value_error("input_mapping is empty");
  return entries;
}

// ---- what next_batch decodes, once the format is known ----

struct BatchLayout {
  // Decoded by DecodeColumns into one array each.
  std::vector<feed::Field> fields;
  // Returned: (index into fields, key), in the order of the mapping or schema.
  // Binary records are decoded whole, so a mapping may leave fields out here.
  std::vector<std::pair<size_t, std::string>> outputs;
};

bool IsBinary(feed::RecordFormat format) {
  return format == feed::RecordFormat::kRaw || format == feed::RecordFormat::kTfRecord;
}

bool IsColumnIndex(std::string_view text) {
  return !text.empty() && text.find_first_not_of("0123456789") == std::string_view::npos;
}

// REQUIRES: schema or mapping.
Result<BatchLayout> MakeLayout(feed::RecordFormat format,
                               const std::optional<std::vector<feed::Field>>& schema,
                               const std::optional<std::vector<MappingEntry>>& mapping,
                               uint64_t record_bytes) {
  BatchLayout layout;
  if (schema && format == feed::RecordFormat::kRaw && record_bytes != 0) {
    uint64_t packed = 0;
    for (const feed::Field& field : *schema) packed += field.width * feed::DTypeSize(field.dtype);
    if (packed != record_bytes) {
      return Status::InvalidArgument("the schema packs " + std::to_string(packed) +
                                     " bytes per record, the run's --record-bytes is " +
                                     std::to_string(record_bytes));
    }
  }
  if (!mapping) {
    layout.fields = *schema;
    for (size_t i = 0; i < layout.fields.size(); ++i) {
      layout.outputs.emplace_back(i, layout.fields[i].name);
    }
    return layout;
  }
  if (!schema) {
    if (IsBinary(format)) {
      return Status::InvalidArgument(
          "input_mapping without a schema reads CSV columns or JSONL keys; " +
          std::string(feed::RecordFormatName(format)) +
          " records need a schema saying how their bytes are packed");
    }
    for (const MappingEntry& entry : *mapping) {
      if (format == feed::RecordFormat::kCsv && !IsColumnIndex(entry.source)) {
        return Status::InvalidArgument("input_mapping: '" + entry.source +
                                       "' is not a CSV column index (0-based); give a schema to "
                                       "map fields by name");
      }
      layout.outputs.emplace_back(layout.fields.size(), entry.output);
      layout.fields.push_back({entry.output, entry.source, feed::DType::kFloat64, 1});
    }
    return layout;
  }
  // Mapping over a schema: select and rename schema fields.
  std::vector<size_t> first_column;  // CSV: where each schema field starts
  size_t next_column = 0;
  for (const feed::Field& field : *schema) {
    first_column.push_back(next_column);
    next_column += field.width;
  }
  if (IsBinary(format)) layout.fields = *schema;
  for (const MappingEntry& entry : *mapping) {
    size_t index = 0;
    while (index < schema->size() && (*schema)[index].name != entry.source) ++index;
    if (index == schema->size()) {
      std::string names;
      for (const feed::Field& field : *schema) names += (names.empty() ? "" : ", ") + field.name;
      return Status::InvalidArgument("input_mapping: '" + entry.source +
                                     "' is not a schema field (the schema has " + names + ")");
    }
    const feed::Field& field = (*schema)[index];
    if (IsBinary(format)) {
      layout.outputs.emplace_back(index, entry.output);
      continue;
    }
    std::string source =
        format == feed::RecordFormat::kCsv ? std::to_string(first_column[index]) : field.name;
    layout.outputs.emplace_back(layout.fields.size(), entry.output);
    layout.fields.push_back({entry.output, std::move(source), field.dtype, field.width});
  }
  return layout;
}

py::dtype NumpyDType(feed::DType dtype) {
  switch (dtype) {
    case feed::DType::kFloat32:
      return py::dtype::of<float>();
    case feed::DType::kFloat64:
      return py::dtype::of<double>();
    case feed::DType::kInt32:
      return py::dtype::of<int32_t>();
    case feed::DType::kInt64:
      return py::dtype::of<int64_t>();
    case feed::DType::kUint8:
      return py::dtype::of<uint8_t>();
  }
  return py::dtype::of<uint8_t>();
}

// REQUIRES: the GIL; `records` stay valid throughout.
py::dict DecodeBatch(feed::RecordFormat format, const BatchLayout& layout,
                     const std::vector<std::string_view>& records) {
  const size_t rows = records.size();
  std::vector<py::array> arrays;
  std::vector<feed::ColumnBuffer> buffers;
  arrays.reserve(layout.fields.size());
  for (const feed::Field& field : layout.fields) {
    std::vector<py::ssize_t> shape = {static_cast<py::ssize_t>(rows)};
    if (field.width != 1) shape.push_back(static_cast<py::ssize_t>(field.width));
    arrays.emplace_back(NumpyDType(field.dtype), shape);  // uninitialized; every element is written
    buffers.push_back({arrays.back().mutable_data(), rows});
  }
  Status status;
  {
    py::gil_scoped_release release;
    status = feed::DecodeColumns(format, layout.fields, records, buffers);
  }
  Check(status);
  py::dict out;
  for (const auto& [index, key] : layout.outputs) out[py::str(key)] = arrays[index];
  return out;
}

py::list BytesList(const std::vector<std::string_view>& records) {
  py::list out(records.size());
  for (size_t i = 0; i < records.size(); ++i) {
    PyObject* bytes = PyBytes_FromStringAndSize(records[i].data(), records[i].size());
    if (bytes == nullptr) throw py::error_already_set();
    PyList_SET_ITEM(out.ptr(), i, bytes);  // steals the reference
  }
  return out;
}

// next_batch's bytes objects, one per record. A bytes object is immutable,
// but one that nothing references any more but this class can be written
// over and handed out again without anyone seeing it change: CPython resizes
// a str or bytes in place on the same condition (a reference count of one).
// In the loop `batch = feed.next_batch(n)` the batch before last has been
// dropped by the time of a call, so its list, when only this class still
// holds it, is handed out again with the new records written into its bytes
// objects: a copy per record instead of a list, and per record an
// allocation, a copy and a free. A record whose old object is still held
// elsewhere (kept by the program) gets a new one. Only records of kMinBytes
// to kMaxBytes bytes are written over: shorter ones may be CPython's shared
// one-byte objects, and longer ones would hold memory for little gain.
class BytesRecycler {
 public:
  // REQUIRES: the GIL.
  py::list Make(const std::vector<std::string_view>& records) {
    const bool reuse = TakeOlder(records.size());
    py::list out =
        reuse ? py::reinterpret_steal<py::list>(older_.release()) : py::list(records.size());
    for (size_t i = 0; i < records.size(); ++i) {
      if (reuse) {
        Overwrite(out.ptr(), i, records[i]);
      } else {
        PyList_SET_ITEM(out.ptr(), i, NewBytes(records[i]));  // steals the reference
      }
    }
    older_ = std::move(last_);
    last_ = out;
    return out;
  }

 private:
  static constexpr size_t kMinBytes = 2;
  static constexpr size_t kMaxBytes = 4096;

  static PyObject* NewBytes(std::string_view record) {
    PyObject* bytes = PyBytes_FromStringAndSize(record.data(), record.size());
    if (bytes == nullptr) throw py::error_already_set();
    return bytes;
  }
  // Whether the list handed out two calls ago can be handed out again: only
  // this class holds it, and it has `size` items.
  bool TakeOlder(size_t size) const {
    return older_ && Py_REFCNT(older_.ptr()) == 1 &&
           PyList_GET_SIZE(older_.ptr()) == static_cast<Py_ssize_t>(size);
  }
  // Puts `record` at list[i]: into the bytes object there when nothing else
  // holds it and it has the record's size, else into a new one.
  static void Overwrite(PyObject* list, size_t i, std::string_view record) {
    PyObject* old = PyList_GET_ITEM(list, i);
    if (record.size() >= kMinBytes && record.size() <= kMaxBytes && Py_REFCNT(old) == 1 &&
        PyBytes_CheckExact(old) &&
        PyBytes_GET_SIZE(old) == static_cast<Py_ssize_t>(record.size())) {
      std::memcpy(PyBytes_AS_STRING(old), record.data(), record.size());
      ForgetHash(old);
      return;
    }
    PyList_SET_ITEM(list, i, NewBytes(record));
    Py_DECREF(old);
  }
  // The cached hash was of the old value (-1: not computed).
  static void ForgetHash(PyObject* bytes) {
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    reinterpret_cast<PyBytesObject*>(bytes)->ob_shash = -1;
#pragma GCC diagnostic pop
  }

  py::object older_;  // the list handed out two calls ago (none before)
  py::object last_;   // the list handed out by the last call
};

// The schema and input_mapping as given, checked before any feed is involved.
struct ColumnRequest {
  std::optional<std::vector<feed::Field>> schema;
  std::optional<std::vector<MappingEntry>> mapping;
};

ColumnRequest ParseColumnRequest(const py::object& schema, const py::object& input_mapping) {
  ColumnRequest request;
  if (!schema.is_none()) request.schema = ParseSchema(schema);
  if (!input_mapping.is_none()) request.mapping = ParseInputMapping(input_mapping);
  return request;
}

// std::nullopt: neither was given, next_batch returns bytes.
std::optional<BatchLayout> LayoutFor(feed::RecordFormat format, const ColumnRequest& request,
                                     uint64_t record_bytes) {
  if (!request.schema && !request.mapping) return std::nullopt;
  return Unwrap(MakeLayout(format, request.schema, request.mapping, record_bytes));
}

// ---- the feed ----

std::chrono::milliseconds TimeoutOf(const py::object& timeout) {
  if (timeout.is_none()) return std::chrono::milliseconds(0);  // the run's --feed-timeout
  if (py::isinstance<py::bool_>(timeout) || !PyNumber_Check(timeout.ptr())) {
    throw py::type_error("timeout must be a number of seconds or None, got " + Repr(timeout));
  }
  double seconds = py::float_(timeout).cast<double>();
  if (!(seconds > 0) || std::isinf(seconds)) {
    throw py::value_error("timeout must be a positive number of seconds or None, got " +
                          Repr(timeout));
  }
  // Round up: 0 ms would mean the run's default.
  return std::chrono::milliseconds(static_cast<int64_t>(std::ceil(seconds * 1000)));
}

class PyDataFeed {
 public:
  PyDataFeed(bool train_mode, const py::object& input_mapping, const py::object& schema,
             const py::object& timeout) {
    // Python-side mistakes surface before connecting, and without a feed.
    ColumnRequest request = ParseColumnRequest(schema, input_mapping);
    DataFeedOptions options;
    options.train_mode = train_mode;
    options.timeout = TimeoutOf(timeout);

    Result<std::unique_ptr<DataFeed>> connected = [&] {
      py::gil_scoped_release release;
      return DataFeed::Connect(ProcessEnvironment(), options);
    }();
    if (!connected.ok()) RaiseConnectError(connected.status());
    feed_ = std::move(connected).value();
    format_name_ = feed_->format();
    train_mode_ = train_mode;
    if (format_name_ == kPickleFormat) {
      // Python objects fed by drover.Cluster.train: unpickled, optionally
      // mapped to columns (TensorFlowOnSpark's input_mapping over rows).
      if (!schema.is_none()) {
        throw py::value_error(
            "schema= decodes CSV, JSONL, TFRecord or raw records; this feed carries Python "
            "objects (drover.Cluster.train): use input_mapping= or read the objects");
      }
      pickle_ = py::module_::import("pickle");
      if (!input_mapping.is_none()) mapping_ = py::dict(input_mapping);
      return;
    }
    format_ = Unwrap(feed::ParseRecordFormat(format_name_));
    layout_ = LayoutFor(format_, request, feed_->record_bytes());
  }

  py::object NextBatch(py::ssize_t max_records) {
    if (max_records < 1) {
      throw py::value_error("next_batch needs a batch size of at least 1, got " +
                            std::to_string(max_records));
    }
    // The GIL goes first (another thread may hold mutex_ and want it), and
    // comes back with mutex_ still held: the records are views into the
    // queue until the next call.
    std::optional<py::gil_scoped_release> release(std::in_place);
    MutexLock lock(mutex_);
    Status status = feed_->NextBatch(static_cast<size_t>(max_records), &batch_);
    release.reset();
    records_read_ = feed_->records_read();
    if (!status.ok()) ThrowStatus(status);
    epoch_ = batch_.epoch;
    // The records are views into the queue (or the input file's mapping):
    // decode them before unlocking.
    if (pickle_) return Unpickle(batch_.records);
    if (layout_) return DecodeBatch(format_, *layout_, batch_.records);
    return recycler_.Make(batch_.records);
  }

  void BatchResults(const py::object& results) {
    if (py::isinstance<py::str>(results) || py::isinstance<py::bytes>(results)) {
      throw py::type_error("batch_results takes a list of results, one per record, not a single " +
                           std::string(Py_TYPE(results.ptr())->tp_name));
    }
    if (py::isinstance<py::array>(results) && results.cast<py::array>().ndim() != 1) {
      throw py::value_error("batch_results takes a 1-D array (one result per record), got " +
                            std::to_string(results.cast<py::array>().ndim()) + " dimensions");
    }
    // The views point into these objects' buffers (bytes, or the UTF-8 that
    // str caches), so they must outlive the call.
    std::vector<py::object> keep_alive;
    std::vector<std::string_view> views;
    for (py::handle item : results) {
      py::object object = py::reinterpret_borrow<py::object>(item);
      if (pickle_) object = pickle_->attr("dumps")(object, kPickleProtocol);
      if (!PyBytes_Check(object.ptr()) && !PyUnicode_Check(object.ptr())) {
        object = py::str(object);
      }
      char* data = nullptr;
      Py_ssize_t size = 0;
      if (PyBytes_Check(object.ptr())) {
        if (PyBytes_AsStringAndSize(object.ptr(), &data, &size) != 0) throw py::error_already_set();
      } else {
        const char* utf8 = PyUnicode_AsUTF8AndSize(object.ptr(), &size);
        if (utf8 == nullptr) throw py::error_already_set();
        data = const_cast<char*>(utf8);
      }
      views.emplace_back(data, static_cast<size_t>(size));
      keep_alive.push_back(std::move(object));
    }
    Status status;
    {
      py::gil_scoped_release release;
      MutexLock lock(mutex_);
      status = feed_->BatchResults(views);
    }
    Check(status);
  }

  bool ShouldStop() {
    py::gil_scoped_release release;
    MutexLock lock(mutex_);
    return feed_->ShouldStop();
  }

  py::object Commit() {
    std::optional<Result<std::optional<FeedPosition>>> committed;
    {
      py::gil_scoped_release release;
      MutexLock lock(mutex_);
      committed.emplace(feed_->Commit());
    }
    if (!committed->ok()) ThrowStatus(committed->status());
    const std::optional<FeedPosition>& position = **committed;
    if (!position) return py::none();
    py::dict out;
    out["feed"] = position->feed;
    out["record"] = position->record;
    out["done"] = position->done;
    return out;
  }

  void Terminate() {
    py::gil_scoped_release release;
    MutexLock lock(mutex_);
    feed_->Terminate();
  }

  uint64_t records_read() const { return records_read_; }
  int epoch() const { return epoch_; }
  static constexpr char kPickleFormat[] = "pickle";
  static constexpr int kPickleProtocol = 5;
  const std::string& format() const { return format_name_; }
  bool train_mode() const { return train_mode_; }

 private:
  [[noreturn]] static void RaiseConnectError(const Status& status) {
    switch (status.code()) {
      case Status::Code::kNotFound: {
        // Connect names the variable itself; the fallback keeps the hint if that changes.
        std::string message = "drover.DataFeed: " + status.message();
        if (message.find(kFeedSocketVariable) == std::string::npos) {
          message += std::string(" (") + kFeedSocketVariable +
                     " is not set: not a program started by `drover run --input ...`)";
        }
        throw std::runtime_error(message);
      }
      case Status::Code::kAlreadyExists:
      case Status::Code::kUnavailable:
        throw std::runtime_error("drover.DataFeed: " + status.message());
      default:
        ThrowStatus(status);
    }
  }

  Mutex mutex_;
  std::unique_ptr<DataFeed> feed_ PT_GUARDED_BY(mutex_);
  feed::RecordFormat format_ = feed::RecordFormat::kCsv;
  std::string format_name_;
  std::optional<BatchLayout> layout_;  // unset: next_batch returns bytes
  bool train_mode_ = true;
  std::optional<py::module_> pickle_;     // set: the records are pickled objects
  std::optional<py::dict> mapping_;       // input_mapping over pickled rows
  BytesRecycler recycler_;                // next_batch's bytes (the GIL guards it)
  RecordBatch batch_ GUARDED_BY(mutex_);  // next_batch's views, its storage reused

  // The batch's objects, or with input_mapping {name: array of column}.
  py::object Unpickle(const std::vector<std::string_view>& records) {
    py::object loads = pickle_->attr("loads");
    py::list objects(records.size());
    for (size_t i = 0; i < records.size(); ++i) {
      objects[i] = loads(py::memoryview::from_memory(records[i].data(),
                                                     static_cast<py::ssize_t>(records[i].size())));
    }
    if (!mapping_) return objects;
    py::object asarray = py::module_::import("numpy").attr("asarray");
    py::dict columns;
    for (auto [source, name] : *mapping_) {
      py::list column(records.size());
      for (size_t i = 0; i < records.size(); ++i) {
        py::object row = objects[i];
        try {
          column[i] = row[source];
        } catch (py::error_already_set& error) {
          if (!error.matches(PyExc_KeyError) && !error.matches(PyExc_IndexError) &&
              !error.matches(PyExc_TypeError)) {
            throw;
          }
          throw py::value_error("input_mapping: record " + std::to_string(i) + " has no field " +
                                py::repr(source).cast<std::string>() + " (records are " +
                                std::string(Py_TYPE(row.ptr())->tp_name) + ")");
        }
      }
      columns[name] = asarray(column);
    }
    return columns;
  }
  // Read by the properties under the GIL alone, so they never wait on mutex_.
  uint64_t records_read_ = 0;
  int epoch_ = 0;
};

// `self` of the methods called once a batch (next_batch, should_stop).
// pybind11 finds a method's C++ class by hashing its mangled name on every
// call; this argument's caster looks it up once.
struct FeedSelf {
  PyDataFeed* feed = nullptr;
};

}  // namespace
}  // namespace drover::python

namespace pybind11::detail {

template <>
struct type_caster<drover::python::FeedSelf> {
  PYBIND11_TYPE_CASTER(drover::python::FeedSelf, const_name("DataFeed"));

  bool load(handle source, bool /*convert*/) {
    static const type_info* const kType = get_type_info(typeid(drover::python::PyDataFeed));
    type_caster_generic caster(kType);
    if (!caster.load(source, /*convert=*/false) || caster.value == nullptr) return false;
    value.feed = static_cast<drover::python::PyDataFeed*>(caster.value);
    return true;
  }
  static handle cast(const drover::python::FeedSelf&, return_value_policy, handle) {
    return handle();  // never returned to Python
  }
};

}  // namespace pybind11::detail

namespace drover::python {

void RegisterFeed(py::module_& m) {
  py::class_<PyDataFeed>(
      m, "DataFeed",
      "The records `drover run --input ...` feeds this node (TensorFlowOnSpark's\n"
      "TFNode.DataFeed).\n\n"
      "DataFeed(train_mode=True, input_mapping=None, schema=None, timeout=None)\n\n"
      "next_batch(n) returns up to n records of one epoch: a list of bytes (CSV and\n"
      "JSONL: one line without its newline), or with a schema / input_mapping a dict\n"
      "{name: numpy array} of n rows. An empty list (or empty arrays) once the feed is\n"
      "over. schema: [(name, dtype[, width]), ...] or {name: dtype or (dtype, width)};\n"
      "input_mapping: {source: output_name}, selecting and renaming schema fields, or\n"
      "without a schema reading JSONL keys / CSV column indices as float64. timeout:\n"
      "seconds next_batch waits for records before TimeoutError (None: the run's\n"
      "--feed-timeout). Raises RuntimeError outside `drover run --input`.")
      .def(py::init<bool, const py::object&, const py::object&, const py::object&>(),
           py::arg("train_mode") = true, py::arg("input_mapping") = py::none(),
           py::arg("schema") = py::none(), py::arg("timeout") = py::none())
      .def(
          "next_batch",
          [](FeedSelf self, py::ssize_t batch_size) { return self.feed->NextBatch(batch_size); },
          py::arg("batch_size"),
          "Up to batch_size records of one epoch; empty once the feed is over.\n"
          "TimeoutError when nothing arrived within the timeout; RuntimeError when\n"
          "feeding failed; ValueError when a record does not match the schema, or in\n"
          "inference mode when the previous batch has no results yet.")
      .def("batch_results", &PyDataFeed::BatchResults, py::arg("results"),
           "Inference: one result per record of the last batch, in order. Each is bytes,\n"
           "str, or anything else written as str(item); none may contain a newline.")
      .def(
          "should_stop", [](FeedSelf self) { return self.feed->ShouldStop(); },
          "True once every epoch is read, or the feed was terminated or stopped. When\n"
          "feeding failed, true only after next_batch raised the failure, so a\n"
          "`while not should_stop()` loop raises it instead of ending as if done.")
      .def("commit", &PyDataFeed::Commit,
           "Training: records in the driver that every record next_batch returned so far\n"
           "is consumed; call it when the model is checkpointed. After a failure the next\n"
           "round (--max-restarts) feeds this node's share from just after its last commit.\n"
           "Returns the position on record, {'feed': n, 'record': n, 'done': bool}, or None\n"
           "when nothing was committed or read. RuntimeError in inference, for a feed from\n"
           "drover.Cluster.train, or when the driver cannot be reached.")
      .def("terminate", &PyDataFeed::Terminate,
           "Stops feeding this node now; next_batch returns nothing from then on.")
      .def_property_readonly("records_read", &PyDataFeed::records_read)
      .def_property_readonly("epoch", &PyDataFeed::epoch,
                             "The (0-based) epoch of the last batch next_batch returned.")
      .def_property_readonly(
          "format", &PyDataFeed::format,
          "The run's --format: 'csv', 'jsonl', 'tfrecord' or 'raw'; 'pickle' for\n"
          "Python objects fed by drover.Cluster.train / inference.")
      .def_property_readonly("train_mode", &PyDataFeed::train_mode)
      .def("__repr__", [](const PyDataFeed& feed) {
        return "DataFeed(format='" + feed.format() +
               "', train_mode=" + (feed.train_mode() ? "True" : "False") +
               ", records_read=" + std::to_string(feed.records_read()) +
               ", epoch=" + std::to_string(feed.epoch()) + ")";
      });

  m.def(
      "_decode_records",
      [](const std::vector<py::bytes>& records, const std::string& format, const py::object& schema,
         const py::object& input_mapping, uint64_t record_bytes) {
        feed::RecordFormat record_format = Unwrap(feed::ParseRecordFormat(format));
        std::vector<std::string_view> views;
        views.reserve(records.size());
        for (const py::bytes& record : records) {
          views.emplace_back(PyBytes_AS_STRING(record.ptr()), PyBytes_GET_SIZE(record.ptr()));
        }
        std::optional<BatchLayout> layout =
            LayoutFor(record_format, ParseColumnRequest(schema, input_mapping), record_bytes);
        if (!layout) return py::object(BytesList(views));
        return py::object(DecodeBatch(record_format, *layout, views));
      },
      py::arg("records"), py::arg("format"), py::arg("schema") = py::none(),
      py::arg("input_mapping") = py::none(), py::arg("record_bytes") = 0,
      "For tests and benchmarks: what DataFeed.next_batch makes of a batch of\n"
      "records (a list of bytes) in the given format, without a feed.");

  m.def(
      "_equal_share_slices",
      [](const std::vector<uint64_t>& counts, int shares, const std::string& remainder) {
        const feed::Remainder parsed = Unwrap(feed::ParseRemainder(remainder));
        std::vector<std::vector<std::tuple<uint32_t, uint64_t, uint64_t>>> out;
        for (const auto& share :
             Unwrap(feed::EqualShareSlices(counts, shares, feed::FeedMode::kTrain, parsed))) {
          auto& slices = out.emplace_back();
          for (const feed::ShareSlice& s : share) slices.emplace_back(s.partition, s.begin, s.end);
        }
        return out;
      },
      py::arg("counts"), py::arg("shares"), py::arg("remainder") = "pad",
      "drover.Cluster.train's equal shares (docs/feed.md): for partitions of the\n"
      "given record counts, each share's (partition, begin, end) slices.");
}

}  // namespace drover::python
