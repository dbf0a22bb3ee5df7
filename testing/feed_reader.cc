// feed_reader: a program for `drover run --input` tests. It reads its node's
// feed through DataFeed and writes what it saw to a file, one
// "<epoch>\t<record>" line per record, so a test can check exactly what each
// node was fed. Options shape its behaviour:
//   --out PREFIX          writes PREFIX.<DROVER_EXECUTOR_ID> (required)
//   --batch N             records per NextBatch (default 64)
//   --inference           answers each batch with "r:<record>" results
//   --short-results       inference: answers with one result too few
//   --terminate-after N   calls Terminate() once N records were read
//   --die-after N         SIGKILLs itself once N records were read
//   --die-in-rounds K     ... only in rounds 0..K-1 (DROVER_RESTART_COUNT)
//   --commit-every N      calls Commit() after every N batches and writes
//                         "#commit" once it returned (SIGTERM waits for both)
//   --append              appends to the file, after a "#round R" line
//   --sleep-us U          sleeps U microseconds per batch (a slow trainer)
//   --slow ID=U           ... but executor ID sleeps U (a straggler)
//   --hold ID=FILE        executor ID, after its first batch, waits until FILE
//                         exists (up to 300 s, then exits 4): a node held
//                         back until the test says, never for a set time
//   --hold-after N        ... not after its first batch but once N records
//                         were read, or at the end of its feed if fewer came;
//                         it writes "#held" first
//   --report              reports, per batch, drover::Report(step = batches
//                         read, loss = 1 / step, records = records read)
//   --tag T               ignored: lets a test find the processes by T
//   --swallow-errors      ends its loop at a NextBatch error as at the feed's
//                         end and exits 0 (a program that ignores it)
// Exit: 0 after the feed ends, 3 on a DataFeed error (printed).

#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "drover/data_feed.h"
#include "drover/report.h"

namespace {

struct Options {
  std::string out;
  size_t batch = 64;
  bool inference = false;
  bool short_results = false;
  long terminate_after = -1;
  long die_after = -1;
  long sleep_us = 0;
  long die_in_rounds = -1;
  long commit_every = 0;
  bool append = false;
  bool report = false;
  bool swallow_errors = false;
  std::string slow;  // "ID=U"
  std::string hold;  // "ID=FILE"
  long hold_after = -1;
};

bool Parse(int argc, char** argv, Options* options) {
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    auto value = [&]() -> const char* { return i + 1 < argc ? argv[++i] : ""; };
    if (flag == "--out") {
      options->out = value();
    } else if (flag == "--batch") {
      options->batch = std::strtoul(value(), nullptr, 10);
    } else if (flag == "--inference") {
      options->inference = true;
    } else if (flag == "--short-results") {
      options->short_results = true;
    } else if (flag == "--terminate-after") {
      options->terminate_after = std::strtol(value(), nullptr, 10);
    } else if (flag == "--die-after") {
      options->die_after = std::strtol(value(), nullptr, 10);
    } else if (flag == "--die-in-rounds") {
      options->die_in_rounds = std::strtol(value(), nullptr, 10);
    } else if (flag == "--commit-every") {
      options->commit_every = std::strtol(value(), nullptr, 10);
    } else if (flag == "--append") {
      options->append = true;
    } else if (flag == "--tag") {
      value();
    } else if (flag == "--sleep-us") {
      options->sleep_us = std::strtol(value(), nullptr, 10);
    } else if (flag == "--hold") {
      options->hold = value();
    } else if (flag == "--hold-after") {
      options->hold_after = std::strtol(value(), nullptr, 10);
    } else if (flag == "--slow") {
      options->slow = value();
    } else if (flag == "--report") {
      options->report = true;
    } else if (flag == "--swallow-errors") {
      options->swallow_errors = true;
    } else {
      std::fprintf(stderr, "feed_reader: unknown flag %s\n", flag.c_str());
      return false;
    }
  }
  return !options->out.empty() && options->batch > 0;
}

int Fail(const drover::Status& status) {
  std::fprintf(stderr, "feed_reader: %s\n", status.ToString().c_str());
  return 3;
}

// Writes "#held" when `mark`, then waits until `file` exists (up to 300 s):
// false when it never does.
bool Hold(std::FILE* out, const std::string& file, bool mark) {
  if (mark) {
    std::fprintf(out, "#held\n");
    std::fflush(out);
  }
  for (int waited_ms = 0; ::access(file.c_str(), F_OK) != 0; waited_ms += 10) {
    if (waited_ms >= 300'000) {
      std::fprintf(stderr, "feed_reader: %s never appeared\n", file.c_str());
      return false;
    }
    ::usleep(10'000);
  }
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  if (!Parse(argc, argv, &options)) {
    std::fprintf(stderr, "usage: feed_reader --out PREFIX [options]\n");
    return 2;
  }
  const char* executor = std::getenv("DROVER_EXECUTOR_ID");
  std::string path = options.out + "." + (executor != nullptr ? executor : "0");
  FILE* out = std::fopen(path.c_str(), options.append ? "a" : "w");
  if (out == nullptr) {
    std::perror(path.c_str());
    return 2;
  }
  const char* round_text = std::getenv("DROVER_RESTART_COUNT");
  const long round = round_text != nullptr ? std::strtol(round_text, nullptr, 10) : 0;
  if (options.append) {
    std::fprintf(out, "#round %ld\n", round);
    std::fflush(out);
  }
  if (options.die_in_rounds >= 0 && round >= options.die_in_rounds) options.die_after = -1;
  const size_t equals = options.slow.find('=');
  if (equals != std::string::npos && executor != nullptr &&
      options.slow.substr(0, equals) == executor) {
    options.sleep_us = std::strtol(options.slow.c_str() + equals + 1, nullptr, 10);
  }
  std::string hold_file;
  if (const size_t at = options.hold.find('=');
      at != std::string::npos && executor != nullptr && options.hold.substr(0, at) == executor) {
    hold_file = options.hold.substr(at + 1);
  }
  drover::DataFeedOptions feed_options;
  feed_options.train_mode = !options.inference;
  auto connected = drover::DataFeed::Connect(drover::ProcessEnvironment(), feed_options);
  if (!connected.ok()) return Fail(connected.status());
  std::unique_ptr<drover::DataFeed> feed = std::move(connected).value();

  long seen = 0;
  long batches = 0;
  int64_t step = 0;
  bool held = false;
  while (!feed->ShouldStop()) {
    auto batch = feed->NextBatch(options.batch);
    if (!batch.ok() && options.swallow_errors) break;
    if (!batch.ok()) return Fail(batch.status());
    if (batch->records.empty()) break;
    std::vector<std::string> results;
    for (std::string_view record : batch->records) {
      std::fprintf(out, "%d\t%.*s\n", batch->epoch, static_cast<int>(record.size()), record.data());
      if (options.inference) results.push_back("r:" + std::string(record));
    }
    std::fflush(out);  // what was read is on disk even if we die next
    seen += static_cast<long>(batch->records.size());
    if (options.inference) {
      if (options.short_results) results.pop_back();
      std::vector<std::string_view> views(results.begin(), results.end());
      if (auto answered = feed->BatchResults(views); !answered.ok()) return Fail(answered);
    }
    if (options.die_after >= 0 && seen >= options.die_after) ::kill(::getpid(), SIGKILL);
    if (options.commit_every > 0 && ++batches % options.commit_every == 0) {
      // A stop (SIGTERM) between the driver recording the commit and the
      // "#commit" line would make the file understate what was committed:
      // it waits until the line is written.
      sigset_t stops, before;
      sigemptyset(&stops);
      sigaddset(&stops, SIGTERM);
      sigaddset(&stops, SIGINT);
      ::sigprocmask(SIG_BLOCK, &stops, &before);
      auto committed = feed->Commit();
      if (!committed.ok()) return Fail(committed.status());
      std::fprintf(out, "#commit\n");
      std::fflush(out);
      ::sigprocmask(SIG_SETMASK, &before, nullptr);
    }
    if (options.terminate_after >= 0 && seen >= options.terminate_after) feed->Terminate();
    ++step;
    if (options.report) {
      auto reported = drover::Report(step, {{"loss", 1.0 / static_cast<double>(step)},
                                            {"records", static_cast<double>(seen)}});
      if (!reported.ok()) return Fail(reported);
    }
    if (options.sleep_us > 0) ::usleep(static_cast<useconds_t>(options.sleep_us));
    const bool hold_now = options.hold_after >= 0 ? seen >= options.hold_after : step == 1;
    if (!hold_file.empty() && hold_now && !held) {
      held = true;
      if (!Hold(out, hold_file, options.hold_after >= 0)) return 4;
    }
  }
  // A node fed fewer than --hold-after records holds at the end of its feed.
  if (!hold_file.empty() && options.hold_after >= 0 && !held && !Hold(out, hold_file, true)) {
    return 4;
  }
  std::fclose(out);
  std::printf("feed_reader: read %ld records\n", seen);
  return 0;
}
