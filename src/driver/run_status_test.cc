#include "driver/run_status.h"

#include <gtest/gtest.h>

namespace drover {
namespace {

NodeSnapshot FedNode(const std::string& id, uint64_t records, uint64_t bytes, uint32_t done,
                     uint32_t total, uint64_t share_bytes, uint32_t epoch, uint32_t epochs) {
  NodeSnapshot node;
  node.executor_id = id;
  node.job = "worker";
  node.task_index = std::stoi(id);
  node.state = "running";
  FeedProgress feed;
  feed.records = records;
  feed.bytes = bytes;
  feed.partitions_done = done;
  feed.partitions_total = total;
  feed.share_bytes = share_bytes;
  feed.epoch = epoch;
  feed.epochs = epochs;
  node.feed = feed;
  return node;
}

TEST(RateMeterTest, RateOverTheWindowAndResetOnANewRound) {
  RateMeter meter(5.0);
  EXPECT_EQ(meter.Add(0.0, 0, 0).first, 0);  // one sample: no rate yet
  EXPECT_DOUBLE_EQ(meter.Add(1.0, 100, 1000).first, 100);
  EXPECT_DOUBLE_EQ(meter.Add(2.0, 300, 3000).second, 1500);
  // Counters that go back are a new round's: start over.
  EXPECT_EQ(meter.Add(3.0, 10, 10).first, 0);
  EXPECT_DOUBLE_EQ(meter.Add(4.0, 20, 20).first, 10);
}

TEST(RateMeterTest, ForgetsSamplesOlderThanTheWindow) {
  RateMeter meter(2.0);
  meter.Add(0, 0, 0);
  meter.Add(1, 1000, 0);
  meter.Add(10, 1000, 0);  // stalled for 9 s
  EXPECT_DOUBLE_EQ(meter.Add(11, 1000, 0).first, 0);
}

TEST(SumFeedsTest, SumsNodesAndEstimatesTheEnd) {
  std::vector<NodeSnapshot> nodes = {FedNode("0", 50, 500, 1, 4, 400, 1, 2),
                                     FedNode("1", 70, 700, 2, 4, 600, 1, 2)};
  nodes[0].bytes_per_s = 100;
  nodes[1].bytes_per_s = 100;
  nodes.push_back(NodeSnapshot{});  // a ps node: not fed
  FeedTotals totals = SumFeeds(nodes);
  EXPECT_EQ(totals.records, 120u);
  EXPECT_EQ(totals.partitions_done, 3u);
  EXPECT_EQ(totals.partitions_total, 8u);
  EXPECT_EQ(totals.epoch_bytes, 1000u);
  EXPECT_EQ(totals.total_bytes, 2000u);
  EXPECT_EQ(totals.epoch, 1u);
  EXPECT_DOUBLE_EQ(totals.epoch_fraction, 0.2);  // 1200 bytes, 200 into epoch 2
  ASSERT_TRUE(totals.eta_s.has_value());
  EXPECT_DOUBLE_EQ(*totals.eta_s, 4.0);  // 800 bytes left at 200 B/s
  EXPECT_DOUBLE_EQ(*totals.epoch_eta_s, 4.0);
}

TEST(SumFeedsTest, ExternalFeedsHaveNoEstimate) {
  FeedTotals totals = SumFeeds({FedNode("0", 5, 50, 0, 0, 0, 0, 0)});
  EXPECT_EQ(totals.records, 5u);
  EXPECT_FALSE(totals.eta_s.has_value());
  EXPECT_EQ(totals.total_bytes, 0u);
}

TEST(SumFeedsTest, ADynamicFeedIsSizedByTheDriversQueue) {
  // Nodes that claimed 1 and 3 partitions: their shares say nothing.
  std::vector<NodeSnapshot> nodes = {FedNode("0", 50, 500, 1, 1, 0, 0, 2),
                                     FedNode("1", 70, 700, 2, 3, 0, 1, 2)};
  nodes[0].bytes_per_s = 100;
  nodes[1].bytes_per_s = 100;
  EXPECT_FALSE(SumFeeds(nodes).eta_s.has_value());
  FeedTotals totals = SumFeeds(nodes, QueueSize{8, 2000, 1000});
  EXPECT_EQ(totals.partitions_total, 8u);
  EXPECT_EQ(totals.total_bytes, 2000u);
  EXPECT_EQ(totals.epoch_bytes, 1000u);
  ASSERT_TRUE(totals.eta_s.has_value());
  EXPECT_DOUBLE_EQ(*totals.eta_s, 4.0);  // 800 bytes left at 200 B/s
}

TEST(SumFeedsTest, AllPartitionsDoneIsTheEnd) {
  FeedTotals totals = SumFeeds({FedNode("0", 10, 90, 2, 2, 100, 0, 1)});
  EXPECT_DOUBLE_EQ(totals.epoch_fraction, 1.0);
  ASSERT_TRUE(totals.eta_s.has_value());
  EXPECT_EQ(*totals.eta_s, 0.0);
}

RunSnapshot TwoNodes() {
  RunSnapshot snapshot;
  snapshot.cluster_id = "run-1";
  snapshot.phase = "running";
  snapshot.engine = "local";
  snapshot.expected = snapshot.registered = 2;
  snapshot.rendezvous_s = 0.25;
  snapshot.nodes.push_back(FedNode("0", 10, 100, 0, 2, 1000, 0, 1));
  snapshot.nodes.back().feed->ingest = "extent-read";
  NodeSnapshot failed;
  failed.executor_id = "1";
  failed.job = "worker";
  failed.task_index = 1;
  failed.state = "failed";
  failed.exited = true;
  failed.exit_signal = 9;
  failed.exit_text = "killed by SIGKILL";
  failed.error = "said \"no\"\nand left";
  failed.heartbeat_age_s = 0.5;
  snapshot.nodes.push_back(failed);
  snapshot.feed = SumFeeds(snapshot.nodes);
  snapshot.history.push_back({1.0, 10, 100});
  return snapshot;
}

TEST(SnapshotJsonTest, HasEveryFieldThePageReads) {
  nlohmann::json json = SnapshotToJson(TwoNodes());
  EXPECT_EQ(json["phase"], "running");
  EXPECT_EQ(json["rendezvous"]["expected"], 2);
  EXPECT_EQ(json["rendezvous"]["duration_s"], 0.25);
  ASSERT_EQ(json["nodes"].size(), 2u);
  const nlohmann::json& worker = json["nodes"][0];
  EXPECT_EQ(worker["task"], "worker:0");
  EXPECT_TRUE(worker["exit"].is_null());
  EXPECT_TRUE(worker["last_heartbeat_age_s"].is_null());
  EXPECT_EQ(worker["feed"]["records"], 10);
  EXPECT_EQ(worker["feed"]["ingest"], "extent-read");
  const nlohmann::json& failed = json["nodes"][1];
  EXPECT_EQ(failed["state"], "failed");
  EXPECT_TRUE(failed["exit"]["code"].is_null());
  EXPECT_EQ(failed["exit"]["signal"], 9);
  EXPECT_TRUE(failed["feed"].is_null());
  EXPECT_EQ(json["feed"]["history"].size(), 1u);
  EXPECT_TRUE(json["exit_code"].is_null());
  EXPECT_TRUE(json["heartbeat"].is_null());  // not said: an etcd run's
}

TEST(SnapshotJsonTest, SaysTheHeartbeatIntervalsThePageJudgesLateness) {
  RunSnapshot snapshot = TwoNodes();
  snapshot.heartbeat_interval_s = 1.0;
  snapshot.quiet_heartbeat_interval_s = 5.0;
  nlohmann::json json = SnapshotToJson(snapshot);
  EXPECT_EQ(json["heartbeat"]["interval_s"], 1.0);
  EXPECT_EQ(json["heartbeat"]["quiet_s"], 5.0);
  // Late: the longer of the two and two intervals more.
  EXPECT_EQ(json["heartbeat"]["late_after_s"], 7.0);
  snapshot.quiet_heartbeat_interval_s = 0.0;  // never quiet
  EXPECT_EQ(SnapshotToJson(snapshot)["heartbeat"]["late_after_s"], 3.0);
}

TEST(SnapshotPrometheusTest, NamesEscapesAndCountsStates) {
  std::string text = SnapshotToPrometheus(TwoNodes());
  EXPECT_NE(text.find("drover_nodes{state=\"running\"} 1\n"), std::string::npos) << text;
  EXPECT_NE(text.find("drover_nodes{state=\"failed\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("drover_nodes{state=\"lost\"} 0\n"), std::string::npos);
  EXPECT_NE(text.find("drover_feed_records_total{executor=\"0\",task=\"worker:0\"} 10\n"),
            std::string::npos);
  EXPECT_NE(text.find("drover_rendezvous_duration_seconds 0.25\n"), std::string::npos);
  EXPECT_NE(
      text.find("drover_feed_ingest{executor=\"0\",task=\"worker:0\",way=\"extent-read\"} 1\n"),
      std::string::npos)
      << text;
  EXPECT_NE(text.find("# TYPE drover_feed_records_total counter\n"), std::string::npos);
  // Every sample and family is drover's.
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    std::string line = text.substr(start, end - start);
    if (line.rfind("# ", 0) == 0) line = line.substr(line.find(' ', 2) + 1);
    EXPECT_EQ(line.rfind("drover_", 0), 0u) << line;
    start = end + 1;
  }
}

TEST(SnapshotJsonTest, CarriesTheReportsAndStragglers) {
  RunSnapshot snapshot = TwoNodes();
  snapshot.nodes[0].metrics = {{"loss", 0.25, 40}, {"acc", std::nan(""), std::nullopt}};
  snapshot.nodes[0].step = 40;
  snapshot.nodes[0].step_rate = 12.5;
  snapshot.nodes[0].straggler = "worker:0 on h1 at 41% of the median step rate";
  snapshot.metrics_task = "worker:0";
  snapshot.metrics = snapshot.nodes[0].metrics;
  snapshot.stragglers = {snapshot.nodes[0].straggler};
  nlohmann::json json = SnapshotToJson(snapshot);
  const nlohmann::json& worker = json["nodes"][0];
  EXPECT_EQ(worker["metrics"]["loss"], nlohmann::json::parse(R"({"value": 0.25, "step": 40})"));
  EXPECT_TRUE(worker["metrics"]["acc"]["value"].is_null());  // NaN has no JSON form
  EXPECT_EQ(worker["step"], 40);
  EXPECT_EQ(worker["step_rate"], 12.5);
  EXPECT_EQ(worker["straggler"], "worker:0 on h1 at 41% of the median step rate");
  EXPECT_TRUE(json["nodes"][1]["straggler"].is_null());
  EXPECT_EQ(json["metrics"]["loss"], 0.25);
  EXPECT_EQ(json["metrics_task"], "worker:0");
  EXPECT_EQ(json["stragglers"].size(), 1u);

  std::string text = SnapshotToPrometheus(snapshot);
  EXPECT_NE(text.find("drover_metric{name=\"loss\",executor=\"0\",task=\"worker:0\"} 0.25\n"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("drover_metric{name=\"acc\",executor=\"0\",task=\"worker:0\"} NaN\n"),
            std::string::npos);
  EXPECT_NE(text.find("drover_node_step{executor=\"0\",task=\"worker:0\"} 40\n"),
            std::string::npos);
  EXPECT_NE(text.find("drover_node_step_rate{executor=\"0\",task=\"worker:0\"} 12.5\n"),
            std::string::npos);
  EXPECT_NE(text.find("drover_straggler{executor=\"0\",task=\"worker:0\",host=\"\"} 1\n"),
            std::string::npos);
}

TEST(SnapshotPrometheusTest, EscapesLabelValues) {
  RunSnapshot snapshot;
  snapshot.cluster_id = "a\"b\\c\nd";
  std::string text = SnapshotToPrometheus(snapshot);
  EXPECT_NE(text.find("cluster_id=\"a\\\"b\\\\c\\nd\""), std::string::npos) << text;
}

TEST(RunStatusTest, KeepsTheLastLogLinesPerNode) {
  RunStatus status(3);
  RunSnapshot snapshot;
  snapshot.nodes.push_back(NodeSnapshot{.executor_id = "7"});
  status.Publish(snapshot);
  status.AppendLog("0", {"a", "b"});
  status.AppendLog("0", {"c", "d"});
  EXPECT_EQ(status.LogTail("0", 10)->lines, (std::vector<std::string>{"b", "c", "d"}));
  EXPECT_EQ(status.LogTail("0", 10)->task, "executor 0");  // not in the snapshot
  EXPECT_EQ(status.LogTail("0", 1)->lines, (std::vector<std::string>{"d"}));
  EXPECT_TRUE(status.LogTail("7", 5)->lines.empty());  // a node that said nothing yet
  EXPECT_EQ(status.LogTail("7", 5)->task, "executor 7");
  EXPECT_FALSE(status.LogTail("9", 5).has_value());
  status.ClearLogs();
  EXPECT_FALSE(status.LogTail("0", 5).has_value());
}

TEST(RunStatusTest, NumbersEachNodesLinesOverTheWholeRun) {
  RunStatus status(3);
  RunSnapshot snapshot;
  snapshot.nodes.push_back(NodeSnapshot{.executor_id = "0"});
  status.Publish(snapshot);
  status.AppendLog("0", {"a", "b"});
  status.AppendLog("1", {"x"});
  std::optional<RunStatus::NodeLog> log = status.LogSince("0", 0, 10);
  EXPECT_EQ(log->lines, (std::vector<std::string>{"a", "b"}));
  EXPECT_EQ(log->first, 0u);
  EXPECT_EQ(log->next, 2u);
  EXPECT_EQ(status.LogSince("1", 0, 10)->next, 1u);  // each node counts its own
  status.AppendLog("0", {"c", "d", "e"});
  // Only 3 kept: the first asked for is gone, and `first` says so.
  log = status.LogSince("0", 1, 10);
  EXPECT_EQ(log->lines, (std::vector<std::string>{"c", "d", "e"}));
  EXPECT_EQ(log->first, 2u);
  EXPECT_EQ(log->next, 5u);
  log = status.LogSince("0", 3, 1);
  EXPECT_EQ(log->lines, (std::vector<std::string>{"d"}));
  EXPECT_EQ(log->next, 4u);
  log = status.LogTail("0", 2);
  EXPECT_EQ(log->lines, (std::vector<std::string>{"d", "e"}));
  EXPECT_EQ(log->first, 3u);
  EXPECT_EQ(log->next, 5u);
  // A new round starts its lines after the last round's numbers.
  status.ClearLogs();
  log = status.LogSince("0", 5, 10);
  EXPECT_TRUE(log->lines.empty());
  EXPECT_EQ(log->first, 5u);
  EXPECT_EQ(log->next, 5u);
  status.AppendLog("0", {"f"});
  log = status.LogSince("0", 5, 10);
  EXPECT_EQ(log->lines, (std::vector<std::string>{"f"}));
  EXPECT_EQ(log->first, 5u);
  EXPECT_EQ(log->next, 6u);
  EXPECT_FALSE(status.LogSince("9", 0, 10).has_value());
}

}  // namespace
}  // namespace drover
