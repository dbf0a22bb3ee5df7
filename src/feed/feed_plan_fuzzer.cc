// Fuzzes FeedPlan::FromJson. Errors must be kInvalidArgument; whatever parses
// must survive the JSON round trip unchanged, and its shares must split the
// feeds exactly. Aborts on any violation.

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <string_view>
#include <utility>

#include "feed/feed_plan.h"

namespace {

void Check(bool condition, const char* what, const std::string& json) {
  if (condition) return;
  std::fprintf(stderr, "invariant broken: %s\nplan: %s\n", what, json.c_str());
  std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using drover::feed::FeedPlan;
  std::string_view input(reinterpret_cast<const char*>(data), size);
  auto parsed = FeedPlan::FromJson(input);
  if (!parsed.ok()) {
    if (parsed.status().code() != drover::Status::Code::kInvalidArgument) std::abort();
    return 0;
  }
  const FeedPlan& plan = *parsed;
  const std::string json = plan.ToJson();
  Check(plan.epochs >= 1, "epochs below 1 parsed", json);
  for (const auto& partition : plan.partitions) {
    Check(partition.begin <= partition.end, "begin > end parsed", json);
    Check(!partition.path.empty() && partition.path[0] == '/', "a relative path parsed", json);
  }
  auto again = FeedPlan::FromJson(json);
  Check(again.ok(), "ToJson output does not parse", json);
  Check(*again == plan, "the JSON round trip changed the plan", json);
  Check(again->ToJson() == json, "ToJson is not stable", json);

  // FeedsOfShare allocates epochs x partitions units; keep that small.
  if (plan.external) {
    for (int share = 0; share < 3; ++share) {
      auto feeds = drover::feed::FeedsOfShare(plan, share, 3);
      Check(feeds.ok() && feeds->empty(), "an external plan has feeds", json);
    }
    return 0;
  }
  if (plan.balance == drover::feed::Balance::kDynamic) {
    Check(!drover::feed::FeedsOfShare(plan, 0, 1).ok(), "a dynamic plan has shares", json);
    if (static_cast<uint64_t>(plan.epochs) * plan.partitions.size() > 10'000 && !plan.queue) {
      return 0;
    }
    const auto queue = drover::feed::DynamicQueue(plan);
    for (const auto& unit : queue) {
      Check(
          unit.epoch < plan.epochs && static_cast<size_t>(unit.partition) < plan.partitions.size(),
          "a queue entry names what the plan does not have", json);
    }
    // Whatever the claims and commits, the next queue is a subset, in order.
    std::vector<std::vector<uint64_t>> claims = {{0, 2, 1}, {3, 99}};
    std::vector<std::optional<drover::FeedPosition>> commits = {drover::FeedPosition{1, 0, true},
                                                                drover::FeedPosition{0, 5, false}};
    const auto next = drover::feed::QueueAfterRound(queue, claims, commits);
    Check(next.size() <= queue.size(), "the next queue grew", json);
    return 0;
  }
  if (!plan.shares.empty()) {
    uint64_t listed = 0;
    for (const auto& share : plan.shares) listed += share.size();
    if (listed * static_cast<uint64_t>(plan.epochs) > 10'000) return 0;
    const int shares = static_cast<int>(plan.shares.size());
    for (int share = 0; share < shares; ++share) {
      auto feeds = drover::feed::FeedsOfShare(plan, share, shares);
      Check(feeds.ok(), "a laid-out share was refused", json);
      Check(feeds->size() ==
                plan.shares[static_cast<size_t>(share)].size() * static_cast<size_t>(plan.epochs),
            "a share's feeds are not its list once per epoch", json);
      for (const auto& unit : *feeds) {
        Check(static_cast<size_t>(unit.partition) < plan.partitions.size(),
              "a unit names no partition", json);
      }
    }
    Check(!drover::feed::FeedsOfShare(plan, 0, shares + 1).ok(),
          "a plan laid out for another cluster size was taken", json);
    return 0;
  }
  const uint64_t units = static_cast<uint64_t>(plan.epochs) * plan.partitions.size();
  if (units > 10'000) return 0;
  for (int shares = 1; shares <= 3; ++shares) {
    std::set<std::pair<int, int>> seen;
    for (int share = 0; share < shares; ++share) {
      auto feeds = drover::feed::FeedsOfShare(plan, share, shares);
      Check(feeds.ok(), "a share was refused", json);
      for (const auto& unit : *feeds) {
        Check(unit.partition % shares == share, "a unit went to the wrong share", json);
        Check(seen.emplace(unit.epoch, unit.partition).second, "a unit was fed twice", json);
      }
    }
    Check(seen.size() == units, "shares do not cover every unit", json);
  }
  return 0;
}
