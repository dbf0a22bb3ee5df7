// Fuzzes DecodeColumns: the first byte picks the format and the schema, the
// rest is split into records at '\n' (text formats) or used as packed records
// (binary formats). Every record must decode or fail with a Status; nothing
// may read or write outside the buffers.
#include <cstdint>
#include <string_view>
#include <vector>

#include "feed/columns.h"

namespace {

using drover::feed::DType;
using drover::feed::Field;
using drover::feed::RecordFormat;

std::vector<Field> SchemaFor(uint8_t selector) {
  std::vector<Field> fields;
  switch (selector % 4) {
    case 0:
      fields = {{"x", "", DType::kFloat32, 3}, {"y", "", DType::kInt64, 1}};
      break;
    case 1:
      fields = {{"a", "", DType::kUint8, 2}, {"b", "", DType::kFloat64, 1}};
      break;
    case 2:
      fields = {{"k", "2", DType::kInt32, 1}, {"v", "0", DType::kFloat32, 2}};
      break;
    default:
      fields = {{"only", "", DType::kInt64, 1}};
      break;
  }
  return fields;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const uint8_t selector = data[0];
  std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  const RecordFormat formats[] = {RecordFormat::kCsv, RecordFormat::kJsonl, RecordFormat::kRaw,
                                  RecordFormat::kTfRecord};
  const RecordFormat format = formats[(selector >> 2) % 4];
  std::vector<Field> fields = SchemaFor(selector);
  if (format == RecordFormat::kRaw || format == RecordFormat::kTfRecord) {
    for (Field& field : fields) field.source.clear();
  }
  if (format == RecordFormat::kJsonl) {
    for (Field& field : fields) field.source.clear();
  }
  std::vector<std::string_view> records;
  size_t start = 0;
  while (start <= rest.size() && records.size() < 64) {
    size_t end = rest.find('\n', start);
    if (end == std::string_view::npos) end = rest.size();
    records.push_back(rest.substr(start, end - start));
    start = end + 1;
  }
  std::vector<std::vector<unsigned char>> storage;
  std::vector<drover::feed::ColumnBuffer> columns;
  for (const Field& field : fields) {
    storage.emplace_back(records.size() * field.width * drover::feed::DTypeSize(field.dtype));
  }
  for (auto& buffer : storage) columns.push_back({buffer.data(), records.size()});
  (void)drover::feed::DecodeColumns(format, fields, records, columns);
  return 0;
}
