#include "wire/frame.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace drover::wire {
namespace {

using ::testing::HasSubstr;

Frame MustRead(FrameReader& reader) {
  Frame frame;
  FrameError error;
  EXPECT_EQ(reader.Next(&frame, &error), FrameReader::Step::kFrame) << error.message;
  return frame;
}

FrameError MustFail(FrameReader& reader) {
  Frame frame;
  FrameError error;
  EXPECT_EQ(reader.Next(&frame, &error), FrameReader::Step::kError);
  return error;
}

TEST(FrameTest, HeaderIsLittleEndianAndFixedWidth) {
  auto header = EncodeHeader(/*type=*/0x0102, /*length=*/0x03040506);
  EXPECT_EQ(std::string(header.data(), header.size()),
            std::string("DRVR\x05\x00\x02\x01\x06\x05\x04\x03", 12));
}

TEST(FrameTest, RoundTripsMessages) {
  Hello hello;
  hello.set_client_nonce(std::string(32, 'n'));
  hello.set_name("executor 3");
  std::string bytes = EncodeFrame(HELLO, hello) + EncodeFrame(HEARTBEAT, Heartbeat());
  FrameReader reader(kServerMaxFrameBytes);
  reader.Append(bytes);
  Frame first = MustRead(reader);
  EXPECT_EQ(first.type(), HELLO);
  Hello parsed;
  FrameError error;
  ASSERT_TRUE(ParseBody(first, &parsed, &error));
  EXPECT_EQ(parsed.name(), "executor 3");
  Frame second = MustRead(reader);
  EXPECT_EQ(second.type(), HEARTBEAT);
  EXPECT_EQ(second.body, "");
  Frame none;
  EXPECT_EQ(reader.Next(&none, &error), FrameReader::Step::kNeedMore);
  EXPECT_FALSE(reader.mid_frame());
}

TEST(FrameTest, ReassemblesFramesArrivingByteByByte) {
  Register reg;
  reg.mutable_node()->set_executor_id("7");
  reg.mutable_node()->add_ports(2222);
  std::string bytes = EncodeFrame(REGISTER, reg);
  FrameReader reader(kServerMaxFrameBytes);
  Frame frame;
  FrameError error;
  for (size_t i = 0; i + 1 < bytes.size(); ++i) {
    reader.Append(bytes.substr(i, 1));
    ASSERT_EQ(reader.Next(&frame, &error), FrameReader::Step::kNeedMore) << i;
    EXPECT_TRUE(reader.mid_frame());
  }
  reader.Append(bytes.substr(bytes.size() - 1));
  ASSERT_EQ(reader.Next(&frame, &error), FrameReader::Step::kFrame);
  EXPECT_EQ(frame.type(), REGISTER);
}

TEST(FrameTest, RejectsGarbageAtTheFirstWrongByte) {
  FrameReader reader(kServerMaxFrameBytes);
  reader.Append("GE");  // an HTTP client
  FrameError error = MustFail(reader);
  EXPECT_EQ(error.code, BAD_FRAME);
  EXPECT_THAT(error.message, HasSubstr("\"GE\""));
}

TEST(FrameTest, RejectsOtherVersionsNamingBoth) {
  auto header = EncodeHeader(HELLO, 0, /*version=*/7);
  FrameReader reader(kServerMaxFrameBytes);
  reader.Append(std::string_view(header.data(), header.size()));
  FrameError error = MustFail(reader);
  EXPECT_EQ(error.code, UNSUPPORTED_VERSION);
  EXPECT_THAT(error.message, HasSubstr("version 7"));
  EXPECT_THAT(error.message, HasSubstr("speaks 5"));
}

TEST(FrameTest, SealedFramesCarryTheirTrailer) {
  std::string bytes = EncodeFrame(HEARTBEAT, std::string_view("hb")) + "12345678" +
                      std::string(kFrameMacBytes, 'm');
  FrameReader reader(kServerMaxFrameBytes);
  reader.set_sealed(true);
  reader.Append(bytes.substr(0, bytes.size() - 1));
  Frame frame;
  FrameError error;
  // The body is there; the frame is not whole until its trailer is.
  ASSERT_EQ(reader.Next(&frame, &error), FrameReader::Step::kNeedMore);
  reader.Append(bytes.substr(bytes.size() - 1));
  ASSERT_EQ(reader.Next(&frame, &error), FrameReader::Step::kFrame);
  EXPECT_EQ(frame.body, "hb");
  EXPECT_EQ(frame.sequence, 0x3837363534333231u);
  EXPECT_EQ(frame.mac, std::string(kFrameMacBytes, 'm'));
  EXPECT_FALSE(reader.mid_frame());
}

TEST(FrameTest, RejectsOversizeLengthBeforeBuffering) {
  auto header = EncodeHeader(REGISTER, 0xfffffff0u);
  FrameReader reader(1024);
  reader.Append(std::string_view(header.data(), header.size()));
  FrameError error = MustFail(reader);
  EXPECT_EQ(error.code, FRAME_TOO_LARGE);
  EXPECT_THAT(error.message, HasSubstr("4294967280"));
  EXPECT_THAT(error.message, HasSubstr("1024"));
}

TEST(FrameTest, RejectsUnknownTypes) {
  for (uint16_t type : {0, 6, 13, 999, 0xffff}) {
    auto header = EncodeHeader(type, 0);
    FrameReader reader(kServerMaxFrameBytes);
    reader.Append(std::string_view(header.data(), header.size()));
    FrameError error = MustFail(reader);
    EXPECT_EQ(error.code, UNKNOWN_MESSAGE) << type;
    EXPECT_THAT(error.message, HasSubstr(std::to_string(type)));
  }
}

TEST(FrameTest, MalformedBodyIsReportedByParseBody) {
  FrameReader reader(kServerMaxFrameBytes);
  reader.Append(EncodeFrame(REGISTER, std::string("\xff\xff\xff", 3)));
  Frame frame = MustRead(reader);
  Register reg;
  FrameError error;
  EXPECT_FALSE(ParseBody(frame, &reg, &error));
  EXPECT_EQ(error.code, MALFORMED);
  EXPECT_THAT(error.message, HasSubstr("REGISTER"));
}

TEST(FrameTest, ErrorFramesCarryCodeAndMessage) {
  FrameReader reader(kClientMaxFrameBytes);
  reader.Append(EncodeError(AUTH_FAILED, "authentication failed: wrong token"));
  Frame frame = MustRead(reader);
  ASSERT_EQ(frame.type(), ERROR);
  Error error;
  FrameError parse_error;
  ASSERT_TRUE(ParseBody(frame, &error, &parse_error));
  EXPECT_EQ(error.code(), AUTH_FAILED);
  EXPECT_EQ(error.message(), "authentication failed: wrong token");
}

TEST(FrameTest, LongStreamsDoNotGrowTheBufferForever) {
  FrameReader reader(kServerMaxFrameBytes);
  std::string heartbeat = EncodeFrame(HEARTBEAT, Heartbeat());
  Frame frame;
  FrameError error;
  for (int i = 0; i < 10000; ++i) {
    reader.Append(heartbeat);
    ASSERT_EQ(reader.Next(&frame, &error), FrameReader::Step::kFrame);
  }
  EXPECT_EQ(reader.buffered_bytes(), 0u);
}

}  // namespace
}  // namespace drover::wire
