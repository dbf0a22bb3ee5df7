#include "rendezvous/node_info_codec.h"

#include <gtest/gtest.h>

namespace drover::rendezvous_internal {
namespace {

TEST(FeedProgressCodecTest, RoundTripsEveryField) {
  FeedProgress progress;
  progress.records = 1;
  progress.bytes = 2;
  progress.partitions_done = 3;
  progress.partitions_total = 4;
  progress.share_bytes = 5;
  progress.epoch = 6;
  progress.epochs = 7;
  progress.queue_bytes = 8;
  progress.queue_capacity = 9;
  progress.feeder_restarts = 10;
  progress.results = 11;
  progress.ingest = "extent-read";
  EXPECT_EQ(FeedProgressFromWire(FeedProgressToWire(progress)), progress);
}

// A node's heartbeat names the way its records come in; what no way is
// called is not passed on to the status page and /metrics.
TEST(FeedProgressCodecTest, KeepsOnlyWhatCouldBeAWaysName) {
  wire::FeedProgress wire;
  for (const char* name : {"map", "read", "extent", "extent-read", "measure"}) {
    wire.set_ingest(name);
    EXPECT_EQ(FeedProgressFromWire(wire).ingest, name);
  }
  for (const char* name : {"Extent", "in place", "x\"}", "a-very-long-name-of-a-way"}) {
    wire.set_ingest(name);
    EXPECT_EQ(FeedProgressFromWire(wire).ingest, "") << name;
  }
}

}  // namespace
}  // namespace drover::rendezvous_internal
