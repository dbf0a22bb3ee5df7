#include "feed/columns.h"

#include <algorithm>
#include <bit>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <system_error>
#include <type_traits>

namespace drover::feed {
namespace {

using Json = nlohmann::json;

std::string_view DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "float32";
    case DType::kFloat64:
      return "float64";
    case DType::kInt32:
      return "int32";
    case DType::kInt64:
      return "int64";
    case DType::kUint8:
      return "uint8";
  }
  return "?";
}

std::string FieldContext(size_t record_index, const Field& field) {
  return "record " + std::to_string(record_index) + " of the batch, field '" + field.name + "'";
}

// Why a value could not be stored; the caller adds which record and field.
enum class BadValue { kNone, kNotANumber, kOutOfRange, kNotAnInteger };

std::string DescribeBadValue(BadValue error, std::string_view value_text, DType dtype) {
  std::string quoted = "'" + std::string(value_text) + "'";
  switch (error) {
    case BadValue::kNotANumber:
      return quoted + " is not a number";
    case BadValue::kOutOfRange:
      return quoted + " does not fit " + std::string(DTypeName(dtype));
    case BadValue::kNotAnInteger:
      return quoted + " is not an integer (dtype " + std::string(DTypeName(dtype)) + ")";
    case BadValue::kNone:
      break;
  }
  return quoted;
}

template <typename T>
bool FitsInteger(int64_t value) {
  return value >= static_cast<int64_t>(std::numeric_limits<T>::min()) &&
         value <= static_cast<int64_t>(std::numeric_limits<T>::max());
}

// CSV writers often put a space after the comma, and some write "+1".
std::string_view TrimForNumber(std::string_view text) {
  while (!text.empty() && (text.front() == ' ' || text.front() == '\t')) text.remove_prefix(1);
  while (!text.empty() && (text.back() == ' ' || text.back() == '\t')) text.remove_suffix(1);
  if (text.size() > 1 && text.front() == '+' && text[1] != '-' && text[1] != '+') {
    text.remove_prefix(1);
  }
  return text;
}

// An out-of-range float whose exponent is negative underflowed: NumPy and
// strtod give a (signed) zero or a denormal there, so do we; only overflow is
// an error.
bool HasNegativeExponent(std::string_view text) {
  size_t e = text.find_first_of("eE");
  return e != std::string_view::npos && e + 1 < text.size() && text[e + 1] == '-';
}

template <typename T>
BadValue ParseText(std::string_view text, T* out) {
  text = TrimForNumber(text);
  const char* begin = text.data();
  const char* end = text.data() + text.size();
  if constexpr (std::is_floating_point_v<T>) {
    auto [ptr, ec] = std::from_chars(begin, end, *out);
    if (ptr != end || ec == std::errc::invalid_argument) return BadValue::kNotANumber;
    if (ec == std::errc::result_out_of_range) {
      if (!HasNegativeExponent(text)) return BadValue::kOutOfRange;
      double wide = 0;
      auto [wide_ptr, wide_ec] = std::from_chars(begin, end, wide);
      if (wide_ec != std::errc()) wide = 0;
      *out = std::copysign(static_cast<T>(wide), text.front() == '-' ? T(-1) : T(1));
    }
    return BadValue::kNone;
  } else {
    int64_t wide = 0;
    auto [ptr, ec] = std::from_chars(begin, end, wide);
    if (ec == std::errc::invalid_argument) return BadValue::kNotANumber;
    if (ptr != end) {
      // "3.5" or "1e3": a number, but not an integer.
      double ignored = 0;
      auto [float_ptr, float_ec] = std::from_chars(begin, end, ignored);
      return float_ptr == end && float_ec != std::errc::invalid_argument ? BadValue::kNotAnInteger
                                                                         : BadValue::kNotANumber;
    }
    if (ec == std::errc::result_out_of_range || !FitsInteger<T>(wide)) {
      return BadValue::kOutOfRange;
    }
    *out = static_cast<T>(wide);
    return BadValue::kNone;
  }
}

// Stores a JSON scalar (number or bool) as T.
template <typename T>
BadValue StoreJson(const Json& value, T* out) {
  switch (value.type()) {
    case Json::value_t::boolean:
      *out = value.get<bool>() ? T(1) : T(0);
      return BadValue::kNone;
    case Json::value_t::number_integer: {
      int64_t integer = value.get<int64_t>();
      if constexpr (std::is_floating_point_v<T>) {
        *out = static_cast<T>(integer);
      } else {
        if (!FitsInteger<T>(integer)) return BadValue::kOutOfRange;
        *out = static_cast<T>(integer);
      }
      return BadValue::kNone;
    }
    case Json::value_t::number_unsigned: {
      uint64_t integer = value.get<uint64_t>();
      if constexpr (std::is_floating_point_v<T>) {
        *out = static_cast<T>(integer);
      } else {
        if (integer > static_cast<uint64_t>(std::numeric_limits<T>::max())) {
          return BadValue::kOutOfRange;
        }
        *out = static_cast<T>(integer);
      }
      return BadValue::kNone;
    }
    case Json::value_t::number_float: {
      double real = value.get<double>();
      if constexpr (std::is_floating_point_v<T>) {
        if (std::isfinite(real) && std::fabs(real) > std::numeric_limits<T>::max()) {
          return BadValue::kOutOfRange;
        }
        *out = static_cast<T>(real);
      } else {
        // Python's json.dumps writes a float label as "3.0": accept integral values.
        if (std::trunc(real) != real) return BadValue::kNotAnInteger;
        // 2^63 is exactly representable; every double below it converts to int64.
        if (!(real >= -9223372036854775808.0 && real < 9223372036854775808.0) ||
            !FitsInteger<T>(static_cast<int64_t>(real))) {
          return BadValue::kOutOfRange;
        }
        *out = static_cast<T>(static_cast<int64_t>(real));
      }
      return BadValue::kNone;
    }
    default:
      return BadValue::kNotANumber;
  }
}

template <typename T>
T* TypedColumn(const ColumnBuffer& column) {
  return static_cast<T*>(column.data);
}

// Calls fn(T{}) with T the C++ type of dtype.
template <typename Fn>
auto VisitDType(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::kFloat32:
      return fn(float{});
    case DType::kFloat64:
      return fn(double{});
    case DType::kInt32:
      return fn(int32_t{});
    case DType::kInt64:
      return fn(int64_t{});
    case DType::kUint8:
      return fn(uint8_t{});
  }
  return fn(uint8_t{});
}

Status ValidateArguments(RecordFormat format, const std::vector<Field>& fields,
                         const std::vector<std::string_view>& records,
                         const std::vector<ColumnBuffer>& columns) {
  if (fields.size() != columns.size()) {
    return Status::InvalidArgument("DecodeColumns: " + std::to_string(fields.size()) +
                                   " fields but " + std::to_string(columns.size()) + " buffers");
  }
  for (size_t i = 0; i < fields.size(); ++i) {
    const Field& field = fields[i];
    if (field.width == 0) {
      return Status::InvalidArgument("field '" + field.name + "': width must be at least 1");
    }
    if (columns[i].capacity_rows < records.size() ||
        (columns[i].data == nullptr && !records.empty())) {
      return Status::InvalidArgument("field '" + field.name + "': its buffer holds " +
                                     std::to_string(columns[i].capacity_rows) +
                                     " rows, the batch " + std::to_string(records.size()) +
                                     " records");
    }
    if (!field.source.empty() &&
        (format == RecordFormat::kRaw || format == RecordFormat::kTfRecord)) {
      return Status::InvalidArgument("field '" + field.name + "': source '" + field.source +
                                     "' only applies to csv and jsonl records, not binary ones");
    }
  }
  return Status::Ok();
}

// ---- CSV ----

struct CsvPlan {
  std::vector<size_t> first_column;  // per field
  size_t columns_needed = 0;         // one past the highest column read
  bool exact_column_count = true;    // no field names a source: extra columns are an error
};

Result<CsvPlan> PlanCsv(const std::vector<Field>& fields) {
  CsvPlan plan;
  size_t next_column = 0;
  for (const Field& field : fields) {
    size_t first = next_column;
    if (!field.source.empty()) {
      plan.exact_column_count = false;
      const char* end = field.source.data() + field.source.size();
      auto [ptr, ec] = std::from_chars(field.source.data(), end, first);
      if (ec != std::errc() || ptr != end) {
        return Status::InvalidArgument("field '" + field.name + "': csv source '" + field.source +
                                       "' is not a column index (0-based)");
      }
    }
    plan.first_column.push_back(first);
    next_column = first + field.width;
    plan.columns_needed = std::max(plan.columns_needed, next_column);
  }
  return plan;
}

// Splits on ',' into *cells (reused between records, so no allocation once it
// has grown to the widest record).
void SplitCsv(std::string_view record, std::vector<std::string_view>* cells) {
  cells->clear();
  const char* begin = record.data();
  const char* end = record.data() + record.size();
  while (true) {
    const char* comma = static_cast<const char*>(std::memchr(begin, ',', end - begin));
    if (comma == nullptr) {
      cells->emplace_back(begin, end - begin);
      return;
    }
    cells->emplace_back(begin, comma - begin);
    begin = comma + 1;
  }
}

Status DecodeCsv(const std::vector<Field>& fields, const std::vector<std::string_view>& records,
                 const std::vector<ColumnBuffer>& columns) {
  DROVER_ASSIGN_OR_RETURN(CsvPlan plan, PlanCsv(fields));
  std::vector<std::string_view> cells;
  cells.reserve(plan.columns_needed);
  for (size_t row = 0; row < records.size(); ++row) {
    SplitCsv(records[row], &cells);
    if (plan.exact_column_count && cells.size() > plan.columns_needed) {
      return Status::InvalidArgument(
          "record " + std::to_string(row) + " of the batch: " + std::to_string(cells.size()) +
          " csv columns, the schema's fields take " + std::to_string(plan.columns_needed) +
          " (name a field's source column to skip columns)");
    }
    for (size_t f = 0; f < fields.size(); ++f) {
      const Field& field = fields[f];
      size_t first = plan.first_column[f];
      if (first + field.width > cells.size()) {
        return Status::InvalidArgument(FieldContext(row, field) + ": needs csv columns " +
                                       std::to_string(first) + ".." +
                                       std::to_string(first + field.width - 1) +
                                       ", the record has " + std::to_string(cells.size()));
      }
      Status status = VisitDType(field.dtype, [&](auto zero) -> Status {
        using T = decltype(zero);
        T* out = TypedColumn<T>(columns[f]) + row * field.width;
        for (size_t j = 0; j < field.width; ++j) {
          std::string_view cell = cells[first + j];
          BadValue error = ParseText(cell, out + j);
          if (error != BadValue::kNone) [[unlikely]] {
            return Status::InvalidArgument(FieldContext(row, field) + " (csv column " +
                                           std::to_string(first + j) +
                                           "): " + DescribeBadValue(error, cell, field.dtype));
          }
        }
        return Status::Ok();
      });
      DROVER_RETURN_IF_ERROR(status);
    }
  }
  return Status::Ok();
}

// ---- JSONL ----

Status DecodeJsonl(const std::vector<Field>& fields, const std::vector<std::string_view>& records,
                   const std::vector<ColumnBuffer>& columns) {
  for (size_t row = 0; row < records.size(); ++row) {
    // Parse errors come back as a discarded value; the try only guards
    // against nlohmann throwing anyway (it must not escape this library).
    Json object;
    try {
      object = Json::parse(records[row], /*cb=*/nullptr, /*allow_exceptions=*/false);
    } catch (const Json::exception& e) {
      object = Json::value_t::discarded;
    }
    if (object.is_discarded()) {
      return Status::InvalidArgument("record " + std::to_string(row) +
                                     " of the batch: not valid JSON");
    }
    if (!object.is_object()) {
      return Status::InvalidArgument("record " + std::to_string(row) +
                                     " of the batch: expected a JSON object, got " +
                                     object.type_name());
    }
    for (size_t f = 0; f < fields.size(); ++f) {
      const Field& field = fields[f];
      const std::string& key = field.source.empty() ? field.name : field.source;
      auto found = object.find(key);
      if (found == object.end()) {
        return Status::InvalidArgument(FieldContext(row, field) + ": key '" + key + "' missing");
      }
      const Json& value = *found;
      Status status = VisitDType(field.dtype, [&](auto zero) -> Status {
        using T = decltype(zero);
        T* out = TypedColumn<T>(columns[f]) + row * field.width;
        auto store = [&](const Json& element, T* target) -> Status {
          BadValue error = StoreJson(element, target);
          if (error == BadValue::kNone) return Status::Ok();
          return Status::InvalidArgument(FieldContext(row, field) + ": " +
                                         DescribeBadValue(error, element.dump(), field.dtype));
        };
        if (value.is_array()) {
          if (value.size() != field.width) {
            return Status::InvalidArgument(
                FieldContext(row, field) + ": expected " + std::to_string(field.width) +
                " numbers, got an array of " + std::to_string(value.size()));
          }
          for (size_t j = 0; j < field.width; ++j) DROVER_RETURN_IF_ERROR(store(value[j], out + j));
          return Status::Ok();
        }
        if (field.width != 1) {
          return Status::InvalidArgument(FieldContext(row, field) + ": expected an array of " +
                                         std::to_string(field.width) + " numbers, got " +
                                         value.type_name());
        }
        return store(value, out);
      });
      DROVER_RETURN_IF_ERROR(status);
    }
  }
  return Status::Ok();
}

// ---- raw / TFRecord ----

template <typename T>
void ByteSwapInPlace(T* values, size_t count) {
  for (size_t i = 0; i < count; ++i) {
    unsigned char bytes[sizeof(T)];
    std::memcpy(bytes, &values[i], sizeof(T));
    std::reverse(bytes, bytes + sizeof(T));
    std::memcpy(&values[i], bytes, sizeof(T));
  }
}

Status DecodeBinary(const std::vector<Field>& fields, const std::vector<std::string_view>& records,
                    const std::vector<ColumnBuffer>& columns) {
  std::vector<size_t> offset(fields.size());
  std::vector<size_t> bytes(fields.size());
  size_t record_size = 0;
  for (size_t f = 0; f < fields.size(); ++f) {
    offset[f] = record_size;
    bytes[f] = fields[f].width * DTypeSize(fields[f].dtype);
    record_size += bytes[f];
  }
  for (size_t row = 0; row < records.size(); ++row) {
    if (records[row].size() != record_size) {
      return Status::InvalidArgument("record " + std::to_string(row) +
                                     " of the batch: " + std::to_string(records[row].size()) +
                                     " bytes, the schema's packed fields take " +
                                     std::to_string(record_size) + " bytes");
    }
  }
  // The hot path of binary feeding: one memcpy per field per record, straight
  // into the caller's (NumPy) buffers.
  for (size_t row = 0; row < records.size(); ++row) {
    const char* record = records[row].data();
    for (size_t f = 0; f < fields.size(); ++f) {
      std::memcpy(static_cast<char*>(columns[f].data) + row * bytes[f], record + offset[f],
                  bytes[f]);
    }
  }
  if constexpr (std::endian::native == std::endian::big) {
    for (size_t f = 0; f < fields.size(); ++f) {
      VisitDType(fields[f].dtype, [&](auto zero) {
        using T = decltype(zero);
        ByteSwapInPlace(TypedColumn<T>(columns[f]), records.size() * fields[f].width);
      });
    }
  }
  return Status::Ok();
}

}  // namespace

Result<DType> ParseDType(std::string_view name) {
  for (DType dtype :
       {DType::kFloat32, DType::kFloat64, DType::kInt32, DType::kInt64, DType::kUint8}) {
    if (name == DTypeName(dtype)) return dtype;
  }
  return Status::InvalidArgument("unknown dtype '" + std::string(name) +
                                 "': expected float32, float64, int32, int64 or uint8");
}

size_t DTypeSize(DType dtype) {
  return VisitDType(dtype, [](auto zero) { return sizeof(zero); });
}

Status DecodeColumns(RecordFormat format, const std::vector<Field>& fields,
                     const std::vector<std::string_view>& records,
                     const std::vector<ColumnBuffer>& columns) {
  DROVER_RETURN_IF_ERROR(ValidateArguments(format, fields, records, columns));
  switch (format) {
    case RecordFormat::kCsv:
      return DecodeCsv(fields, records, columns);
    case RecordFormat::kJsonl:
      return DecodeJsonl(fields, records, columns);
    case RecordFormat::kRaw:
    case RecordFormat::kTfRecord:
      return DecodeBinary(fields, records, columns);
    case RecordFormat::kPickle:
      return Status::InvalidArgument(
          "pickled records are Python objects, decoded by drover.DataFeed, not into columns");
  }
  return Status::InvalidArgument("unknown record format");
}

}  // namespace drover::feed
