#include "driver/status_text.h"

#include <gtest/gtest.h>

namespace drover {
namespace {

TEST(FormatTest, DurationsCountsAndBytes) {
  EXPECT_EQ(FormatDuration(0.25), "250 ms");
  EXPECT_EQ(FormatDuration(12.46), "12.5 s");
  EXPECT_EQ(FormatDuration(190), "3 m 10 s");
  EXPECT_EQ(FormatDuration(7500), "2 h 5 m");
  EXPECT_EQ(FormatCount(0), "0");
  EXPECT_EQ(FormatCount(1234567), "1,234,567");
  EXPECT_EQ(FormatCount(999), "999");
  EXPECT_EQ(FormatBytes(980), "980 B");
  EXPECT_EQ(FormatBytes(1'234'567), "1.2 MB");
}

TEST(ProgressTextTest, NamesWhoTheRendezvousWaitsFor) {
  RunSnapshot snapshot;
  snapshot.phase = "reserving";
  snapshot.registered = 4;
  snapshot.expected = 8;
  snapshot.elapsed_s = 3;
  snapshot.waiting_for = {"worker:3 (executor 4) on host-b", "worker:4 (executor 5) on host-c"};
  EXPECT_EQ(ProgressText(snapshot),
            "drover run: 4/8 nodes registered, waiting for worker:3 (executor 4) on host-b and 1 "
            "more (3.0 s)");
}

TEST(ProgressTextTest, FeedingShowsEpochRateAndEta) {
  RunSnapshot snapshot;
  snapshot.phase = "running";
  FeedTotals feed;
  feed.records = 12345;
  feed.records_per_s = 2100;
  feed.bytes_per_s = 1.2e6;
  feed.partitions_total = 80;
  feed.partitions_done = 3;
  feed.epoch = 1;
  feed.epochs = 40;
  feed.epoch_fraction = 0.45;
  feed.epoch_eta_s = 5;
  feed.eta_s = 190;
  snapshot.feed = feed;
  EXPECT_EQ(ProgressText(snapshot),
            "drover run: feeding epoch 2/40 (45%): 12,345 records, 2,100 records/s, 1.2 MB/s, "
            "epoch ETA 5.0 s, ETA 3 m 10 s");
  snapshot.feed->records = 0;
  snapshot.feed->partitions_done = 0;
  EXPECT_EQ(ProgressText(snapshot), "");  // nothing read yet: nothing to say
  snapshot.feed.reset();
  EXPECT_EQ(ProgressText(snapshot), "");
}

TEST(ProgressTextTest, ShowsTheLeadNodesMetricsAndStragglers) {
  RunSnapshot snapshot;
  snapshot.phase = "running";
  snapshot.metrics = {{"loss", 0.041234, 1200}, {"acc", 0.97, std::nullopt}};
  EXPECT_EQ(ProgressText(snapshot), "drover run: step 1200  loss 0.04123  acc 0.97");
  snapshot.stragglers = {"worker:3 on h2 at 41% of the median step rate"};
  EXPECT_EQ(ProgressText(snapshot),
            "drover run: step 1200  loss 0.04123  acc 0.97; straggler: worker:3 on h2 at 41% of "
            "the median step rate");
  FeedTotals feed;
  feed.records = 10;
  feed.records_per_s = 5;
  snapshot.feed = feed;
  snapshot.stragglers.clear();
  EXPECT_EQ(ProgressText(snapshot),
            "drover run: feeding: 10 records, 5 records/s, 0 B/s; step 1200  loss 0.04123  acc "
            "0.97");
}

nlohmann::json Cluster() {
  return nlohmann::json::parse(R"({
    "cluster_id": "run-1", "phase": "failed", "engine": "local", "elapsed_s": 12.5,
    "round": 0, "log_dir": "/logs/run-1",
    "rendezvous": {"registered": 2, "expected": 2, "duration_s": 0.2, "waiting_for": []},
    "feed": {"records": 1500, "bytes": 15000, "rate_records_per_s": 0, "partitions_done": 2,
             "partitions_total": 4, "epoch": 0, "epochs": 1, "eta_s": null},
    "nodes": [
      {"executor_id": "0", "task": "worker:0", "host": "h1", "pid": 10, "state": "finished",
       "restarts": 0, "last_heartbeat_age_s": null, "runtime_s": 12.0, "gpus": [0, 1],
       "exit": {"code": 0, "signal": null, "text": "exit code 0"}, "error": "",
       "feed": {"records": 1000, "rate_records_per_s": 0}},
      {"executor_id": "1", "task": "", "host": "h2", "pid": 0, "state": "failed",
       "restarts": 0, "last_heartbeat_age_s": 1.5, "runtime_s": 3.0, "gpus": [],
       "exit": null, "error": "its agent exited before the cluster formed", "feed": null}
    ]})");
}

TEST(RenderTest, StatusListsEveryNodeAndItsError) {
  std::string text = RenderStatus(Cluster());
  EXPECT_NE(text.find("cluster run-1: failed on the local engine for 12.5 s"), std::string::npos)
      << text;
  EXPECT_NE(text.find("2/2 nodes registered, formed in 200 ms"), std::string::npos) << text;
  EXPECT_NE(text.find("feed: 1,500 records (15.0 kB)"), std::string::npos) << text;
  EXPECT_NE(text.find("worker:0    0         h1"), std::string::npos) << text;
  EXPECT_NE(text.find("0,1"), std::string::npos) << text;
  EXPECT_NE(text.find("executor 1  1         h2"), std::string::npos) << text;
  EXPECT_NE(text.find("1.5 s ago"), std::string::npos) << text;
  EXPECT_NE(text.find("executor 1: its agent exited before the cluster formed"), std::string::npos)
      << text;
  EXPECT_EQ(text.find("ingest:"), std::string::npos) << text;  // no node says
}

// The way each fed node's raw records come in, nodes grouped by way.
TEST(RenderTest, StatusSaysHowRecordsComeIn) {
  nlohmann::json cluster = Cluster();
  cluster["nodes"][0]["feed"]["ingest"] = "extent";
  nlohmann::json more = cluster["nodes"][0];
  more["task"] = "worker:2";
  more["feed"]["ingest"] = "read";
  cluster["nodes"].push_back(more);
  more["task"] = "worker:3";
  more["feed"]["ingest"] = "extent";
  cluster["nodes"].push_back(more);
  const std::string text = RenderStatus(cluster);
  EXPECT_NE(text.find("ingest: extent (worker:0, worker:3), read (worker:2)\n"), std::string::npos)
      << text;
}

// Late past the driver's late_after_s, as the status page counts it; 10 s
// when the run does not say; and only for a node that should be
// heartbeating.
TEST(RenderTest, StatusMarksALateHeartbeat) {
  nlohmann::json cluster = Cluster();
  cluster["nodes"][0]["state"] = "running";
  cluster["nodes"][0]["last_heartbeat_age_s"] = 8.0;
  cluster["nodes"][1]["last_heartbeat_age_s"] = 60.0;  // failed: not late, gone
  cluster["heartbeat"] = {{"interval_s", 1.0}, {"quiet_s", 5.0}, {"late_after_s", 7.0}};
  std::string text = RenderStatus(cluster);
  EXPECT_NE(text.find("8.0 s ago (late)"), std::string::npos) << text;
  EXPECT_NE(text.find("1 m 0 s ago  "), std::string::npos) << text;
  EXPECT_EQ(text.find("1 m 0 s ago (late)"), std::string::npos) << text;
  cluster["heartbeat"] = {{"interval_s", 1.0}, {"quiet_s", 30.0}, {"late_after_s", 32.0}};
  text = RenderStatus(cluster);
  EXPECT_EQ(text.find("(late)"), std::string::npos) << text;
  cluster["heartbeat"] = nullptr;  // etcd, or an older driver: 10 s
  text = RenderStatus(cluster);
  EXPECT_EQ(text.find("(late)"), std::string::npos) << text;
  cluster["nodes"][0]["last_heartbeat_age_s"] = 10.5;
  text = RenderStatus(cluster);
  EXPECT_NE(text.find("10.5 s ago (late)"), std::string::npos) << text;
}

TEST(RenderTest, StatusAndSummaryShowMetrics) {
  nlohmann::json cluster = Cluster();
  cluster["nodes"][0]["metrics"] = {{"loss", {{"value", 0.5}, {"step", 7}}}};
  cluster["nodes"][0]["step"] = 7;
  cluster["stragglers"] = {"worker:0 on h1 at 41% of the median step rate"};
  cluster["metrics"] = {{"loss", 0.5}, {"acc", nullptr}};
  cluster["metrics_task"] = "worker:0";
  std::string text = RenderStatus(cluster);
  EXPECT_NE(text.find("STEP  METRICS"), std::string::npos) << text;
  EXPECT_NE(text.find("7     loss 0.5"), std::string::npos) << text;
  EXPECT_NE(text.find("straggler: worker:0 on h1 at 41%"), std::string::npos) << text;
  EXPECT_NE(text.find("metrics (worker:0): acc nan  loss 0.5"), std::string::npos) << text;
  EXPECT_NE(RenderSummary(cluster).find("metrics (worker:0): acc nan  loss 0.5"), std::string::npos)
      << RenderSummary(cluster);
}

TEST(RenderTest, SummaryHasRuntimeExitAndRecords) {
  std::string text = RenderSummary(Cluster());
  EXPECT_NE(text.find("cluster run-1 failed after 12.5 s (rendezvous 200 ms)"), std::string::npos)
      << text;
  EXPECT_NE(text.find("worker:0    0         h1    12.0 s   exit code 0  1,000"), std::string::npos)
      << text;
  EXPECT_NE(text.find("executor 1  1         h2    3.0 s    failed       -"), std::string::npos)
      << text;
  EXPECT_NE(text.find("fed 1,500 records (15.0 kB), 2 of 4 partitions"), std::string::npos) << text;
}

TEST(RenderTest, MissingFieldsAndWrongTypesDoNotThrow) {
  EXPECT_NO_THROW(RenderStatus(nlohmann::json::object()));
  EXPECT_NO_THROW(RenderStatus(nlohmann::json(7)));
  EXPECT_NO_THROW(RenderSummary(nlohmann::json::parse(R"({"nodes": [{"feed": 3}]})")));
  nlohmann::json odd = nlohmann::json::parse(R"({
    "rendezvous": 5, "round": 1e300, "nodes": [3, {"exit": "x", "gpus": {"a": 1},
    "feed": {"records": -4, "rate_records_per_s": 1e300}}],
    "feed": {"records": "many", "partitions_total": 1e30, "epoch": -1e20, "eta_s": "soon"}})");
  std::string text;
  EXPECT_NO_THROW(text = RenderStatus(odd));
  EXPECT_NE(text.find("feed: 0 records"), std::string::npos) << text;
  EXPECT_NO_THROW(RenderSummary(odd));
}

}  // namespace
}  // namespace drover
