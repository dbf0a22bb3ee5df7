#include "os/output_relay.h"

#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "os/fd_io.h"

namespace drover::os {
namespace {

struct Decoded {
  std::vector<std::string> channels = std::vector<std::string>(3);
  std::vector<bool> ended = std::vector<bool>(3, false);
  std::string status;
  std::string raw;
};

void Collect(Decoded* into, const RelayFrame& frame) {
  switch (frame.kind) {
    case 'o':
      into->channels.at(frame.channel).append(frame.payload);
      break;
    case 'e':
      into->ended.at(frame.channel) = true;
      break;
    case 's':
      into->status.append(frame.payload);
      break;
    default:
      into->raw.append(frame.payload);
  }
}

// A header whose kind is a NUL byte: not a frame.
const std::string kNulKind(
    "\x1e\0"
    "1 0\n",
    6);

// A header a byte longer than the longest a frame may have (43 bytes between
// the marker and the newline): not a frame, whether it arrives whole or a
// byte at a time (the fuzzer found the two disagreeing).
const std::string kLongHeader = "\x1eo" + std::string(39, '0') + "1 2\nab";

std::string SampleStream() {
  return "ssh: warning\n" + EncodeRelayFrame('o', 0, "zero\n") +
         EncodeRelayFrame('o', 2, std::string(5000, 'x')) + EncodeRelayFrame('s', 0, "1 0\n") +
         "\x1e" + "not a header\n" + EncodeRelayFrame('o', 1, "one, with \x1e inside\n") +
         EncodeRelayFrame('e', 1, "") + EncodeRelayFrame('o', 0, "") + "\x1eo9 99999999999\n" +
         kLongHeader + kNulKind;
}

TEST(RelayDecoderTest, FramesComeOutWholeWhateverThePiecesTheyArriveIn) {
  const std::string stream = SampleStream();
  for (size_t piece : {size_t{1}, size_t{2}, size_t{7}, size_t{64}, stream.size()}) {
    Decoded decoded;
    RelayDecoder decoder;
    for (size_t at = 0; at < stream.size(); at += piece) {
      decoder.Feed(std::string_view(stream).substr(at, piece),
                   [&](const RelayFrame& frame) { Collect(&decoded, frame); });
    }
    decoder.Finish([&](const RelayFrame& frame) { Collect(&decoded, frame); });
    EXPECT_EQ(decoded.channels[0], "zero\n") << piece;
    EXPECT_EQ(decoded.channels[1], "one, with \x1e inside\n") << piece;
    EXPECT_EQ(decoded.channels[2], std::string(5000, 'x')) << piece;
    EXPECT_EQ(decoded.ended, (std::vector<bool>{false, true, false})) << piece;
    EXPECT_EQ(decoded.status, "1 0\n") << piece;
    // What is not a frame is kept, not lost: the stray marker and its
    // line, and a header that asks for more than a frame may hold.
    EXPECT_EQ(decoded.raw,
              "ssh: warning\n\x1enot a header\n\x1eo9 99999999999\n" + kLongHeader + kNulKind)
        << piece;
    EXPECT_EQ(decoder.pending(), 0u);
  }
}

TEST(RelayDecoderTest, AStreamCutInsideAFrameIsHandedOnAsItCame) {
  const std::string frame = EncodeRelayFrame('o', 0, "cut short");
  RelayDecoder decoder;
  Decoded decoded;
  decoder.Feed(frame.substr(0, frame.size() - 3),
               [&](const RelayFrame& f) { Collect(&decoded, f); });
  EXPECT_EQ(decoded.channels[0], "");
  decoder.Finish([&](const RelayFrame& f) { Collect(&decoded, f); });
  EXPECT_EQ(decoded.raw, frame.substr(0, frame.size() - 3));
}

// Reads every fd to its end, all at once (as the driver does), so no pipe
// holds up another.
std::vector<std::string> ReadAllToEnd(const std::vector<int>& fds) {
  std::vector<std::string> got(fds.size());
  std::vector<bool> open(fds.size(), true);
  for (;;) {
    std::vector<pollfd> polled;
    std::vector<size_t> which;
    for (size_t i = 0; i < fds.size(); ++i) {
      if (!open[i]) continue;
      polled.push_back({fds[i], POLLIN, 0});
      which.push_back(i);
    }
    if (polled.empty()) return got;
    if (::poll(polled.data(), polled.size(), 30'000) <= 0) {
      ADD_FAILURE() << "a relayed pipe never ended";
      return got;
    }
    for (size_t k = 0; k < polled.size(); ++k) {
      if (polled[k].revents != 0 && !ReadAvailable(fds[which[k]], &got[which[k]])) {
        open[which[k]] = false;
      }
    }
  }
}

void WriteAll(int fd, const std::string& data) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t wrote = ::write(fd, data.data() + done, data.size() - done);
    ASSERT_GT(wrote, 0);
    done += static_cast<size_t>(wrote);
  }
}

TEST(OutputRelayTest, EachChannelArrivesApartWithItsEndAndTheStatusLines) {
  Result<Pipe> stream = MakePipe(O_CLOEXEC);
  ASSERT_TRUE(stream.ok());
  const int stream_read = stream->read.get();
  ::fcntl(stream_read, F_SETFL, O_NONBLOCK);
  Result<std::unique_ptr<RelayDemux>> demux = RelayDemux::Start(stream_read, -1, 3);
  ASSERT_TRUE(demux.ok()) << demux.status().message();
  std::vector<UniqueFd> readers;
  for (size_t i = 0; i < 3; ++i) readers.push_back((*demux)->TakeChannelReader(i));
  readers.push_back((*demux)->TakeStatusReader());

  Result<std::unique_ptr<OutputRelay>> relay = OutputRelay::Start(3, std::move(stream->write));
  ASSERT_TRUE(relay.ok()) << relay.status().message();
  std::vector<UniqueFd> writers;
  for (size_t i = 0; i < 3; ++i) writers.push_back((*relay)->TakeChannelWriter(i));
  UniqueFd status = (*relay)->TakeStatusWriter();

  // Channel 2 sends more than the relay holds for a slow reader (8 MiB),
  // written while the reader is busy with nothing, so both sides back up.
  const std::string big(8 << 20, 'b');
  std::vector<std::string> got;
  std::thread reader([&] {
    std::vector<int> fds;
    for (const UniqueFd& fd : readers) fds.push_back(fd.get());
    got = ReadAllToEnd(fds);
  });
  WriteAll(writers[0].get(), "node zero\n");
  WriteAll(writers[1].get(), "node one\n");
  writers[1].Reset();  // node one ended first
  WriteAll(status.get(), "1 0\n");
  WriteAll(writers[2].get(), big);
  WriteAll(status.get(), "2 3\n");
  WriteAll(writers[0].get(), "node zero's last line\n");
  writers.clear();
  status.Reset();
  (*relay)->Finish(std::chrono::seconds(30));
  reader.join();
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got[0], "node zero\nnode zero's last line\n");
  EXPECT_EQ(got[1], "node one\n");
  EXPECT_EQ(got[2].size(), big.size());
  EXPECT_TRUE(got[2] == big);
  EXPECT_EQ(got[3], "1 0\n2 3\n");
}

TEST(OutputRelayTest, FinishGivesUpOnAChannelSomeoneStillHolds) {
  Result<Pipe> stream = MakePipe(O_CLOEXEC);
  ASSERT_TRUE(stream.ok());
  // Another holder of the stream's file description (a terminal, by hand).
  UniqueFd shared(::dup(stream->write.get()));
  Result<std::unique_ptr<OutputRelay>> relay = OutputRelay::Start(1, std::move(stream->write));
  ASSERT_TRUE(relay.ok());
  UniqueFd held = (*relay)->TakeChannelWriter(0);  // a leftover process's copy
  WriteAll(held.get(), "before\n");
  (*relay)->Finish(std::chrono::milliseconds(50));
  // It came blocking and goes back so.
  EXPECT_EQ(::fcntl(shared.get(), F_GETFL) & O_NONBLOCK, 0);
  shared.Reset();
  // The relay's end closed the stream; what came before it arrived.
  ::fcntl(stream->read.get(), F_SETFL, O_NONBLOCK);
  const std::string data = ReadAllToEnd({stream->read.get()})[0];
  RelayDecoder decoder;
  Decoded decoded;
  decoder.Feed(data, [&](const RelayFrame& f) { Collect(&decoded, f); });
  EXPECT_EQ(decoded.channels[0], "before\n");
}

TEST(RelayDemuxTest, TheLaunchersOwnOutputGoesToChannelZeroAndStoppingIsImmediate) {
  Result<Pipe> frames = MakePipe(O_CLOEXEC);
  Result<Pipe> raw = MakePipe(O_CLOEXEC);
  ASSERT_TRUE(frames.ok() && raw.ok());
  ::fcntl(frames->read.get(), F_SETFL, O_NONBLOCK);
  ::fcntl(raw->read.get(), F_SETFL, O_NONBLOCK);
  Result<std::unique_ptr<RelayDemux>> demux =
      RelayDemux::Start(frames->read.get(), raw->read.get(), 2);
  ASSERT_TRUE(demux.ok());
  UniqueFd zero = (*demux)->TakeChannelReader(0);
  UniqueFd one = (*demux)->TakeChannelReader(1);
  UniqueFd status = (*demux)->TakeStatusReader();
  WriteAll(raw->write.get(), "Connection to h1 closed.\n");
  WriteAll(frames->write.get(), EncodeRelayFrame('o', 1, "one\n") + EncodeRelayFrame('e', 1, ""));
  frames->write.Reset();
  raw->write.Reset();
  std::vector<std::string> got = ReadAllToEnd({zero.get(), one.get(), status.get()});
  EXPECT_EQ(got[0], "Connection to h1 closed.\n");
  EXPECT_EQ(got[1], "one\n");
  EXPECT_EQ(got[2], "");

  // A demux whose readers never read stops when destroyed.
  Result<Pipe> busy = MakePipe(O_CLOEXEC);
  ASSERT_TRUE(busy.ok());
  ::fcntl(busy->read.get(), F_SETFL, O_NONBLOCK);
  Result<std::unique_ptr<RelayDemux>> stuck = RelayDemux::Start(busy->read.get(), -1, 1);
  ASSERT_TRUE(stuck.ok());
  UniqueFd unread = (*stuck)->TakeChannelReader(0);
  ::fcntl(busy->write.get(), F_SETFL, O_NONBLOCK);
  size_t done = 0;
  const std::string frame = EncodeRelayFrame('o', 0, std::string(60000, 'z'));
  for (int i = 0; i < 20; ++i) {
    done = 0;
    WriteAvailable(busy->write.get(), frame, &done);
  }
  stuck->reset();
}

// A host agent's end counts once its nodes' output is in (HostAgent::ExitOf
// takes the status pipe's end for it): with megabytes still held for a
// channel when the launcher ends, the status pipe ends only after that
// channel's pipe took them all, however slowly its reader reads.
TEST(RelayDemuxTest, TheStatusPipeEndsAfterEveryChannelTookItsOutput) {
  Result<Pipe> frames = MakePipe(O_CLOEXEC | O_NONBLOCK);
  ASSERT_TRUE(frames.ok());
  Result<std::unique_ptr<RelayDemux>> demux = RelayDemux::Start(frames->read.get(), -1, 1);
  ASSERT_TRUE(demux.ok());
  UniqueFd channel = (*demux)->TakeChannelReader(0);
  UniqueFd status = (*demux)->TakeStatusReader();
  // Far more than a pipe holds, less than the demux holds before it stops
  // reading its source (1 MiB).
  const std::string output(512 << 10, 'o');
  std::thread launcher([&frames, &output] {
    ::fcntl(frames->write.get(), F_SETFL, 0);  // blocking: the demux reads as it can
    WriteAll(frames->write.get(),
             EncodeRelayFrame('o', 0, output) + EncodeRelayFrame('s', 0, "0 0\n"));
    frames->write.Reset();  // the launcher ended
  });
  // The status line comes while the channel, unread, still holds output;
  // its pipe does not end then.
  std::string line;
  char byte;
  for (int polls = 0; line.size() < 4; ++polls) {
    ASSERT_LT(polls, 3000) << "no status line";  // a hang detector, not a timing check
    pollfd ready{status.get(), POLLIN, 0};
    ASSERT_GE(::poll(&ready, 1, 10), 0);
    if (ready.revents != 0 && ::read(status.get(), &byte, 1) == 1) line += byte;
  }
  launcher.join();
  EXPECT_EQ(line, "0 0\n");
  EXPECT_EQ(::read(status.get(), &byte, 1), -1) << "the status pipe ended before the channel";
  EXPECT_EQ(errno, EAGAIN);
  std::vector<std::string> got = ReadAllToEnd({channel.get(), status.get()});
  EXPECT_EQ(got[0], output);
  EXPECT_EQ(got[1], "");
}

size_t ThreadsOfThisProcess() {
  size_t count = 0;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/task")) {
    (void)entry;
    ++count;
  }
  return count;
}

TEST(RelayDemuxTest, OneThreadServesEveryDemuxOfTheProcess) {
  // The hub's thread exists once any demux has.
  Result<Pipe> first = MakePipe(O_CLOEXEC | O_NONBLOCK);
  ASSERT_TRUE(first.ok());
  Result<std::unique_ptr<RelayDemux>> warm = RelayDemux::Start(first->read.get(), -1, 1);
  ASSERT_TRUE(warm.ok());
  const size_t before = ThreadsOfThisProcess();
  constexpr size_t kHosts = 40;
  std::vector<Pipe> streams;
  std::vector<std::unique_ptr<RelayDemux>> demuxes;
  std::vector<int> readers;
  std::vector<UniqueFd> owned;
  for (size_t h = 0; h < kHosts; ++h) {
    Result<Pipe> stream = MakePipe(O_CLOEXEC | O_NONBLOCK);
    ASSERT_TRUE(stream.ok());
    Result<std::unique_ptr<RelayDemux>> demux = RelayDemux::Start(stream->read.get(), -1, 2);
    ASSERT_TRUE(demux.ok());
    for (size_t c = 0; c < 2; ++c) {
      owned.push_back((*demux)->TakeChannelReader(c));
      readers.push_back(owned.back().get());
    }
    owned.push_back((*demux)->TakeStatusReader());
    readers.push_back(owned.back().get());
    WriteAll(stream->write.get(),
             EncodeRelayFrame('o', 0, "host " + std::to_string(h) + " node 0\n") +
                 EncodeRelayFrame('o', 1, "host " + std::to_string(h) + " node 1\n") +
                 EncodeRelayFrame('s', 0, std::to_string(h) + " 0\n"));
    stream->write.Reset();  // the launcher ended
    streams.push_back(std::move(stream).value());
    demuxes.push_back(std::move(demux).value());
  }
  EXPECT_EQ(ThreadsOfThisProcess(), before);
  std::vector<std::string> got = ReadAllToEnd(readers);
  for (size_t h = 0; h < kHosts; ++h) {
    EXPECT_EQ(got[3 * h], "host " + std::to_string(h) + " node 0\n");
    EXPECT_EQ(got[3 * h + 1], "host " + std::to_string(h) + " node 1\n");
    EXPECT_EQ(got[3 * h + 2], std::to_string(h) + " 0\n");
  }
}

}  // namespace
}  // namespace drover::os
