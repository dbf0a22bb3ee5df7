#include "feed/feed_plan.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <span>
#include <system_error>
#include <utility>

#include "os/unique_fd.h"

namespace drover::feed {
namespace {

using Json = nlohmann::ordered_json;

constexpr std::string_view kPlanFields[] = {
    "mode",        "format",     "record_bytes", "epochs",     "feed_timeout_ms",
    "queue_bytes", "output_dir", "external",     "partitions", "shares",
    "starts",      "balance",    "queue",        "ingest"};
constexpr std::string_view kPartitionFields[] = {"path", "begin", "end", "records"};

std::string TypeName(const Json& value) {
  switch (value.type()) {
    case Json::value_t::null:
      return "null";
    case Json::value_t::boolean:
      return "a boolean";
    case Json::value_t::string:
      return "a string";
    case Json::value_t::array:
      return "an array";
    case Json::value_t::object:
      return "an object";
    case Json::value_t::number_float:
      return "a fractional number";
    default:
      return "an integer";
  }
}

// Messages travel to Python as str, so bytes outside printable ASCII become \xNN.
std::string Printable(std::string_view text) {
  std::string out;
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x20 && byte < 0x7f) {
      out += c;
    } else {
      char escaped[8];
      std::snprintf(escaped, sizeof(escaped), "\\x%02x", byte);
      out += escaped;
    }
  }
  return out;
}

Status FieldError(std::string_view field, std::string_view what) {
  return Status::InvalidArgument("feed plan field '" + std::string(field) + "' " +
                                 std::string(what));
}

// An integer in [min, max]. JSON parsing keeps non-negative integers
// unsigned and negative ones signed, so both are compared without casts.
template <typename Int>
Status GetInteger(const Json& value, std::string_view field, Int min, Int max, Int* out) {
  if (!value.is_number_integer()) {
    return FieldError(field, "must be an integer, got " + TypeName(value));
  }
  auto check = [&](auto number) {
    if (std::cmp_less(number, min)) {
      return FieldError(field, (min == 0 ? std::string("must not be negative")
                                         : "must be at least " + std::to_string(min)) +
                                   ", got " + std::to_string(number));
    }
    if (std::cmp_greater(number, max)) {
      return FieldError(
          field, "must be at most " + std::to_string(max) + ", got " + std::to_string(number));
    }
    *out = static_cast<Int>(number);
    return Status::Ok();
  };
  if (value.is_number_unsigned()) return check(value.get<uint64_t>());
  return check(value.get<int64_t>());
}

Status GetString(const Json& value, std::string_view field, std::string* out) {
  if (!value.is_string()) return FieldError(field, "must be a string, got " + TypeName(value));
  *out = value.get<std::string>();
  return Status::Ok();
}

Status CheckFields(const Json& object, std::string_view where,
                   std::span<const std::string_view> known) {
  for (const auto& [key, value] : object.items()) {
    bool found = false;
    for (std::string_view name : known) found = found || key == name;
    if (!found) {
      return Status::InvalidArgument("feed plan: unknown field '" + Printable(key) + "' in " +
                                     std::string(where));
    }
  }
  return Status::Ok();
}

// Parses without exceptions escaping and rejects a repeated key, which a
// Python writer's dict could never produce and nlohmann would keep silently.
Result<Json> ParseJson(std::string_view text) {
  std::vector<std::set<std::string>> keys_in_open_objects;
  std::string duplicate;
  auto callback = [&](int /*depth*/, Json::parse_event_t event, Json& parsed) {
    switch (event) {
      case Json::parse_event_t::object_start:
        keys_in_open_objects.emplace_back();
        break;
      case Json::parse_event_t::object_end:
        keys_in_open_objects.pop_back();
        break;
      case Json::parse_event_t::key:
        if (!keys_in_open_objects.back().insert(parsed.get<std::string>()).second &&
            duplicate.empty()) {
          duplicate = parsed.get<std::string>();
        }
        break;
      default:
        break;
    }
    return true;
  };
  Json json;
  try {
    json = Json::parse(text.begin(), text.end(), callback);
  } catch (const Json::exception& error) {
    return Status::InvalidArgument("feed plan is not valid JSON: " + Printable(error.what()));
  }
  if (!duplicate.empty()) {
    return Status::InvalidArgument("feed plan: field '" + Printable(duplicate) +
                                   "' appears twice in one object");
  }
  return json;
}

Status ParsePartition(const Json& json, size_t index, Partition* partition) {
  const std::string where = "partitions[" + std::to_string(index) + "]";
  if (!json.is_object()) {
    return FieldError(where,
                      "must be an object {\"path\", \"begin\", \"end\"}, got " + TypeName(json));
  }
  DROVER_RETURN_IF_ERROR(CheckFields(json, where, kPartitionFields));
  for (std::string_view name : {"path", "begin", "end"}) {
    if (!json.contains(name)) return FieldError(where + "." + std::string(name), "is missing");
  }
  DROVER_RETURN_IF_ERROR(GetString(json["path"], where + ".path", &partition->path));
  if (partition->path.empty() || partition->path[0] != '/') {
    return FieldError(where + ".path",
                      "must be an absolute path, got '" + Printable(partition->path) + "'");
  }
  constexpr uint64_t kMaxOffset = std::numeric_limits<int64_t>::max();  // off_t
  DROVER_RETURN_IF_ERROR(
      GetInteger<uint64_t>(json["begin"], where + ".begin", 0, kMaxOffset, &partition->begin));
  DROVER_RETURN_IF_ERROR(
      GetInteger<uint64_t>(json["end"], where + ".end", 0, kMaxOffset, &partition->end));
  if (partition->begin > partition->end) {
    return FieldError(where + ".begin", "must not be after end (" + std::to_string(partition->end) +
                                            "), got " + std::to_string(partition->begin));
  }
  if (json.contains("records")) {
    uint64_t records = 0;
    DROVER_RETURN_IF_ERROR(GetInteger<uint64_t>(json["records"], where + ".records", 0,
                                                partition->end - partition->begin, &records));
    partition->records = records;
  }
  return Status::Ok();
}

Status ParsePosition(const Json& json, std::string_view where, FeedPosition* position) {
  if (!json.is_object()) {
    return FieldError(where,
                      "must be an object {\"feed\", \"record\", \"done\"}, got " + TypeName(json));
  }
  static constexpr std::string_view kFields[] = {"feed", "record", "done"};
  DROVER_RETURN_IF_ERROR(CheckFields(json, where, kFields));
  for (std::string_view name : kFields) {
    if (!json.contains(name))
      return FieldError(std::string(where) + "." + std::string(name), "is missing");
  }
  const std::string prefix(where);
  DROVER_RETURN_IF_ERROR(GetInteger<uint32_t>(
      json["feed"], prefix + ".feed", 0, std::numeric_limits<uint32_t>::max(), &position->feed));
  DROVER_RETURN_IF_ERROR(GetInteger<uint64_t>(json["record"], prefix + ".record", 0,
                                              std::numeric_limits<int64_t>::max(),
                                              &position->record));
  if (!json["done"].is_boolean()) {
    return FieldError(prefix + ".done", "must be a boolean, got " + TypeName(json["done"]));
  }
  position->done = json["done"].get<bool>();
  return Status::Ok();
}

Json PositionJson(const FeedPosition& position) {
  Json json;
  json["feed"] = position.feed;
  json["record"] = position.record;
  json["done"] = position.done;
  return json;
}

Status ParseStarts(const Json& json, std::vector<std::optional<FeedPosition>>* out) {
  if (!json.is_array()) return FieldError("starts", "must be an array, got " + TypeName(json));
  for (size_t k = 0; k < json.size(); ++k) {
    std::optional<FeedPosition>& start = out->emplace_back();
    if (json[k].is_null()) continue;
    DROVER_RETURN_IF_ERROR(
        ParsePosition(json[k], "starts[" + std::to_string(k) + "]", &start.emplace()));
  }
  return Status::Ok();
}

Status ParseShares(const Json& json, size_t partitions, std::vector<std::vector<uint32_t>>* out) {
  if (!json.is_array()) return FieldError("shares", "must be an array, got " + TypeName(json));
  for (size_t k = 0; k < json.size(); ++k) {
    const std::string where = "shares[" + std::to_string(k) + "]";
    if (!json[k].is_array()) {
      return FieldError(where, "must be an array of partition indexes, got " + TypeName(json[k]));
    }
    std::vector<uint32_t>& share = out->emplace_back();
    for (size_t i = 0; i < json[k].size(); ++i) {
      if (partitions == 0) return FieldError(where, "names a partition of a plan without any");
      uint32_t partition = 0;
      DROVER_RETURN_IF_ERROR(GetInteger<uint32_t>(json[k][i], where + "[" + std::to_string(i) + "]",
                                                  0, static_cast<uint32_t>(partitions - 1),
                                                  &partition));
      share.push_back(partition);
    }
  }
  return Status::Ok();
}

// [[epoch, partition, first record], ...], each naming what the plan has.
Status ParseQueue(const Json& json, const FeedPlan& plan, std::vector<FeedUnit>* out) {
  if (!json.is_array()) return FieldError("queue", "must be an array, got " + TypeName(json));
  for (size_t i = 0; i < json.size(); ++i) {
    const std::string where = "queue[" + std::to_string(i) + "]";
    if (!json[i].is_array() || json[i].size() != 3) {
      return FieldError(where,
                        "must be [epoch, partition, first record], got " + TypeName(json[i]));
    }
    if (plan.partitions.empty())
      return FieldError(where, "names a partition of a plan without any");
    FeedUnit& unit = out->emplace_back();
    DROVER_RETURN_IF_ERROR(
        GetInteger<int>(json[i][0], where + "[0]", 0, plan.epochs - 1, &unit.epoch));
    DROVER_RETURN_IF_ERROR(GetInteger<int>(json[i][1], where + "[1]", 0,
                                           static_cast<int>(plan.partitions.size() - 1),
                                           &unit.partition));
    const Partition& partition = plan.partitions[static_cast<size_t>(unit.partition)];
    DROVER_RETURN_IF_ERROR(GetInteger<uint64_t>(
        json[i][2], where + "[2]", 0, partition.end - partition.begin, &unit.first_record));
  }
  return Status::Ok();
}

Status ParseBalance(const Json& json, FeedPlan* plan) {
  if (json.contains("balance")) {
    std::string name;
    DROVER_RETURN_IF_ERROR(GetString(json["balance"], "balance", &name));
    if (name != "equal" && name != "dynamic") {
      return FieldError("balance",
                        "must be \"equal\" or \"dynamic\", got '" + Printable(name) + "'");
    }
    plan->balance = name == "dynamic" ? Balance::kDynamic : Balance::kEqual;
  }
  const bool dynamic = plan->balance == Balance::kDynamic;
  if (dynamic && !plan->shares.empty()) return FieldError("shares", "is set in a dynamic plan");
  if (dynamic && !plan->starts.empty()) return FieldError("starts", "is set in a dynamic plan");
  if (json.contains("queue")) {
    if (!dynamic) return FieldError("queue", "is set in a plan that is not dynamic");
    DROVER_RETURN_IF_ERROR(ParseQueue(json["queue"], *plan, &plan->queue.emplace()));
  }
  return Status::Ok();
}

}  // namespace

std::string FeedPlan::ToJson() const {
  Json json;
  json["mode"] = mode == FeedMode::kTrain ? "train" : "inference";
  json["format"] = std::string(RecordFormatName(read.format));
  json["record_bytes"] = read.record_bytes;
  json["epochs"] = epochs;
  json["feed_timeout_ms"] = feed_timeout_ms;
  json["queue_bytes"] = queue_bytes;
  json["output_dir"] = output_dir;
  if (external) json["external"] = true;
  Json list = Json::array();
  for (const Partition& partition : partitions) {
    Json entry;
    entry["path"] = partition.path;
    entry["begin"] = partition.begin;
    entry["end"] = partition.end;
    if (partition.records) entry["records"] = *partition.records;
    list.push_back(std::move(entry));
  }
  json["partitions"] = std::move(list);
  if (!shares.empty()) json["shares"] = shares;
  if (!starts.empty()) {
    Json list = Json::array();
    for (const std::optional<FeedPosition>& start : starts) {
      list.push_back(start ? PositionJson(*start) : Json());
    }
    json["starts"] = std::move(list);
  }
  if (balance == Balance::kDynamic) json["balance"] = "dynamic";
  if (ingest != Ingest::kMeasure) json["ingest"] = std::string(IngestName(ingest));
  if (queue) {
    Json list = Json::array();
    for (const FeedUnit& unit : *queue) {
      list.push_back(Json::array({unit.epoch, unit.partition, unit.first_record}));
    }
    json["queue"] = std::move(list);
  }
  // replace: a path that is not UTF-8 must not throw here; FromJson rejects it.
  return json.dump(-1, ' ', false, Json::error_handler_t::replace);
}

Result<FeedPlan> FeedPlan::FromJson(std::string_view text) {
  DROVER_ASSIGN_OR_RETURN(Json json, ParseJson(text));
  if (!json.is_object()) {
    return Status::InvalidArgument("feed plan must be a JSON object, got " + TypeName(json));
  }
  DROVER_RETURN_IF_ERROR(CheckFields(json, "the plan", kPlanFields));
  FeedPlan plan;
  if (json.contains("external")) {
    if (!json["external"].is_boolean()) {
      return FieldError("external", "must be a boolean, got " + TypeName(json["external"]));
    }
    plan.external = json["external"].get<bool>();
  }
  for (std::string_view required : {"mode", "format", "partitions"}) {
    if (required == "partitions" && plan.external) continue;
    if (!json.contains(required)) return FieldError(required, "is missing");
  }

  std::string text_value;
  DROVER_RETURN_IF_ERROR(GetString(json["mode"], "mode", &text_value));
  if (text_value == "train") {
    plan.mode = FeedMode::kTrain;
  } else if (text_value == "inference") {
    plan.mode = FeedMode::kInference;
  } else {
    return FieldError("mode",
                      "must be \"train\" or \"inference\", got '" + Printable(text_value) + "'");
  }
  DROVER_RETURN_IF_ERROR(GetString(json["format"], "format", &text_value));
  Result<RecordFormat> format = ParseRecordFormat(text_value);
  if (!format.ok()) {
    return FieldError("format", "must be csv, jsonl, tfrecord, raw or pickle, got '" +
                                    Printable(text_value) + "'");
  }
  plan.read.format = *format;
  if (plan.read.format == RecordFormat::kPickle && !plan.external) {
    return FieldError("format",
                      "is pickle in a plan that is not external: " + std::string(kPickleFromFiles));
  }
  if (json.contains("record_bytes")) {
    DROVER_RETURN_IF_ERROR(GetInteger<uint64_t>(json["record_bytes"], "record_bytes", 0,
                                                kMaxRecordBytes, &plan.read.record_bytes));
  }
  if (json.contains("epochs")) {
    DROVER_RETURN_IF_ERROR(GetInteger<int>(json["epochs"], "epochs", 1,
                                           std::numeric_limits<int>::max(), &plan.epochs));
  }
  if (json.contains("feed_timeout_ms")) {
    DROVER_RETURN_IF_ERROR(GetInteger<int64_t>(json["feed_timeout_ms"], "feed_timeout_ms", 0,
                                               std::numeric_limits<int64_t>::max(),
                                               &plan.feed_timeout_ms));
  }
  if (json.contains("queue_bytes")) {
    DROVER_RETURN_IF_ERROR(GetInteger<uint64_t>(json["queue_bytes"], "queue_bytes", 1,
                                                std::numeric_limits<uint64_t>::max(),
                                                &plan.queue_bytes));
  }
  if (json.contains("output_dir")) {
    DROVER_RETURN_IF_ERROR(GetString(json["output_dir"], "output_dir", &plan.output_dir));
    if (!plan.output_dir.empty() && plan.output_dir[0] != '/') {
      return FieldError("output_dir",
                        "must be an absolute path, got '" + Printable(plan.output_dir) + "'");
    }
  }
  if (json.contains("ingest")) {
    std::string name;
    DROVER_RETURN_IF_ERROR(GetString(json["ingest"], "ingest", &name));
    Result<Ingest> ingest = ParseIngest(name);
    if (!ingest.ok()) return FieldError("ingest", ingest.status().message());
    plan.ingest = *ingest;
  }
  if (!json.contains("partitions")) {  // external
    if (json.contains("balance") || json.contains("queue")) {
      return FieldError(json.contains("queue") ? "queue" : "balance",
                        "is set in a plan without partitions");
    }
    return plan;
  }
  const Json& partitions = json["partitions"];
  if (!partitions.is_array()) {
    return FieldError("partitions", "must be an array, got " + TypeName(partitions));
  }
  plan.partitions.resize(partitions.size());
  for (size_t i = 0; i < partitions.size(); ++i) {
    DROVER_RETURN_IF_ERROR(ParsePartition(partitions[i], i, &plan.partitions[i]));
  }
  if (json.contains("shares")) {
    DROVER_RETURN_IF_ERROR(ParseShares(json["shares"], plan.partitions.size(), &plan.shares));
  }
  if (json.contains("starts")) DROVER_RETURN_IF_ERROR(ParseStarts(json["starts"], &plan.starts));
  DROVER_RETURN_IF_ERROR(ParseBalance(json, &plan));
  return plan;
}

std::string FeedPositionToJson(const FeedPosition& position) {
  return PositionJson(position).dump();
}

// Every Ingest, in the enum's order.
constexpr Ingest kIngests[] = {Ingest::kMeasure, Ingest::kMap, Ingest::kRead, Ingest::kExtent,
                               Ingest::kExtentRead};

Result<Ingest> ParseIngest(std::string_view name) {
  for (Ingest ingest : kIngests) {
    if (name == IngestName(ingest)) return ingest;
  }
  return Status::InvalidArgument("takes " + IngestNames() + ", not '" + Printable(name) + "'");
}

std::string IngestNames() {
  std::string names;
  for (size_t i = 0; i < std::size(kIngests); ++i) {
    if (i > 0) names += i + 1 == std::size(kIngests) ? " or " : ", ";
    names += IngestName(kIngests[i]);
  }
  return names;
}

uint32_t IngestWord(Ingest ingest) {
  return static_cast<uint32_t>(ingest) + 1;
}

std::optional<Ingest> IngestOfWord(uint32_t word) {
  if (word == 0 || word > std::size(kIngests)) return std::nullopt;
  return kIngests[word - 1];
}

std::string_view IngestName(Ingest ingest) {
  switch (ingest) {
    case Ingest::kMeasure:
      return "measure";
    case Ingest::kMap:
      return "map";
    case Ingest::kRead:
      return "read";
    case Ingest::kExtent:
      return "extent";
    case Ingest::kExtentRead:
      return "extent-read";
  }
  return "measure";
}

std::string CommitKey(int share) {
  return kFeedKeyPrefix + std::string("commit/") + std::to_string(share);
}

std::string ClaimCounterKey() {
  return kFeedKeyPrefix + std::string("claimed");
}

std::string ClaimKey(int share, uint32_t seq) {
  return kFeedKeyPrefix + std::string("claim/") + std::to_string(share) + "/" + std::to_string(seq);
}

Result<FeedPosition> FeedPositionFromJson(std::string_view text) {
  DROVER_ASSIGN_OR_RETURN(Json json, ParseJson(text));
  FeedPosition position;
  DROVER_RETURN_IF_ERROR(ParsePosition(json, "position", &position));
  return position;
}

Status FeedPlan::WriteFile(const std::string& path) const {
  std::ofstream out(path, std::ios::trunc);
  out << ToJson() << "\n";
  if (!out.flush()) return Status::IoError("cannot write the feed plan " + path);
  return Status::Ok();
}

Result<FeedPlan> FeedPlan::ReadFile(const std::string& path) {
  int opened;
  do {
    opened = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  } while (opened < 0 && errno == EINTR);
  if (opened < 0) {
    const int error = errno;
    std::string message = "cannot open feed plan " + path + ": " +
                          std::error_code(error, std::generic_category()).message();
    if (error == ENOENT) return Status::NotFound(std::move(message));
    return Status::IoError(std::move(message));
  }
  const os::UniqueFd fd(opened);
  std::string text;
  char chunk[64 << 10];
  for (;;) {
    const ssize_t got = ::read(fd.get(), chunk, sizeof(chunk));
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      const int error = errno;
      return Status::IoError("cannot read feed plan " + path + ": " +
                             std::error_code(error, std::generic_category()).message());
    }
    if (got == 0) break;
    text.append(chunk, static_cast<size_t>(got));
  }
  Result<FeedPlan> plan = FromJson(text);
  if (!plan.ok()) return plan.status().WithContext(path);
  return plan;
}

Result<std::vector<FeedUnit>> FeedsOfShare(const FeedPlan& plan, int share, int shares) {
  std::vector<FeedUnit> feeds;
  if (plan.external) return feeds;
  if (plan.balance == Balance::kDynamic) {
    return Status::InvalidArgument("a dynamic feed plan has no shares: its feeds are claimed");
  }
  if (shares <= 0 || share < 0 || share >= shares) {
    return Status::InvalidArgument("feed share " + std::to_string(share) + " of " +
                                   std::to_string(shares) + " does not exist");
  }
  if (!plan.shares.empty() && plan.shares.size() != static_cast<size_t>(shares)) {
    return Status::InvalidArgument("the feed plan was laid out for " +
                                   std::to_string(plan.shares.size()) +
                                   " fed nodes, but the cluster has " + std::to_string(shares));
  }
  std::vector<uint32_t> dealt;
  if (plan.shares.empty()) {
    for (size_t p = static_cast<size_t>(share); p < plan.partitions.size();
         p += static_cast<size_t>(shares)) {
      dealt.push_back(static_cast<uint32_t>(p));
    }
  }
  const std::vector<uint32_t>& mine =
      plan.shares.empty() ? dealt : plan.shares[static_cast<size_t>(share)];
  for (int epoch = 0; epoch < plan.epochs; ++epoch) {
    for (uint32_t p : mine) feeds.push_back(FeedUnit{epoch, static_cast<int>(p)});
  }
  return feeds;
}

}  // namespace drover::feed

namespace drover::feed {

std::vector<FeedUnit> DynamicQueue(const FeedPlan& plan) {
  if (plan.queue) return *plan.queue;
  std::vector<FeedUnit> queue;
  queue.reserve(plan.partitions.size() * static_cast<size_t>(plan.epochs));
  for (int epoch = 0; epoch < plan.epochs; ++epoch) {
    for (size_t p = 0; p < plan.partitions.size(); ++p) {
      queue.push_back(FeedUnit{epoch, static_cast<int>(p)});
    }
  }
  return queue;
}

std::vector<FeedUnit> QueueAfterRound(const std::vector<FeedUnit>& queue,
                                      const std::vector<std::vector<uint64_t>>& claims,
                                      const std::vector<std::optional<FeedPosition>>& commits) {
  std::vector<bool> consumed(queue.size(), false);
  std::vector<std::optional<uint64_t>> resume_at(queue.size());
  for (size_t share = 0; share < claims.size() && share < commits.size(); ++share) {
    const std::optional<FeedPosition>& commit = commits[share];
    const std::vector<uint64_t>& claimed = claims[share];
    if (!commit || commit->feed >= claimed.size()) continue;
    for (size_t seq = 0; seq <= commit->feed; ++seq) {
      const uint64_t entry = claimed[seq];
      if (entry >= queue.size()) continue;
      if (seq < commit->feed || commit->done) {
        consumed[entry] = true;
      } else if (commit->record >= queue[entry].first_record) {
        resume_at[entry] = commit->record;
      }
    }
  }
  std::vector<FeedUnit> next;
  for (size_t i = 0; i < queue.size(); ++i) {
    if (consumed[i]) continue;
    FeedUnit unit = queue[i];
    if (resume_at[i]) unit.first_record = *resume_at[i];
    next.push_back(unit);
  }
  return next;
}

}  // namespace drover::feed
