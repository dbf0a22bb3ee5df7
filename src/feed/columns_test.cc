#include "feed/columns.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "testing/status_matchers.h"

namespace drover::feed {
namespace {

using ::drover::testing::StatusIs;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Owns one vector per field, sized for the batch, and hands out ColumnBuffers.
class Columns {
 public:
  Columns(const std::vector<Field>& fields, size_t rows) {
    for (const Field& field : fields) {
      storage_.emplace_back(rows * field.width * DTypeSize(field.dtype), 0xAB);
      buffers_.push_back({storage_.back().data(), rows});
    }
  }
  const std::vector<ColumnBuffer>& buffers() const { return buffers_; }

  template <typename T>
  std::vector<T> Values(size_t field) const {
    std::vector<T> values(storage_[field].size() / sizeof(T));
    std::memcpy(values.data(), storage_[field].data(), storage_[field].size());
    return values;
  }

 private:
  std::vector<std::vector<unsigned char>> storage_;
  std::vector<ColumnBuffer> buffers_;
};

Field MakeField(std::string name, DType dtype, size_t width = 1, std::string source = "") {
  return Field{std::move(name), std::move(source), dtype, width};
}

template <typename T>
void AppendPacked(std::string* record, std::initializer_list<T> values) {
  for (T value : values) record->append(reinterpret_cast<const char*>(&value), sizeof(T));
}

TEST(DTypeTest, ParsesNumpyNames) {
  EXPECT_EQ(ParseDType("float32").value(), DType::kFloat32);
  EXPECT_EQ(ParseDType("float64").value(), DType::kFloat64);
  EXPECT_EQ(ParseDType("int32").value(), DType::kInt32);
  EXPECT_EQ(ParseDType("int64").value(), DType::kInt64);
  EXPECT_EQ(ParseDType("uint8").value(), DType::kUint8);
  EXPECT_THAT(ParseDType("float16"), StatusIs(Status::Code::kInvalidArgument,
                                              AllOf(HasSubstr("float16"), HasSubstr("uint8"))));
  EXPECT_THAT(ParseDType(""), StatusIs(Status::Code::kInvalidArgument, HasSubstr("dtype")));
}

TEST(DTypeTest, Sizes) {
  EXPECT_EQ(DTypeSize(DType::kFloat32), 4u);
  EXPECT_EQ(DTypeSize(DType::kFloat64), 8u);
  EXPECT_EQ(DTypeSize(DType::kInt32), 4u);
  EXPECT_EQ(DTypeSize(DType::kInt64), 8u);
  EXPECT_EQ(DTypeSize(DType::kUint8), 1u);
}

// ---- CSV ----

TEST(CsvColumnsTest, EveryDtypeAndWidth) {
  std::vector<Field> fields = {MakeField("f32", DType::kFloat32, 2),
                               MakeField("f64", DType::kFloat64), MakeField("i32", DType::kInt32),
                               MakeField("i64", DType::kInt64), MakeField("u8", DType::kUint8, 3)};
  std::vector<std::string_view> records = {
      "1.5,-2,0.1,-7,9000000000,0,128,255",
      " 3e2 ,+4.25,1e-3,2147483647,-9223372036854775808,1,2,3",
  };
  Columns columns(fields, records.size());
  ASSERT_OK(DecodeColumns(RecordFormat::kCsv, fields, records, columns.buffers()));
  EXPECT_THAT(columns.Values<float>(0), ElementsAre(1.5f, -2.0f, 300.0f, 4.25f));
  EXPECT_THAT(columns.Values<double>(1), ElementsAre(0.1, 1e-3));
  EXPECT_THAT(columns.Values<int32_t>(2), ElementsAre(-7, 2147483647));
  EXPECT_THAT(columns.Values<int64_t>(3),
              ElementsAre(9000000000LL, std::numeric_limits<int64_t>::min()));
  EXPECT_THAT(columns.Values<uint8_t>(4), ElementsAre(0, 128, 255, 1, 2, 3));
}

TEST(CsvColumnsTest, FloatsParseExactly) {
  std::vector<Field> fields = {MakeField("x", DType::kFloat64), MakeField("y", DType::kFloat32)};
  std::vector<std::string_view> records = {"0.1,0.1", "inf,-nan", "1e-400,1e-50"};
  Columns columns(fields, records.size());
  ASSERT_OK(DecodeColumns(RecordFormat::kCsv, fields, records, columns.buffers()));
  std::vector<double> x = columns.Values<double>(0);
  std::vector<float> y = columns.Values<float>(1);
  EXPECT_EQ(x[0], 0.1);
  EXPECT_EQ(y[0], 0.1f);
  EXPECT_TRUE(std::isinf(x[1]));
  EXPECT_TRUE(std::isnan(y[1]));
  // Underflow gives zero, as NumPy and strtod do.
  EXPECT_EQ(x[2], 0.0);
  EXPECT_EQ(y[2], 0.0f);
}

TEST(CsvColumnsTest, SourceColumnsSelectAndSkip) {
  // label first in the file, features after an id column we skip; a field
  // without a source takes the columns after the previous field; extra
  // columns are fine once sources are named.
  std::vector<Field> fields = {MakeField("image", DType::kFloat32, 3, "2"),
                               MakeField("after_image", DType::kInt64),
                               MakeField("label", DType::kInt32, 1, "0")};
  std::vector<std::string_view> records = {"7,id-a,0.5,0.25,1,9,extra", "3,id-b,1,2,3,-9,more"};
  Columns columns(fields, records.size());
  ASSERT_OK(DecodeColumns(RecordFormat::kCsv, fields, records, columns.buffers()));
  EXPECT_THAT(columns.Values<float>(0), ElementsAre(0.5f, 0.25f, 1.0f, 1.0f, 2.0f, 3.0f));
  EXPECT_THAT(columns.Values<int64_t>(1), ElementsAre(9, -9));
  EXPECT_THAT(columns.Values<int32_t>(2), ElementsAre(7, 3));
  // A field without a source follows the previous field: column 1 here, which is text.
  std::vector<Field> text_field = {MakeField("label", DType::kInt32, 1, "0"),
                                   MakeField("id", DType::kInt64)};
  Columns bad(text_field, records.size());
  EXPECT_THAT(DecodeColumns(RecordFormat::kCsv, text_field, records, bad.buffers()),
              StatusIs(Status::Code::kInvalidArgument,
                       AllOf(HasSubstr("record 0"), HasSubstr("'id'"), HasSubstr("column 1"),
                             HasSubstr("'id-a' is not a number"))));
}

TEST(CsvColumnsTest, BadSourceIsAnError) {
  std::vector<Field> fields = {MakeField("x", DType::kFloat32, 1, "first")};
  std::vector<std::string_view> records = {"1"};
  Columns columns(fields, records.size());
  EXPECT_THAT(DecodeColumns(RecordFormat::kCsv, fields, records, columns.buffers()),
              StatusIs(Status::Code::kInvalidArgument,
                       AllOf(HasSubstr("'x'"), HasSubstr("'first'"), HasSubstr("column index"))));
}

TEST(CsvColumnsTest, ColumnCountMustMatchWithoutSources) {
  std::vector<Field> fields = {MakeField("image", DType::kFloat32, 2),
                               MakeField("label", DType::kInt32)};
  std::vector<std::string_view> extra = {"1,2,3", "1,2,3,4"};
  Columns columns(fields, extra.size());
  EXPECT_THAT(
      DecodeColumns(RecordFormat::kCsv, fields, extra, columns.buffers()),
      StatusIs(Status::Code::kInvalidArgument,
               AllOf(HasSubstr("record 1"), HasSubstr("4 csv columns"), HasSubstr("take 3"))));
  std::vector<std::string_view> missing = {"1,2"};
  EXPECT_THAT(DecodeColumns(RecordFormat::kCsv, fields, missing, columns.buffers()),
              StatusIs(Status::Code::kInvalidArgument,
                       AllOf(HasSubstr("record 0"), HasSubstr("'label'"), HasSubstr("has 2"))));
}

TEST(CsvColumnsTest, OutOfRangeIntegers) {
  struct Case {
    DType dtype;
    std::string_view text;
  };
  for (const Case& c :
       {Case{DType::kUint8, "256"}, Case{DType::kUint8, "-1"}, Case{DType::kInt32, "2147483648"},
        Case{DType::kInt32, "-2147483649"}, Case{DType::kInt64, "9223372036854775808"}}) {
    std::vector<Field> fields = {MakeField("n", c.dtype)};
    std::vector<std::string_view> records = {"0", c.text};
    Columns columns(fields, records.size());
    EXPECT_THAT(DecodeColumns(RecordFormat::kCsv, fields, records, columns.buffers()),
                StatusIs(Status::Code::kInvalidArgument,
                         AllOf(HasSubstr("record 1"), HasSubstr("'n'"), HasSubstr(c.text),
                               HasSubstr("does not fit"))))
        << c.text;
  }
}

TEST(CsvColumnsTest, FloatOverflowIsAnError) {
  std::vector<Field> fields = {MakeField("x", DType::kFloat32)};
  std::vector<std::string_view> records = {"1e39"};
  Columns columns(fields, records.size());
  EXPECT_THAT(DecodeColumns(RecordFormat::kCsv, fields, records, columns.buffers()),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("does not fit float32")));
}

TEST(CsvColumnsTest, BadNumbers) {
  for (std::string_view text : {"", "abc", "1.5.2", "1 2", "0x10", "--1"}) {
    for (DType dtype : {DType::kFloat32, DType::kFloat64, DType::kInt32}) {
      std::vector<Field> fields = {MakeField("a", DType::kInt64), MakeField("b", dtype)};
      std::string record = "1," + std::string(text);
      std::vector<std::string_view> records = {record};
      Columns columns(fields, records.size());
      EXPECT_THAT(DecodeColumns(RecordFormat::kCsv, fields, records, columns.buffers()),
                  StatusIs(Status::Code::kInvalidArgument,
                           AllOf(HasSubstr("record 0"), HasSubstr("'b'"),
                                 HasSubstr("'" + std::string(text) + "' is not a number"))))
          << text;
    }
  }
}

TEST(CsvColumnsTest, FractionIntoIntegerIsNotAnInteger) {
  std::vector<Field> fields = {MakeField("label", DType::kInt32)};
  std::vector<std::string_view> records = {"2.5"};
  Columns columns(fields, records.size());
  EXPECT_THAT(DecodeColumns(RecordFormat::kCsv, fields, records, columns.buffers()),
              StatusIs(Status::Code::kInvalidArgument,
                       AllOf(HasSubstr("'label'"), HasSubstr("not an integer"))));
}

// ---- JSONL ----

TEST(JsonlColumnsTest, EveryDtypeAndWidth) {
  std::vector<Field> fields = {MakeField("x", DType::kFloat32, 2),
                               MakeField("y", DType::kFloat64),
                               MakeField("label", DType::kInt32, 1, "target"),
                               MakeField("big", DType::kInt64),
                               MakeField("flag", DType::kUint8),
                               MakeField("pix", DType::kUint8, 3)};
  std::vector<std::string_view> records = {
      R"({"x": [1.5, 2], "y": 0.1, "target": 7, "big": 9000000000, "flag": true, "pix": [0, 1, 255]})",
      R"({"pix": [3, 4, 5], "flag": false, "big": -1, "target": 3.0, "y": [2], "x": [-1, 1e3], "z": 0})",
  };
  Columns columns(fields, records.size());
  ASSERT_OK(DecodeColumns(RecordFormat::kJsonl, fields, records, columns.buffers()));
  EXPECT_THAT(columns.Values<float>(0), ElementsAre(1.5f, 2.0f, -1.0f, 1000.0f));
  EXPECT_THAT(columns.Values<double>(1), ElementsAre(0.1, 2.0));
  EXPECT_THAT(columns.Values<int32_t>(2), ElementsAre(7, 3));
  EXPECT_THAT(columns.Values<int64_t>(3), ElementsAre(9000000000LL, -1));
  EXPECT_THAT(columns.Values<uint8_t>(4), ElementsAre(1, 0));
  EXPECT_THAT(columns.Values<uint8_t>(5), ElementsAre(0, 1, 255, 3, 4, 5));
}

TEST(JsonlColumnsTest, MissingKeyNamesRecordAndField) {
  std::vector<Field> fields = {MakeField("label", DType::kInt32, 1, "target")};
  std::vector<std::string_view> records = {R"({"target": 1})", R"({"label": 2})"};
  Columns columns(fields, records.size());
  EXPECT_THAT(
      DecodeColumns(RecordFormat::kJsonl, fields, records, columns.buffers()),
      StatusIs(Status::Code::kInvalidArgument, AllOf(HasSubstr("record 1"), HasSubstr("'label'"),
                                                     HasSubstr("key 'target' missing"))));
}

TEST(JsonlColumnsTest, OutOfRangeAndWrongTypes) {
  struct Case {
    Field field;
    std::string record;
    std::string expected;
  };
  std::vector<Case> cases = {
      {MakeField("n", DType::kUint8), R"({"n": 256})", "'256' does not fit uint8"},
      {MakeField("n", DType::kUint8), R"({"n": -1})", "'-1' does not fit uint8"},
      {MakeField("n", DType::kInt32), R"({"n": 3000000000})", "does not fit int32"},
      {MakeField("n", DType::kInt64), R"({"n": 18446744073709551615})", "does not fit int64"},
      {MakeField("n", DType::kInt64), R"({"n": 1e30})", "does not fit int64"},
      {MakeField("n", DType::kInt32), R"({"n": 2.5})", "not an integer"},
      {MakeField("x", DType::kFloat32), R"({"x": 1e300})", "does not fit float32"},
      {MakeField("x", DType::kFloat32), R"({"x": "1.5"})", "is not a number"},
      {MakeField("x", DType::kFloat32), R"({"x": null})", "is not a number"},
      {MakeField("x", DType::kFloat32, 2), R"({"x": [1]})",
       "expected 2 numbers, got an array of 1"},
      {MakeField("x", DType::kFloat32, 2), R"({"x": 1})", "expected an array of 2 numbers"},
      {MakeField("x", DType::kFloat32, 2), R"({"x": [1, "a"]})", "'\"a\"' is not a number"},
  };
  for (const Case& c : cases) {
    std::vector<Field> fields = {c.field};
    std::vector<std::string_view> records = {c.record};
    Columns columns(fields, records.size());
    EXPECT_THAT(DecodeColumns(RecordFormat::kJsonl, fields, records, columns.buffers()),
                StatusIs(Status::Code::kInvalidArgument,
                         AllOf(HasSubstr("record 0"), HasSubstr("'" + c.field.name + "'"),
                               HasSubstr(c.expected))))
        << c.record;
  }
}

TEST(JsonlColumnsTest, NotAnObject) {
  std::vector<Field> fields = {MakeField("x", DType::kFloat32)};
  Columns columns(fields, 2);
  std::vector<std::string_view> broken = {R"({"x": 1})", R"({"x": )"};
  EXPECT_THAT(DecodeColumns(RecordFormat::kJsonl, fields, broken, columns.buffers()),
              StatusIs(Status::Code::kInvalidArgument,
                       AllOf(HasSubstr("record 1"), HasSubstr("not valid JSON"))));
  std::vector<std::string_view> array = {"[1, 2]"};
  EXPECT_THAT(DecodeColumns(RecordFormat::kJsonl, fields, array, columns.buffers()),
              StatusIs(Status::Code::kInvalidArgument,
                       AllOf(HasSubstr("record 0"), HasSubstr("JSON object, got array"))));
}

// ---- raw / TFRecord ----

TEST(BinaryColumnsTest, MnistLikeRecordsCopyEachField) {
  for (RecordFormat format : {RecordFormat::kRaw, RecordFormat::kTfRecord}) {
    std::vector<Field> fields = {
        MakeField("image", DType::kFloat32, 3), MakeField("label", DType::kInt32),
        MakeField("weight", DType::kFloat64), MakeField("id", DType::kInt64),
        MakeField("mask", DType::kUint8, 2)};
    std::vector<std::string> storage(2);
    AppendPacked<float>(&storage[0], {0.5f, 1.0f, -2.0f});
    AppendPacked<int32_t>(&storage[0], {7});
    AppendPacked<double>(&storage[0], {0.25});
    AppendPacked<int64_t>(&storage[0], {1LL << 40});
    AppendPacked<uint8_t>(&storage[0], {1, 0});
    AppendPacked<float>(&storage[1], {3.0f, 4.0f, 5.0f});
    AppendPacked<int32_t>(&storage[1], {-1});
    AppendPacked<double>(&storage[1], {1e300});
    AppendPacked<int64_t>(&storage[1], {-5});
    AppendPacked<uint8_t>(&storage[1], {255, 9});
    std::vector<std::string_view> records(storage.begin(), storage.end());
    Columns columns(fields, records.size());
    ASSERT_OK(DecodeColumns(format, fields, records, columns.buffers()));
    EXPECT_THAT(columns.Values<float>(0), ElementsAre(0.5f, 1.0f, -2.0f, 3.0f, 4.0f, 5.0f));
    EXPECT_THAT(columns.Values<int32_t>(1), ElementsAre(7, -1));
    EXPECT_THAT(columns.Values<double>(2), ElementsAre(0.25, 1e300));
    EXPECT_THAT(columns.Values<int64_t>(3), ElementsAre(1LL << 40, -5));
    EXPECT_THAT(columns.Values<uint8_t>(4), ElementsAre(1, 0, 255, 9));
  }
}

TEST(BinaryColumnsTest, WrongRecordSizeNamesRecord) {
  std::vector<Field> fields = {MakeField("image", DType::kFloat32, 2),
                               MakeField("label", DType::kInt32)};
  std::string good(12, '\0');
  std::string short_record(11, '\0');
  std::vector<std::string_view> records = {good, short_record};
  Columns columns(fields, records.size());
  EXPECT_THAT(DecodeColumns(RecordFormat::kRaw, fields, records, columns.buffers()),
              StatusIs(Status::Code::kInvalidArgument,
                       AllOf(HasSubstr("record 1"), HasSubstr("11 bytes"), HasSubstr("take 12"))));
}

TEST(BinaryColumnsTest, SourceDoesNotApply) {
  std::vector<Field> fields = {MakeField("x", DType::kFloat32, 1, "0")};
  std::vector<std::string_view> records = {std::string_view("\0\0\0\0", 4)};
  Columns columns(fields, records.size());
  EXPECT_THAT(
      DecodeColumns(RecordFormat::kTfRecord, fields, records, columns.buffers()),
      StatusIs(Status::Code::kInvalidArgument, AllOf(HasSubstr("'x'"), HasSubstr("source"))));
}

// ---- arguments ----

TEST(DecodeColumnsTest, EmptyBatchTouchesNothing) {
  std::vector<Field> fields = {MakeField("x", DType::kFloat32)};
  std::vector<ColumnBuffer> buffers = {{nullptr, 0}};
  for (RecordFormat format :
       {RecordFormat::kCsv, RecordFormat::kJsonl, RecordFormat::kRaw, RecordFormat::kTfRecord}) {
    EXPECT_OK(DecodeColumns(format, fields, {}, buffers));
  }
}

TEST(DecodeColumnsTest, BuffersMustMatchFieldsAndBatch) {
  std::vector<Field> fields = {MakeField("x", DType::kFloat32), MakeField("y", DType::kFloat32)};
  std::vector<std::string_view> records = {"1,2", "3,4"};
  Columns one_row(fields, 1);
  EXPECT_THAT(
      DecodeColumns(RecordFormat::kCsv, fields, records, one_row.buffers()),
      StatusIs(Status::Code::kInvalidArgument, AllOf(HasSubstr("'x'"), HasSubstr("1 rows"))));
  Columns enough(fields, 2);
  std::vector<ColumnBuffer> too_few = {enough.buffers()[0]};
  EXPECT_THAT(DecodeColumns(RecordFormat::kCsv, fields, records, too_few),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("2 fields but 1 buffers")));
  std::vector<Field> zero_width = {MakeField("x", DType::kFloat32, 0), fields[1]};
  EXPECT_THAT(DecodeColumns(RecordFormat::kCsv, zero_width, records, enough.buffers()),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("width")));
}

}  // namespace
}  // namespace drover::feed
