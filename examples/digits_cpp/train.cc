// digits_cpp: examples/digits/train.py's job in C++, on drover's public API
// and libtorch (Debian's libtorch-dev 1.13).
//
//   drover run --nodes 2 --input 'digits-data/train-*.csv' --epochs 40
//       -- build/bin/digits_cpp --test digits-data/test.csv
//
// Each node reads its place from drover's node context (NodeContext::Load:
// role, chief, log directory; ComputeRank on its cluster: rank, world size,
// the master's address), its training rows from drover::DataFeed (CSV lines
// parsed here), and trains the same MLP as train.py (64-128-128-10, Adam,
// lr 3e-3, a global batch of 32 split across the workers) with torch::nn.
// Gradients are averaged with c10d's ProcessGroupGloo allreduce, over a
// TCPStore the master hosts at its cluster address.
//
// Workers get different numbers of rows from the feed. Each step every worker
// contributes its gradient times its batch's row count, plus that count, in
// one allreduce; the sum divided by the total count is the gradient of the
// global batch. A worker whose feed is over contributes zeros, so the others
// go on (what DDP's join() does in train.py); the loop ends when a step has no
// rows anywhere. Every worker applies the same gradient to the same initial
// weights, so the models stay equal. The test set is scored in shards and the
// counts summed; the chief prints the accuracy and saves the model.
#include <torch/torch.h>

#include <charconv>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <vector>

#include "drover/data_feed.h"
#include "drover/environment.h"
#include "drover/framework_env.h"
#include "drover/host_port.h"
#include "drover/node_context.h"
#include "drover/report.h"

namespace {

constexpr int kPixels = 64;
constexpr auto kCollectiveTimeout = std::chrono::seconds(120);

struct Options {
  std::string test_path;
  int batch_size = 32;  // global, split across the workers
  double lr = 3e-3;
  int hidden = 128;
  uint64_t seed = 0;
};

[[noreturn]] void Fail(const std::string& message) {
  std::cerr << "digits_cpp: " << message << std::endl;
  std::exit(1);
}

Options ParseArgs(int argc, char** argv) {
  Options options;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) Fail(arg + " needs a value");
      return argv[++i];
    };
    if (arg == "--test") {
      options.test_path = value();
    } else if (arg == "--batch-size") {
      options.batch_size = std::stoi(value());
    } else if (arg == "--lr") {
      options.lr = std::stod(value());
    } else if (arg == "--hidden") {
      options.hidden = std::stoi(value());
    } else if (arg == "--seed") {
      options.seed = std::stoull(value());
    } else {
      Fail("unknown argument " + arg +
           " (usage: digits_cpp --test FILE [--batch-size 32] [--lr 3e-3] [--hidden 128] "
           "[--seed 0])");
    }
  }
  if (options.test_path.empty()) Fail("--test FILE (the test set as CSV) is required");
  if (options.batch_size < 1) Fail("--batch-size must be at least 1");
  return options;
}

// Appends one make_csv.py line (64 pixels 0..16, then the label) to `pixels`
// (scaled to 0..1) and `labels`; false when the line is not such a row.
bool ParseRow(std::string_view line, std::vector<float>& pixels, std::vector<int64_t>& labels) {
  const char* p = line.data();
  const char* end = line.data() + line.size();
  float values[kPixels + 1];
  for (int i = 0; i <= kPixels; ++i) {
    auto [next, ec] = std::from_chars(p, end, values[i]);
    if (ec != std::errc()) return false;
    p = next;
    if (i < kPixels) {
      if (p == end || *p != ',') return false;
      ++p;
    }
  }
  if (p != end && !(p + 1 == end && *p == '\r')) return false;
  int label = static_cast<int>(values[kPixels]);
  if (label < 0 || label > 9 || label != values[kPixels]) return false;
  for (int i = 0; i < kPixels; ++i) pixels.push_back(values[i] / 16.0f);
  labels.push_back(label);
  return true;
}

struct Rows {
  torch::Tensor x;  // [n, 64] float
  torch::Tensor y;  // [n] int64
};

Rows ToTensors(std::vector<float>& pixels, std::vector<int64_t>& labels) {
  auto n = static_cast<int64_t>(labels.size());
  return {torch::from_blob(pixels.data(), {n, kPixels}, torch::kFloat32).clone(),
          torch::from_blob(labels.data(), {n}, torch::kInt64).clone()};
}

Rows LoadCsv(const std::string& path) {
  std::ifstream in(path);
  if (!in) Fail("cannot open the test set " + path);
  std::vector<float> pixels;
  std::vector<int64_t> labels;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    if (line.empty()) continue;
    if (!ParseRow(line, pixels, labels)) {
      Fail(path + ":" + std::to_string(number) + ": expected 64 pixel values and a label 0-9");
    }
  }
  if (labels.empty()) Fail(path + " holds no rows");
  return ToTensors(pixels, labels);
}

torch::nn::Sequential MakeModel(int hidden) {
  return torch::nn::Sequential(torch::nn::Linear(kPixels, hidden), torch::nn::ReLU(),
                               torch::nn::Linear(hidden, hidden), torch::nn::ReLU(),
                               torch::nn::Linear(hidden, 10));
}

// The parameters, or their gradients, as one flat tensor and back.
torch::Tensor Flatten(const std::vector<torch::Tensor>& tensors) {
  std::vector<torch::Tensor> flat;
  for (const auto& t : tensors) flat.push_back(t.reshape(-1));
  return torch::cat(flat);
}

void AllReduce(c10d::ProcessGroup& group, torch::Tensor& tensor) {
  std::vector<torch::Tensor> tensors{tensor};
  group.allreduce(tensors)->wait(kCollectiveTimeout);
}

// Rank 0's initial weights everywhere (the same seed gives the same ones;
// this makes it so whatever the seed), as DDP does.
void BroadcastParameters(c10d::ProcessGroup& group, torch::nn::Module& model) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> params = model.parameters();
  std::vector<torch::Tensor> flat{Flatten(params)};
  group.broadcast(flat)->wait(kCollectiveTimeout);
  int64_t offset = 0;
  for (auto& p : params) {
    p.copy_(flat[0].slice(0, offset, offset + p.numel()).view_as(p));
    offset += p.numel();
  }
}

struct TrainStats {
  int64_t rows_here = 0;  // rows this worker trained on
  int64_t rows_all = 0;   // rows every worker trained on
  int epochs = 0;
};

TrainStats Train(torch::nn::Sequential& model, drover::DataFeed& feed, c10d::ProcessGroup& group,
                 int local_batch, double lr, bool is_chief) {
  torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(lr));
  std::vector<torch::Tensor> params = model->parameters();
  int64_t numel = 0;
  for (const auto& p : params) numel += p.numel();

  TrainStats stats;
  int epoch = 0;
  double loss_sum = 0;
  int64_t batches = 0, epoch_rows = 0, steps = 0;
  std::vector<float> pixels;
  std::vector<int64_t> labels;
  bool feed_over = false;
  while (true) {
    pixels.clear();
    labels.clear();
    if (!feed_over && !feed.ShouldStop()) {
      drover::Result<drover::RecordBatch> batch = feed.NextBatch(local_batch);
      if (!batch.ok()) Fail("reading the feed: " + batch.status().ToString());
      for (std::string_view record : batch->records) {
        if (!ParseRow(record, pixels, labels)) {
          Fail("the feed gave a row that is not 64 pixels and a label: " + std::string(record));
        }
      }
      if (labels.empty()) feed_over = true;
      if (!labels.empty() && batch->epoch != epoch) {
        if (is_chief && epoch % 10 == 9) {
          std::cout << "epoch " << epoch + 1 << ": train loss "
                    << loss_sum / std::max<int64_t>(batches, 1) << " (" << epoch_rows
                    << " rows fed to this worker)" << std::endl;
        }
        epoch = batch->epoch;
        loss_sum = 0;
        batches = epoch_rows = 0;
      }
    } else {
      feed_over = true;
    }

    // [gradient x rows..., rows]: summed over the workers in one allreduce.
    auto rows = static_cast<int64_t>(labels.size());
    torch::Tensor contribution;
    if (rows > 0) {
      Rows local = ToTensors(pixels, labels);
      optimizer.zero_grad();
      torch::Tensor loss = torch::nn::functional::cross_entropy(model->forward(local.x), local.y);
      loss.backward();
      const double loss_value = loss.item<double>();
      loss_sum += loss_value;
      ++batches;
      ++steps;
      // The status page's learning curve; a no-op outside drover.
      (void)drover::Report(steps, {{"train_loss", loss_value}, {"epoch", epoch + 1.0}});
      epoch_rows += rows;
      std::vector<torch::Tensor> grads;
      for (const auto& p : params) grads.push_back(p.grad());
      contribution = torch::cat({Flatten(grads) * static_cast<double>(rows),
                                 torch::full({1}, static_cast<double>(rows))});
    } else {
      contribution = torch::zeros({numel + 1});
    }
    AllReduce(group, contribution);
    auto total_rows = static_cast<int64_t>(contribution[numel].item<double>());
    if (total_rows == 0) break;  // every worker's feed is over

    torch::Tensor mean = contribution.slice(0, 0, numel) / static_cast<double>(total_rows);
    int64_t offset = 0;
    for (auto& p : params) {
      torch::Tensor g = mean.slice(0, offset, offset + p.numel()).view_as(p);
      if (p.grad().defined()) {
        p.mutable_grad().copy_(g);
      } else {
        p.mutable_grad() = g.clone();
      }
      offset += p.numel();
    }
    optimizer.step();
    stats.rows_here += rows;
    stats.rows_all += total_rows;
  }
  stats.epochs = epoch + 1;
  if (is_chief) {
    std::cout << "epoch " << epoch + 1 << ": train loss "
              << loss_sum / std::max<int64_t>(batches, 1) << " (" << epoch_rows
              << " rows fed to this worker; " << feed.records_read() << " in all)" << std::endl;
  }
  return stats;
}

double Evaluate(torch::nn::Sequential& model, const Rows& test, c10d::ProcessGroup& group, int rank,
                int world_size) {
  torch::NoGradGuard no_grad;
  model->eval();
  torch::Tensor index = torch::arange(rank, test.y.size(0), world_size);
  torch::Tensor x = test.x.index_select(0, index);
  torch::Tensor y = test.y.index_select(0, index);
  double correct = model->forward(x).argmax(1).eq(y).sum().item<double>();
  torch::Tensor counts = torch::tensor({correct, static_cast<double>(y.size(0))}, torch::kFloat64);
  AllReduce(group, counts);
  model->train();
  return counts[0].item<double>() / counts[1].item<double>();
}

int Run(const Options& options) {
  using Clock = std::chrono::steady_clock;
  torch::set_num_threads(1);  // one core per worker; the nodes share the machine

  // The node's place in the cluster, from the context file the agent wrote.
  drover::Environment& env = drover::ProcessEnvironment();
  drover::Result<drover::NodeContext> context = drover::NodeContext::Load(env);
  if (!context.ok()) {
    Fail("not started by drover run: " + context.status().ToString());
  }
  const drover::NodeContext& ctx = *context;
  drover::Result<std::optional<drover::RankInfo>> ranked =
      drover::ComputeRank(ctx.cluster_spec, ctx.job_name, ctx.task_index);
  if (!ranked.ok()) Fail("computing this node's rank: " + ranked.status().ToString());
  if (!ranked->has_value()) {
    Fail(ctx.job_name + ":" + std::to_string(ctx.task_index) + " is not a training task");
  }
  const drover::RankInfo& rank = **ranked;
  drover::Result<std::string> own_address =
      ctx.cluster_spec.task_address(ctx.job_name, ctx.task_index);
  if (!own_address.ok()) Fail(own_address.status().ToString());
  drover::Result<std::pair<std::string, int>> own = drover::SplitHostPort(*own_address);
  if (!own.ok()) Fail(own.status().ToString());

  // The master hosts the store at its cluster address; gloo binds this
  // node's own cluster address.
  c10d::TCPStoreOptions store_options;
  store_options.port = static_cast<uint16_t>(rank.master_port);
  store_options.isServer = rank.rank == 0;
  store_options.numWorkers = rank.world_size;
  store_options.timeout = kCollectiveTimeout;
  auto store = c10::make_intrusive<c10d::TCPStore>(rank.master_host, store_options);
  auto gloo_options = c10d::ProcessGroupGloo::Options::create(kCollectiveTimeout);
  gloo_options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname(own->first));
  auto group =
      c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank.rank, rank.world_size, gloo_options);
  std::cout << ctx.job_name << ":" << ctx.task_index << ": rank " << rank.rank << " of "
            << rank.world_size << ", chief=" << (ctx.is_chief ? "true" : "false") << ", master "
            << rank.master_host << ":" << rank.master_port << std::endl;
  Clock::time_point started = Clock::now();

  Rows test = LoadCsv(options.test_path);
  drover::Result<std::unique_ptr<drover::DataFeed>> feed = drover::DataFeed::Connect(env);
  if (!feed.ok())
    Fail("connecting to drover's feed (run with --input): " + feed.status().ToString());

  torch::manual_seed(options.seed);
  torch::nn::Sequential model = MakeModel(options.hidden);
  BroadcastParameters(*group, *model);
  int local_batch = std::max(1, options.batch_size / rank.world_size);
  TrainStats stats = Train(model, **feed, *group, local_batch, options.lr, ctx.is_chief);
  double seconds = std::chrono::duration<double>(Clock::now() - started).count();
  double accuracy = Evaluate(model, test, *group, rank.rank, rank.world_size);
  (void)drover::Report(std::nullopt, {{"test_accuracy", accuracy}});
  drover::FlushReports();

  if (ctx.is_chief) {
    std::printf("test accuracy: %.3f\n", accuracy);
    std::printf("trained on %lld rows in %.2f s (%.0f rows/s, all workers)\n",
                static_cast<long long>(stats.rows_all), seconds,
                static_cast<double>(stats.rows_all) / seconds);
    std::fflush(stdout);
    std::string dir = ctx.log_dir.empty() ? "." : ctx.log_dir;
    std::string path = dir + "/digits_mlp_cpp.pt";
    torch::save(model, path);
    std::printf("saved model to %s\n", path.c_str());
    std::fflush(stdout);
  }
  // Nobody leaves while the chief still saves.
  std::vector<torch::Tensor> none{torch::zeros({1})};
  group->allreduce(none)->wait(kCollectiveTimeout);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options options = ParseArgs(argc, argv);
  try {
    return Run(options);
  } catch (const std::exception& e) {
    // c10::Error from torch and gloo (a peer gone, a timeout): one line.
    std::string what = e.what();
    Fail(what.substr(0, what.find('\n')));
  }
}
