// The local GPUs `drover run --gpus-per-node K` deals out: found with
// nvidia-smi (the driver's own index order, which CUDA_VISIBLE_DEVICES
// refers to), then K disjoint ones per node. Thread-safe.

#ifndef DROVER_DRIVER_GPUS_H_
#define DROVER_DRIVER_GPUS_H_

#include <string>
#include <string_view>
#include <vector>

#include "drover/environment.h"
#include "drover/status.h"

namespace drover {

// GPU indices from `nvidia-smi --query-gpu=index --format=csv,noheader`
// output.
std::vector<int> ParseGpuIndices(std::string_view nvidia_smi_output);

// This host's GPU indices: nvidia-smi found on `env`'s PATH, run with a
// deadline. Empty when there is no nvidia-smi, or it fails or finds none.
std::vector<int> DetectGpus(const Environment& env);

// The GPUs for each of `nodes` local nodes: K disjoint ones each from
// `available` ("none" for every node when K = 0). kInvalidArgument when there
// are not enough.
Result<std::vector<std::string>> AssignGpus(int gpus_per_node, int nodes,
                                            const std::vector<int>& available);

}  // namespace drover

#endif  // DROVER_DRIVER_GPUS_H_
