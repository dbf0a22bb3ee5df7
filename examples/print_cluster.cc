// Resolves the cluster this process runs in and prints what each framework
// would be told, using only the public API in include/drover.
//
//   export TF_CONFIG='{"cluster":{"worker":["a:1","b:1"]},"task":{"type":"worker","index":0}}'
//   build/bin/print_cluster
#include <iostream>

#include "drover/auto_resolver.h"
#include "drover/framework_env.h"

int main() {
  auto choice = drover::MakeClusterResolver("auto", drover::ProcessEnvironment());
  if (!choice.ok()) {
    std::cerr << choice.status().message() << "\n";
    return 2;
  }
  auto cluster = choice->resolver->cluster_spec();
  if (!cluster.ok()) {
    std::cerr << cluster.status().message() << "\n";
    return 2;
  }
  std::cout << "resolved by " << choice->kind << ": " << cluster->DebugString() << "\n";
  auto type = choice->resolver->task_type();
  auto id = choice->resolver->task_id();
  if (!type || !id) return 0;
  auto vars = drover::FrameworkEnvironment(*cluster, *type, *id);
  if (!vars.ok()) {
    std::cerr << vars.status().message() << "\n";
    return 2;
  }
  std::cout << drover::FormatShellExports(*vars);
  return 0;
}
