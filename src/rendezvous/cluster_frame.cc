#include "rendezvous/cluster_frame.h"

#include <google/protobuf/io/coded_stream.h>
#include <zlib.h>

#include <array>
#include <string>
#include <utility>

#include "rendezvous/node_info_codec.h"
#include "wire/frame.h"

namespace drover::rendezvous_internal {

int EncodeCluster(const wire::SharedCluster& shared, EncodedCluster* out) {
  std::string plain = shared.SerializeAsString();
  uLongf compressed_size = compressBound(static_cast<uLong>(plain.size()));
  std::string compressed(compressed_size, '\0');
  int rc = compress2(reinterpret_cast<Bytef*>(compressed.data()), &compressed_size,
                     reinterpret_cast<const Bytef*>(plain.data()), static_cast<uLong>(plain.size()),
                     Z_BEST_SPEED);
  if (rc != Z_OK) return rc;
  compressed.resize(compressed_size);
  auto body = std::make_shared<SharedBody>();
  uint8_t field[16];
  uint8_t* field_end = google::protobuf::io::CodedOutputStream::WriteTagToArray(
      (wire::Cluster::kSharedFieldNumber << 3) | 2 /* length-delimited */, field);
  field_end = google::protobuf::io::CodedOutputStream::WriteVarint32ToArray(
      static_cast<uint32_t>(compressed.size()), field_end);
  body->bytes.reserve(static_cast<size_t>(field_end - field) + compressed.size());
  body->bytes.append(reinterpret_cast<const char*>(field), static_cast<size_t>(field_end - field));
  body->bytes.append(compressed);
  body->digest.Update(body->bytes);
  out->body = std::move(body);
  out->uncompressed_bytes = plain.size();
  out->compressed_bytes = compressed.size();
  return Z_OK;
}

namespace {

wire::Cluster OwnFields(const EncodedCluster& cluster, uint32_t position,
                        const HeartbeatTiming& heartbeats) {
  wire::Cluster own;
  own.set_position(position);
  own.set_heartbeat_interval_ms(static_cast<uint32_t>(heartbeats.interval.count()));
  own.set_quiet_heartbeat_interval_ms(static_cast<uint32_t>(heartbeats.quiet.count()));
  own.set_shared_uncompressed_bytes(cluster.uncompressed_bytes);
  return own;
}

OutFrame FrameAround(const EncodedCluster& cluster, const wire::Cluster& own) {
  OutFrame frame;
  frame.tail = own.SerializeAsString();
  size_t body_size = cluster.body->bytes.size() + frame.tail.size();
  std::array<char, wire::kHeaderBytes> header =
      wire::EncodeHeader(wire::CLUSTER, static_cast<uint32_t>(body_size));
  frame.head.assign(header.data(), header.size());
  frame.shared = cluster.body;
  return frame;
}

}  // namespace

OutFrame ClusterFrame(const EncodedCluster& cluster, uint32_t position,
                      const HeartbeatTiming& heartbeats) {
  return FrameAround(cluster, OwnFields(cluster, position, heartbeats));
}

OutFrame ClusterFrame(const EncodedCluster& summary, uint32_t position,
                      const HeartbeatTiming& heartbeats, const NodeInfo& node,
                      const TaskRole& placement) {
  wire::Cluster own = OwnFields(summary, position, heartbeats);
  *own.mutable_node() = NodeToWire(node);
  *own.mutable_placement() = OwnPlacementToWire(placement);
  return FrameAround(summary, own);
}

}  // namespace drover::rendezvous_internal
