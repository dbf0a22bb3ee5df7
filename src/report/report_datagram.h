// The datagram a program's reporter sends its agent (docs/protocol.md,
// "Metrics"): one metric per line, `NAME VALUE [STEP]\n`, the value as C's
// %.17g writes it (nan and inf included), the step a decimal int64. Text, so
// that a person can read it off the socket and any language can send it.

#ifndef DROVER_REPORT_REPORT_DATAGRAM_H_
#define DROVER_REPORT_REPORT_DATAGRAM_H_

#include <string>
#include <string_view>
#include <vector>

#include "drover/report.h"
#include "drover/status.h"

namespace drover::report {

// Larger than kMaxMetrics lines of the longest name, value and step.
inline constexpr size_t kMaxDatagramBytes = 16384;

std::string EncodeMetrics(const std::vector<MetricValue>& metrics);
// InvalidArgument naming the first bad line.
Result<std::vector<MetricValue>> DecodeMetrics(std::string_view datagram);

}  // namespace drover::report

#endif  // DROVER_REPORT_REPORT_DATAGRAM_H_
