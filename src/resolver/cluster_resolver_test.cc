// TensorFlow's cluster_resolver_test.py re-expressed, plus the rules its tests
// leave implicit (master() fallbacks, "" vs unset, task id 0 overrides).

#include "drover/cluster_resolver.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "drover/environment.h"
#include "testing/status_matchers.h"

namespace drover {
namespace {

using ::drover::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using Code = Status::Code;

ClusterSpec Dense(std::vector<std::pair<std::string, std::vector<std::string>>> jobs) {
  ClusterSpec spec;
  for (auto& [name, tasks] : jobs) EXPECT_OK(spec.AddJob(name, tasks));
  return spec;
}

ClusterSpec Sparse(std::string job, ClusterSpec::TaskMap tasks) {
  ClusterSpec spec;
  EXPECT_OK(spec.AddSparseJob(std::move(job), std::move(tasks)));
  return spec;
}

ClusterSpec PsAndWorkers() {
  return Dense({{"ps", {"ps0:2222", "ps1:2222"}},
                {"worker", {"worker0:2222", "worker1:2222", "worker2:2222"}}});
}

std::shared_ptr<ClusterResolver> Simple(ClusterSpec spec,
                                        SimpleClusterResolver::Options options = {}) {
  return std::make_shared<SimpleClusterResolver>(std::move(spec), std::move(options));
}

std::unique_ptr<UnionClusterResolver> Union(std::vector<std::shared_ptr<ClusterResolver>> resolvers,
                                            UnionClusterResolver::Options options = {}) {
  auto result = UnionClusterResolver::Create(std::move(resolvers), std::move(options));
  EXPECT_OK(result);
  return std::move(result).value();
}

// TensorFlow's _verifyClusterSpecEquality: equal, and equal through the proto
// and dict (JSON) forms.
void VerifyClusterSpecEquality(const Result<ClusterSpec>& actual, const ClusterSpec& expected) {
  ASSERT_OK(actual);
  EXPECT_EQ(*actual, expected) << actual->DebugString() << " vs " << expected.DebugString();
  EXPECT_EQ(actual->AsClusterDef(), expected.AsClusterDef());
  ASSERT_OK_AND_ASSIGN(ClusterSpec from_def, ClusterSpec::FromClusterDef(actual->AsClusterDef()));
  EXPECT_EQ(from_def, expected);
  ASSERT_OK_AND_ASSIGN(ClusterSpec from_dict, ClusterSpec::FromJson(actual->ToJson()));
  EXPECT_EQ(from_dict, expected);
}

// A resolver whose cluster_spec() fails, to see errors pass through.
class FailingResolver : public ClusterResolver {
 public:
  Result<ClusterSpec> cluster_spec() const override {
    return Status::Unavailable("source went away");
  }
  using ClusterResolver::master;
  Result<std::string> master(const std::optional<std::string>&, std::optional<int>,
                             const std::optional<std::string>&) const override {
    return std::string("failing-master");
  }
  using ClusterResolver::num_accelerators;
  Result<AcceleratorMap> num_accelerators(const std::optional<std::string>&,
                                          std::optional<int>) const override {
    return AcceleratorMap{};
  }
};

// ---- FormatMasterUrl ----

TEST(FormatMasterUrlTest, PrefixesOnlyWithANonEmptyLayer) {
  EXPECT_EQ(FormatMasterUrl("host:1", "grpc"), "grpc://host:1");
  EXPECT_EQ(FormatMasterUrl("host:1", ""), "host:1");
  EXPECT_EQ(FormatMasterUrl("", "grpc"), "grpc://");
}

// ---- ClusterResolver defaults ----

TEST(LocalAcceleratorsTest, CountsTheEnvironmentsGpus) {
  EXPECT_EQ(LocalAccelerators(MapEnvironment({}, "host", 2)), (AcceleratorMap{{"GPU", 2}}));
  EXPECT_TRUE(LocalAccelerators(MapEnvironment({}, "host", 0)).empty());  // no {"GPU": 0} entry
}

TEST(BaseClusterResolverTest, Defaults) {
  FailingResolver resolver;
  EXPECT_EQ(resolver.environment(), "");
  EXPECT_EQ(resolver.task_type(), std::nullopt);
  EXPECT_EQ(resolver.task_id(), std::nullopt);
  EXPECT_EQ(resolver.rpc_layer(), std::nullopt);
}

TEST(BaseClusterResolverTest, SettersOverrideAndNulloptClears) {
  FailingResolver resolver;
  resolver.set_task_type("worker");
  resolver.set_task_id(3);
  resolver.set_rpc_layer("grpc");
  EXPECT_EQ(resolver.task_type(), "worker");
  EXPECT_EQ(resolver.task_id(), 3);
  EXPECT_EQ(resolver.rpc_layer(), "grpc");
  resolver.set_task_type(std::nullopt);
  resolver.set_task_id(std::nullopt);
  resolver.set_rpc_layer(std::nullopt);
  EXPECT_EQ(resolver.task_type(), std::nullopt);
  EXPECT_EQ(resolver.task_id(), std::nullopt);
  EXPECT_EQ(resolver.rpc_layer(), std::nullopt);
}

// ---- SimpleClusterResolver (TensorFlow's tests) ----

TEST(SimpleClusterResolverTest, InitSimpleClusterResolver) {
  SimpleClusterResolver resolver(PsAndWorkers(), {.task_type = "ps",
                                                  .task_id = 1,
                                                  .environment = "cloud",
                                                  .num_accelerators = AcceleratorMap{{"GPU", 8}},
                                                  .rpc_layer = "grpc"});
  EXPECT_EQ(resolver.task_type(), "ps");
  EXPECT_EQ(resolver.task_id(), 1);
  EXPECT_EQ(resolver.environment(), "cloud");
  EXPECT_EQ(resolver.num_accelerators().value(), (AcceleratorMap{{"GPU", 8}}));
  EXPECT_EQ(resolver.rpc_layer(), "grpc");
  EXPECT_EQ(resolver.cluster_spec().value(), PsAndWorkers());
}

TEST(SimpleClusterResolverTest, OverrideSimpleClusterResolver) {
  SimpleClusterResolver resolver(PsAndWorkers(), {.task_type = "ps",
                                                  .task_id = 1,
                                                  .environment = "cloud",
                                                  .num_accelerators = AcceleratorMap{{"GPU", 8}},
                                                  .rpc_layer = "grpc"});
  resolver.set_task_type("worker");
  resolver.set_task_id(2);
  resolver.set_rpc_layer("http");
  EXPECT_EQ(resolver.task_type(), "worker");
  EXPECT_EQ(resolver.task_id(), 2);
  EXPECT_EQ(resolver.rpc_layer(), "http");
}

TEST(SimpleClusterResolverTest, SimpleOverrideMasterWithTaskIndexZero) {
  SimpleClusterResolver resolver(PsAndWorkers());
  EXPECT_EQ(resolver.master("worker", 0, "grpc").value(), "grpc://worker0:2222");
}

TEST(SimpleClusterResolverTest, SimpleOverrideMasterWithRpcLayer) {
  SimpleClusterResolver resolver(PsAndWorkers());
  EXPECT_EQ(resolver.master("worker", 2, "grpc").value(), "grpc://worker2:2222");
}

TEST(SimpleClusterResolverTest, SimpleOverrideMaster) {
  SimpleClusterResolver resolver(PsAndWorkers());
  EXPECT_EQ(resolver.master("worker", 2, std::nullopt).value(), "worker2:2222");
}

TEST(SimpleClusterResolverTest, MasterFallsBackToGivenMasterAndRpcLayer) {
  SimpleClusterResolver resolver(PsAndWorkers(), {.master = "m:1", .rpc_layer = "grpc"});
  EXPECT_EQ(resolver.master().value(), "grpc://m:1");
  // Both task_type and task_id are needed to pick a task.
  EXPECT_EQ(resolver.master("worker", std::nullopt, std::nullopt).value(), "grpc://m:1");
  EXPECT_EQ(resolver.master(std::nullopt, 1, std::nullopt).value(), "grpc://m:1");
  EXPECT_EQ(resolver.master("worker", 1, std::nullopt).value(), "grpc://worker1:2222");
  EXPECT_EQ(resolver.master(std::nullopt, std::nullopt, "http").value(), "http://m:1");
  // `rpc_layer or self._rpc_layer`: "" falls back.
  EXPECT_EQ(resolver.master(std::nullopt, std::nullopt, "").value(), "grpc://m:1");
  resolver.set_rpc_layer(std::nullopt);
  EXPECT_EQ(resolver.master().value(), "m:1");
  EXPECT_EQ(SimpleClusterResolver(PsAndWorkers()).master().value(), "");
}

TEST(SimpleClusterResolverTest, MasterOfUnknownTaskIsNotFound) {
  SimpleClusterResolver resolver(PsAndWorkers());
  EXPECT_THAT(resolver.master("chief", 0, std::nullopt),
              StatusIs(Code::kNotFound, "No such job in cluster: 'chief'"));
  EXPECT_THAT(resolver.master("worker", 7, std::nullopt),
              StatusIs(Code::kNotFound, "No task with index 7 in job 'worker'"));
}

TEST(SimpleClusterResolverTest, NumAcceleratorsDefaultsToEmpty) {
  SimpleClusterResolver resolver(PsAndWorkers());
  EXPECT_TRUE(resolver.num_accelerators().value().empty());
  EXPECT_TRUE(resolver.num_accelerators("worker", 0).value().empty());
  EXPECT_EQ(resolver.environment(), "");
}

// ---- UnionClusterResolver (TensorFlow's tests) ----

TEST(UnionClusterResolverTest, SingleClusterResolver) {
  auto union_resolver = Union({Simple(PsAndWorkers())});
  VerifyClusterSpecEquality(union_resolver->cluster_spec(), PsAndWorkers());
}

TEST(UnionClusterResolverTest, UnionClusterResolverGetProperties) {
  auto resolver1 = Simple(PsAndWorkers(), {.task_type = "ps",
                                           .task_id = 1,
                                           .environment = "cloud",
                                           .num_accelerators = AcceleratorMap{{"GPU", 8}},
                                           .rpc_layer = "grpc"});
  auto resolver2 = Simple(Dense({{"ps", {"ps2:2222", "ps3:2222"}},
                                 {"worker", {"worker3:2222", "worker4:2222", "worker5:2222"}}}),
                          {.task_type = "worker",
                           .task_id = 2,
                           .environment = "local",
                           .num_accelerators = AcceleratorMap{{"GPU", 16}},
                           .rpc_layer = "http"});
  auto union_resolver = Union({resolver1, resolver2});

  EXPECT_EQ(union_resolver->task_type(), "ps");
  EXPECT_EQ(union_resolver->task_id(), 1);
  EXPECT_EQ(union_resolver->environment(), "cloud");
  EXPECT_EQ(union_resolver->num_accelerators().value(), (AcceleratorMap{{"GPU", 8}}));
  EXPECT_EQ(union_resolver->rpc_layer(), "grpc");

  union_resolver->set_task_type("worker");
  union_resolver->set_task_id(2);
  union_resolver->set_rpc_layer("http");
  EXPECT_EQ(union_resolver->task_type(), "worker");
  EXPECT_EQ(union_resolver->task_id(), 2);
  EXPECT_EQ(union_resolver->rpc_layer(), "http");
  // The first resolver is untouched.
  EXPECT_EQ(resolver1->task_type(), "ps");
}

TEST(UnionClusterResolverTest, TwoNonOverlappingJobMergedClusterResolver) {
  auto union_resolver =
      Union({Simple(Dense({{"ps", {"ps0:2222", "ps1:2222"}}})),
             Simple(Dense({{"worker", {"worker0:2222", "worker1:2222", "worker2:2222"}}}))});
  VerifyClusterSpecEquality(union_resolver->cluster_spec(), PsAndWorkers());
  EXPECT_THAT(union_resolver->cluster_spec()->jobs(), ElementsAre("ps", "worker"));
}

TEST(UnionClusterResolverTest, MergedClusterResolverMaster) {
  auto union_resolver =
      Union({Simple(Dense({{"ps", {"ps0:2222", "ps1:2222"}}})),
             Simple(Dense({{"worker", {"worker0:2222", "worker1:2222", "worker2:2222"}}}))});
  EXPECT_EQ(union_resolver->master().value(), "");
  EXPECT_EQ(union_resolver->master("worker", 1, std::nullopt).value(), "worker1:2222");
  EXPECT_EQ(union_resolver->master("worker", 1, "grpc").value(), "grpc://worker1:2222");
}

TEST(UnionClusterResolverTest, OverlappingJobMergedClusterResolver) {
  auto union_resolver =
      Union({Simple(Dense({{"worker", {"worker4:2222", "worker5:2222"}}})),
             Simple(Dense({{"worker", {"worker0:2222", "worker1:2222", "worker2:2222"}}}))});
  VerifyClusterSpecEquality(
      union_resolver->cluster_spec(),
      Dense({{"worker",
              {"worker4:2222", "worker5:2222", "worker0:2222", "worker1:2222", "worker2:2222"}}}));
}

TEST(UnionClusterResolverTest, OverlappingSparseJobMergedClusterResolverThrowError) {
  auto union_resolver = Union(
      {Simple(Sparse("worker", {{7, "worker4:2222"}, {9, "worker5:2222"}})),
       Simple(Sparse("worker", {{3, "worker0:2222"}, {6, "worker1:2222"}, {7, "worker2:2222"}}))});
  EXPECT_THAT(union_resolver->cluster_spec(),
              StatusIs(Code::kAlreadyExists,
                       HasSubstr("Duplicate keys detected when merging two ClusterSpecs: {7}")));
}

TEST(UnionClusterResolverTest, OverlappingDictAndListThrowError) {
  auto union_resolver = Union(
      {Simple(Dense({{"worker", {"worker4:2222", "worker5:2222"}}})),
       Simple(Sparse("worker", {{1, "worker0:2222"}, {2, "worker1:2222"}, {3, "worker2:2222"}}))});
  EXPECT_THAT(union_resolver->cluster_spec(),
              StatusIs(Code::kAlreadyExists,
                       "Duplicate keys detected when merging two ClusterSpecs: {1} (job "
                       "'worker')"));
}

TEST(UnionClusterResolverTest, OverlappingJobNonOverlappingKey) {
  auto union_resolver = Union(
      {Simple(Sparse("worker", {{5, "worker4:2222"}, {9, "worker5:2222"}})),
       Simple(Sparse("worker", {{3, "worker0:2222"}, {6, "worker1:2222"}, {7, "worker2:2222"}}))});
  VerifyClusterSpecEquality(union_resolver->cluster_spec(),
                            Sparse("worker", {{3, "worker0:2222"},
                                              {5, "worker4:2222"},
                                              {6, "worker1:2222"},
                                              {7, "worker2:2222"},
                                              {9, "worker5:2222"}}));
}

TEST(UnionClusterResolverTest, MixedModeNonOverlappingKey) {
  auto union_resolver = Union(
      {Simple(Dense({{"worker", {"worker4:2222", "worker5:2222"}}})),
       Simple(Sparse("worker", {{3, "worker0:2222"}, {6, "worker1:2222"}, {7, "worker2:2222"}}))});
  VerifyClusterSpecEquality(union_resolver->cluster_spec(),
                            Sparse("worker", {{0, "worker4:2222"},
                                              {1, "worker5:2222"},
                                              {3, "worker0:2222"},
                                              {6, "worker1:2222"},
                                              {7, "worker2:2222"}}));
}

TEST(UnionClusterResolverTest, RetainSparseJobWithNoMerging) {
  ClusterSpec sparse =
      Sparse("worker", {{1, "worker0:2222"}, {3, "worker1:2222"}, {5, "worker2:2222"}});
  auto union_resolver = Union({Simple(sparse)});
  VerifyClusterSpecEquality(union_resolver->cluster_spec(), sparse);
}

// ---- UnionClusterResolver: the rules behind those tests ----

TEST(UnionClusterResolverTest, ZeroResolversIsInvalidArgument) {
  EXPECT_THAT(UnionClusterResolver::Create({}),
              StatusIs(Code::kInvalidArgument, "At least one ClusterResolver is required."));
  EXPECT_THAT(UnionClusterResolver::Create({Simple(PsAndWorkers()), nullptr}),
              StatusIs(Code::kWrongType, HasSubstr("resolver 1 is null")));
}

TEST(UnionClusterResolverTest, DuplicateKeysAreListedInOrder) {
  auto union_resolver = Union({Simple(Sparse("w", {{9, "a"}, {2, "b"}, {4, "c"}})),
                               Simple(Sparse("w", {{4, "d"}, {9, "e"}, {2, "f"}}))});
  EXPECT_THAT(union_resolver->cluster_spec(),
              StatusIs(Code::kAlreadyExists, HasSubstr("ClusterSpecs: {2, 4, 9}")));
}

TEST(UnionClusterResolverTest, ListsThatOverlapInOnlyOneSourceStayLists) {
  // ps is a list everywhere: concatenated. worker is a dict in the second
  // source: merged as a dict, and a dense result still reads as a list.
  auto union_resolver =
      Union({Simple(Dense({{"ps", {"p0"}}, {"worker", {"w0", "w1"}}})),
             Simple(Dense({{"ps", {"p1"}}})), Simple(Sparse("worker", {{2, "w2"}}))});
  ASSERT_OK_AND_ASSIGN(ClusterSpec spec, union_resolver->cluster_spec());
  EXPECT_EQ(spec, Dense({{"ps", {"p0", "p1"}}, {"worker", {"w0", "w1", "w2"}}}));
  EXPECT_THAT(spec.jobs(), ElementsAre("ps", "worker"));
}

TEST(UnionClusterResolverTest, EmptyJobIsADict) {
  // An empty job shows as {} in as_dict(), so it turns the job into a dict.
  auto first_empty = Union({Simple(Dense({{"worker", {}}})), Simple(Dense({{"worker", {"w0"}}}))});
  EXPECT_EQ(first_empty->cluster_spec().value(), Dense({{"worker", {"w0"}}}));
  auto list_then_empty =
      Union({Simple(Dense({{"worker", {"w0"}}})), Simple(Dense({{"worker", {}}}))});
  EXPECT_EQ(list_then_empty->cluster_spec().value(), Dense({{"worker", {"w0"}}}));
  auto only_empty = Union({Simple(Dense({{"worker", {}}}))});
  EXPECT_EQ(only_empty->cluster_spec().value(), Dense({{"worker", {}}}));
}

TEST(UnionClusterResolverTest, JobsKeepFirstSeenOrder) {
  auto union_resolver = Union({Simple(Dense({{"worker", {"w0"}}})),
                               Simple(Dense({{"chief", {"c0"}}, {"worker", {"w1"}}}))});
  EXPECT_THAT(union_resolver->cluster_spec()->jobs(), ElementsAre("worker", "chief"));
}

TEST(UnionClusterResolverTest, SourceErrorsPassThrough) {
  auto union_resolver = Union({Simple(PsAndWorkers()), std::make_shared<FailingResolver>()});
  EXPECT_THAT(union_resolver->cluster_spec(), StatusIs(Code::kUnavailable, "source went away"));
  EXPECT_THAT(union_resolver->master("worker", 0, std::nullopt),
              StatusIs(Code::kUnavailable, ::testing::_));
  // Without a task, master() only asks the first resolver.
  EXPECT_EQ(union_resolver->master().value(), "");
}

TEST(UnionClusterResolverTest, MasterWithoutTaskComesFromFirstResolver) {
  auto first = Simple(PsAndWorkers(), {.master = "first:1", .rpc_layer = "grpc"});
  auto union_resolver = Union({first, Simple(Dense({{"chief", {"c:1"}}}))}, {.rpc_layer = "http"});
  // Only the caller's rpc_layer is passed down; the first resolver uses its own.
  EXPECT_EQ(union_resolver->master().value(), "grpc://first:1");
  EXPECT_EQ(union_resolver->master(std::nullopt, std::nullopt, "udp").value(), "udp://first:1");
  EXPECT_EQ(union_resolver->master("worker", std::nullopt, std::nullopt).value(), "grpc://first:1");
  // With a task: the merged cluster, and the union's own rpc_layer.
  EXPECT_EQ(union_resolver->master("chief", 0, std::nullopt).value(), "http://c:1");
  EXPECT_EQ(union_resolver->master("chief", 0, "udp").value(), "udp://c:1");
  EXPECT_THAT(union_resolver->master("evaluator", 0, std::nullopt),
              StatusIs(Code::kNotFound, "No such job in cluster: 'evaluator'"));
}

TEST(UnionClusterResolverTest, MasterWithTaskIgnoresFirstResolversRpcLayer) {
  auto union_resolver = Union({Simple(PsAndWorkers(), {.rpc_layer = "grpc"})});
  // TensorFlow uses `rpc_layer or self._rpc_layer` (the union's), not the
  // rpc_layer property, here.
  EXPECT_EQ(union_resolver->rpc_layer(), "grpc");
  EXPECT_EQ(union_resolver->master("ps", 1, std::nullopt).value(), "ps1:2222");
}

TEST(UnionClusterResolverTest, OverridesFromOptionsAndEmptyStringFallsBack) {
  auto first = Simple(PsAndWorkers(), {.task_type = "ps", .task_id = 1, .rpc_layer = "grpc"});
  auto union_resolver = Union({first}, {.task_type = "worker", .task_id = 0, .rpc_layer = "http"});
  EXPECT_EQ(union_resolver->task_type(), "worker");
  // TensorFlow's `self._task_id or ...` would drop 0; we keep the override.
  EXPECT_EQ(union_resolver->task_id(), 0);
  EXPECT_EQ(union_resolver->rpc_layer(), "http");
  // An empty string is falsy in Python: the first resolver's value shows.
  union_resolver->set_task_type("");
  union_resolver->set_rpc_layer("");
  EXPECT_EQ(union_resolver->task_type(), "ps");
  EXPECT_EQ(union_resolver->rpc_layer(), "grpc");
  union_resolver->set_task_id(std::nullopt);
  EXPECT_EQ(union_resolver->task_id(), 1);
}

TEST(UnionClusterResolverTest, NumAcceleratorsAndEnvironmentFromFirstResolver) {
  auto union_resolver =
      Union({Simple(PsAndWorkers(), {.environment = "google"}),
             Simple(PsAndWorkers(),
                    {.environment = "cloud", .num_accelerators = AcceleratorMap{{"GPU", 4}}})});
  EXPECT_EQ(union_resolver->environment(), "google");
  EXPECT_TRUE(union_resolver->num_accelerators("worker", 0).value().empty());
  EXPECT_EQ(union_resolver->resolvers().size(), 2u);
}

TEST(UnionClusterResolverTest, ReadsSourcesOnEveryCall) {
  auto simple = std::make_shared<SimpleClusterResolver>(Dense({{"worker", {"w0"}}}));
  auto union_resolver = Union({simple});
  EXPECT_EQ(union_resolver->cluster_spec().value(), Dense({{"worker", {"w0"}}}));
  *simple = SimpleClusterResolver(Dense({{"worker", {"w0", "w1"}}}));
  EXPECT_EQ(union_resolver->cluster_spec().value(), Dense({{"worker", {"w0", "w1"}}}));
}

}  // namespace
}  // namespace drover
