#include "drover/rendezvous.h"

namespace drover {

Status ClusterTemplate::Validate() const {
  if (num_nodes < 1) {
    return Status::InvalidArgument("a cluster needs at least one node, got " +
                                   std::to_string(num_nodes));
  }
  if (num_ps < 0)
    return Status::InvalidArgument("num_ps must be >= 0, got " + std::to_string(num_ps));
  if (master_node && *master_node != "chief" && *master_node != "master") {
    return Status::InvalidArgument("master_node must be \"chief\" or \"master\", got \"" +
                                   *master_node + "\"");
  }
  int reserved = num_ps + (master_node ? 1 : 0) + (eval_node ? 1 : 0);
  if (reserved > num_nodes) {
    return Status::InvalidArgument(
        std::to_string(num_nodes) + " nodes cannot hold " + std::to_string(num_ps) + " ps" +
        (master_node ? " + 1 " + *master_node : "") + (eval_node ? " + 1 evaluator" : ""));
  }
  return Status::Ok();
}

std::pair<std::string, int> ClusterTemplate::Slot(int i) const {
  // TensorFlowOnSpark's order: ps first, then the chief/master, the evaluator, workers.
  if (i < num_ps) return {"ps", i};
  i -= num_ps;
  if (master_node) {
    if (i == 0) return {*master_node, 0};
    --i;
  }
  if (eval_node) {
    if (i == 0) return {"evaluator", 0};
    --i;
  }
  return {"worker", i};
}

}  // namespace drover
