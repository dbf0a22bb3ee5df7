"""`drover resolve` as a black box: flags in, JSON/exports/bytes out, exit codes."""
import json
import shlex
import subprocess

import pytest

TF_CONFIG = json.dumps({
    "cluster": {"chief": ["c0:2222"], "worker": ["w0:2222", "w1:2222"], "ps": ["p0:2222"]},
    "task": {"type": "worker", "index": 1},
})


def test_help_teaches_every_resolver_and_format(drover):
    out = drover("resolve", "--help")
    assert out.returncode == 0
    for word in ("tfconfig", "slurm", "mpi", "torch", "k8s", "resource-spec", "static",
                 "tf-config", "cluster-def", "env", "Exit codes"):
        assert word in out.stdout, word


def test_no_subcommand_is_bad_input(drover):
    out = drover()
    assert out.returncode == 2
    assert out.stderr


def test_auto_finds_tf_config(drover):
    out = drover("resolve", env={"TF_CONFIG": TF_CONFIG})
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["resolver"] == "tfconfig"
    assert result["cluster"] == {"chief": ["c0:2222"], "worker": ["w0:2222", "w1:2222"],
                                 "ps": ["p0:2222"]}
    assert result["task_type"] == "worker"
    assert result["task_id"] == 1
    assert result["master"] == "w1:2222"
    assert isinstance(result["num_accelerators"], dict)


def test_rpc_layer_flag_prefixes_master(drover):
    out = drover("resolve", "--rpc-layer", "grpc", env={"TF_CONFIG": TF_CONFIG})
    assert json.loads(out.stdout)["master"] == "grpc://w1:2222"


def test_tf_config_format_round_trips(drover):
    out = drover("resolve", "--format", "tf-config", env={"TF_CONFIG": TF_CONFIG})
    assert out.returncode == 0, out.stderr
    config = json.loads(out.stdout)
    assert config["task"] == {"type": "worker", "index": 1}
    assert config["environment"] == "cloud"
    again = drover("resolve", env={"TF_CONFIG": out.stdout})
    assert json.loads(again.stdout)["cluster"] == json.loads(TF_CONFIG)["cluster"]


def test_env_format_is_sourceable_shell(drover):
    out = drover("resolve", "--format", "env", env={"TF_CONFIG": TF_CONFIG})
    assert out.returncode == 0, out.stderr
    script = out.stdout + 'printf "%s|%s|%s|%s" "$RANK" "$WORLD_SIZE" "$MASTER_ADDR" "$TF_CONFIG"'
    shown = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True)
    rank, world, master, tf_config = shown.stdout.split("|", 3)
    assert (rank, world, master) == ("2", "3", "c0")
    assert json.loads(tf_config)["task"]["index"] == 1


def test_cluster_def_format_writes_tensorflow_bytes(drover):
    out = drover("resolve", "--format", "cluster-def", env={"TF_CONFIG": TF_CONFIG},
                 binary_output=True)
    assert out.returncode == 0, out.stderr
    # ClusterDef.job (field 1, length-delimited) entries come sorted by name: chief first.
    assert out.stdout[0] == 0x0A
    assert b"chief" in out.stdout and out.stdout.index(b"chief") < out.stdout.index(b"worker")


def test_static_resolver_with_task_flags(drover):
    cluster = json.dumps({"worker": ["a:1", "b:1"]})
    out = drover("resolve", "--resolver", "static=" + cluster, "--task-type", "worker",
                 "--task-index", "0", "--format", "env")
    assert out.returncode == 0, out.stderr
    assert "export RANK='0'" in out.stdout
    assert "export MASTER_ADDR='a'" in out.stdout


def test_torch_resolver(drover):
    env = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2",
           "MASTER_ADDR": "10.1.1.1", "MASTER_PORT": "29500"}
    out = drover("resolve", env=env)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["resolver"] == "torch"
    assert result["task_id"] == 1
    assert result["cluster"]["worker"][0] == "10.1.1.1:29500"  # master and self: dense


def test_slurm_resolver(drover):
    env = {"SLURM_PROCID": "3", "SLURM_STEP_NUM_TASKS": "4", "SLURM_STEP_NODELIST": "n[9-10]",
           "SLURM_STEP_TASKS_PER_NODE": "2(x2)", "SLURM_NTASKS": "4",
           "SLURM_JOB_NODELIST": "n[9-10]", "SLURM_TASKS_PER_NODE": "2(x2)"}
    out = drover("resolve", "--resolver", "slurm", env=env)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    # n9 before n10: hosts keep Slurm's order, not string order.
    assert result["cluster"]["worker"] == ["n9:8888", "n9:8889", "n10:8888", "n10:8889"]
    assert result["task_id"] == 3


@pytest.mark.parametrize("args, env, needle", [
    (("--resolver", "nonsense"), {}, "nonsense"),
    (("--resolver", "static={bad json"), {}, "static"),
    ((), {"TF_CONFIG": "{not json"}, "TF_CONFIG"),
    (("--resolver", "slurm"), {"SLURM_PROCID": "x"}, "SLURM_PROCID"),
    (("--resolver", "torch"), {"RANK": "5", "WORLD_SIZE": "2", "MASTER_ADDR": "a",
                               "MASTER_PORT": "1"}, "RANK"),
    (("--resolver", "resource-spec=/nonexistent/spec.yml"), {}, "/nonexistent/spec.yml"),
    ((), {}, "TF_CONFIG"),  # auto with nothing to find lists what it checked
    (("--format", "yaml"), {}, "format"),
])
def test_bad_input_is_one_line_and_exit_2(drover, args, env, needle):
    out = drover("resolve", *args, env=env)
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert out.stdout == ""
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert needle in lines[0]


def test_formats_needing_a_task_say_so(drover):
    cluster = json.dumps({"worker": ["a:1"]})
    out = drover("resolve", "--resolver", "static=" + cluster, "--format", "env")
    assert out.returncode == 2
    assert "--task-type" in out.stderr


def test_bad_resource_spec_names_the_file(drover, tmp_path):
    spec = tmp_path / "spec.yml"
    spec.write_text("nodes: [{address: 1.2.3.4, chief: true}, {address: 1.2.3.4}]\n")
    out = drover("resolve", "--resolver", "resource-spec=" + str(spec))
    assert out.returncode == 2
    assert str(spec) in out.stderr


def test_resource_spec_resolver(drover, tmp_path):
    spec = tmp_path / "spec.yml"
    spec.write_text("nodes:\n  - address: 10.0.0.2\n    gpus: [0, 1]\n    ssh_config: c\n"
                    "  - address: 10.0.0.1\n    chief: true\n"
                    "ssh:\n  c:\n    username: root\n")
    out = drover("resolve", "--resolver", "resource-spec=" + str(spec),
                 env={"DROVER_WORKER": "10.0.0.2"})
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout)
    assert result["cluster"]["worker"][0].startswith("10.0.0.1:")
    assert result["task_id"] == 1
