"""The resolvers from Python, with TensorFlow's constructor arguments and errors."""
import json
import sys
import os

import pytest

import drover

CLUSTER_VARS = ("TF_CONFIG", "SLURM_", "OMPI_", "PMI_", "JOB_COMPLETION_INDEX", "DROVER_",
                "AUTODIST_", "CUDA_VISIBLE_DEVICES")
TORCH_VARS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK",
              "MASTER_ADDR", "MASTER_PORT")


@pytest.fixture(autouse=True)
def clean_environment(monkeypatch):
    for name in list(os.environ):
        if name.startswith(CLUSTER_VARS) or name in TORCH_VARS:
            monkeypatch.delenv(name)


def set_tf_config(monkeypatch, config):
    monkeypatch.setenv("TF_CONFIG", json.dumps(config))


def test_simple_resolver_like_tensorflow():
    spec = drover.ClusterSpec({"worker": ["w0:1", "w1:1"]})
    r = drover.SimpleClusterResolver(spec, master="m:1", task_type="worker", task_id=1,
                                     num_accelerators={"GPU": 2}, rpc_layer="grpc")
    assert r.cluster_spec() == spec
    assert r.master() == "grpc://m:1"
    assert r.master("worker", 0) == "grpc://w0:1"
    assert r.master("worker", 0, rpc_layer="http") == "http://w0:1"
    assert r.num_accelerators() == {"GPU": 2}
    assert (r.task_type, r.task_id, r.rpc_layer) == ("worker", 1, "grpc")
    r.task_type = "ps"
    assert r.task_type == "ps"


def test_tf_config_resolver_rereads_the_variable(monkeypatch):
    set_tf_config(monkeypatch, {"cluster": {"worker": ["a:1", "b:1"]},
                                "task": {"type": "worker", "index": 1}, "rpc_layer": "grpc"})
    r = drover.TFConfigClusterResolver()
    assert r.cluster_spec().as_dict() == {"worker": ["a:1", "b:1"]}
    assert (r.task_type, r.task_id) == ("worker", 1)
    assert r.master() == "grpc://b:1"
    set_tf_config(monkeypatch, {"cluster": {"worker": ["c:1", "d:1"]},
                                "task": {"type": "worker", "index": 0}})
    assert r.cluster_spec().as_dict() == {"worker": ["c:1", "d:1"]}
    assert r.master() == "c:1"
    set_tf_config(monkeypatch, {"cluster": {"worker": ["c:1"]},
                                "task": {"type": "worker", "index": 0}})
    assert r.master() == ""  # TensorFlow: a one-task cluster has no remote master


def test_tf_config_overrides(monkeypatch):
    set_tf_config(monkeypatch, {"cluster": {"ps": ["p:1"], "worker": ["a:1"]},
                                "task": {"type": "worker", "index": 0}})
    r = drover.TFConfigClusterResolver(task_type="ps", task_id=0, rpc_layer="grpc")
    assert r.master() == "grpc://p:1"


def test_tf_config_malformed_is_value_error(monkeypatch):
    monkeypatch.setenv("TF_CONFIG", "{not json")
    with pytest.raises(ValueError, match="TF_CONFIG"):
        drover.TFConfigClusterResolver().cluster_spec()


def test_issue_15_tf_config_task_properties_raise_value_error_as_tensorflow(monkeypatch):
    monkeypatch.setenv("TF_CONFIG", "{not json")
    r = drover.TFConfigClusterResolver()
    for name in ("task_type", "task_id", "rpc_layer"):
        with pytest.raises(ValueError, match="TF_CONFIG"):
            getattr(r, name)
    # An override is returned without reading TF_CONFIG, as TensorFlow does.
    fixed = drover.TFConfigClusterResolver(task_type="ps", task_id=1, rpc_layer="grpc")
    assert (fixed.task_type, fixed.task_id, fixed.rpc_layer) == ("ps", 1, "grpc")
    for index in ("one", 1.5, [1]):
        set_tf_config(monkeypatch, {"cluster": {"worker": ["a:1"]},
                                    "task": {"type": "worker", "index": index}})
        with pytest.raises(ValueError, match="task.index"):
            r.task_id
        assert r.task_type == "worker"  # TensorFlow reads task.type alone for it
    # Each property reads its own entry: a broken cluster does not hide the task.
    set_tf_config(monkeypatch, {"cluster": {"worker": 5}, "task": {"type": "worker", "index": "2"}})
    assert (r.task_type, r.task_id) == ("worker", 2)
    monkeypatch.setenv("TF_CONFIG", " ")
    assert (r.task_type, r.task_id, r.rpc_layer) == (None, None, None)


def test_union_merges_and_detects_duplicates():
    a = drover.SimpleClusterResolver(drover.ClusterSpec({"worker": ["a:1"]}), task_type="worker",
                                     task_id=0)
    b = drover.SimpleClusterResolver(drover.ClusterSpec({"worker": ["b:1"], "ps": ["p:1"]}))
    union = drover.UnionClusterResolver(a, b)
    assert union.cluster_spec().as_dict() == {"worker": ["a:1", "b:1"], "ps": ["p:1"]}
    assert union.task_type == "worker"
    sparse = drover.SimpleClusterResolver(drover.ClusterSpec({"worker": {0: "x:1", 2: "z:1"}}))
    with pytest.raises(KeyError):
        drover.UnionClusterResolver(a, sparse).cluster_spec()
    with pytest.raises(ValueError):
        drover.UnionClusterResolver()
    with pytest.raises(TypeError):
        drover.UnionClusterResolver(a, "not a resolver")
    with pytest.raises(ValueError, match="Unexpected kwargs"):
        drover.UnionClusterResolver(a, colour="blue")


def test_python_subclass_joins_a_union():
    class Fixed(drover.ClusterResolver):
        def cluster_spec(self):
            return drover.ClusterSpec({"evaluator": ["e:1"]})

        def master(self, task_type=None, task_id=None, rpc_layer=None):
            return "e:1"

    other = drover.SimpleClusterResolver(drover.ClusterSpec({"worker": ["w:1"]}))
    union = drover.UnionClusterResolver(Fixed(), other)
    assert union.cluster_spec().as_dict() == {"evaluator": ["e:1"], "worker": ["w:1"]}
    assert union.master() == "e:1"


def test_slurm_resolver_and_parsers(monkeypatch):
    assert drover.expand_hostlist("n[1-3,05-07],m[01-02]") == [
        "n1", "n2", "n3", "n05", "n06", "n07", "m01", "m02"]
    assert drover.expand_tasks_per_node("2(x3),1") == [2, 2, 2, 1]
    with pytest.raises(ValueError):
        drover.expand_hostlist("n[1-")
    for name, value in {"SLURM_PROCID": "2", "SLURM_NTASKS": "4", "SLURM_STEP_NUM_TASKS": "4",
                        "SLURM_STEP_NODELIST": "t[02-03]", "SLURM_JOB_NODELIST": "t[02-03]",
                        "SLURM_STEP_TASKS_PER_NODE": "2(x2)",
                        "SLURM_TASKS_PER_NODE": "2(x2)"}.items():
        monkeypatch.setenv(name, value)
    r = drover.SlurmClusterResolver(jobs={"ps": 1, "worker": 3}, port_base=9000,
                                    gpus_per_node=2, gpus_per_task=1)
    spec = r.cluster_spec()
    assert spec.as_dict() == {"ps": ["t02:9000"], "worker": ["t02:9001", "t03:9000", "t03:9001"]}
    assert (r.task_type, r.task_id) == ("worker", 1)
    assert r.master() == "grpc://t03:9000"
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "0"  # mirrored into os.environ
    assert r.num_accelerators() == {"GPU": 1}


def test_issue_15_slurm_missing_or_inconsistent_variables_are_runtime_error(monkeypatch):
    # TensorFlow: RuntimeError("SLURM_PROCID not found in environment. Not running inside a
    # SLURM step?"), RuntimeError("Requested 3 tasks but only 2 were assigned."); the
    # messages are drover's.
    with pytest.raises(RuntimeError, match="SLURM_PROCID is not set"):
        drover.SlurmClusterResolver()
    monkeypatch.setenv("SLURM_PROCID", "0")
    with pytest.raises(RuntimeError, match="SLURM_STEP_NODELIST"):
        drover.SlurmClusterResolver()
    monkeypatch.setenv("SLURM_STEP_NODELIST", "a,b")
    with pytest.raises(RuntimeError, match="SLURM_STEP_TASKS_PER_NODE is not set"):
        drover.SlurmClusterResolver()
    monkeypatch.setenv("SLURM_STEP_TASKS_PER_NODE", "1(x3)")
    with pytest.raises(RuntimeError, match="names 2 nodes but"):
        drover.SlurmClusterResolver()
    monkeypatch.setenv("SLURM_STEP_TASKS_PER_NODE", "1(x2)")
    monkeypatch.setenv("SLURM_STEP_NUM_TASKS", "2")
    with pytest.raises(RuntimeError, match="ask for 3 tasks but"):
        drover.SlurmClusterResolver(jobs={"worker": 3}, gpus_per_node=0)
    with pytest.raises(RuntimeError, match="more GPUs per node than available"):
        drover.SlurmClusterResolver(gpus_per_node=1, gpus_per_task=2)
    monkeypatch.setenv("SLURM_PROCID", "5")
    with pytest.raises(RuntimeError, match="SLURM_PROCID=5 must be < 2"):
        drover.SlurmClusterResolver(gpus_per_node=0)
    # Arguments that cannot be right stay ValueError.
    monkeypatch.setenv("SLURM_PROCID", "0")
    with pytest.raises(ValueError, match="must be >= 0"):
        drover.SlurmClusterResolver(jobs={"worker": -1}, gpus_per_node=0)
    assert drover.SlurmClusterResolver(gpus_per_node=0).cluster_spec().as_dict() == {
        "worker": ["a:8888", "b:8888"]}


def test_slurm_garbled_variable_is_value_error(monkeypatch):
    monkeypatch.setenv("SLURM_PROCID", "zero")
    with pytest.raises(ValueError, match="SLURM_PROCID"):
        drover.SlurmClusterResolver().cluster_spec()


def test_torch_resolver(monkeypatch):
    for name, value in {"RANK": "2", "WORLD_SIZE": "4", "LOCAL_RANK": "0",
                        "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "10.0.0.1",
                        "MASTER_PORT": "29500"}.items():
        monkeypatch.setenv(name, value)
    r = drover.TorchEnvClusterResolver()
    assert (r.task_type, r.task_id, r.world_size, r.local_rank) == ("worker", 2, 4, 0)
    assert r.cluster_spec().task_address("worker", 0) == "10.0.0.1:29500"


def test_kubernetes_resolver(monkeypatch):
    monkeypatch.setenv("JOB_COMPLETION_INDEX", "1")
    monkeypatch.setenv("HOSTNAME", "train-1")
    r = drover.KubernetesClusterResolver(jobs={"chief": 1, "worker": 2}, service="svc",
                                         namespace="ml")
    spec = r.cluster_spec()
    assert spec.task_address("chief", 0) == "train-0.svc.ml.svc.cluster.local:8470"
    assert (r.task_type, r.task_id) == ("worker", 0)


def test_resource_spec_resolver(tmp_path, monkeypatch):
    path = tmp_path / "spec.yml"
    path.write_text("nodes:\n"
                    "  - address: 10.0.0.11\n    gpus: [0, 1]\n    ssh_config: c\n"
                    "  - address: 10.0.0.1\n    chief: true\n"
                    "ssh:\n  c:\n    username: root\n    port: 22\n")
    r = drover.ResourceSpecClusterResolver(str(path))
    assert r.is_chief()
    assert r.get_local_address() == "10.0.0.1"
    assert r.get_local_worker_task_index() == 0
    assert r.get_local_session_target() == "grpc://localhost:15000"
    monkeypatch.setenv("DROVER_WORKER", "10.0.0.11")
    assert not r.is_chief()
    assert r.get_local_worker_task_index() == 1  # exact match, not AutoDist's substring
    assert r.get_address_from_task("worker", 1) == "10.0.0.11"
    assert r.num_accelerators() == {"GPU": 2}


def test_resource_spec_errors_name_the_file(tmp_path):
    path = tmp_path / "bad.yml"
    path.write_text("nodes: []\n")
    with pytest.raises(ValueError, match="bad.yml"):
        drover.ResourceSpecClusterResolver(str(path))


def test_resolve_auto(monkeypatch):
    with pytest.raises(ValueError, match="TF_CONFIG"):
        drover.resolve()
    set_tf_config(monkeypatch, {"cluster": {"worker": ["a:1"]},
                                "task": {"type": "worker", "index": 0}})
    assert isinstance(drover.resolve(), drover.TFConfigClusterResolver)


# --- issue 22: resolvers written in Python behave as TensorFlow's --------------

# Every order of setting task_type / task_id / rpc_layer, reading them and
# calling inherited methods around super().__init__() (or never calling it),
# run in a child interpreter so that a crash shows as its exit status.
_ORDERS_SCRIPT = r'''
import itertools, sys
import drover

STEPS = {
    "type": "self.task_type = 'worker'",
    "id": "self.task_id = 1",
    "rpc": "self.rpc_layer = 'grpc'",
    "read": "assert self.task_type in (None, 'worker')",
    "env": "assert self.environment == ''",
    "acc": "self.num_accelerators()",
    "init": "super().__init__()",
}
other = drover.SimpleClusterResolver(drover.ClusterSpec({"ps": ["p:1"]}))
count = 0
for n in range(len(STEPS) + 1):
    for order in itertools.permutations(STEPS, n):
        body = "\n".join("        " + STEPS[step] for step in order) or "        pass"
        source = ("class R(drover.ClusterResolver):\n"
                  "    def __init__(self):\n" + body + "\n"
                  "    def cluster_spec(self):\n"
                  "        return drover.ClusterSpec({'worker': ['w:1', 'w:2']})\n"
                  "    def master(self, task_type=None, task_id=None, rpc_layer=None):\n"
                  "        return ''\n")
        print("order:", order, flush=True)
        scope = {"drover": drover}
        exec(source, scope)
        r = scope["R"]()
        expect_type = "worker" if "type" in order else None
        expect_id = 1 if "id" in order else None
        assert r.task_type == expect_type and r.task_id == expect_id, order
        assert r.rpc_layer == ("grpc" if "rpc" in order else None), order
        union = drover.UnionClusterResolver(r, other)
        assert union.task_type == expect_type and union.task_id == expect_id, order
        assert union.cluster_spec().as_dict() == {"worker": ["w:1", "w:2"], "ps": ["p:1"]}
        r.task_type, r.task_id = "ps", 0
        assert (union.task_type, union.task_id) == ("ps", 0), order
        count += 1
# A class deriving from the C++ base directly (bypassing drover.ClusterResolver)
# must raise, not crash, when it is touched before its __init__.
class Raw(drover._drover.ClusterResolver):
    def __init__(self):
        try:
            self.task_type = "worker"
        except Exception as error:
            print("raw refused:", type(error).__name__, flush=True)
        try:
            self.environment
        except Exception as error:
            print("raw refused:", type(error).__name__, flush=True)
        super().__init__()
    def cluster_spec(self):
        return drover.ClusterSpec({"worker": ["w:1"]})
    def master(self, task_type=None, task_id=None, rpc_layer=None):
        return ""
raw = Raw()
raw.task_type = "worker"
assert raw.task_type == "worker"
print("orders:", count)
'''


def test_issue_22_any_order_of_attributes_and_super_init_does_not_crash(tmp_path):
    import math
    import subprocess
    script = tmp_path / "orders.py"
    script.write_text(_ORDERS_SCRIPT)
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                            timeout=600, env=dict(os.environ))
    last = result.stdout.strip().splitlines()[-3:]
    assert result.returncode == 0, "exit %d after %s\n%s" % (result.returncode, last,
                                                            result.stderr[-3000:])
    expected = sum(math.perm(7, n) for n in range(8))
    assert "orders: %d" % expected in result.stdout
    assert result.stdout.count("raw refused:") == 2


def test_issue_22_union_sees_python_properties():
    class Props(drover.ClusterResolver):
        @property
        def task_type(self):
            return "evaluator"

        @property
        def task_id(self):
            return 0

        @property
        def rpc_layer(self):
            return "grpc+verbs"

        def cluster_spec(self):
            return drover.ClusterSpec({"evaluator": ["e:1"]})

        def master(self, task_type=None, task_id=None, rpc_layer=None):
            return "e:1"

    other = drover.SimpleClusterResolver(drover.ClusterSpec({"worker": ["w:1"]}))
    union = drover.UnionClusterResolver(Props(), other)
    assert (union.task_type, union.task_id, union.rpc_layer) == ("evaluator", 0, "grpc+verbs")
    # A task set on the union still wins, as in TensorFlow.
    union = drover.UnionClusterResolver(Props(), other, task_type="worker", task_id=0)
    assert (union.task_type, union.task_id) == ("worker", 0)


def test_issue_22_cluster_resolver_is_abstract():
    with pytest.raises(TypeError, match="abstract"):
        drover.ClusterResolver()

    class NoMaster(drover.ClusterResolver):
        def cluster_spec(self):
            return drover.ClusterSpec({})

    with pytest.raises(TypeError, match="master"):
        NoMaster()
    simple = drover.SimpleClusterResolver(drover.ClusterSpec({"worker": ["w:1"]}))
    assert isinstance(simple, drover.ClusterResolver)
    assert isinstance(drover.UnionClusterResolver(simple), drover.ClusterResolver)
    assert issubclass(drover.TFConfigClusterResolver, drover.ClusterResolver)
