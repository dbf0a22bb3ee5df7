// NodeInfo <-> its wire form (drover.proto's NodeInfo), shared by the
// rendezvous server and client. Pure functions; thread-safe.

#ifndef DROVER_SRC_RENDEZVOUS_NODE_INFO_CODEC_H_
#define DROVER_SRC_RENDEZVOUS_NODE_INFO_CODEC_H_

#include "drover.pb.h"
#include "drover/rendezvous.h"

namespace drover::rendezvous_internal {

wire::NodeInfo NodeToWire(const NodeInfo& node);
NodeInfo NodeFromWire(const wire::NodeInfo& node);

}  // namespace drover::rendezvous_internal

#endif  // DROVER_SRC_RENDEZVOUS_NODE_INFO_CODEC_H_
