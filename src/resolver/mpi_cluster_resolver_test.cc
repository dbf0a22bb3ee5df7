#include "drover/mpi_cluster_resolver.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "drover/environment.h"
#include "testing/status_matchers.h"

namespace drover {
namespace {

using ::drover::testing::StatusIs;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Optional;

using Options = MPIClusterResolver::Options;
using Vars = std::map<std::string, std::string>;

// Answers as if every rank had called with the hosts given; records calls.
class FakeHostExchange : public HostExchange {
 public:
  explicit FakeHostExchange(Result<std::vector<std::string>> hosts) : hosts_(std::move(hosts)) {}
  Result<std::vector<std::string>> AllgatherHostNames(const std::string& own, int rank,
                                                      int size) override {
    ++calls;
    last_own = own;
    last_rank = rank;
    last_size = size;
    return hosts_;
  }
  int calls = 0;
  std::string last_own;
  int last_rank = -1;
  int last_size = -1;

 private:
  Result<std::vector<std::string>> hosts_;
};

Vars OpenMpi(int rank, int size, int local_rank, int local_size) {
  return {{"OMPI_COMM_WORLD_RANK", std::to_string(rank)},
          {"OMPI_COMM_WORLD_SIZE", std::to_string(size)},
          {"OMPI_COMM_WORLD_LOCAL_RANK", std::to_string(local_rank)},
          {"OMPI_COMM_WORLD_LOCAL_SIZE", std::to_string(local_size)},
          {"OMPI_COMM_WORLD_NODE_RANK", std::to_string(local_rank)}};
}

ClusterSpec Spec(std::map<std::string, std::vector<std::string>> jobs) {
  ClusterSpec spec;
  for (auto& [name, tasks] : jobs) EXPECT_OK(spec.AddJob(name, tasks));
  return spec;
}

TEST(MPIClusterResolverTest, OneHostNeedsNoExchange) {
  MapEnvironment env(OpenMpi(2, 3, 2, 3), "box", /*gpus=*/3);
  auto exchange = std::make_shared<FakeHostExchange>(Status::Internal("must not be called"));
  ASSERT_OK_AND_ASSIGN(auto resolver, MPIClusterResolver::Create({}, exchange, env));
  EXPECT_EQ(exchange->calls, 0);
  ASSERT_OK_AND_ASSIGN(ClusterSpec spec, resolver->cluster_spec());
  EXPECT_EQ(spec, Spec({{"worker", {"box:8888", "box:8889", "box:8890"}}}));
  EXPECT_EQ(env.Get("CUDA_VISIBLE_DEVICES"), "2");
  EXPECT_THAT(resolver->task_type(), Optional(std::string("worker")));
  EXPECT_THAT(resolver->task_id(), Optional(2));
  EXPECT_EQ(resolver->master().value_or(""), "grpc://box:8890");
  ASSERT_OK_AND_ASSIGN(AcceleratorMap accelerators, resolver->num_accelerators());
  EXPECT_EQ(accelerators, (AcceleratorMap{{"GPU", 1}}));
}

TEST(MPIClusterResolverTest, NullExchangeIsFineOnOneHost) {
  MapEnvironment env(OpenMpi(0, 2, 0, 2), "box");
  ASSERT_OK_AND_ASSIGN(auto resolver, MPIClusterResolver::Create({}, nullptr, env));
  EXPECT_THAT(resolver->host_names(), ElementsAre("box", "box"));
}

// Ranks laid out in rank order, not TensorFlow's sorted-set order.
TEST(MPIClusterResolverTest, RanksAcrossHostsKeepRankOrder) {
  std::vector<std::string> hosts = {"n10", "n2", "n10", "n2"};
  auto exchange = std::make_shared<FakeHostExchange>(hosts);
  MapEnvironment env(OpenMpi(3, 4, 1, 2), "n2");
  Options options;
  options.jobs = {{"chief", 1}, {"worker", 3}};
  options.gpus_per_node = 2;
  ASSERT_OK_AND_ASSIGN(auto resolver, MPIClusterResolver::Create(options, exchange, env));
  EXPECT_EQ(exchange->calls, 1);
  EXPECT_EQ(exchange->last_own, "n2");
  EXPECT_EQ(exchange->last_rank, 3);
  EXPECT_EQ(exchange->last_size, 4);
  ASSERT_OK_AND_ASSIGN(ClusterSpec spec, resolver->cluster_spec());
  EXPECT_EQ(spec, Spec({{"chief", {"n10:8888"}}, {"worker", {"n2:8888", "n10:8889", "n2:8889"}}}));
  EXPECT_EQ(env.Get("CUDA_VISIBLE_DEVICES"), "1");
  EXPECT_EQ(resolver->get_task_info(),
            std::make_pair(std::optional<std::string>("worker"), std::optional<int>(2)));
  // The exchange is not repeated on later calls.
  ASSERT_OK(resolver->cluster_spec());
  EXPECT_EQ(exchange->calls, 1);
  ASSERT_OK_AND_ASSIGN(auto placements, resolver->Placement());
  EXPECT_EQ(placements[2].host, "n10");
  EXPECT_EQ(placements[2].local_index, 1);
  EXPECT_EQ(placements[2].port, 8889);
}

// Every rank of one job computes the same ClusterSpec.
TEST(MPIClusterResolverTest, AllRanksAgree) {
  std::vector<std::string> hosts = {"a", "a", "b", "c", "b"};
  std::vector<int> local = {0, 1, 0, 0, 1};
  std::vector<int> local_size = {2, 2, 2, 1, 2};
  std::optional<ClusterSpec> first;
  for (int rank = 0; rank < 5; ++rank) {
    MapEnvironment env(OpenMpi(rank, 5, local[rank], local_size[rank]), hosts[rank]);
    Options options;
    options.jobs = {{"ps", 2}, {"worker", 3}};
    options.auto_set_gpu = false;
    ASSERT_OK_AND_ASSIGN(
        auto resolver,
        MPIClusterResolver::Create(options, std::make_shared<FakeHostExchange>(hosts), env));
    ASSERT_OK_AND_ASSIGN(ClusterSpec spec, resolver->cluster_spec());
    if (!first) first = spec;
    EXPECT_EQ(spec, *first) << "rank " << rank;
    EXPECT_EQ(resolver->master().value_or(""),
              "grpc://" + hosts[rank] + ":" + std::to_string(8888 + local[rank]));
  }
  EXPECT_EQ(*first,
            Spec({{"ps", {"a:8888", "a:8889"}}, {"worker", {"b:8888", "c:8888", "b:8889"}}}));
}

TEST(MPIClusterResolverTest, MpichHydraVariables) {
  MapEnvironment env(
      Vars{
          {"PMI_RANK", "1"}, {"PMI_SIZE", "2"}, {"MPI_LOCALRANKID", "1"}, {"MPI_LOCALNRANKS", "2"}},
      "h");
  Options options;
  options.auto_set_gpu = false;
  ASSERT_OK_AND_ASSIGN(auto resolver, MPIClusterResolver::Create(options, nullptr, env));
  EXPECT_EQ(resolver->cluster_spec().value_or(ClusterSpec()),
            Spec({{"worker", {"h:8888", "h:8889"}}}));
  EXPECT_THAT(resolver->task_id(), Optional(1));
  EXPECT_EQ(resolver->size().value_or(0), 2);
}

TEST(MPIClusterResolverTest, SingleRankWithoutLocalVariables) {
  MapEnvironment env(Vars{{"PMI_RANK", "0"}, {"PMI_SIZE", "1"}}, "solo");
  Options options;
  options.port_base = 2222;
  options.rpc_layer = "";
  ASSERT_OK_AND_ASSIGN(auto resolver, MPIClusterResolver::Create(options, nullptr, env));
  EXPECT_EQ(resolver->master().value_or("error"), "solo:2222");
}

TEST(MPIClusterResolverTest, MissingLauncherVariables) {
  MapEnvironment env;
  EXPECT_THAT(MPIClusterResolver::Create({}, nullptr, env),
              StatusIs(Status::Code::kNotFound,
                       AllOf(HasSubstr("OMPI_COMM_WORLD_RANK"), HasSubstr("PMI_RANK"))));
  env.Set("OMPI_COMM_WORLD_RANK", "0");
  EXPECT_THAT(MPIClusterResolver::Create({}, nullptr, env),
              StatusIs(Status::Code::kNotFound, HasSubstr("OMPI_COMM_WORLD_SIZE is not set")));
}

TEST(MPIClusterResolverTest, GarbledLauncherVariables) {
  MapEnvironment env(OpenMpi(0, 2, 0, 2));
  env.Set("OMPI_COMM_WORLD_RANK", "x");
  EXPECT_THAT(MPIClusterResolver::Create({}, nullptr, env),
              StatusIs(Status::Code::kInvalidArgument,
                       HasSubstr("OMPI_COMM_WORLD_RANK=x is not an integer")));
  env.Set("OMPI_COMM_WORLD_RANK", "2");
  EXPECT_THAT(MPIClusterResolver::Create({}, nullptr, env),
              StatusIs(Status::Code::kInvalidArgument,
                       HasSubstr("OMPI_COMM_WORLD_RANK=2 must be < OMPI_COMM_WORLD_SIZE=2")));
  env.Set("OMPI_COMM_WORLD_RANK", "0");
  env.Set("OMPI_COMM_WORLD_SIZE", "0");
  EXPECT_THAT(
      MPIClusterResolver::Create({}, nullptr, env),
      StatusIs(Status::Code::kInvalidArgument, HasSubstr("OMPI_COMM_WORLD_SIZE=0 must be >= 1")));
  env.Set("OMPI_COMM_WORLD_SIZE", "2");
  env.Set("OMPI_COMM_WORLD_LOCAL_SIZE", "3");
  EXPECT_THAT(
      MPIClusterResolver::Create({}, nullptr, env),
      StatusIs(Status::Code::kInvalidArgument,
               HasSubstr("OMPI_COMM_WORLD_LOCAL_SIZE=3 must be <= OMPI_COMM_WORLD_SIZE=2")));
  env.Set("OMPI_COMM_WORLD_LOCAL_SIZE", "2");
  env.Set("OMPI_COMM_WORLD_LOCAL_RANK", "2");
  EXPECT_THAT(
      MPIClusterResolver::Create({}, nullptr, env),
      StatusIs(Status::Code::kInvalidArgument,
               HasSubstr("OMPI_COMM_WORLD_LOCAL_RANK=2 must be < OMPI_COMM_WORLD_LOCAL_SIZE=2")));
}

TEST(MPIClusterResolverTest, SeveralHostsWithoutAnExchange) {
  MapEnvironment env(OpenMpi(0, 4, 0, 2));
  EXPECT_THAT(MPIClusterResolver::Create({}, nullptr, env),
              StatusIs(Status::Code::kUnavailable,
                       AllOf(HasSubstr("OMPI_COMM_WORLD_LOCAL_SIZE=2 < OMPI_COMM_WORLD_SIZE=4"),
                             HasSubstr("no host exchange"))));
  env.Unset("OMPI_COMM_WORLD_LOCAL_SIZE");
  EXPECT_THAT(
      MPIClusterResolver::Create({}, nullptr, env),
      StatusIs(Status::Code::kUnavailable, HasSubstr("OMPI_COMM_WORLD_LOCAL_SIZE is not set")));
}

TEST(MPIClusterResolverTest, ExchangeFailuresAndBadAnswers) {
  MapEnvironment env(OpenMpi(0, 2, 0, 1), "a");
  EXPECT_THAT(MPIClusterResolver::Create(
                  {}, std::make_shared<FakeHostExchange>(Status::Unavailable("peer died")), env),
              StatusIs(Status::Code::kUnavailable,
                       AllOf(HasSubstr("exchanging host names"), HasSubstr("peer died"))));
  EXPECT_THAT(MPIClusterResolver::Create(
                  {}, std::make_shared<FakeHostExchange>(std::vector<std::string>{"a"}), env),
              StatusIs(Status::Code::kInternal, HasSubstr("1 names for 2 ranks")));
  EXPECT_THAT(MPIClusterResolver::Create(
                  {}, std::make_shared<FakeHostExchange>(std::vector<std::string>{"a", ""}), env),
              StatusIs(Status::Code::kInternal, HasSubstr("empty name for rank 1")));
}

// Two containers both called "worker": the launcher's counts expose it.
TEST(MPIClusterResolverTest, DuplicateHostNamesAreDetected) {
  std::vector<std::string> hosts = {"worker", "worker", "other"};
  MapEnvironment env(OpenMpi(1, 3, 0, 1), "worker");
  EXPECT_THAT(
      MPIClusterResolver::Create({}, std::make_shared<FakeHostExchange>(hosts), env),
      StatusIs(Status::Code::kInvalidArgument, AllOf(HasSubstr("2 ranks report host name 'worker'"),
                                                     HasSubstr("OMPI_COMM_WORLD_LOCAL_SIZE=1"))));
  MapEnvironment env2(OpenMpi(1, 3, 0, 2), "worker");
  EXPECT_THAT(MPIClusterResolver::Create({}, std::make_shared<FakeHostExchange>(hosts), env2),
              StatusIs(Status::Code::kInvalidArgument,
                       HasSubstr("local rank 1 by host names but OMPI_COMM_WORLD_LOCAL_RANK=0")));
}

TEST(MPIClusterResolverTest, JobsAndGpusMustFit) {
  MapEnvironment env(OpenMpi(0, 2, 0, 2), "h");
  Options options;
  options.jobs = {{"worker", 3}};
  EXPECT_THAT(MPIClusterResolver::Create(options, nullptr, env),
              StatusIs(Status::Code::kInvalidArgument,
                       AllOf(HasSubstr("ask for 3 tasks"), HasSubstr("OMPI_COMM_WORLD_SIZE=2"))));
  options.jobs = {};
  options.gpus_per_node = 1;
  options.gpus_per_task = 1;
  EXPECT_THAT(
      MPIClusterResolver::Create(options, nullptr, env),
      StatusIs(Status::Code::kInvalidArgument, HasSubstr("more GPUs per node than available")));
  options.gpus_per_node = std::nullopt;
  options.gpus_per_task = std::nullopt;
  options.port_base = 70000;
  EXPECT_THAT(MPIClusterResolver::Create(options, nullptr, env),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("port_base=70000")));
}

TEST(MPIClusterResolverTest, ZeroGpusHidesDevices) {
  MapEnvironment env(OpenMpi(1, 2, 1, 2), "h", /*gpus=*/1);
  ASSERT_OK_AND_ASSIGN(auto resolver, MPIClusterResolver::Create({}, nullptr, env));
  EXPECT_EQ(resolver->gpus_per_task(), 0);
  ASSERT_OK(resolver->cluster_spec());
  EXPECT_EQ(env.Get("CUDA_VISIBLE_DEVICES"), "");
  EXPECT_TRUE(resolver->num_accelerators().value_or(AcceleratorMap{{"x", 1}}).empty());
}

TEST(MPIClusterResolverTest, WorldSizeChangeIsReported) {
  MapEnvironment env(OpenMpi(0, 2, 0, 2), "h");
  ASSERT_OK_AND_ASSIGN(auto resolver, MPIClusterResolver::Create({}, nullptr, env));
  env.Set("OMPI_COMM_WORLD_SIZE", "3");
  env.Set("OMPI_COMM_WORLD_LOCAL_SIZE", "3");
  EXPECT_THAT(resolver->cluster_spec(),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("created for 2 ranks")));
  EXPECT_EQ(resolver->task_id(), std::nullopt);
}

TEST(MPIClusterResolverTest, MpiExchangeAvailabilityMatchesTheBuild) {
  std::shared_ptr<HostExchange> exchange = NewMpiHostExchange();
  EXPECT_EQ(exchange != nullptr, HaveMpiHostExchange());
}

}  // namespace
}  // namespace drover
