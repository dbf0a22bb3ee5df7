#include "drover/kubernetes_cluster_resolver.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <map>
#include <string>

#include "drover/environment.h"
#include "testing/status_matchers.h"

namespace drover {
namespace {

using ::drover::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Optional;

using Options = KubernetesClusterResolver::Options;
using Vars = std::map<std::string, std::string>;

Options NoNamespaceFile() {
  Options options;
  options.namespace_file = "/nonexistent/drover/namespace";
  return options;
}

ClusterSpec Spec(std::map<std::string, std::vector<std::string>> jobs) {
  ClusterSpec spec;
  for (auto& [name, tasks] : jobs) EXPECT_OK(spec.AddJob(name, tasks));
  return spec;
}

TEST(KubernetesClusterResolverTest, WorkersFromTheIndexedJob) {
  MapEnvironment env(Vars{{"JOB_COMPLETION_INDEX", "2"},
                          {"HOSTNAME", "train-2"},
                          {"DROVER_NUM_TASKS", "3"},
                          {"POD_NAMESPACE", "ml"}});
  ASSERT_OK_AND_ASSIGN(auto resolver, KubernetesClusterResolver::Create(NoNamespaceFile(), env));
  ASSERT_OK_AND_ASSIGN(ClusterSpec spec, resolver->cluster_spec());
  EXPECT_EQ(
      spec,
      Spec({{"worker",
             {"train-0.train.ml.svc.cluster.local:8470", "train-1.train.ml.svc.cluster.local:8470",
              "train-2.train.ml.svc.cluster.local:8470"}}}));
  EXPECT_THAT(resolver->task_type(), Optional(std::string("worker")));
  EXPECT_THAT(resolver->task_id(), Optional(2));
  EXPECT_EQ(resolver->master().value_or(""), "grpc://train-2.train.ml.svc.cluster.local:8470");
  EXPECT_EQ(resolver->job_name().value_or(""), "train");
  EXPECT_EQ(resolver->pod_dns_name(0).value_or(""), "train-0.train.ml.svc.cluster.local");
}

TEST(KubernetesClusterResolverTest, AcceleratorsAreTheEnvironmentsGpus) {
  MapEnvironment env(Vars{{"JOB_COMPLETION_INDEX", "0"}, {"DROVER_NUM_TASKS", "1"}}, "train-0",
                     /*gpus=*/2);
  ASSERT_OK_AND_ASSIGN(auto resolver, KubernetesClusterResolver::Create(NoNamespaceFile(), env));
  EXPECT_EQ(resolver->num_accelerators().value_or(AcceleratorMap{}), (AcceleratorMap{{"GPU", 2}}));
}

TEST(KubernetesClusterResolverTest, JobsSplitIndicesInNameOrder) {
  MapEnvironment env(Vars{
      {"JOB_COMPLETION_INDEX", "0"}, {"HOSTNAME", "tf-job-0"}, {"DROVER_K8S_SERVICE", "tf-svc"}});
  Options options = NoNamespaceFile();
  options.jobs = {{"worker", 3}, {"chief", 1}};
  options.port = 2222;
  options.cluster_domain = "corp.example";
  ASSERT_OK_AND_ASSIGN(auto resolver, KubernetesClusterResolver::Create(options, env));
  ASSERT_OK_AND_ASSIGN(ClusterSpec spec, resolver->cluster_spec());
  const std::string suffix = ".tf-svc.default.svc.corp.example:2222";
  EXPECT_EQ(spec,
            Spec({{"chief", {"tf-job-0" + suffix}},
                  {"worker", {"tf-job-1" + suffix, "tf-job-2" + suffix, "tf-job-3" + suffix}}}));
  EXPECT_THAT(resolver->task_type(), Optional(std::string("chief")));
  env.Set("JOB_COMPLETION_INDEX", "3");
  env.Set("HOSTNAME", "tf-job-3");
  EXPECT_THAT(resolver->task_type(), Optional(std::string("worker")));
  EXPECT_THAT(resolver->task_id(), Optional(2));
  EXPECT_EQ(resolver->num_tasks().value_or(0), 4);
}

TEST(KubernetesClusterResolverTest, ExplicitNamesAndTheNamespaceFile) {
  char path[] = "/tmp/drover_k8s_ns_XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  std::ofstream(path) << "team-a\n";
  MapEnvironment env(Vars{{"JOB_COMPLETION_INDEX", "1"}}, "ignored-host");
  Options options;
  options.namespace_file = path;
  options.num_tasks = 2;
  options.job_name = "bert";
  options.service = "bert-hl";
  ASSERT_OK_AND_ASSIGN(auto resolver, KubernetesClusterResolver::Create(options, env));
  EXPECT_EQ(resolver->kube_namespace(), "team-a");
  EXPECT_EQ(resolver->master().value_or(""), "grpc://bert-1.bert-hl.team-a.svc.cluster.local:8470");
  env.Set("POD_NAMESPACE", "from-env");
  EXPECT_EQ(resolver->kube_namespace(), "from-env");
  std::remove(path);
}

TEST(KubernetesClusterResolverTest, JobNameFallsBackToTheHostName) {
  MapEnvironment env(Vars{{"JOB_COMPLETION_INDEX", "1"}, {"DROVER_NUM_TASKS", "2"}}, "w-1");
  ASSERT_OK_AND_ASSIGN(auto resolver, KubernetesClusterResolver::Create(NoNamespaceFile(), env));
  EXPECT_EQ(resolver->job_name().value_or(""), "w");
  EXPECT_EQ(resolver->service().value_or(""), "w");
}

TEST(KubernetesClusterResolverTest, Errors) {
  Options options = NoNamespaceFile();
  MapEnvironment env(Vars{{"HOSTNAME", "train-0"}, {"DROVER_NUM_TASKS", "2"}});
  EXPECT_THAT(KubernetesClusterResolver::Create(options, env),
              StatusIs(Status::Code::kNotFound, HasSubstr("JOB_COMPLETION_INDEX is not set")));
  env.Set("JOB_COMPLETION_INDEX", "zero");
  EXPECT_THAT(KubernetesClusterResolver::Create(options, env),
              StatusIs(Status::Code::kInvalidArgument,
                       HasSubstr("JOB_COMPLETION_INDEX=zero is not an integer")));
  env.Set("JOB_COMPLETION_INDEX", "2");
  env.Set("HOSTNAME", "train-2");
  EXPECT_THAT(KubernetesClusterResolver::Create(options, env),
              StatusIs(Status::Code::kInvalidArgument,
                       HasSubstr("JOB_COMPLETION_INDEX=2 must be < the number of tasks, 2")));
  env.Set("JOB_COMPLETION_INDEX", "0");
  env.Set("HOSTNAME", "train-0");
  env.Unset("DROVER_NUM_TASKS");
  EXPECT_THAT(KubernetesClusterResolver::Create(options, env),
              StatusIs(Status::Code::kNotFound, AllOf(HasSubstr("number of tasks is unknown"),
                                                      HasSubstr("DROVER_NUM_TASKS"))));
  env.Set("DROVER_NUM_TASKS", "many");
  EXPECT_THAT(KubernetesClusterResolver::Create(options, env),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("DROVER_NUM_TASKS=many")));
  env.Set("DROVER_NUM_TASKS", "3");
  options.jobs = {{"worker", 2}};
  EXPECT_THAT(KubernetesClusterResolver::Create(options, env),
              StatusIs(Status::Code::kInvalidArgument,
                       HasSubstr("the jobs ask for 2 tasks but DROVER_NUM_TASKS=3")));
  options.jobs = {};
  options.num_tasks = 0;
  EXPECT_THAT(KubernetesClusterResolver::Create(options, env),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("num_tasks=0")));
  options.num_tasks.reset();
  env.Set("HOSTNAME", "train-7");
  EXPECT_THAT(KubernetesClusterResolver::Create(options, env),
              StatusIs(Status::Code::kInvalidArgument,
                       AllOf(HasSubstr("HOSTNAME=train-7"), HasSubstr("\"-0\""))));
  env.Set("HOSTNAME", "Train_x-0");
  EXPECT_THAT(KubernetesClusterResolver::Create(options, env),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("not a DNS label")));
  env.Set("HOSTNAME", "train-0");
  env.Set("DROVER_K8S_SERVICE", "bad.service");
  EXPECT_THAT(KubernetesClusterResolver::Create(options, env),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("service \"bad.service\"")));
  env.Unset("DROVER_K8S_SERVICE");
  env.Set("POD_NAMESPACE", "Bad NS");
  EXPECT_THAT(KubernetesClusterResolver::Create(options, env),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("namespace \"Bad NS\"")));
  env.Unset("POD_NAMESPACE");
  options.port = 0;
  EXPECT_THAT(KubernetesClusterResolver::Create(options, env),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("port=0")));
  options.port = 8470;
  options.cluster_domain = "";
  EXPECT_THAT(KubernetesClusterResolver::Create(options, env),
              StatusIs(Status::Code::kInvalidArgument, HasSubstr("cluster_domain")));
}

}  // namespace
}  // namespace drover
