#include "rendezvous/node_info_codec.h"

namespace drover::rendezvous_internal {

wire::NodeInfo NodeToWire(const NodeInfo& node) {
  wire::NodeInfo out;
  out.set_executor_id(node.executor_id);
  out.set_host(node.host);
  for (uint32_t port : node.ports) out.add_ports(port);
  out.set_pid(node.pid);
  for (int32_t gpu : node.gpus) out.add_gpus(gpu);
  out.set_agent_address(node.agent_address);
  out.set_feed_socket(node.feed_socket);
  out.set_job_name(node.job_name);
  out.set_task_index(node.task_index);
  return out;
}

NodeInfo NodeFromWire(const wire::NodeInfo& node) {
  NodeInfo out;
  out.executor_id = node.executor_id();
  out.host = node.host();
  out.ports.assign(node.ports().begin(), node.ports().end());
  out.pid = node.pid();
  out.gpus.assign(node.gpus().begin(), node.gpus().end());
  out.agent_address = node.agent_address();
  out.feed_socket = node.feed_socket();
  out.job_name = node.job_name();
  out.task_index = node.task_index();
  return out;
}

wire::FeedProgress FeedProgressToWire(const FeedProgress& progress) {
  wire::FeedProgress out;
  out.set_records(progress.records);
  out.set_bytes(progress.bytes);
  out.set_partitions_done(progress.partitions_done);
  out.set_partitions_total(progress.partitions_total);
  out.set_share_bytes(progress.share_bytes);
  out.set_epoch(progress.epoch);
  out.set_epochs(progress.epochs);
  out.set_queue_bytes(progress.queue_bytes);
  out.set_queue_capacity(progress.queue_capacity);
  out.set_feeder_restarts(progress.feeder_restarts);
  out.set_results(progress.results);
  return out;
}

FeedProgress FeedProgressFromWire(const wire::FeedProgress& progress) {
  FeedProgress out;
  out.records = progress.records();
  out.bytes = progress.bytes();
  out.partitions_done = progress.partitions_done();
  out.partitions_total = progress.partitions_total();
  out.share_bytes = progress.share_bytes();
  out.epoch = progress.epoch();
  out.epochs = progress.epochs();
  out.queue_bytes = progress.queue_bytes();
  out.queue_capacity = progress.queue_capacity();
  out.feeder_restarts = progress.feeder_restarts();
  out.results = progress.results();
  return out;
}

}  // namespace drover::rendezvous_internal
