// drover.<Name>ClusterResolver, the hostlist parsers and framework_environment.
// Constructor arguments follow TensorFlow's classes of the same name.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bindings.h"
#include "drover/auto_resolver.h"
#include "drover/cluster_resolver.h"
#include "drover/framework_env.h"
#include "drover/hostlist.h"
#include "drover/kubernetes_cluster_resolver.h"
#include "drover/mpi_cluster_resolver.h"
#include "drover/resource_spec_cluster_resolver.h"
#include "drover/slurm_cluster_resolver.h"
#include "drover/tf_config_cluster_resolver.h"
#include "drover/torch_env_cluster_resolver.h"

namespace py = pybind11;

namespace drover::python {
namespace {

using OptString = std::optional<std::string>;
using OptInt = std::optional<int>;

// Lets Python classes derive from drover.ClusterResolver (and be merged by
// UnionClusterResolver), as TensorFlow users subclass ClusterResolver.
class PyClusterResolver : public ClusterResolver {
 public:
  // A Python exception raised by an override propagates to the Python caller
  // unchanged (pybind11 carries it through the C++ frames).
  Result<ClusterSpec> cluster_spec() const override {
    py::gil_scoped_acquire gil;
    py::function override = py::get_override(this, "cluster_spec");
    if (!override) return Status::Internal("ClusterResolver.cluster_spec() is abstract");
    return override().cast<ClusterSpec>();
  }
  Result<std::string> master(const OptString& task_type, OptInt task_id,
                             const OptString& rpc_layer) const override {
    py::gil_scoped_acquire gil;
    py::function override = py::get_override(this, "master");
    if (!override) return Status::Internal("ClusterResolver.master() is abstract");
    return override(task_type, task_id, rpc_layer).cast<std::string>();
  }
  Result<AcceleratorMap> num_accelerators(const OptString& task_type,
                                          OptInt task_id) const override {
    py::gil_scoped_acquire gil;
    py::function override = py::get_override(this, "num_accelerators");
    if (!override) return LocalAccelerators(ProcessEnvironment());
    return override(task_type, task_id).cast<AcceleratorMap>();
  }
  // `environment` is a property in TensorFlow, so it cannot be looked up as
  // an overriding method (PYBIND11_OVERRIDE would find its value, a str).
  std::string environment() const override {
    return FromPython<std::string>("_drover_environment",
                                   [this] { return ClusterResolver::environment(); });
  }
  // TensorFlow lets a subclass keep task_type/task_id/rpc_layer as plain
  // attributes or as its own properties; drover.ClusterResolver (Python)
  // reads whichever it has through these hooks, so C++ callers such as
  // UnionClusterResolver see them too.
  std::optional<std::string> task_type() const override {
    return FromPython<OptString>("_drover_task_type",
                                 [this] { return ClusterResolver::task_type(); });
  }
  std::optional<int> task_id() const override {
    return FromPython<OptInt>("_drover_task_id", [this] { return ClusterResolver::task_id(); });
  }
  std::optional<std::string> rpc_layer() const override {
    return FromPython<OptString>("_drover_rpc_layer",
                                 [this] { return ClusterResolver::rpc_layer(); });
  }

 private:
  template <typename T, typename Fallback>
  T FromPython(const char* hook, Fallback fallback) const {
    py::gil_scoped_acquire gil;
    py::function override = py::get_override(this, hook);
    if (!override) return fallback();
    return override().template cast<T>();
  }
};

// Slurm and MPI resolvers set CUDA_VISIBLE_DEVICES with setenv(3); Python's
// os.environ is a copy taken at start-up, so mirror the change into it as
// TensorFlow's resolvers (which write os.environ) would.
void MirrorCudaVisibleDevices() {
  py::object environ = py::module_::import("os").attr("environ");
  std::optional<std::string> value = ProcessEnvironment().Get("CUDA_VISIBLE_DEVICES");
  if (value) {
    environ[py::str("CUDA_VISIBLE_DEVICES")] = *value;
  } else if (environ.contains("CUDA_VISIBLE_DEVICES")) {
    environ.attr("pop")("CUDA_VISIBLE_DEVICES");
  }
}

std::map<std::string, int> JobsOrEmpty(const std::optional<std::map<std::string, int>>& jobs) {
  return jobs.value_or(std::map<std::string, int>{});
}

// The C++ resolver of `self`, or TypeError when its __init__ has not run:
// pybind11 would hand a member function lazily allocated, unconstructed
// memory, and the first virtual call would crash the interpreter.
// drover.ClusterResolver (Python) constructs the C++ part before a subclass's
// __init__ runs; this guards classes that derive from _drover's directly.
const ClusterResolver& Constructed(py::handle self) {
  if (!py::isinstance<ClusterResolver>(self)) {
    throw py::type_error("expected a ClusterResolver, got " +
                         py::str(self.get_type().attr("__name__")).cast<std::string>());
  }
  // One C++ base per resolver class, so the first value is the resolver.
  auto* inst = reinterpret_cast<py::detail::instance*>(self.ptr());
  py::detail::value_and_holder v_h =
      inst->get_value_and_holder(nullptr, /*throw_if_missing=*/false);
  if (!v_h || !v_h.holder_constructed()) {
    throw py::type_error(py::str(self.get_type().attr("__name__")).cast<std::string>() +
                         ": ClusterResolver.__init__() has not run yet; call "
                         "super().__init__() before using the resolver");
  }
  return self.cast<const ClusterResolver&>();
}
ClusterResolver& MutableConstructed(py::handle self) {
  return const_cast<ClusterResolver&>(Constructed(self));
}

void BindBase(py::module_& m) {
  py::class_<ClusterResolver, PyClusterResolver, std::shared_ptr<ClusterResolver>>(
      m, "ClusterResolver",
      "Abstract base of every resolver (tf.distribute.cluster_resolver.ClusterResolver).")
      .def(py::init<>())
      .def("cluster_spec", [](py::handle self) { return Unwrap(Constructed(self).cluster_spec()); })
      .def(
          "master",
          [](py::handle self, OptString task_type, OptInt task_id, OptString rpc_layer) {
            return Unwrap(Constructed(self).master(task_type, task_id, rpc_layer));
          },
          py::arg("task_type") = py::none(), py::arg("task_id") = py::none(),
          py::arg("rpc_layer") = py::none())
      .def(
          "num_accelerators",
          [](py::handle self, OptString task_type, OptInt task_id,
             const py::object& /*config_proto*/) {
            return Unwrap(Constructed(self).num_accelerators(task_type, task_id));
          },
          py::arg("task_type") = py::none(), py::arg("task_id") = py::none(),
          py::arg("config_proto") = py::none())
      .def_property_readonly("environment",
                             [](py::handle self) { return Constructed(self).environment(); })
      .def_property(
          "task_type", [](py::handle self) { return Constructed(self).task_type(); },
          [](py::handle self, OptString type) {
            MutableConstructed(self).set_task_type(std::move(type));
          })
      .def_property(
          "task_id", [](py::handle self) { return Constructed(self).task_id(); },
          [](py::handle self, OptInt id) { MutableConstructed(self).set_task_id(id); })
      .def_property(
          "rpc_layer", [](py::handle self) { return Constructed(self).rpc_layer(); },
          [](py::handle self, OptString layer) {
            MutableConstructed(self).set_rpc_layer(std::move(layer));
          });
}

void BindSimpleAndUnion(py::module_& m) {
  py::class_<SimpleClusterResolver, ClusterResolver, std::shared_ptr<SimpleClusterResolver>>(
      m, "SimpleClusterResolver", "A resolver over a ClusterSpec given by the caller.")
      .def(py::init([](ClusterSpec cluster_spec, std::string master, OptString task_type,
                       OptInt task_id, std::string environment,
                       std::optional<AcceleratorMap> num_accelerators, OptString rpc_layer) {
             SimpleClusterResolver::Options options{
                 std::move(master),      std::move(task_type),        task_id,
                 std::move(environment), std::move(num_accelerators), std::move(rpc_layer)};
             return std::make_shared<SimpleClusterResolver>(std::move(cluster_spec),
                                                            std::move(options));
           }),
           py::arg("cluster_spec"), py::arg("master") = "", py::arg("task_type") = py::none(),
           py::arg("task_id") = py::none(), py::arg("environment") = "",
           py::arg("num_accelerators") = py::none(), py::arg("rpc_layer") = py::none());

  py::class_<UnionClusterResolver, ClusterResolver, std::shared_ptr<UnionClusterResolver>>(
      m, "UnionClusterResolver", py::dynamic_attr(),
      "Merges the clusters of several resolvers (tf's UnionClusterResolver).")
      .def(py::init([](const py::args& args, const py::kwargs& kwargs) {
        UnionClusterResolver::Options options;
        py::dict rest = py::dict(kwargs);
        if (rest.contains("task_type"))
          options.task_type = rest.attr("pop")("task_type").cast<OptString>();
        if (rest.contains("task_id")) options.task_id = rest.attr("pop")("task_id").cast<OptInt>();
        if (rest.contains("rpc_layer"))
          options.rpc_layer = rest.attr("pop")("rpc_layer").cast<OptString>();
        if (py::len(rest) > 0) {
          throw py::value_error("Unexpected kwargs provided " + py::repr(rest).cast<std::string>());
        }
        std::vector<std::shared_ptr<ClusterResolver>> resolvers;
        for (py::handle arg : args) {
          if (!py::isinstance<ClusterResolver>(arg)) {
            throw py::type_error("All arguments must be a sub-class of `ClusterResolver.`");
          }
          resolvers.push_back(arg.cast<std::shared_ptr<ClusterResolver>>());
        }
        std::shared_ptr<UnionClusterResolver> resolver =
            Unwrap(UnionClusterResolver::Create(std::move(resolvers), std::move(options)));
        return resolver;
      }));
}

void BindTfConfig(py::module_& m) {
  py::class_<TFConfigClusterResolver, ClusterResolver, std::shared_ptr<TFConfigClusterResolver>>(
      m, "TFConfigClusterResolver", "Reads the TF_CONFIG environment variable on every call.")
      .def(py::init(
               [](OptString task_type, OptInt task_id, OptString rpc_layer, OptString environment) {
                 TFConfigClusterResolver::Options options;
                 options.task_type = std::move(task_type);
                 options.task_id = task_id;
                 options.rpc_layer = std::move(rpc_layer);
                 options.environment = std::move(environment);
                 return std::make_shared<TFConfigClusterResolver>(std::move(options),
                                                                  ProcessEnvironment());
               }),
           py::arg("task_type") = py::none(), py::arg("task_id") = py::none(),
           py::arg("rpc_layer") = py::none(), py::arg("environment") = py::none())
      // TensorFlow's properties raise ValueError for a TF_CONFIG that is not
      // JSON, or whose entry is malformed, rather than returning None.
      .def_property(
          "task_type", [](const TFConfigClusterResolver& r) { return Unwrap(r.ReadTaskType()); },
          [](TFConfigClusterResolver& r, OptString type) { r.set_task_type(std::move(type)); })
      .def_property(
          "task_id", [](const TFConfigClusterResolver& r) { return Unwrap(r.ReadTaskId()); },
          [](TFConfigClusterResolver& r, OptInt id) { r.set_task_id(id); })
      .def_property(
          "rpc_layer", [](const TFConfigClusterResolver& r) { return Unwrap(r.ReadRpcLayer()); },
          [](TFConfigClusterResolver& r, OptString layer) { r.set_rpc_layer(std::move(layer)); });
}

template <typename Resolver>
void BindGpuResolverClusterSpec(
    py::class_<Resolver, ClusterResolver, std::shared_ptr<Resolver>>& cls) {
  cls.def("cluster_spec", [](const Resolver& r) {
    ClusterSpec spec = Unwrap(r.cluster_spec());
    if (r.options().auto_set_gpu) MirrorCudaVisibleDevices();
    return spec;
  });
  cls.def("get_task_info", &Resolver::get_task_info);
  cls.def_property_readonly("gpus_per_node", &Resolver::gpus_per_node);
  cls.def_property_readonly("gpus_per_task", &Resolver::gpus_per_task);
}

void BindSlurmAndMpi(py::module_& m) {
  py::class_<SlurmClusterResolver, ClusterResolver, std::shared_ptr<SlurmClusterResolver>> slurm(
      m, "SlurmClusterResolver",
      "Resolves the cluster of a Slurm job step from SLURM_* variables.");
  slurm.def(
      py::init([](std::optional<std::map<std::string, int>> jobs, int port_base,
                  OptInt gpus_per_node, OptInt gpus_per_task, const py::object& tasks_per_node,
                  bool auto_set_gpu, std::string rpc_layer) {
        SlurmClusterResolver::Options options;
        options.jobs = JobsOrEmpty(jobs);
        options.port_base = port_base;
        options.gpus_per_node = gpus_per_node;
        options.gpus_per_task = gpus_per_task;
        // TensorFlow takes an int (the same count on every node) or a {host: count} dict.
        if (py::isinstance<py::dict>(tasks_per_node)) {
          for (auto [host, count] : tasks_per_node.cast<py::dict>()) {
            options.tasks_per_host.emplace_back(host.cast<std::string>(), count.cast<int>());
          }
        } else if (!tasks_per_node.is_none()) {
          options.tasks_per_node = tasks_per_node.cast<int>();
        }
        options.auto_set_gpu = auto_set_gpu;
        options.rpc_layer = std::move(rpc_layer);
        return std::shared_ptr<SlurmClusterResolver>(
            Unwrap(SlurmClusterResolver::Create(std::move(options), ProcessEnvironment())));
      }),
      py::arg("jobs") = py::none(), py::arg("port_base") = 8888,
      py::arg("gpus_per_node") = py::none(), py::arg("gpus_per_task") = py::none(),
      py::arg("tasks_per_node") = py::none(), py::arg("auto_set_gpu") = true,
      py::arg("rpc_layer") = "grpc");
  BindGpuResolverClusterSpec(slurm);

  py::class_<MPIClusterResolver, ClusterResolver, std::shared_ptr<MPIClusterResolver>> mpi(
      m, "MPIClusterResolver",
      "Resolves the cluster of an mpirun/mpiexec job (Open MPI OMPI_COMM_WORLD_* or PMI_*).");
  mpi.def(py::init([](std::optional<std::map<std::string, int>> jobs, int port_base,
                      OptInt gpus_per_node, OptInt gpus_per_task, bool auto_set_gpu,
                      std::string rpc_layer) {
            MPIClusterResolver::Options options;
            options.jobs = JobsOrEmpty(jobs);
            options.port_base = port_base;
            options.gpus_per_node = gpus_per_node;
            options.gpus_per_task = gpus_per_task;
            options.auto_set_gpu = auto_set_gpu;
            options.rpc_layer = std::move(rpc_layer);
            return std::shared_ptr<MPIClusterResolver>(Unwrap(
                MPIClusterResolver::CreateWithMpi(std::move(options), ProcessEnvironment())));
          }),
          py::arg("jobs") = py::none(), py::arg("port_base") = 8888,
          py::arg("gpus_per_node") = py::none(), py::arg("gpus_per_task") = py::none(),
          py::arg("auto_set_gpu") = true, py::arg("rpc_layer") = "grpc");
  BindGpuResolverClusterSpec(mpi);
  mpi.def_property_readonly("host_names", &MPIClusterResolver::host_names);
}

void BindTorchAndKubernetes(py::module_& m) {
  py::class_<TorchEnvClusterResolver, ClusterResolver, std::shared_ptr<TorchEnvClusterResolver>>(
      m, "TorchEnvClusterResolver",
      "Resolves from torchrun's RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT.")
      .def(py::init([](std::string job_name, int port_base, std::string rpc_layer) {
             TorchEnvClusterResolver::Options options{std::move(job_name), port_base,
                                                      std::move(rpc_layer)};
             return std::shared_ptr<TorchEnvClusterResolver>(
                 Unwrap(TorchEnvClusterResolver::Create(std::move(options), ProcessEnvironment())));
           }),
           py::arg("job_name") = "worker", py::arg("port_base") = 8888,
           py::arg("rpc_layer") = "grpc")
      .def_property_readonly(
          "world_size", [](const TorchEnvClusterResolver& r) { return Unwrap(r.world_size()); })
      .def_property_readonly(
          "local_rank", [](const TorchEnvClusterResolver& r) { return Unwrap(r.local_rank()); })
      .def_property_readonly("local_world_size", [](const TorchEnvClusterResolver& r) {
        return Unwrap(r.local_world_size());
      });

  py::class_<KubernetesClusterResolver, ClusterResolver,
             std::shared_ptr<KubernetesClusterResolver>>(
      m, "KubernetesClusterResolver",
      "Resolves the pods of a Kubernetes Indexed Job behind a headless Service (no API server).")
      .def(py::init([](std::optional<std::map<std::string, int>> jobs, OptInt num_tasks,
                       std::string job_name, std::string service, std::string kube_namespace,
                       std::string cluster_domain, int port, std::string rpc_layer) {
             KubernetesClusterResolver::Options options;
             options.jobs = JobsOrEmpty(jobs);
             options.num_tasks = num_tasks;
             options.job_name = std::move(job_name);
             options.service = std::move(service);
             options.kube_namespace = std::move(kube_namespace);
             options.cluster_domain = std::move(cluster_domain);
             options.port = port;
             options.rpc_layer = std::move(rpc_layer);
             return std::shared_ptr<KubernetesClusterResolver>(Unwrap(
                 KubernetesClusterResolver::Create(std::move(options), ProcessEnvironment())));
           }),
           py::arg("jobs") = py::none(), py::arg("num_tasks") = py::none(),
           py::arg("job_name") = "", py::arg("service") = "", py::arg("namespace") = "",
           py::arg("cluster_domain") = "cluster.local", py::arg("port") = 8470,
           py::arg("rpc_layer") = "grpc")
      .def("pod_dns_name", [](const KubernetesClusterResolver& r, int index) {
        return Unwrap(r.pod_dns_name(index));
      });
}

void BindResourceSpec(py::module_& m) {
  py::class_<ResourceSpecClusterResolver, ClusterResolver,
             std::shared_ptr<ResourceSpecClusterResolver>>(
      m, "ResourceSpecClusterResolver",
      "A cluster of hosts from an AutoDist-style resource spec YAML (AutoDist's Cluster).")
      .def(
          py::init([](const std::string& resource_spec_file, int port_base, std::string rpc_layer) {
            ResourceSpecClusterResolver::Options options{port_base, std::move(rpc_layer)};
            return std::shared_ptr<ResourceSpecClusterResolver>(
                Unwrap(ResourceSpecClusterResolver::Create(resource_spec_file, std::move(options),
                                                           ProcessEnvironment())));
          }),
          py::arg("resource_spec_file"), py::arg("port_base") = 15000,
          py::arg("rpc_layer") = "grpc")
      .def("is_chief", &ResourceSpecClusterResolver::is_chief, py::arg("address") = py::none())
      .def(
          "get_address_from_task",
          [](const ResourceSpecClusterResolver& r, const std::string& job, int index) {
            return Unwrap(r.get_address_from_task(job, index));
          },
          py::arg("job_name"), py::arg("task_index"))
      .def("get_local_address", &ResourceSpecClusterResolver::get_local_address)
      .def("get_local_worker_task_index",
           [](const ResourceSpecClusterResolver& r) {
             return Unwrap(r.get_local_worker_task_index());
           })
      .def("get_local_session_target", [](const ResourceSpecClusterResolver& r) {
        return Unwrap(r.get_local_session_target());
      });
}

// The parsed spec as plain Python values, for drover.ResourceSpec (which
// adds AutoDist's device rules in Python): the C++ parser stays the one
// reader of the format (docs/ssh.md) and its errors name file and line.
py::dict ResourceSpecToPython(const ResourceSpec& spec) {
  py::list nodes;
  for (const ResourceNode& node : spec.nodes) {
    py::dict item;
    item["address"] = node.address;
    item["gpus"] = node.gpus;
    item["cpus"] = node.cpus;
    item["chief"] = node.chief;
    item["ssh_config"] =
        node.ssh_config.empty() ? py::object(py::none()) : py::str(node.ssh_config);
    item["network_bandwidth"] = node.network_bandwidth;
    nodes.append(item);
  }
  py::dict ssh;
  for (const auto& [name, config] : spec.ssh_configs) {
    py::dict item;
    item["username"] = config.username;
    item["port"] = config.port;
    item["python_venv"] = config.python_venv;
    item["key_file"] = config.key_file;
    item["env"] = config.env;
    ssh[py::str(name)] = item;
  }
  py::dict result;
  result["nodes"] = nodes;
  result["chief"] = spec.chief;
  result["ssh"] = ssh;
  return result;
}

void BindFunctions(py::module_& m) {
  m.def(
      "_load_resource_spec",
      [](const std::string& path) { return ResourceSpecToPython(Unwrap(LoadResourceSpec(path))); },
      py::arg("path"),
      "Reads an AutoDist resource spec: {'nodes': [...], 'chief': address, 'ssh': {...}}.");
  m.def(
      "expand_hostlist",
      [](const std::string& hostlist) { return Unwrap(ExpandHostlist(hostlist)); },
      py::arg("hostlist"), "Expands a Slurm hostlist: 'n[1-2,05]' -> ['n1', 'n2', 'n05'].");
  m.def(
      "expand_tasks_per_node",
      [](const std::string& tasks) { return Unwrap(ExpandTasksPerNode(tasks)); },
      py::arg("tasks_per_node"), "Expands SLURM_TASKS_PER_NODE: '2(x3),1' -> [2, 2, 2, 1].");
  m.def(
      "framework_environment",
      [](const ClusterSpec& cluster, const std::string& task_type, int task_index,
         OptString rpc_layer, OptInt master_port, std::optional<std::vector<std::string>> jobs) {
        FrameworkEnvOptions options;
        options.rpc_layer = std::move(rpc_layer);
        options.master_port = master_port;
        if (jobs) options.training_jobs = std::move(*jobs);
        return Unwrap(FrameworkEnvironment(cluster, task_type, task_index, options));
      },
      py::arg("cluster_spec"), py::arg("task_type"), py::arg("task_index"),
      py::arg("rpc_layer") = py::none(), py::arg("master_port") = py::none(),
      py::arg("training_jobs") = py::none(),
      "The variables TensorFlow (TF_CONFIG), PyTorch (MASTER_ADDR, RANK, ...), JAX and drover\n"
      "programs read, for one task of the cluster.");
  m.def(
      "make_tf_config",
      [](const ClusterSpec& cluster, const std::string& task_type, int task_index,
         OptString rpc_layer) {
        return Unwrap(MakeTfConfig(cluster, task_type, task_index, rpc_layer));
      },
      py::arg("cluster_spec"), py::arg("task_type"), py::arg("task_index"),
      py::arg("rpc_layer") = py::none());
  m.def(
      "resolve",
      [](const std::string& name) -> std::shared_ptr<ClusterResolver> {
        return std::shared_ptr<ClusterResolver>(
            Unwrap(MakeClusterResolver(name, ProcessEnvironment())).resolver);
      },
      py::arg("resolver") = "auto",
      "The resolver `drover resolve --resolver NAME` would use (auto, tfconfig, slurm, ...).");
}

}  // namespace

void RegisterResolvers(py::module_& m) {
  BindBase(m);
  BindSimpleAndUnion(m);
  BindTfConfig(m);
  BindSlurmAndMpi(m);
  BindTorchAndKubernetes(m);
  BindResourceSpec(m);
  BindFunctions(m);
}

}  // namespace drover::python
