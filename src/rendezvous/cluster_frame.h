// The formed cluster on the wire (docs/protocol.md, "Messages"): the part
// every node shares (the SharedCluster, zlib-compressed, as Cluster field
// 4) is encoded, compressed and hashed once; each node's CLUSTER frame
// borrows those bytes and adds its own few (its position in the node list,
// the heartbeat intervals). Pure functions; an EncodedCluster's body is immutable and may
// back any number of frames.

#ifndef DROVER_SRC_RENDEZVOUS_CLUSTER_FRAME_H_
#define DROVER_SRC_RENDEZVOUS_CLUSTER_FRAME_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "drover.pb.h"
#include "drover/rendezvous.h"
#include "rendezvous/node_info_codec.h"
#include "rendezvous/peer.h"

namespace drover::rendezvous_internal {

struct EncodedCluster {
  // Cluster field 4 whole: its tag, its length, then zlib(SharedCluster).
  std::shared_ptr<const SharedBody> body;
  uint64_t uncompressed_bytes = 0;  // the SharedCluster's encoding
  size_t compressed_bytes = 0;
};

// Encodes and compresses `shared` into *out. Returns zlib's code: Z_OK, or
// why compressing failed (*out is unchanged then).
int EncodeCluster(const wire::SharedCluster& shared, EncodedCluster* out);

// The heartbeat intervals every node is told with the cluster.
struct HeartbeatTiming {
  Milliseconds interval{1'000};
  Milliseconds quiet{0};  // 0: never quiet (Cluster.quiet_heartbeat_interval_ms)
};

// The CLUSTER frame of the node at `position` in the shared node list:
// header | field 4 (the shared bytes) | fields 3, 5, 6, 9 (heartbeat interval,
// uncompressed size, position, quiet heartbeat interval). Protobuf
// parsers accept fields in any order, so this is a valid Cluster encoding,
// and it lets the shared bytes go out by scatter-gather straight from one
// buffer and be hashed once: per node only a few dozen bytes are encoded
// and hashed, nothing is copied.
// REQUIRES: cluster.body is set.
OutFrame ClusterFrame(const EncodedCluster& cluster, uint32_t position,
                      const HeartbeatTiming& heartbeats);
// The same with the node's own entry and placement after its position: the
// frame of a node whose shared part is the summary, without the node list.
OutFrame ClusterFrame(const EncodedCluster& summary, uint32_t position,
                      const HeartbeatTiming& heartbeats, const NodeInfo& node,
                      const TaskRole& placement);

}  // namespace drover::rendezvous_internal

#endif  // DROVER_SRC_RENDEZVOUS_CLUSTER_FRAME_H_
