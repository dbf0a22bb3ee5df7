#include "report/report_datagram.h"

#include <charconv>
#include <cstdio>
#include <cstdlib>

namespace drover {

bool ValidMetricName(const std::string& name) {
  if (name.empty() || name.size() > kMaxMetricNameLength) return false;
  for (char c : name) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '.' || c == ':' || c == '/' || c == '-';
    if (!ok) return false;
  }
  return true;
}

namespace report {
namespace {

// strtod wants a terminated string; a value is at most a few dozen bytes.
bool ParseValue(std::string_view text, double* value) {
  if (text.empty() || text.size() > 64) return false;
  char buffer[65];
  text.copy(buffer, text.size());
  buffer[text.size()] = '\0';
  char* end = nullptr;
  *value = std::strtod(buffer, &end);
  return end == buffer + text.size();
}

Status ParseLine(std::string_view line, MetricValue* metric) {
  const size_t first = line.find(' ');
  if (first == std::string_view::npos) return Status::InvalidArgument("no value");
  metric->name = std::string(line.substr(0, first));
  if (!ValidMetricName(metric->name)) return Status::InvalidArgument("bad metric name");
  std::string_view rest = line.substr(first + 1);
  const size_t second = rest.find(' ');
  if (!ParseValue(rest.substr(0, second), &metric->value)) {
    return Status::InvalidArgument("bad value");
  }
  metric->step.reset();
  if (second == std::string_view::npos) return Status::Ok();
  std::string_view step = rest.substr(second + 1);
  int64_t parsed = 0;
  auto [end, error] = std::from_chars(step.data(), step.data() + step.size(), parsed);
  if (step.empty() || error != std::errc() || end != step.data() + step.size()) {
    return Status::InvalidArgument("bad step");
  }
  metric->step = parsed;
  return Status::Ok();
}

}  // namespace

std::string EncodeMetrics(const std::vector<MetricValue>& metrics) {
  std::string out;
  char number[64];
  for (const MetricValue& metric : metrics) {
    out += metric.name;
    std::snprintf(number, sizeof(number), " %.17g", metric.value);
    out += number;
    if (metric.step) out += " " + std::to_string(*metric.step);
    out += '\n';
  }
  return out;
}

Result<std::vector<MetricValue>> DecodeMetrics(std::string_view datagram) {
  if (datagram.size() > kMaxDatagramBytes) {
    return Status::InvalidArgument("a metrics datagram of " + std::to_string(datagram.size()) +
                                   " bytes (at most " + std::to_string(kMaxDatagramBytes) + ")");
  }
  std::vector<MetricValue> metrics;
  size_t line_number = 0;
  while (!datagram.empty()) {
    ++line_number;
    const size_t end = datagram.find('\n');
    if (end == std::string_view::npos) {
      return Status::InvalidArgument("metrics line " + std::to_string(line_number) +
                                     " has no newline");
    }
    MetricValue metric;
    if (Status parsed = ParseLine(datagram.substr(0, end), &metric); !parsed.ok()) {
      return Status::InvalidArgument("metrics line " + std::to_string(line_number) + ": " +
                                     parsed.message());
    }
    if (metrics.size() == kMaxMetrics) {
      return Status::InvalidArgument("more than " + std::to_string(kMaxMetrics) + " metrics");
    }
    metrics.push_back(std::move(metric));
    datagram.remove_prefix(end + 1);
  }
  return metrics;
}

}  // namespace report
}  // namespace drover
