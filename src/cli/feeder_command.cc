#include "cli/feeder_command.h"

#include <signal.h>

#include <iostream>
#include <memory>
#include <string>

#include "cli/error_line.h"
#include "cli/resolve_command.h"
#include "feed/feeder.h"

namespace drover::cli {
namespace {

struct FeederFlags {
  std::string socket;
  std::string plan;
  int share = 0;
  int shares = 1;
  std::string task = "node";
};

int RunFeederCommand(const FeederFlags& flags) {
  auto fail = [&](const Status& status, int code) {
    PrintErrorLine("drover feeder " + flags.task + ": " + status.message());
    return code;
  };
  Result<feed::FeedPlan> plan = feed::FeedPlan::ReadFile(flags.plan);
  if (!plan.ok()) return fail(plan.status(), kExitBadInput);
  if (flags.share >= flags.shares) {
    return fail(Status::InvalidArgument("--share must be below --shares"), kExitBadInput);
  }
  ::signal(SIGPIPE, SIG_IGN);
  feed::FeederOptions options;
  options.socket_path = flags.socket;
  options.plan = std::move(plan).value();
  options.share = flags.share;
  options.shares = flags.shares;
  options.task = flags.task;
  options.notice = [&](const std::string& line) {
    std::cerr << "drover feeder " << flags.task << ": " << line << std::endl;
  };
  Result<feed::FeederReport> report = feed::RunFeeder(options);
  if (!report.ok()) return fail(report.status(), kExitFailure);
  return kExitOk;
}

}  // namespace

void AddFeederCommand(CLI::App& app, int* exit_code) {
  auto flags = std::make_shared<FeederFlags>();
  CLI::App* feeder = app.add_subcommand(
      "feeder", "Feed one node's share of a plan into its agent's queue (started by the agent)");
  feeder->group("");  // internal: not listed in `drover --help`
  feeder->add_option("--socket", flags->socket, "The agent's feed socket")->required();
  feeder->add_option("--plan", flags->plan, "The feed plan file")->required();
  feeder->add_option("--share", flags->share, "This node's share")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  feeder->add_option("--shares", flags->shares, "How many nodes are fed")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  feeder->add_option("--task", flags->task, "The node, for messages (job:index)");
  feeder->callback([flags, exit_code] { *exit_code = RunFeederCommand(*flags); });
}

}  // namespace drover::cli
