// Columns: turns a batch of records into typed columns without a per-record
// interpreter loop, for DataFeed's `schema` / `input_mapping` (Python's
// next_batch returning a dict of NumPy arrays; docs/feed.md).
//
// A schema is a list of fields, each a name, a dtype and a width (values per
// record, 1 for a scalar). How a record maps onto the fields depends on its
// format:
//  - kCsv: the fields take consecutive comma-separated columns in order
//    (width columns each); extra columns are an error unless the schema
//    names `source` columns (see below).
//  - kJsonl: each field is the record's key `source` (default: its name),
//    a number (width 1) or an array of width numbers; bool counts as 0/1.
//  - kRaw, kTfRecord: the record is the fields' values packed little-endian
//    in order, no padding; its size must be the sum of the widths times the
//    dtype sizes.
// Integers in text are parsed exactly (std::from_chars); a value that does
// not fit the dtype, a missing field, or a wrong record size is
// kInvalidArgument naming the record (its index in the batch) and the field.

#ifndef DROVER_FEED_COLUMNS_H_
#define DROVER_FEED_COLUMNS_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "drover/status.h"
#include "feed/record_io.h"

namespace drover::feed {

enum class DType { kFloat32, kFloat64, kInt32, kInt64, kUint8 };

// NumPy's names: "float32", "float64", "int32", "int64", "uint8".
Result<DType> ParseDType(std::string_view name);
size_t DTypeSize(DType dtype);

struct Field {
  std::string name;    // the output key
  std::string source;  // kJsonl: the key to read ("" : name); kCsv: first column
                       // index as text ("" : after the previous field)
  DType dtype = DType::kFloat32;
  size_t width = 1;
};

// Where one field's values go: rows * width elements of its dtype, row-major.
struct ColumnBuffer {
  void* data = nullptr;
  size_t capacity_rows = 0;
};

// Decodes `records` into one buffer per field (same order as `fields`).
// Each buffer must hold records.size() rows.
Status DecodeColumns(RecordFormat format, const std::vector<Field>& fields,
                     const std::vector<std::string_view>& records,
                     const std::vector<ColumnBuffer>& columns);

}  // namespace drover::feed

#endif  // DROVER_FEED_COLUMNS_H_
