#include "feed/feed_request.h"

#include <filesystem>

#include "feed/record_io.h"
#include "feed/share_layout.h"

namespace drover::feed {

std::string FormatOfExtension(const std::string& pattern) {
  std::string extension = std::filesystem::path(pattern).extension().string();
  if (extension == ".csv") return "csv";
  if (extension == ".jsonl" || extension == ".json" || extension == ".ndjson") return "jsonl";
  if (extension == ".tfrecord" || extension == ".tfrecords") return "tfrecord";
  return "";
}

uint64_t DefaultQueueBytes(const PlanOptions& read) {
  constexpr uint64_t kSmallRecord = 256 << 10;
  if (read.format == RecordFormat::kRaw && read.record_bytes > 0 &&
      read.record_bytes <= kSmallRecord) {
    return 4 << 20;
  }
  return 64ull << 20;
}

Result<std::optional<FeedPlan>> PlanFeed(const FeedRequest& request) {
  if (request.inputs.empty()) {
    if (!request.output.empty() || request.mode != "train" || request.epochs != 1 ||
        !request.format.empty() || request.record_bytes != 0 || !request.remainder.empty() ||
        !request.balance.empty() || !request.ingest.empty()) {
      return Status::InvalidArgument(
          "--format, --record-bytes, --epochs, --mode, --output, --remainder, --balance and "
          "--feed-ingest go with --input");
    }
    return std::optional<FeedPlan>();
  }
  FeedPlan plan;
  if (request.mode == "inference") {
    plan.mode = FeedMode::kInference;
  } else if (request.mode != "train") {
    return Status::InvalidArgument("--mode takes train or inference, not '" + request.mode + "'");
  }
  std::string format =
      request.format.empty() ? FormatOfExtension(request.inputs.front()) : request.format;
  if (format.empty()) {
    return Status::InvalidArgument("give --format csv|jsonl|tfrecord|raw: the extension of '" +
                                   request.inputs.front() + "' does not say");
  }
  DROVER_ASSIGN_OR_RETURN(plan.read.format, ParseRecordFormat(format));
  if (request.record_bytes != 0 && plan.read.format != RecordFormat::kRaw) {
    return Status::InvalidArgument("--record-bytes goes with --format raw");
  }
  plan.read.record_bytes = request.record_bytes;
  if (!request.ingest.empty()) {
    Result<Ingest> ingest = ParseIngest(request.ingest);
    if (!ingest.ok()) {
      return Status::InvalidArgument("--feed-ingest " + std::string(ingest.status().message()));
    }
    // Fixed-size raw records take every way; CSV, JSONL, TFRecord and
    // whole-file raw records all but the extents (their windows are mapped
    // or read).
    const bool fixed_size = plan.read.format == RecordFormat::kRaw && plan.read.record_bytes != 0;
    const bool extents = *ingest == Ingest::kExtent || *ingest == Ingest::kExtentRead;
    if (!fixed_size && extents) {
      return Status::InvalidArgument(
          "--feed-ingest " + std::string(IngestName(*ingest)) +
          " goes with --format raw --record-bytes N: CSV, JSONL and TFRecord files and whole-file "
          "raw records are mapped or read a window at a time (measure, the default, map or read)");
    }
    plan.ingest = *ingest;
  }
  plan.read.split_bytes = request.split_bytes;
  plan.epochs = request.epochs;
  plan.feed_timeout_ms = static_cast<int64_t>(request.feed_timeout_seconds * 1000);
  plan.queue_bytes = request.queue_bytes != 0 ? request.queue_bytes : DefaultQueueBytes(plan.read);
  if (plan.mode == FeedMode::kInference) {
    if (request.output.empty()) {
      return Status::InvalidArgument("--mode inference needs --output DIR for the results");
    }
    if (request.epochs != 1) return Status::InvalidArgument("--mode inference feeds one epoch");
    std::error_code error;
    plan.output_dir = std::filesystem::absolute(request.output, error).lexically_normal().string();
    for (const auto& entry : std::filesystem::directory_iterator(plan.output_dir, error)) {
      if (entry.path().filename().string().rfind("part-", 0) == 0) {
        return Status::AlreadyExists("the output directory " + plan.output_dir +
                                     " already holds results (" + entry.path().filename().string() +
                                     "); remove them or choose another --output");
      }
    }
    if (!request.remainder.empty()) {
      return Status::InvalidArgument(
          "--remainder goes with --mode train: inference feeds every record once");
    }
  } else if (!request.output.empty()) {
    return Status::InvalidArgument("--output goes with --mode inference");
  }
  if (request.balance == "dynamic") {
    plan.balance = Balance::kDynamic;
  } else if (!request.balance.empty() && request.balance != "equal") {
    return Status::InvalidArgument("--balance takes equal or dynamic, not '" + request.balance +
                                   "'");
  }
  if (plan.balance == Balance::kDynamic && !request.remainder.empty()) {
    return Status::InvalidArgument(
        "--remainder goes with --balance equal: a dynamic feed hands out every record once an "
        "epoch");
  }
  Remainder remainder = Remainder::kPad;
  if (!request.remainder.empty()) {
    Result<Remainder> parsed = ParseRemainder(request.remainder);
    if (!parsed.ok()) {
      return Status::InvalidArgument("--remainder takes pad or drop, not '" + request.remainder +
                                     "'");
    }
    remainder = *parsed;
  }
  DROVER_ASSIGN_OR_RETURN(plan.partitions, PlanPartitions(request.inputs, plan.read));
  if (plan.partitions.empty()) {
    return Status::InvalidArgument("--input matched only empty files: nothing to feed");
  }
  if (request.fed_nodes < 1) {
    return Status::InvalidArgument(
        "--input needs a fed node (a chief, master or worker), but the cluster has none");
  }
  // A dynamic feed needs no counting: whoever has room takes the next
  // partition, whatever its size.
  if (plan.balance == Balance::kDynamic) return std::optional<FeedPlan>(std::move(plan));
  DROVER_ASSIGN_OR_RETURN(plan, LayOutEqualShares(std::move(plan), request.fed_nodes, remainder));
  return std::optional<FeedPlan>(std::move(plan));
}

}  // namespace drover::feed
