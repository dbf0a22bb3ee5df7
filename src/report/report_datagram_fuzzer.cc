// Decodes each input as a metrics datagram. A datagram that decodes must
// encode and decode to the same metrics (NaN compared as NaN); decoding
// never crashes and fails only with kInvalidArgument. Aborts otherwise.

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

#include "report/report_datagram.h"

namespace {

void Check(bool condition, const char* what) {
  if (condition) return;
  std::fprintf(stderr, "report_datagram_fuzzer: %s\n", what);
  std::abort();
}

bool SameValue(double a, double b) {
  return (std::isnan(a) && std::isnan(b)) || a == b;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view input(reinterpret_cast<const char*>(data), size);
  auto decoded = drover::report::DecodeMetrics(input);
  if (!decoded.ok()) {
    Check(decoded.status().code() == drover::Status::Code::kInvalidArgument,
          "a failure other than kInvalidArgument");
    return 0;
  }
  auto again = drover::report::DecodeMetrics(drover::report::EncodeMetrics(*decoded));
  Check(again.ok(), "an encoded datagram does not decode");
  Check(again->size() == decoded->size(), "a different number of metrics after a round trip");
  for (size_t i = 0; i < decoded->size(); ++i) {
    const drover::MetricValue& a = (*decoded)[i];
    const drover::MetricValue& b = (*again)[i];
    Check(a.name == b.name && a.step == b.step && SameValue(a.value, b.value),
          "a metric changed in a round trip");
  }
  return 0;
}
