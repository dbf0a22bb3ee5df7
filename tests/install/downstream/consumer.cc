// A program using drover's installed C++ API, started by `drover run --input`:
// its place from the node context, its records from DataFeed. Each record is
// one integer; it prints one line with its role, how many records it read and
// their sum, and the library's version, for tests/install/test_install.py.
#include <cstdio>
#include <memory>
#include <string>

#include "drover/data_feed.h"
#include "drover/environment.h"
#include "drover/node_context.h"
#include "drover/version.h"

int main() {
  drover::Result<drover::NodeContext> context =
      drover::NodeContext::Load(drover::ProcessEnvironment());
  if (!context.ok()) {
    std::fprintf(stderr, "consumer: %s\n", context.status().ToString().c_str());
    return 1;
  }
  drover::Result<std::unique_ptr<drover::DataFeed>> feed =
      drover::DataFeed::Connect(drover::ProcessEnvironment());
  if (!feed.ok()) {
    std::fprintf(stderr, "consumer: %s\n", feed.status().ToString().c_str());
    return 1;
  }
  unsigned long long records = 0, sum = 0;
  while (!(*feed)->ShouldStop()) {
    drover::Result<drover::RecordBatch> batch = (*feed)->NextBatch(7);
    if (!batch.ok()) {
      std::fprintf(stderr, "consumer: %s\n", batch.status().ToString().c_str());
      return 1;
    }
    if (batch->records.empty()) break;
    for (std::string_view record : batch->records) {
      ++records;
      sum += std::stoull(std::string(record));
    }
  }
  std::printf("consumer %s:%d chief=%d records=%llu sum=%llu drover=%s commit=%s\n",
              context->job_name.c_str(), context->task_index, context->is_chief ? 1 : 0, records,
              sum, drover::Version(), drover::GitCommit());
  return 0;
}
