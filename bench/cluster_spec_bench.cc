// What it costs to ship a cluster to every node: ClusterDef and JSON encode
// and decode of an N-task cluster, against memcpy of the same bytes (the
// floor for any encoding). The rendezvous (next issue) sends this to all N
// nodes, so these numbers bound its barrier time.
#include <benchmark/benchmark.h>

#include <cstring>
#include <string>
#include <vector>

#include "drover/cluster_spec.h"

namespace {

drover::ClusterSpec MakeCluster(int tasks) {
  std::vector<std::string> workers;
  workers.reserve(tasks);
  for (int i = 0; i < tasks; ++i) {
    workers.push_back("node" + std::to_string(i / 8) +
                      ".cluster.example.com:" + std::to_string(20000 + i % 8));
  }
  drover::ClusterSpec spec;
  (void)spec.AddJob("chief", {"chief0.cluster.example.com:20000"});
  (void)spec.AddJob("worker", std::move(workers));
  return spec;
}

void SetBytes(benchmark::State& state, size_t bytes) {
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes));
  state.counters["encoded_bytes"] = static_cast<double>(bytes);
}

void BM_MemcpyBaseline(benchmark::State& state) {
  std::string source = MakeCluster(static_cast<int>(state.range(0))).AsClusterDef();
  std::string target(source.size(), '\0');
  for (auto _ : state) {
    std::memcpy(target.data(), source.data(), source.size());
    benchmark::DoNotOptimize(target.data());
    benchmark::ClobberMemory();
  }
  SetBytes(state, source.size());
}

void BM_AsClusterDef(benchmark::State& state) {
  drover::ClusterSpec spec = MakeCluster(static_cast<int>(state.range(0)));
  size_t bytes = 0;
  for (auto _ : state) {
    std::string encoded = spec.AsClusterDef();
    bytes = encoded.size();
    benchmark::DoNotOptimize(encoded);
  }
  SetBytes(state, bytes);
}

void BM_FromClusterDef(benchmark::State& state) {
  std::string encoded = MakeCluster(static_cast<int>(state.range(0))).AsClusterDef();
  for (auto _ : state) {
    auto spec = drover::ClusterSpec::FromClusterDef(encoded);
    benchmark::DoNotOptimize(spec);
  }
  SetBytes(state, encoded.size());
}

void BM_ToJson(benchmark::State& state) {
  drover::ClusterSpec spec = MakeCluster(static_cast<int>(state.range(0)));
  size_t bytes = 0;
  for (auto _ : state) {
    std::string json = spec.ToJson();
    bytes = json.size();
    benchmark::DoNotOptimize(json);
  }
  SetBytes(state, bytes);
}

void BM_FromJson(benchmark::State& state) {
  std::string json = MakeCluster(static_cast<int>(state.range(0))).ToJson();
  for (auto _ : state) {
    auto spec = drover::ClusterSpec::FromJson(json);
    benchmark::DoNotOptimize(spec);
  }
  SetBytes(state, json.size());
}

#define DROVER_CLUSTER_SIZES Arg(8)->Arg(1000)->Arg(4000)
BENCHMARK(BM_MemcpyBaseline)->DROVER_CLUSTER_SIZES;
BENCHMARK(BM_AsClusterDef)->DROVER_CLUSTER_SIZES;
BENCHMARK(BM_FromClusterDef)->DROVER_CLUSTER_SIZES;
BENCHMARK(BM_ToJson)->DROVER_CLUSTER_SIZES;
BENCHMARK(BM_FromJson)->DROVER_CLUSTER_SIZES;

}  // namespace

BENCHMARK_MAIN();
