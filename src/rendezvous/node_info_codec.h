// NodeInfo and FeedProgress <-> their wire forms (drover.proto), shared by the
// rendezvous server and client. Pure functions; thread-safe.

#ifndef DROVER_SRC_RENDEZVOUS_NODE_INFO_CODEC_H_
#define DROVER_SRC_RENDEZVOUS_NODE_INFO_CODEC_H_

#include "drover.pb.h"
#include "drover/rendezvous.h"

namespace drover::rendezvous_internal {

wire::NodeInfo NodeToWire(const NodeInfo& node);
NodeInfo NodeFromWire(const wire::NodeInfo& node);
wire::FeedProgress FeedProgressToWire(const FeedProgress& progress);
FeedProgress FeedProgressFromWire(const wire::FeedProgress& progress);

}  // namespace drover::rendezvous_internal

#endif  // DROVER_SRC_RENDEZVOUS_NODE_INFO_CODEC_H_
