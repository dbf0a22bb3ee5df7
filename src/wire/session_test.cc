#include "wire/session.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "testing/status_matchers.h"

namespace drover::wire {
namespace {

using ::testing::HasSubstr;

Token Key(unsigned char seed) {
  Token key;
  for (size_t i = 0; i < key.size(); ++i) key[i] = static_cast<unsigned char>(seed + 3 * i);
  return key;
}

// Reads one sealed frame out of `bytes`.
Frame ReadSealed(const std::string& bytes) {
  FrameReader reader(1 << 20);
  reader.set_sealed(true);
  reader.Append(bytes);
  Frame frame;
  FrameError error;
  EXPECT_EQ(reader.Next(&frame, &error), FrameReader::Step::kFrame) << error.message;
  EXPECT_FALSE(reader.mid_frame());
  return frame;
}

Control Stop() {
  Control control;
  control.set_kind(Control::STOP_ALL);
  return control;
}

TEST(SessionTest, SealedFramesOpenInOrder) {
  FrameSealer sealer(Key(1), Direction::kClientToServer);
  FrameOpener opener(Key(1), Direction::kClientToServer);
  for (int i = 0; i < 3; ++i) {
    Heartbeat heartbeat;
    heartbeat.set_sequence(static_cast<uint64_t>(i));
    std::string bytes = sealer.Seal(HEARTBEAT, heartbeat);
    EXPECT_EQ(bytes.size(), kHeaderBytes + heartbeat.ByteSizeLong() + kTrailerBytes);
    Frame frame = ReadSealed(bytes);
    EXPECT_EQ(frame.sequence, static_cast<uint64_t>(i));
    FrameError error;
    EXPECT_TRUE(opener.Open(frame, &error)) << error.message;
  }
  EXPECT_EQ(opener.next_sequence(), 3u);
}

TEST(SessionTest, AnAlteredByteAnywhereFailsTheMac) {
  FrameSealer sealer(Key(1), Direction::kServerToClient);
  std::string bytes = sealer.Seal(CONTROL, Stop());
  // Every byte of header, body and trailer is covered.
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string altered = bytes;
    // The magic and the version are checked by the reader before the MAC.
    if (i < 6) continue;
    altered[i] = static_cast<char>(altered[i] ^ 0x01);
    FrameReader reader(1 << 20);
    reader.set_sealed(true);
    reader.Append(altered);
    Frame frame;
    FrameError error;
    if (reader.Next(&frame, &error) != FrameReader::Step::kFrame) continue;  // a bad header
    FrameOpener opener(Key(1), Direction::kServerToClient);
    EXPECT_FALSE(opener.Open(frame, &error)) << "byte " << i;
    EXPECT_EQ(error.code, FRAME_AUTH_FAILED);
  }
}

TEST(SessionTest, ReplayedReorderedAndReflectedFramesFail) {
  FrameSealer sealer(Key(1), Direction::kClientToServer);
  std::string first = sealer.Seal(CONTROL, Stop());
  std::string second = sealer.Seal(CONTROL, Stop());

  FrameOpener reordered(Key(1), Direction::kClientToServer);
  FrameError error;
  EXPECT_FALSE(reordered.Open(ReadSealed(second), &error));
  EXPECT_THAT(error.message, HasSubstr("sequence 1, expected 0"));

  FrameOpener replayed(Key(1), Direction::kClientToServer);
  ASSERT_TRUE(replayed.Open(ReadSealed(first), &error));
  EXPECT_FALSE(replayed.Open(ReadSealed(first), &error));
  EXPECT_THAT(error.message, HasSubstr("sequence 0, expected 1 (replayed"));

  // A frame sent back to its sender (the other direction) does not open.
  FrameOpener reflected(Key(1), Direction::kServerToClient);
  EXPECT_FALSE(reflected.Open(ReadSealed(first), &error));
  EXPECT_THAT(error.message, HasSubstr("MAC check failed"));

  // Nor under another session's key.
  FrameOpener other(Key(2), Direction::kClientToServer);
  EXPECT_FALSE(other.Open(ReadSealed(first), &error));
}

TEST(SessionTest, ASharedBodyPrefixHashedOnceGivesTheSameMac) {
  std::string shared(100000, 'x');
  std::string own = "per-node";
  BodyDigest prefix;
  prefix.Update(shared);
  BodyDigest continued = prefix;
  continued.Update(own);
  BodyDigest whole;
  whole.Update(shared + own);
  EXPECT_EQ(continued.Finish(), whole.Finish());
  EXPECT_NE(prefix.Finish(), whole.Finish());
  // Finish leaves the state as it was.
  EXPECT_EQ(continued.Finish(), whole.Finish());
}

TEST(SessionTest, SealedErrorsAreVersion2) {
  FrameSealer sealer(Key(1), Direction::kServerToClient);
  Frame frame = ReadSealed(sealer.SealError(STOPPED, "bye"));
  EXPECT_EQ(frame.header.version, kProtocolVersion);
  FrameOpener opener(Key(1), Direction::kServerToClient);
  FrameError error;
  EXPECT_TRUE(opener.Open(frame, &error));
}

TEST(SessionTest, UnsealedVersion1ErrorsAreReadOnlyBeforeTheHandshake) {
  std::string bytes = EncodeError(AUTH_FAILED, "no");
  FrameReader open_reader(1024);
  open_reader.Append(bytes);
  Frame frame;
  FrameError error;
  ASSERT_EQ(open_reader.Next(&frame, &error), FrameReader::Step::kFrame) << error.message;
  EXPECT_EQ(frame.header.version, kErrorFrameVersion);
  FrameReader sealed_reader(1024);
  sealed_reader.set_sealed(true);
  sealed_reader.Append(bytes);
  EXPECT_EQ(sealed_reader.Next(&frame, &error), FrameReader::Step::kError);
  EXPECT_EQ(error.code, UNSUPPORTED_VERSION);
  // Any other frame of version 1 is a peer that speaks the old protocol.
  std::array<char, kHeaderBytes> hello = EncodeHeader(HELLO, 0, 1);
  FrameReader reader(1024);
  reader.Append(std::string_view(hello.data(), hello.size()));
  EXPECT_EQ(reader.Next(&frame, &error), FrameReader::Step::kError);
  EXPECT_EQ(error.message, "peer speaks protocol version 1; this drover speaks 5");
}

}  // namespace
}  // namespace drover::wire
