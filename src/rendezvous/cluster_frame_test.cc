// The formed cluster's encoding: the shared part compressed once, and every
// node's CLUSTER frame a valid Cluster message that borrows it. No sockets.

#include "rendezvous/cluster_frame.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <string>
#include <tuple>
#include <vector>

#include "rendezvous/node_info_codec.h"
#include "rendezvous/server_fakes.h"
#include "wire/frame.h"
#include "wire/session.h"

namespace drover::rendezvous_internal {
namespace {

wire::SharedCluster ManyNodes(int count) {
  wire::SharedCluster shared;
  shared.set_cluster_id("c0ffee");
  for (int i = 0; i < count; ++i) {
    wire::NodeInfo* node = shared.add_nodes();
    node->set_executor_id(std::to_string(i));
    node->set_host("10.0.0." + std::to_string(i % 250));
    node->add_ports(7000 + i);
  }
  return shared;
}

std::string Inflate(const std::string& compressed, uint64_t size) {
  std::string plain(size, '\0');
  uLongf plain_size = plain.size();
  int rc = uncompress(reinterpret_cast<Bytef*>(plain.data()), &plain_size,
                      reinterpret_cast<const Bytef*>(compressed.data()), compressed.size());
  EXPECT_EQ(rc, Z_OK);
  plain.resize(plain_size);
  return plain;
}

TEST(ClusterFrameTest, TheSharedPartIsField4CompressedAndHashed) {
  wire::SharedCluster shared = ManyNodes(100);
  EncodedCluster encoded;
  ASSERT_EQ(EncodeCluster(shared, &encoded), Z_OK);
  ASSERT_NE(encoded.body, nullptr);
  EXPECT_EQ(encoded.uncompressed_bytes, shared.SerializeAsString().size());
  EXPECT_LT(encoded.compressed_bytes, encoded.uncompressed_bytes);

  // Field 4 alone is a valid Cluster encoding: parse it as one.
  wire::Cluster field;
  ASSERT_TRUE(field.ParseFromString(encoded.body->bytes));
  EXPECT_EQ(field.shared().size(), encoded.compressed_bytes);
  wire::SharedCluster decoded;
  ASSERT_TRUE(decoded.ParseFromString(Inflate(field.shared(), encoded.uncompressed_bytes)));
  EXPECT_EQ(decoded.nodes_size(), 100);
  EXPECT_EQ(decoded.cluster_id(), "c0ffee");

  wire::BodyDigest digest;
  digest.Update(encoded.body->bytes);
  EXPECT_EQ(encoded.body->digest.Finish(), digest.Finish());
}

TEST(ClusterFrameTest, EachNodesFrameBorrowsTheSharedBytesAndAddsItsPosition) {
  EncodedCluster encoded;
  ASSERT_EQ(EncodeCluster(ManyNodes(3), &encoded), Z_OK);
  OutFrame frame =
      ClusterFrame(encoded, 2, HeartbeatTiming{Milliseconds(250), Milliseconds(4'000)});
  OutFrame other =
      ClusterFrame(encoded, 0, HeartbeatTiming{Milliseconds(250), Milliseconds(4'000)});

  // No copy: both frames point at the one shared body.
  EXPECT_EQ(frame.shared.get(), encoded.body.get());
  EXPECT_EQ(other.shared.get(), encoded.body.get());
  ASSERT_EQ(frame.head.size(), wire::kHeaderBytes);

  wire::FrameHeader header;
  wire::FrameError error;
  ASSERT_TRUE(wire::DecodeHeader(frame.head, wire::kClientMaxFrameBytes, &header, &error))
      << error.message;
  EXPECT_EQ(header.type, wire::CLUSTER);
  EXPECT_EQ(header.length, encoded.body->bytes.size() + frame.tail.size());

  wire::Cluster cluster;
  ASSERT_TRUE(cluster.ParseFromString(BodyOf(frame)));
  EXPECT_EQ(cluster.position(), 2u);
  EXPECT_EQ(cluster.heartbeat_interval_ms(), 250u);
  EXPECT_EQ(cluster.quiet_heartbeat_interval_ms(), 4'000u);
  EXPECT_EQ(cluster.shared_uncompressed_bytes(), encoded.uncompressed_bytes);
  wire::SharedCluster shared;
  ASSERT_TRUE(shared.ParseFromString(Inflate(cluster.shared(), encoded.uncompressed_bytes)));
  EXPECT_EQ(shared.nodes_size(), 3);
}

// The server's layout survives the wire whole: every placement decodes to
// what the server laid out, with the cluster-wide parts filled back in.
TEST(ClusterFrameTest, PlacementsRoundTrip) {
  FormedCluster formed;
  formed.cluster_id = "c1";
  const std::vector<std::tuple<std::string, int, std::string, std::vector<uint32_t>>> nodes = {
      {"ps", 0, "h0", {7000}},
      {"chief", 0, "h1", {7001, 7002}},
      {"evaluator", 0, "h1", {7003}},
      {"worker", 0, "h2", {7004}},
      {"worker", 1, "h1", {7005}}};
  for (const auto& [job, index, host, ports] : nodes) {
    NodeInfo node;
    node.executor_id = std::to_string(formed.nodes.size());
    node.job_name = job;
    node.task_index = index;
    node.host = host;
    node.ports = ports;
    node.gpus = {index};
    formed.nodes.push_back(node);
    formed.placements.push_back(NodePlacement(node));
  }
  ASSERT_TRUE(PlaceTasks(formed.placements).ok());
  wire::SharedCluster shared = SharedClusterToWire(formed);
  EXPECT_EQ(shared.master(), 1u);
  Result<FormedCluster> decoded = SharedClusterFromWire(shared);
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(decoded->placements, formed.placements);
  EXPECT_EQ(decoded->placements[4].rank->store_port, 7002);
  EXPECT_EQ(decoded->spec.task_address("worker", 1).value(), "h1:7005");
  EXPECT_EQ(decoded->cluster_id, "c1");
}

}  // namespace
}  // namespace drover::rendezvous_internal
