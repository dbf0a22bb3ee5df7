// The JSON form of a ClusterSpec as a parsed value, for callers that hold the
// cluster inside a larger document (TF_CONFIG's "cluster"). ClusterSpec's own
// FromJson/ToJson are the text versions of these.
//
// Internal to drover; stateless and thread-safe.

#ifndef DROVER_SPEC_CLUSTER_SPEC_JSON_H_
#define DROVER_SPEC_CLUSTER_SPEC_JSON_H_

#include <nlohmann/json.hpp>

#include "drover/cluster_spec.h"
#include "drover/status.h"

namespace drover {

// TensorFlow's ClusterSpec(dict) for the dict json.loads gives: see
// ClusterSpec::FromJson for the accepted shapes and error codes. Duplicate
// keys must already have been rejected (ParseStrictJson does).
Result<ClusterSpec> ClusterSpecFromJsonValue(const nlohmann::ordered_json& cluster);

// as_dict() as a JSON value, jobs in insertion order.
nlohmann::ordered_json ClusterSpecToJsonValue(const ClusterSpec& spec);

}  // namespace drover

#endif  // DROVER_SPEC_CLUSTER_SPEC_JSON_H_
