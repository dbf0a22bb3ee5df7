#include "feed/shm_channel.h"

#include <fcntl.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <deque>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "feed/feed_test_util.h"
#include "testing/child_process.h"
#include "testing/status_matchers.h"

namespace drover::feed {
namespace {

using ::drover::feed::testing::ExitedWith;
using ::drover::feed::testing::In;
using ::drover::feed::testing::kInputOffsetOffset;
using ::drover::feed::testing::kInputRingHeader;
using ::drover::feed::testing::kOutputOffsetOffset;
using ::drover::feed::testing::kReadPos;
using ::drover::feed::testing::kRingBytesOffset;
using ::drover::feed::testing::kWritePos;
using ::drover::feed::testing::OutputRingHeader;
using ::drover::feed::testing::Peek;
using ::drover::feed::testing::PublishBatch;
using ::drover::feed::testing::PublishExtent;
using ::drover::feed::testing::RecordsOf;
using ::drover::feed::testing::Scribble;
using ::drover::testing::Child;
using ::drover::testing::ChildBody;
using ::drover::testing::InheritedFd;
using ::drover::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Code = Status::Code;
using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr uint64_t kBatchHeaderBytes = 40;  // docs/shm_queue_format.md

uint64_t AlignUp(uint64_t value, uint64_t to) {
  return (value + to - 1) / to * to;
}

// Record number n: its 8-byte number, then filler that depends on n, so a
// record read back can be checked byte by byte.
std::string NumberedRecord(uint64_t n) {
  std::string record(sizeof(n) + (n * 7919) % 61, '\0');
  std::memcpy(record.data(), &n, sizeof(n));
  for (size_t i = sizeof(n); i < record.size(); ++i) {
    record[i] = static_cast<char>((n + i) & 0xff);
  }
  return record;
}

// The record's number, or UINT64_MAX when its bytes are not NumberedRecord's.
uint64_t NumberOf(std::string_view record) {
  uint64_t n;
  if (record.size() < sizeof(n)) return UINT64_MAX;
  std::memcpy(&n, record.data(), sizeof(n));
  if (record != NumberedRecord(n)) return UINT64_MAX;
  return n;
}

TEST(ShmChannelTest, CreateRoundsTheRingSize) {
  ASSERT_OK_AND_ASSIGN(ShmChannel small, ShmChannel::Create(1));
  EXPECT_EQ(small.ring_bytes(), 64u * 1024);
  EXPECT_EQ(small.max_batch_bytes(), 32u * 1024);
  ASSERT_OK_AND_ASSIGN(ShmChannel odd, ShmChannel::Create(70000));
  EXPECT_EQ(odd.ring_bytes(), 73728u);
  EXPECT_EQ(odd.state(), RunState::kRunning);
  EXPECT_EQ(odd.error(), "");
}

TEST(ShmChannelTest, RoundTrip) {
  ASSERT_OK_AND_ASSIGN(ShmChannel channel, ShmChannel::Create(64 << 10));
  RingWriter writer(channel, /*input_ring=*/true);
  RingReader reader(channel, /*input_ring=*/true);
  ASSERT_OK_AND_ASSIGN(std::optional<BatchView> none, reader.TryNext());
  EXPECT_FALSE(none.has_value());

  const std::vector<std::string> records = {"alpha", "", std::string("\0\n\xff", 3), "z"};
  BatchInfo info;
  info.feed_seq = 3;
  info.partition = 7;
  info.epoch = 2;
  info.flags = kEndOfPartition;
  info.first_record = 1000;
  ASSERT_OK(PublishBatch(writer, info, records, /*source_offset=*/4242));

  ASSERT_OK_AND_ASSIGN(std::optional<BatchView> batch, reader.Next(In(seconds(5))));
  ASSERT_TRUE(batch.has_value());
  EXPECT_EQ(batch->info.feed_seq, 3u);
  EXPECT_EQ(batch->info.partition, 7u);
  EXPECT_EQ(batch->info.epoch, 2u);
  EXPECT_EQ(batch->info.flags, kEndOfPartition);
  EXPECT_EQ(batch->info.first_record, 1000u);
  EXPECT_EQ(batch->info.record_count, 4u);
  EXPECT_EQ(batch->bytes, 4 * sizeof(uint32_t) + 5 + 0 + 3 + 1);
  EXPECT_EQ(batch->end, AlignUp(kBatchHeaderBytes + batch->bytes, 8));
  EXPECT_EQ(RecordsOf(*batch), records);
  reader.Release(batch->end);

  ASSERT_OK_AND_ASSIGN(std::optional<CommitPoint> commit, writer.LastCommit());
  ASSERT_TRUE(commit.has_value());
  EXPECT_EQ(commit->feed_seq, 3u);
  EXPECT_EQ(commit->flags, kEndOfPartition);
  EXPECT_EQ(commit->records_through, 1004u);
  EXPECT_EQ(commit->source_offset, 4242u);

  ASSERT_OK_AND_ASSIGN(none, reader.TryNext());
  EXPECT_FALSE(none.has_value());
  EXPECT_FALSE(reader.closed_and_drained());
}

// Issue #9: the reader counts what it was handed in the ring's header, and
// any process that maps the channel (the agent) reads it.
TEST(ShmChannelTest, ReaderProgressIsCountedInTheSharedHeader) {
  ASSERT_OK_AND_ASSIGN(ShmChannel channel, ShmChannel::Create(64 << 10));
  RingWriter writer(channel, /*input_ring=*/true);
  RingReader reader(channel, /*input_ring=*/true);
  FeedProgress none = ReadRingProgress(channel, /*input_ring=*/true);
  EXPECT_EQ(none.records, 0u);
  EXPECT_EQ(none.queue_capacity, 64u << 10);

  BatchInfo first;
  first.epoch = 0;
  ASSERT_OK(PublishBatch(writer, first, {"abc", "de"}));
  BatchInfo last;
  last.epoch = 1;
  last.flags = kEndOfPartition;
  ASSERT_OK(PublishBatch(writer, last, {"fghij"}));
  FeedProgress published = ReadRingProgress(channel, true);
  EXPECT_EQ(published.records, 0u);  // published, not read yet
  EXPECT_GT(published.queue_bytes, 0u);

  ASSERT_OK_AND_ASSIGN(std::optional<BatchView> one, reader.TryNext());
  ASSERT_TRUE(one.has_value());
  FeedProgress after_one = ReadRingProgress(channel, true);
  EXPECT_EQ(after_one.records, 2u);
  EXPECT_EQ(after_one.bytes, 5u);  // without the length prefixes
  EXPECT_EQ(after_one.partitions_done, 0u);
  ASSERT_OK_AND_ASSIGN(std::optional<BatchView> two, reader.TryNext());
  ASSERT_TRUE(two.has_value());
  reader.ReleaseAll();
  // Seen through a second mapping, as the agent sees it.
  ASSERT_OK_AND_ASSIGN(ShmChannel mapped, ShmChannel::Map(os::UniqueFd(::dup(channel.fd()))));
  FeedProgress after_two = ReadRingProgress(mapped, true);
  EXPECT_EQ(after_two.records, 3u);
  EXPECT_EQ(after_two.bytes, 10u);
  EXPECT_EQ(after_two.partitions_done, 1u);
  EXPECT_EQ(after_two.epoch, 1u);
  EXPECT_EQ(after_two.queue_bytes, 0u);
  EXPECT_EQ(ReadRingProgress(mapped, /*input_ring=*/false).records, 0u);
}

TEST(ShmChannelTest, EmptyBatchIsPublished) {
  ASSERT_OK_AND_ASSIGN(ShmChannel channel, ShmChannel::Create(64 << 10));
  RingWriter writer(channel, true);
  RingReader reader(channel, true);
  BatchInfo info;
  info.partition = 4;
  info.flags = kEndOfPartition;
  ASSERT_OK(PublishBatch(writer, info, {}));
  ASSERT_OK_AND_ASSIGN(std::optional<BatchView> batch, reader.TryNext());
  ASSERT_TRUE(batch.has_value());
  EXPECT_EQ(batch->info.record_count, 0u);
  EXPECT_EQ(batch->info.partition, 4u);
  EXPECT_EQ(batch->bytes, 0u);
  EXPECT_EQ(batch->end, kBatchHeaderBytes);
}

TEST(ShmChannelTest, LastCommitFollowsEveryBatch) {
  ASSERT_OK_AND_ASSIGN(ShmChannel channel, ShmChannel::Create(64 << 10));
  RingWriter writer(channel, true);
  RingReader reader(channel, true);
  ASSERT_OK_AND_ASSIGN(std::optional<CommitPoint> commit, writer.LastCommit());
  EXPECT_FALSE(commit.has_value());
  for (uint32_t i = 0; i < 7; ++i) {
    BatchInfo info;
    info.feed_seq = i / 2;
    info.first_record = 10 * i;
    info.flags = i % 2 == 1 ? kEndOfPartition : 0;
    ASSERT_OK(PublishBatch(writer, info, {"a", "b", "c"}, /*source_offset=*/100 + i));
    // A new writer (as after a restart) sees the same commit point.
    RingWriter probe(channel, true);
    ASSERT_OK_AND_ASSIGN(commit, probe.LastCommit());
    ASSERT_TRUE(commit.has_value());
    EXPECT_EQ(commit->feed_seq, i / 2);
    EXPECT_EQ(commit->records_through, 10 * i + 3);
    EXPECT_EQ(commit->source_offset, 100 + i);
    EXPECT_EQ(commit->flags, info.flags);
  }
}

// Returns the ring's write_pos to `position` (ring header offset 0,
// docs/shm_queue_format.md): the state a writer killed after writing its
// commit slot and commit_count, but before publishing write_pos, leaves.
void UnpublishTo(const ShmChannel& channel, uint64_t position) {
  auto* write_pos = reinterpret_cast<uint64_t*>(channel.input());
  std::atomic_ref<uint64_t>(*write_pos).store(position, std::memory_order_release);
}

uint64_t WritePos(const ShmChannel& channel) {
  return std::atomic_ref<uint64_t>(*reinterpret_cast<uint64_t*>(channel.input())).load();
}

// Two writers in a row killed while publishing (each after its commit slot
// and commit_count were written, before write_pos): the commit point of the
// last published batch must survive both.
TEST(ShmChannelTest, CommitPointSurvivesTwoWritersKilledWhilePublishing) {
  ASSERT_OK_AND_ASSIGN(ShmChannel channel, ShmChannel::Create(64 << 10));
  {
    RingWriter first(channel, true);
    ASSERT_OK(PublishBatch(first, BatchInfo{}, {"a", "b", "c"}, /*source_offset=*/30));
  }
  const uint64_t published = WritePos(channel);
  BatchInfo next;
  next.first_record = 3;
  for (int killed = 0; killed < 3; ++killed) {
    RingWriter writer(channel, true);
    ASSERT_OK_AND_ASSIGN(std::optional<CommitPoint> commit, writer.LastCommit());
    ASSERT_TRUE(commit.has_value()) << "after " << killed << " killed writers";
    EXPECT_EQ(commit->records_through, 3u);
    EXPECT_EQ(commit->source_offset, 30u);
    ASSERT_OK(PublishBatch(writer, next, {"lost " + std::to_string(killed)}, 40));
    UnpublishTo(channel, published);
  }
  // The next writer resumes after "c"; the reader never sees the lost batches.
  RingWriter writer(channel, true);
  ASSERT_OK_AND_ASSIGN(std::optional<CommitPoint> commit, writer.LastCommit());
  ASSERT_TRUE(commit.has_value());
  EXPECT_EQ(commit->records_through, 3u);
  ASSERT_OK(PublishBatch(writer, next, {"d"}, 40));
  RingReader reader(channel, true);
  ASSERT_OK_AND_ASSIGN(std::optional<BatchView> batch, reader.TryNext());
  ASSERT_TRUE(batch.has_value());
  EXPECT_THAT(RecordsOf(*batch), ElementsAre("a", "b", "c"));
  ASSERT_OK_AND_ASSIGN(batch, reader.TryNext());
  ASSERT_TRUE(batch.has_value());
  EXPECT_THAT(RecordsOf(*batch), ElementsAre("d"));
  EXPECT_EQ(batch->info.first_record, 3u);
}

TEST(ShmChannelTest, ReserveRefusesABatchLargerThanHalfTheRing) {
  ASSERT_OK_AND_ASSIGN(ShmChannel channel, ShmChannel::Create(64 << 10));
  RingWriter writer(channel, true);
  const size_t largest = channel.max_batch_bytes() - kBatchHeaderBytes;
  EXPECT_THAT(writer.Reserve(largest + 1, In(seconds(5))),
              StatusIs(Code::kInvalidArgument, HasSubstr("does not fit the queue")));
  EXPECT_THAT(writer.Reserve(channel.ring_bytes(), In(seconds(5))),
              StatusIs(Code::kInvalidArgument, HasSubstr("raise --queue-bytes")));
  // The largest batch that fits is taken, twice (the whole ring).
  BatchInfo info;
  ASSERT_OK(writer.Reserve(largest, In(seconds(5))));
  writer.Commit(info, largest, 0);
  ASSERT_OK(writer.Reserve(largest, In(seconds(5))));
  writer.Commit(info, largest, 0);
  EXPECT_THAT(writer.Reserve(0, In(milliseconds(20))),
              StatusIs(Code::kDeadlineExceeded, ::testing::_));
}

TEST(ShmChannelTest, ReserveTimesOutWhenTheReaderTakesNothing) {
  ASSERT_OK_AND_ASSIGN(ShmChannel channel, ShmChannel::Create(64 << 10));
  RingWriter writer(channel, true);
  RingReader reader(channel, true);
  const std::string record(1000, 'x');
  int published = 0;
  for (;;) {
    Status status = PublishBatch(writer, BatchInfo{}, {record}, 0, In(milliseconds(50)));
    if (!status.ok()) {
      EXPECT_THAT(status, StatusIs(Code::kDeadlineExceeded, HasSubstr("the reader took nothing")));
      break;
    }
    ASSERT_LT(++published, 1000) << "the ring never filled";
  }
  EXPECT_EQ(published, 65536 / 1048);  // batches of 1048 bytes (40 + 4 + 1000, aligned)

  // Reading without releasing frees nothing; releasing one batch frees it.
  ASSERT_OK_AND_ASSIGN(std::optional<BatchView> batch, reader.TryNext());
  ASSERT_TRUE(batch.has_value());
  EXPECT_THAT(writer.Reserve(record.size() + 4, In(milliseconds(20))),
              StatusIs(Code::kDeadlineExceeded, ::testing::_));
  reader.Release(batch->end);
  EXPECT_OK(PublishBatch(writer, BatchInfo{}, {record}, 0, In(seconds(5))));
}

// Writes batches of random sizes while there is room, reads a random number
// of them, many times round the ring: every record comes back in order, and a
// batch that does not fit before the end starts the next lap after a pad.
TEST(ShmChannelTest, WrapsAroundTheRingManyTimes) {
  ASSERT_OK_AND_ASSIGN(ShmChannel channel, ShmChannel::Create(64 << 10));
  const uint64_t capacity = channel.ring_bytes();
  RingWriter writer(channel, true);
  RingReader reader(channel, true);
  std::mt19937 rng(12345);

  struct Sent {
    uint64_t first;
    uint32_t count;
    size_t payload;
  };
  std::deque<Sent> in_flight;
  uint64_t next_number = 0, next_expected = 0, last_end = 0;
  int pads = 0, max_batches = 0;
  std::optional<Sent> pending;  // generated, not yet published

  while (last_end < 8 * capacity) {
    // Write while there is room.
    for (;;) {
      if (!pending) {
        Sent sent{next_number, 0, 0};
        const bool largest = rng() % 10 == 0;
        const uint32_t count = largest ? 500 : 1 + rng() % 40;
        for (uint32_t i = 0; i < count; ++i) {
          size_t size = sizeof(uint32_t) + NumberedRecord(sent.first + i).size();
          if (kBatchHeaderBytes + sent.payload + size > channel.max_batch_bytes()) break;
          sent.payload += size;
          ++sent.count;
        }
        pending = sent;
      }
      Result<char*> space = writer.Reserve(pending->payload, Clock::now());
      if (!space.ok()) {
        ASSERT_THAT(space, StatusIs(Code::kDeadlineExceeded, ::testing::_));
        break;
      }
      char* out = *space;
      for (uint32_t i = 0; i < pending->count; ++i) {
        const std::string record = NumberedRecord(pending->first + i);
        uint32_t length = static_cast<uint32_t>(record.size());
        std::memcpy(out, &length, sizeof(length));
        std::memcpy(out + sizeof(length), record.data(), record.size());
        out += sizeof(length) + record.size();
      }
      BatchInfo info;
      info.first_record = pending->first;
      info.record_count = pending->count;
      writer.Commit(info, pending->payload, 0);
      next_number += pending->count;
      in_flight.push_back(*pending);
      pending.reset();
    }
    max_batches = std::max(max_batches, static_cast<int>(in_flight.size()));
    ASSERT_FALSE(in_flight.empty()) << "the writer found no room in an empty ring";

    // Read some, release them together.
    const size_t to_read = 1 + rng() % in_flight.size();
    for (size_t b = 0; b < to_read; ++b) {
      ASSERT_OK_AND_ASSIGN(std::optional<BatchView> batch, reader.TryNext());
      ASSERT_TRUE(batch.has_value());
      const Sent sent = in_flight.front();
      in_flight.pop_front();
      ASSERT_EQ(batch->info.first_record, sent.first);
      ASSERT_EQ(batch->info.record_count, sent.count);
      ASSERT_EQ(batch->bytes, sent.payload);
      const uint64_t batch_bytes = AlignUp(kBatchHeaderBytes + sent.payload, 8);
      const uint64_t start = batch->end - batch_bytes;
      if (start != last_end) {
        // A pad: the batch did not fit before the end of the ring.
        ++pads;
        ASSERT_EQ(start % capacity, 0u) << "a batch after a pad starts a lap";
        ASSERT_EQ(start - last_end, capacity - last_end % capacity);
        ASSERT_LT(capacity - last_end % capacity, batch_bytes) << "a pad where the batch fit";
      } else {
        ASSERT_LE(start % capacity + batch_bytes, capacity) << "a batch straddles the end";
      }
      last_end = batch->end;
      ForEachRecord(*batch, [&](std::string_view record) {
        ASSERT_EQ(NumberOf(record), next_expected);
        ++next_expected;
      });
    }
    reader.Release(last_end);
  }
  // Drain.
  for (;;) {
    ASSERT_OK_AND_ASSIGN(std::optional<BatchView> batch, reader.TryNext());
    if (!batch) break;
    ForEachRecord(*batch, [&](std::string_view record) {
      ASSERT_EQ(NumberOf(record), next_expected);
      ++next_expected;
    });
    reader.Release(batch->end);
  }
  EXPECT_EQ(next_expected, next_number);
  EXPECT_GT(pads, 3);
  EXPECT_GT(max_batches, 2);
}

TEST(ShmChannelTest, CloseEndsTheRingOnceDrained) {
  ASSERT_OK_AND_ASSIGN(ShmChannel channel, ShmChannel::Create(64 << 10));
  RingWriter writer(channel, true);
  RingReader reader(channel, true);
  ASSERT_OK(PublishBatch(writer, BatchInfo{}, {"one"}));
  ASSERT_OK(PublishBatch(writer, BatchInfo{}, {"two", "three"}));
  writer.Close();
  EXPECT_FALSE(reader.closed_and_drained());

  ASSERT_OK_AND_ASSIGN(std::optional<BatchView> batch, reader.Next(In(seconds(5))));
  ASSERT_TRUE(batch.has_value());
  EXPECT_THAT(RecordsOf(*batch), ElementsAre("one"));
  EXPECT_FALSE(reader.closed_and_drained());
  ASSERT_OK_AND_ASSIGN(batch, reader.Next(In(seconds(5))));
  ASSERT_TRUE(batch.has_value());
  EXPECT_THAT(RecordsOf(*batch), ElementsAre("two", "three"));
  EXPECT_TRUE(reader.closed_and_drained());
  reader.ReleaseAll();

  // Returns at once (not at the deadline) with nothing.
  ASSERT_OK_AND_ASSIGN(batch, reader.Next(In(seconds(30))));
  EXPECT_FALSE(batch.has_value());
  EXPECT_TRUE(reader.closed_and_drained());
  EXPECT_EQ(channel.state(), RunState::kRunning);
}

TEST(ShmChannelTest, CloseWakesABlockedReader) {
  ASSERT_OK_AND_ASSIGN(ShmChannel channel, ShmChannel::Create(64 << 10));
  RingReader reader(channel, true);
  Result<std::optional<BatchView>> got = Status::Internal("not run");
  std::thread thread([&] { got = reader.Next(In(seconds(20))); });
  std::this_thread::sleep_for(milliseconds(30));
  RingWriter(channel, true).Close();
  thread.join();
  ASSERT_OK(got);
  EXPECT_FALSE(got->has_value());
  EXPECT_TRUE(reader.closed_and_drained());
}

TEST(ShmChannelTest, NextTimesOutWhenNothingArrives) {
  ASSERT_OK_AND_ASSIGN(ShmChannel channel, ShmChannel::Create(64 << 10));
  RingReader reader(channel, true);
  EXPECT_THAT(reader.Next(In(milliseconds(30))),
              StatusIs(Code::kDeadlineExceeded, HasSubstr("no batch arrived")));
}

TEST(ShmChannelTest, DiscardAllDropsReadAndUnreadBatches) {
  ASSERT_OK_AND_ASSIGN(ShmChannel channel, ShmChannel::Create(64 << 10));
  RingWriter writer(channel, true);
  RingReader reader(channel, true);
  const std::string big(10000, 'b');
  for (int i = 0; i < 6; ++i) ASSERT_OK(PublishBatch(writer, BatchInfo{}, {big}));
  ASSERT_OK_AND_ASSIGN(std::optional<BatchView> batch, reader.TryNext());
  ASSERT_TRUE(batch.has_value());
  EXPECT_THAT(writer.Reserve(big.size() + 4, In(milliseconds(20))),
              StatusIs(Code::kDeadlineExceeded, ::testing::_));

  reader.DiscardAll();
  ASSERT_OK_AND_ASSIGN(batch, reader.TryNext());
  EXPECT_FALSE(batch.has_value());
  // The whole ring is free again.
  for (int i = 0; i < 6; ++i) {
    ASSERT_OK(
        PublishBatch(writer, BatchInfo{}, {big + std::to_string(i)}, 0, In(milliseconds(50))));
  }
  ASSERT_OK_AND_ASSIGN(batch, reader.TryNext());
  ASSERT_TRUE(batch.has_value());
  EXPECT_THAT(RecordsOf(*batch), ElementsAre(big + "0"));
  // A new reader starts at the last release: it reads that batch again.
  RingReader again(channel, true);
  ASSERT_OK_AND_ASSIGN(batch, again.TryNext());
  ASSERT_TRUE(batch.has_value());
  EXPECT_THAT(RecordsOf(*batch), ElementsAre(big + "0"));
}

class AdvanceStateTest : public ::testing::TestWithParam<RunState> {};

TEST_P(AdvanceStateTest, WakesABlockedWriterAndReader) {
  const RunState to = GetParam();
  ASSERT_OK_AND_ASSIGN(ShmChannel channel, ShmChannel::Create(64 << 10));
  RingWriter writer(channel, true);
  const size_t largest = channel.max_batch_bytes() - kBatchHeaderBytes;
  ASSERT_OK(writer.Reserve(largest, In(seconds(5))));
  writer.Commit(BatchInfo{}, largest, 0);
  ASSERT_OK(writer.Reserve(largest, In(seconds(5))));
  writer.Commit(BatchInfo{}, largest, 0);

  RingReader output_reader(channel, /*input_ring=*/false);
  Result<char*> reserved = Status::Internal("not run");
  Result<std::optional<BatchView>> read = Status::Internal("not run");
  std::thread blocked_writer([&] { reserved = writer.Reserve(100, In(seconds(20))); });
  std::thread blocked_reader([&] { read = output_reader.Next(In(seconds(20))); });
  std::this_thread::sleep_for(milliseconds(50));
  EXPECT_EQ(channel.AdvanceState(to), to);
  blocked_writer.join();
  blocked_reader.join();

  EXPECT_THAT(reserved, StatusIs(Code::kUnavailable, HasSubstr(std::string(RunStateName(to)))));
  ASSERT_OK(read);
  EXPECT_FALSE(read->has_value());
  EXPECT_EQ(channel.state(), to);
  EXPECT_THAT(writer.Reserve(8, In(seconds(5))),
              StatusIs(Code::kUnavailable, HasSubstr("feed is")));
  RingWriter output_writer(channel, /*input_ring=*/false);
  EXPECT_THAT(output_writer.Reserve(8, In(seconds(5))), StatusIs(Code::kUnavailable, ::testing::_));

  // Never back.
  EXPECT_EQ(channel.AdvanceState(RunState::kRunning), to);
  EXPECT_EQ(channel.AdvanceState(RunState::kStopped), RunState::kStopped);
  EXPECT_EQ(channel.AdvanceState(RunState::kTerminating), RunState::kStopped);
}

INSTANTIATE_TEST_SUITE_P(States, AdvanceStateTest,
                         ::testing::Values(RunState::kTerminating, RunState::kStopped),
                         [](const auto& info) { return std::string(RunStateName(info.param)); });

TEST(ShmChannelTest, FirstErrorWins) {
  ASSERT_OK_AND_ASSIGN(ShmChannel channel, ShmChannel::Create(64 << 10));
  channel.SetError("bad record in a.csv");
  channel.SetError("second");
  EXPECT_EQ(channel.error(), "bad record in a.csv");
  channel.AdvanceState(RunState::kStopped);
  // Another mapping sees it.
  ASSERT_OK_AND_ASSIGN(ShmChannel mapped, ShmChannel::Map(os::UniqueFd(::dup(channel.fd()))));
  EXPECT_EQ(mapped.error(), "bad record in a.csv");
  EXPECT_EQ(mapped.state(), RunState::kStopped);
  // A long error is cut, not overrun.
  ASSERT_OK_AND_ASSIGN(ShmChannel other, ShmChannel::Create(64 << 10));
  other.SetError(std::string(100000, 'e'));
  EXPECT_EQ(other.error().size(), 2048u);
}

TEST(ShmChannelTest, MapSharesTheChannel) {
  ASSERT_OK_AND_ASSIGN(ShmChannel channel, ShmChannel::Create(128 << 10));
  ASSERT_OK_AND_ASSIGN(ShmChannel mapped, ShmChannel::Map(os::UniqueFd(::dup(channel.fd()))));
  EXPECT_EQ(mapped.ring_bytes(), channel.ring_bytes());
  RingWriter writer(mapped, /*input_ring=*/false);
  RingReader reader(channel, /*input_ring=*/false);
  ASSERT_OK(PublishBatch(writer, BatchInfo{}, {"through", "another", "mapping"}));
  ASSERT_OK_AND_ASSIGN(std::optional<BatchView> batch, reader.Next(In(seconds(5))));
  ASSERT_TRUE(batch.has_value());
  EXPECT_THAT(RecordsOf(*batch), ElementsAre("through", "another", "mapping"));
  // The input ring is separate.
  RingReader input(mapped, /*input_ring=*/true);
  ASSERT_OK_AND_ASSIGN(batch, input.TryNext());
  EXPECT_FALSE(batch.has_value());
  // Moving keeps the mapping.
  ShmChannel moved = std::move(mapped);
  EXPECT_EQ(moved.ring_bytes(), channel.ring_bytes());
}

// A memfd holding `bytes`, sealed against shrinking when `seal`.
int MakeMemfd(const std::string& bytes, bool seal) {
  int fd = ::memfd_create("drover-feed-test", MFD_CLOEXEC | (seal ? MFD_ALLOW_SEALING : 0));
  if (fd < 0) return -1;
  if (::ftruncate(fd, static_cast<off_t>(bytes.size())) != 0 ||
      ::pwrite(fd, bytes.data(), bytes.size(), 0) != static_cast<ssize_t>(bytes.size()) ||
      (seal && ::fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) != 0)) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// The bytes of a real channel's whole memfd.
std::string ChannelBytes(const ShmChannel& channel) {
  std::string bytes(4096 + 2 * (4096 + channel.ring_bytes()), '\0');
  if (::pread(channel.fd(), bytes.data(), bytes.size(), 0) != static_cast<ssize_t>(bytes.size())) {
    return "";
  }
  return bytes;
}

TEST(ShmChannelTest, MapRefusesWhatIsNotAChannel) {
  ASSERT_OK_AND_ASSIGN(ShmChannel channel, ShmChannel::Create(64 << 10));
  const std::string good = ChannelBytes(channel);
  ASSERT_FALSE(good.empty());
  {  // The bytes of a channel, sealed: accepted (the checks below are the only differences).
    int fd = MakeMemfd(good, /*seal=*/true);
    ASSERT_GE(fd, 0);
    EXPECT_OK(ShmChannel::Map(os::UniqueFd(fd)));
  }
  {  // Not sealed: the creator could shrink it under the reader.
    int fd = MakeMemfd(good, /*seal=*/false);
    ASSERT_GE(fd, 0);
    EXPECT_THAT(ShmChannel::Map(os::UniqueFd(fd)),
                StatusIs(Code::kInvalidArgument, HasSubstr("the memfd is not sealed")));
    EXPECT_EQ(::fcntl(fd, F_GETFD), -1) << "Map takes the descriptor, also on failure";
  }
  {  // Wrong magic.
    std::string bytes = good;
    bytes[0] = 'X';
    int fd = MakeMemfd(bytes, true);
    ASSERT_GE(fd, 0);
    EXPECT_THAT(ShmChannel::Map(os::UniqueFd(fd)),
                StatusIs(Code::kInvalidArgument, HasSubstr("bad magic")));
  }
  {  // Wrong version.
    std::string bytes = good;
    const uint32_t version = 1;  // before file extents
    std::memcpy(bytes.data() + 8, &version, sizeof(version));
    int fd = MakeMemfd(bytes, true);
    ASSERT_GE(fd, 0);
    EXPECT_THAT(ShmChannel::Map(os::UniqueFd(fd)),
                StatusIs(Code::kInvalidArgument, HasSubstr("version 1, expected 2")));
  }
  {  // Too small for a header.
    int fd = MakeMemfd(good.substr(0, 100), true);
    ASSERT_GE(fd, 0);
    EXPECT_THAT(ShmChannel::Map(os::UniqueFd(fd)),
                StatusIs(Code::kInvalidArgument, HasSubstr("too small")));
  }
  {  // A header whose rings are not there.
    int fd = MakeMemfd(good.substr(0, 4096), true);
    ASSERT_GE(fd, 0);
    EXPECT_THAT(ShmChannel::Map(os::UniqueFd(fd)),
                StatusIs(Code::kInvalidArgument, HasSubstr("inconsistent sizes")));
  }
  {  // Not a memfd at all.
    ::drover::testing::TempDir dir;
    testing::WriteFile(dir.File("plain"), good);
    int fd = ::open(dir.File("plain").c_str(), O_RDWR | O_CLOEXEC);
    ASSERT_GE(fd, 0);
    EXPECT_THAT(ShmChannel::Map(os::UniqueFd(fd)),
                StatusIs(Code::kInvalidArgument, HasSubstr("not sealed")));
  }
}

// Issue #15: the header is in memory the program can write. What was checked
// when the channel was made or mapped is what the process uses.
TEST(ShmChannelTest, SizesWrittenOverAfterMappingAreNotFollowed) {
  ASSERT_OK_AND_ASSIGN(ShmChannel channel, ShmChannel::Create(64 << 10));
  const int fd = channel.fd();
  ASSERT_TRUE(Scribble<uint64_t>(fd, kRingBytesOffset, uint64_t{1} << 40));
  ASSERT_TRUE(Scribble<uint64_t>(fd, kInputOffsetOffset, ~uint64_t{0}));
  ASSERT_TRUE(Scribble<uint64_t>(fd, kOutputOffsetOffset, 12345));
  EXPECT_EQ(channel.ring_bytes(), 64u << 10);
  EXPECT_EQ(ReadRingProgress(channel, true).queue_capacity, 64u << 10);
  // Both rings still work, several laps round.
  for (bool input : {true, false}) {
    RingWriter writer(channel, input);
    RingReader reader(channel, input);
    for (int i = 0; i < 300; ++i) {
      const std::string record(1000, static_cast<char>('a' + i % 26));
      ASSERT_OK(PublishBatch(writer, BatchInfo{}, {record}, 0, In(seconds(5))));
      ASSERT_OK_AND_ASSIGN(std::optional<BatchView> batch, reader.Next(In(seconds(5))));
      ASSERT_TRUE(batch.has_value());
      ASSERT_THAT(RecordsOf(*batch), ElementsAre(record));
      reader.Release(batch->end);
    }
  }
  // A process mapping it now is refused.
  EXPECT_THAT(ShmChannel::Map(os::UniqueFd(::dup(fd))),
              StatusIs(Code::kInvalidArgument, HasSubstr("inconsistent sizes")));
}

TEST(ShmChannelTest, ReadPosOutOfRangeIsAnErrorForTheWriter) {
  ASSERT_OK_AND_ASSIGN(ShmChannel channel, ShmChannel::Create(64 << 10));
  const int fd = channel.fd();
  const uint64_t read_pos_at = kInputRingHeader + kReadPos;
  RingWriter writer(channel, /*input_ring=*/true);
  RingReader reader(channel, /*input_ring=*/true);
  // More than a lap, read and released.
  for (int i = 0; i < 100; ++i) {
    ASSERT_OK(PublishBatch(writer, BatchInfo{}, {std::string(1000, 'x')}));
    ASSERT_OK_AND_ASSIGN(std::optional<BatchView> batch, reader.Next(In(seconds(5))));
    ASSERT_TRUE(batch.has_value());
    reader.Release(batch->end);
  }
  const uint64_t write_pos = Peek<uint64_t>(fd, kInputRingHeader + kWritePos);
  ASSERT_GT(write_pos, channel.ring_bytes());
  // Released more than was written.
  ASSERT_TRUE(Scribble<uint64_t>(fd, read_pos_at, write_pos + 8));
  EXPECT_THAT(
      writer.Reserve(100, In(seconds(5))),
      StatusIs(Code::kInternal, HasSubstr("the reader corrupted the queue header: read_pos " +
                                          std::to_string(write_pos + 8))));
  // More than a ring behind: the writer would overwrite unread batches.
  ASSERT_TRUE(Scribble<uint64_t>(fd, read_pos_at, 0));
  EXPECT_THAT(PublishBatch(writer, BatchInfo{}, {"three"}),
              StatusIs(Code::kInternal, HasSubstr("the reader corrupted the queue header")));
  EXPECT_EQ(Peek<uint64_t>(fd, kInputRingHeader + kWritePos), write_pos) << "nothing written";
  EXPECT_LE(writer.unread_bytes(), channel.ring_bytes());
  // A write position that is not a batch boundary, found by a new writer.
  ASSERT_TRUE(Scribble<uint64_t>(fd, read_pos_at, write_pos));
  ASSERT_TRUE(Scribble<uint64_t>(fd, kInputRingHeader + kWritePos, write_pos + 3));
  RingWriter next(channel, /*input_ring=*/true);
  EXPECT_THAT(next.Reserve(8, In(seconds(5))),
              StatusIs(Code::kInternal, HasSubstr("is not a multiple of 8")));
}

TEST(ShmChannelTest, WritePosOutOfRangeIsAnErrorForTheReader) {
  ASSERT_OK_AND_ASSIGN(ShmChannel channel, ShmChannel::Create(64 << 10));
  const int fd = channel.fd();
  const uint64_t write_pos_at = OutputRingHeader(channel) + kWritePos;
  RingReader reader(channel, /*input_ring=*/false);
  // The data area full of pad markers, and a write position far ahead: one
  // error, not a walk around the ring for every lap it claims.
  const uint32_t pad = 0x44444150;
  for (uint64_t at = 0; at < channel.ring_bytes(); at += 8) {
    ASSERT_TRUE(Scribble<uint32_t>(fd, OutputRingHeader(channel) + 4096 + at, pad));
  }
  ASSERT_TRUE(Scribble<uint64_t>(fd, write_pos_at, uint64_t{1} << 62));
  EXPECT_THAT(reader.TryNext(),
              StatusIs(Code::kInternal, HasSubstr("corrupt feed queue header: write_pos")));
  EXPECT_THAT(reader.Next(In(seconds(5))), StatusIs(Code::kInternal, HasSubstr("write_pos")));
  // One lap of pad markers is read as nothing.
  ASSERT_TRUE(Scribble<uint64_t>(fd, write_pos_at, channel.ring_bytes()));
  ASSERT_OK_AND_ASSIGN(std::optional<BatchView> batch, reader.TryNext());
  EXPECT_FALSE(batch.has_value());
  // Behind the reader.
  ASSERT_TRUE(Scribble<uint64_t>(fd, write_pos_at, 8));
  EXPECT_THAT(reader.TryNext(), StatusIs(Code::kInternal, HasSubstr("write_pos 8")));
  reader.DiscardAll();  // not followed: only the lap read is released
  EXPECT_EQ(Peek<uint64_t>(fd, OutputRingHeader(channel) + kReadPos), channel.ring_bytes());
}

// Found by shm_attach_fuzzer: a 40-byte batch claiming 2^32 - 1 fixed-size
// records of 0 bytes had every reader (the agent's result writer among them)
// loop over billions of empty records.
TEST(ShmChannelTest, FixedSizeRecordsOfNoBytesAreCorrupt) {
  ASSERT_OK_AND_ASSIGN(ShmChannel channel, ShmChannel::Create(64 << 10));
  RingWriter writer(channel, /*input_ring=*/false);
  ASSERT_OK_AND_ASSIGN(char* space, writer.Reserve(0, In(seconds(5))));
  (void)space;
  BatchInfo info;
  info.flags = kFixedSizeRecords;
  info.record_bytes = 0;
  info.record_count = UINT32_MAX;
  writer.Commit(info, 0, 0);
  RingReader reader(channel, /*input_ring=*/false);
  EXPECT_THAT(reader.TryNext(),
              StatusIs(Code::kInternal, HasSubstr("fixed-size records of 0 bytes")));
}

// Random bytes over the headers and the data, again and again, and every
// call of both sides on every ring: each returns, and none touches memory
// outside the channel (the ASan build checks that).
TEST(ShmChannelTest, GarbageHeadersNeverMakeASideLeaveTheRing) {
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937_64 rng(seed);
  ASSERT_OK_AND_ASSIGN(ShmChannel channel, ShmChannel::Create(64 << 10));
  const int fd = channel.fd();
  const uint64_t ring = channel.ring_bytes();
  auto value = [&](uint64_t near) -> uint64_t {
    switch (rng() % 5) {
      case 0:
        return rng();
      case 1:
        return near + rng() % (2 * ring) - ring;
      case 2:
        return (near & ~uint64_t{7}) + 8 * (rng() % 64);
      case 3:
        return rng() % 64;
      default:
        return near;
    }
  };
  uint64_t sink = 0;
  for (int round = 0; round < 400; ++round) {
    for (uint64_t header : {kInputRingHeader, OutputRingHeader(channel)}) {
      const uint64_t write_pos = Peek<uint64_t>(fd, header + kWritePos);
      for (int i = 0; i < 3; ++i) {
        const uint64_t field = 8 * (rng() % 32);  // the first 256 bytes: both cache lines
        ASSERT_TRUE(Scribble<uint64_t>(fd, header + field, value(write_pos)));
      }
      // A batch header's worth of garbage where the reader will look.
      const uint64_t at = header + 4096 + (value(write_pos) % ring & ~uint64_t{7});
      for (int i = 0; i < 5 && at + 8 * i + 8 <= header + 4096 + ring; ++i) {
        ASSERT_TRUE(Scribble<uint64_t>(fd, at + 8 * i, rng() % 3 ? rng() % 4096 : rng()));
      }
    }
    if (rng() % 4 == 0) {
      ASSERT_TRUE(Scribble<uint32_t>(fd, 68, static_cast<uint32_t>(rng())));
    }
    for (bool input : {true, false}) {
      RingReader reader(channel, input);
      for (int i = 0; i < 64; ++i) {
        Result<std::optional<BatchView>> next = reader.TryNext();
        if (!next.ok() || !next->has_value()) break;
        ForEachRecord(**next, [&](std::string_view record) {
          sink += record.size() + (record.empty() ? 0 : static_cast<uint8_t>(record.back()));
        });
        reader.Release((*next)->end);
      }
      (void)reader.held_bytes();
      (void)reader.closed_and_drained();
      RingWriter writer(channel, input);
      (void)writer.LastCommit();
      (void)writer.unread_bytes();
      const size_t bytes = rng() % 40000;
      Result<char*> space = writer.Reserve(bytes, Clock::now());
      if (space.ok()) {
        std::memset(*space, 'g', bytes);
        BatchInfo info;
        writer.Commit(info, bytes, 0);
      }
      (void)ReadRingProgress(channel, input);
    }
    sink += channel.error().size();
  }
  RecordProperty("sink", std::to_string(sink));
}

// Issue #15: a new reader starts at the first record the previous one was
// not handed, with fixed-size records too, and never counts a batch twice.
TEST(ShmChannelTest, NewReaderResumesAfterWhatThePreviousOneWasHanded) {
  ASSERT_OK_AND_ASSIGN(ShmChannel channel, ShmChannel::Create(64 << 10));
  RingWriter writer(channel, /*input_ring=*/true);
  {  // Fixed-size records: 6 of 4 bytes.
    Result<char*> space = writer.Reserve(24, In(seconds(5)));
    ASSERT_OK(space);
    std::memcpy(*space, "r000r001r002r003r004r005", 24);
    BatchInfo info;
    info.flags = kFixedSizeRecords;
    info.record_bytes = 4;
    info.record_count = 6;
    writer.Commit(info, 24, 0);
  }
  BatchInfo second;
  second.first_record = 6;
  ASSERT_OK(PublishBatch(writer, second, {"r006", "r007"}));
  {
    RingReader first(channel, true);
    ASSERT_OK(first.Resume());
    ASSERT_OK_AND_ASSIGN(std::optional<BatchView> batch, first.TryNext());
    ASSERT_TRUE(batch.has_value());
    first.MarkHanded(*batch, batch->records + 2 * 4);  // handed r000, r001
  }
  {
    RingReader again(channel, true);
    ASSERT_OK(again.Resume());
    ASSERT_OK_AND_ASSIGN(std::optional<BatchView> batch, again.TryNext());
    ASSERT_TRUE(batch.has_value());
    EXPECT_THAT(RecordsOf(*batch), ElementsAre("r002", "r003", "r004", "r005"));
    EXPECT_EQ(batch->info.first_record, 2u);
    again.MarkHanded(*batch, batch->records + batch->bytes);  // all of it
  }
  RingReader last(channel, true);
  ASSERT_OK(last.Resume());
  ASSERT_OK_AND_ASSIGN(std::optional<BatchView> batch, last.TryNext());
  ASSERT_TRUE(batch.has_value());
  EXPECT_THAT(RecordsOf(*batch), ElementsAre("r006", "r007"));
  EXPECT_EQ(ReadRingProgress(channel, true).records, 8u);
  // The first batch was released when `last` resumed.
  EXPECT_EQ(ReadRingProgress(channel, true).queue_bytes, batch->end - batch->begin);
  // A mark past what was published.
  ASSERT_TRUE(Scribble<uint64_t>(channel.fd(), kInputRingHeader + 216, batch->end + 64));
  RingReader confused(channel, true);
  EXPECT_THAT(confused.Resume(), StatusIs(Code::kInternal, HasSubstr("past the published")));
}

// A kFileExtent batch carries where its records are, not the records: the
// reader gets the path, device, inode and offset back, the header's count
// and size, and the progress counts the records' bytes.
TEST(ShmChannelTest, FileExtentsRoundTrip) {
  ASSERT_OK_AND_ASSIGN(ShmChannel channel, ShmChannel::Create(64 << 10));
  RingWriter writer(channel, /*input_ring=*/true);
  BatchInfo info;
  info.feed_seq = 3;
  info.partition = 2;
  info.first_record = 40;
  ASSERT_OK(
      PublishExtent(writer, info, FileExtent{"/data/mnist.raw", 2049, 77, 125440}, 100, 3136));
  ASSERT_OK_AND_ASSIGN(std::optional<CommitPoint> commit, writer.LastCommit());
  ASSERT_TRUE(commit.has_value());
  EXPECT_EQ(commit->source_offset, 125440u + 100 * 3136);

  RingReader reader(channel, /*input_ring=*/true);
  ASSERT_OK_AND_ASSIGN(std::optional<BatchView> batch, reader.TryNext());
  ASSERT_TRUE(batch.has_value());
  EXPECT_TRUE(batch->info.flags & kFileExtent);
  EXPECT_EQ(batch->info.feed_seq, 3u);
  EXPECT_EQ(batch->info.first_record, 40u);
  EXPECT_EQ(batch->info.record_count, 100u);
  EXPECT_EQ(batch->info.record_bytes, 3136u);
  EXPECT_EQ(batch->extent.path, "/data/mnist.raw");
  EXPECT_EQ(batch->extent.device, 2049u);
  EXPECT_EQ(batch->extent.inode, 77u);
  EXPECT_EQ(batch->extent.offset, 125440u);
  int visited = 0;
  ForEachRecord(*batch, [&](std::string_view) { ++visited; });
  EXPECT_EQ(visited, 0);  // the records are not in the ring
  const FeedProgress progress = ReadRingProgress(channel, true);
  EXPECT_EQ(progress.records, 100u);
  EXPECT_EQ(progress.bytes, 100u * 3136);
}

// Records queued as file extents take a few bytes of the ring each batch;
// the queue's fill counts their bytes until they are handed out, so the
// status page shows how far ahead the feeder is. A resuming writer goes on
// counting; a count written over by the program shows as at most the ring.
TEST(ShmChannelTest, FileExtentRecordsCountInTheQueueFill) {
  ASSERT_OK_AND_ASSIGN(ShmChannel channel, ShmChannel::Create(1 << 20));
  {
    RingWriter writer(channel, /*input_ring=*/true);
    ASSERT_OK(PublishExtent(writer, BatchInfo{}, FileExtent{"/in/a.raw", 1, 2, 0}, 100, 1000));
  }
  EXPECT_EQ(ReadRingProgress(channel, true).queue_bytes, 100'000u);
  RingWriter resumed(channel, /*input_ring=*/true);
  BatchInfo next;
  next.first_record = 100;
  ASSERT_OK(PublishExtent(resumed, next, FileExtent{"/in/a.raw", 1, 2, 100'000}, 50, 1000));
  EXPECT_EQ(ReadRingProgress(channel, true).queue_bytes, 150'000u);

  RingReader reader(channel, /*input_ring=*/true);
  ASSERT_OK_AND_ASSIGN(std::optional<BatchView> first, reader.TryNext());
  ASSERT_TRUE(first.has_value());
  EXPECT_EQ(ReadRingProgress(channel, true).queue_bytes, 50'000u);
  ASSERT_OK_AND_ASSIGN(std::optional<BatchView> second, reader.TryNext());
  ASSERT_TRUE(second.has_value());
  // Handed out, not released: what is left is the two small batches.
  const uint64_t in_ring = ReadRingProgress(channel, true).queue_bytes;
  EXPECT_GT(in_ring, 0u);
  EXPECT_LT(in_ring, 1000u);
  reader.ReleaseAll();
  EXPECT_EQ(ReadRingProgress(channel, true).queue_bytes, 0u);

  ASSERT_TRUE(Scribble<uint64_t>(channel.fd(), kInputRingHeader + 112, ~uint64_t{0}));
  EXPECT_EQ(ReadRingProgress(channel, true).queue_bytes, channel.ring_bytes());
}

// An extent written over by a misbehaving program is kInternal, never a
// read of a path or a range it does not name.
TEST(ShmChannelTest, CorruptFileExtentsAreRefused) {
  struct Case {
    std::string name;
    std::string payload;
    uint32_t record_bytes;
    std::string error;
  };
  auto payload = [](uint64_t offset, uint32_t path_bytes, std::string path) {
    std::string bytes(32, '\0');
    std::memcpy(bytes.data(), &offset, 8);
    std::memcpy(bytes.data() + 24, &path_bytes, 4);
    return bytes + path;
  };
  const std::vector<Case> cases = {
      {"short", std::string(20, '\0'), 8, "overruns its batch"},
      {"path past the batch", payload(0, 4000, "/a"), 8, "path overruns its batch"},
      {"relative path", payload(0, 5, "a.raw"), 8, "not an absolute path"},
      {"empty path", payload(0, 0, ""), 8, "not an absolute path"},
      {"NUL in the path", payload(0, 4, std::string("/a\0b", 4)), 8, "not an absolute path"},
      {"records of no bytes", payload(0, 2, "/a"), 0, "a file extent of 10 records of 0 bytes"},
      {"past 2^63", payload(uint64_t{1} << 63, 2, "/a"), 8, "at offset 9223372036854775808"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    ASSERT_OK_AND_ASSIGN(ShmChannel channel, ShmChannel::Create(64 << 10));
    RingWriter writer(channel, /*input_ring=*/true);
    ASSERT_OK_AND_ASSIGN(char* space, writer.Reserve(c.payload.size(), In(seconds(5))));
    std::memcpy(space, c.payload.data(), c.payload.size());
    BatchInfo info;
    info.flags = kFileExtent;
    info.record_count = 10;
    info.record_bytes = c.record_bytes;
    writer.Commit(info, c.payload.size(), 0);
    RingReader reader(channel, /*input_ring=*/true);
    EXPECT_THAT(reader.TryNext(), StatusIs(Code::kInternal, HasSubstr(c.error)));
  }
}

// A reader that leaves partway through an extent's records: the next one
// starts at the first record it was not handed, the extent's offset moved
// to it.
TEST(ShmChannelTest, NewReaderResumesInsideAFileExtent) {
  ASSERT_OK_AND_ASSIGN(ShmChannel channel, ShmChannel::Create(64 << 10));
  RingWriter writer(channel, /*input_ring=*/true);
  BatchInfo info;
  info.first_record = 10;
  ASSERT_OK(PublishExtent(writer, info, FileExtent{"/in/a.raw", 1, 2, 1000}, 6, 100));
  {
    RingReader first(channel, true);
    ASSERT_OK(first.Resume());
    ASSERT_OK_AND_ASSIGN(std::optional<BatchView> batch, first.TryNext());
    ASSERT_TRUE(batch.has_value());
    first.MarkHandedExtent(*batch, 12);  // handed records 10 and 11
  }
  {
    RingReader again(channel, true);
    ASSERT_OK(again.Resume());
    ASSERT_OK_AND_ASSIGN(std::optional<BatchView> batch, again.TryNext());
    ASSERT_TRUE(batch.has_value());
    EXPECT_EQ(batch->info.first_record, 12u);
    EXPECT_EQ(batch->info.record_count, 4u);
    EXPECT_EQ(batch->extent.offset, 1200u);
    EXPECT_EQ(batch->extent.path, "/in/a.raw");
    again.MarkHandedExtent(*batch, 16);  // all of it
  }
  RingReader last(channel, true);
  ASSERT_OK(last.Resume());
  ASSERT_OK_AND_ASSIGN(std::optional<BatchView> none, last.TryNext());
  EXPECT_FALSE(none.has_value());
  EXPECT_EQ(ReadRingProgress(channel, true).queue_bytes, 0u);
}

// Writes records first..last-1 (NumberedRecord) as feeds of kPerFeed records
// in batches of random sizes, resuming after the ring's last commit point:
// the body of a writer child. Returns an exit code.
constexpr uint64_t kPerFeed = 5000;

int WriteNumberedRecords(ShmChannel& channel, uint64_t total, uint32_t seed, bool sleepy) {
  RingWriter writer(channel, /*input_ring=*/true);
  Result<std::optional<CommitPoint>> commit = writer.LastCommit();
  if (!commit.ok()) return 3;
  uint64_t next = 0;  // the next record number
  if (*commit) {
    const CommitPoint& point = **commit;
    if (point.source_offset != point.feed_seq * kPerFeed + point.records_through) return 4;
    next = point.feed_seq * kPerFeed +
           ((point.flags & kEndOfPartition) ? kPerFeed : point.records_through);
  }
  std::mt19937 rng(seed);
  while (next < total) {
    const uint64_t feed = next / kPerFeed;
    const uint64_t feed_end = std::min(total, (feed + 1) * kPerFeed);
    const uint64_t count = std::min<uint64_t>(1 + rng() % 60, feed_end - next);
    std::vector<std::string> records;
    for (uint64_t i = 0; i < count; ++i) records.push_back(NumberedRecord(next + i));
    BatchInfo info;
    info.feed_seq = static_cast<uint32_t>(feed);
    info.first_record = next - feed * kPerFeed;
    info.flags = next + count == feed_end ? kEndOfPartition : 0;
    // source_offset: the next record's number, to check it comes back.
    if (!PublishBatch(writer, info, records, next + count, In(seconds(30))).ok()) return 5;
    next += count;
    if (sleepy && rng() % 3 == 0) ::usleep(rng() % 300);
  }
  writer.Close();
  return 0;
}

// Checks one batch of the numbered stream; advances *expected.
void CheckNumberedBatch(const BatchView& batch, uint64_t* expected) {
  ASSERT_EQ(batch.info.feed_seq, *expected / kPerFeed) << "at record " << *expected;
  ASSERT_EQ(batch.info.first_record, *expected % kPerFeed) << "at record " << *expected;
  uint64_t number = *expected;
  ForEachRecord(batch, [&](std::string_view record) {
    ASSERT_EQ(NumberOf(record), number) << "a gap, a duplicate or a damaged record";
    ++number;
  });
  ASSERT_EQ(number - *expected, batch.info.record_count);
  const bool ends_feed = number % kPerFeed == 0;
  ASSERT_EQ((batch.info.flags & kEndOfPartition) != 0, ends_feed) << "at record " << number;
  *expected = number;
}

// A writer process: maps the channel it inherited as InheritedFd(0) and
// writes "TOTAL SEED SLEEPY" numbered records.
const ChildBody kNumberedWriter("numbered_writer", [](const std::string& arg) {
  uint64_t total = 0;
  uint32_t seed = 0;
  int sleepy = 0;
  if (std::sscanf(arg.c_str(), "%" SCNu64 " %" SCNu32 " %d", &total, &seed, &sleepy) != 3) return 4;
  Result<ShmChannel> mapped = ShmChannel::Map(os::UniqueFd(InheritedFd(0)));
  if (!mapped.ok()) return 2;
  return WriteNumberedRecords(*mapped, total, seed, sleepy != 0);
});

std::string WriterArg(uint64_t total, uint32_t seed, bool sleepy) {
  return std::to_string(total) + " " + std::to_string(seed) + " " + (sleepy ? "1" : "0");
}

TEST(ShmChannelTest, CrossProcessWriterAndReader) {
  constexpr uint64_t kTotal = 30000;
  ASSERT_OK_AND_ASSIGN(ShmChannel channel, ShmChannel::Create(64 << 10));
  RingReader reader(channel, true);
  Child child(kNumberedWriter, WriterArg(kTotal, 7, /*sleepy=*/false), {channel.fd()});
  ASSERT_TRUE(child.started());
  uint64_t expected = 0;
  const Deadline give_up = In(seconds(60));
  for (;;) {
    ASSERT_LT(Clock::now(), give_up);
    ASSERT_OK_AND_ASSIGN(std::optional<BatchView> batch, reader.Next(In(seconds(20))));
    if (!batch) break;
    ASSERT_NO_FATAL_FAILURE(CheckNumberedBatch(*batch, &expected));
    reader.Release(batch->end);
  }
  EXPECT_EQ(expected, kTotal);
  EXPECT_TRUE(reader.closed_and_drained());
  EXPECT_TRUE(ExitedWith(child.Wait(seconds(20)), 0));
}

// The writer is SIGKILLed at random points, again and again, while the
// reader reads; each new writer resumes from the last commit point. The
// reader must see every record exactly once, in order.
TEST(ShmChannelTest, KilledWriterResumesAfterItsLastPublishedBatch) {
  constexpr uint64_t kTotal = 60000;
  constexpr int kKills = 12;
  const uint32_t seed = std::random_device{}();
  SCOPED_TRACE("seed " + std::to_string(seed));
  std::mt19937 rng(seed);

  ASSERT_OK_AND_ASSIGN(ShmChannel channel, ShmChannel::Create(64 << 10));
  RingReader reader(channel, true);
  uint64_t expected = 0;
  int killed_mid_stream = 0;
  bool ended = false;
  const Deadline give_up = In(seconds(60));

  for (int round = 0; round <= kKills && !ended; ++round) {
    const bool last = round == kKills;
    const uint32_t child_seed = static_cast<uint32_t>(rng());
    Child child(kNumberedWriter, WriterArg(kTotal, child_seed, /*sleepy=*/true), {channel.fd()});
    ASSERT_TRUE(child.started());
    // Kill a random time after this writer's first batch arrives.
    const uint64_t started_at = expected;
    std::optional<Deadline> kill_at;
    const auto delay = std::chrono::microseconds(rng() % 3000);
    for (;;) {
      ASSERT_LT(Clock::now(), give_up) << "no progress";
      if (!last && kill_at && Clock::now() >= *kill_at) break;
      Deadline wait = In(seconds(20));
      if (!last && kill_at) wait = std::min(wait, *kill_at);
      Result<std::optional<BatchView>> batch = reader.Next(wait);
      if (!batch.ok()) {
        ASSERT_THAT(batch, StatusIs(Code::kDeadlineExceeded, ::testing::_));
        ASSERT_TRUE(kill_at.has_value()) << "the writer published nothing for 20 s";
        continue;
      }
      if (!batch->has_value()) {
        ended = true;  // closed and drained
        break;
      }
      ASSERT_NO_FATAL_FAILURE(CheckNumberedBatch(**batch, &expected));
      reader.Release((*batch)->end);
      if (!kill_at && expected > started_at) kill_at = Clock::now() + delay;
    }
    if (!last && !ended) {
      child.Kill();
      std::optional<int> status = child.Wait(seconds(20));
      ASSERT_TRUE(status.has_value());
      if (WIFSIGNALED(*status)) {
        ++killed_mid_stream;
      } else {
        ASSERT_TRUE(ExitedWith(status, 0));  // it finished first
      }
    } else {
      EXPECT_TRUE(ExitedWith(child.Wait(seconds(20)), 0));
    }
  }
  EXPECT_TRUE(ended);
  EXPECT_EQ(expected, kTotal);
  EXPECT_TRUE(reader.closed_and_drained());
  EXPECT_GT(killed_mid_stream, 0);
  RecordProperty("killed_mid_stream", killed_mid_stream);
}

}  // namespace
}  // namespace drover::feed
