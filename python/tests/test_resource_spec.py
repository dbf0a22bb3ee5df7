"""drover.ResourceSpec and drover.SSHCluster as AutoDist's ResourceSpec and
Cluster (issue 22), without ssh hosts: what needs real sshd hosts is in
tests/ssh/test_ssh_cluster.py.

test_bandwidth_default and test_bandwidth_fix are AutoDist's
tests/test_resource_spec.py with the import changed; its resource spec files
(r0..r9) are replaced by the specs below, which cover the same shapes (one
node with GPUs, one with CPUs only, several nodes with one chief and ssh
groups).
"""

import importlib.util
import os
import subprocess
import sys
import textwrap

import pytest

import drover
from drover import ResourceSpec

SPECS = {
    "one_node_gpus": """
        nodes:
          - address: localhost
            gpus: [0, 1]
        """,
    "one_node_cpu": """
        nodes:
          - address: localhost
            cpus: [0]
        """,
    "one_node_cpus_and_gpus": """
        nodes:
          - address: 127.0.0.1
            cpus: [0, 1, 2]
            gpus: [0]
        """,
    "two_nodes_one_gpu": """
        nodes:
          - address: 10.20.41.57
            gpus: [0]
            chief: true
            ssh_config: conf
          - address: 10.20.41.146
            gpus: [0]
            ssh_config: conf
        ssh:
          conf:
            username: 'root'
            key_file: '/root/.ssh/id_rsa'
            port: 12345
        """,
    "two_nodes_cpus": """
        nodes:
          - address: 10.20.41.57
            cpus: [0, 1]
            chief: true
          - address: 10.20.41.146
            cpus: [0, 1, 2, 3]
            ssh_config: conf
        ssh:
          conf:
            username: 'root'
            key_file: '/root/.ssh/id_rsa'
        """,
}


@pytest.fixture(params=sorted(SPECS))
def resource_spec_path(request, tmp_path):
    path = tmp_path / ("%s.yml" % request.param)
    path.write_text(textwrap.dedent(SPECS[request.param]))
    return str(path)


def write(tmp_path, text, name="resource_spec.yml"):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


# Ported from AutoDist's tests/test_resource_spec.py (the import changed).
def test_bandwidth_default(resource_spec_path):
    r = ResourceSpec(resource_file=resource_spec_path)
    assert r.num_cpus >= 0
    for k in r.node_cpu_devices:
        # by default it is set as 1
        assert r.network_bandwidth[k] == 1


@pytest.fixture
def tmp_resource_spec_with_bandwidth(tmp_path):
    p = tmp_path / "resource_spec.yml"
    p.write_text(textwrap.dedent(
        """
        nodes:
          - address: 1.1.1.1
            cpus: [0]
            chief: true
            network_bandwidth: 123
            ssh_config: conf
          - address: 2.2.2.2
            cpus: [0]
            network_bandwidth: 456
            ssh_config: conf
        ssh:
          conf:
            username: 'root'
            key_file: '/root/.ssh/id_rsa'
            port: 12345
        """
    ))
    return p


def test_bandwidth_fix(tmp_resource_spec_with_bandwidth):
    r = ResourceSpec(resource_file=tmp_resource_spec_with_bandwidth)
    assert r.network_bandwidth['1.1.1.1'] == 123
    assert r.network_bandwidth['2.2.2.2'] == 456


# AutoDist's documented rules ----------------------------------------------------


def test_devices_follow_autodist_rules(tmp_path):
    r = ResourceSpec(write(tmp_path, SPECS["two_nodes_cpus"]))
    assert r.chief == "10.20.41.57"
    assert r.nodes == {"10.20.41.57", "10.20.41.146"}
    # No GPUs listed: every CPU counts; CPU:0 always.
    assert r.node_cpu_devices == {"10.20.41.57": ["10.20.41.57:CPU:0", "10.20.41.57:CPU:1"],
                                  "10.20.41.146": ["10.20.41.146:CPU:0", "10.20.41.146:CPU:1",
                                                   "10.20.41.146:CPU:2", "10.20.41.146:CPU:3"]}
    assert r.num_cpus == 6 and r.num_gpus == 0 and r.node_gpu_devices == {}
    assert dict(r.gpu_devices) == {}

    r = ResourceSpec(write(tmp_path, SPECS["one_node_cpus_and_gpus"], "b.yml"))
    # GPUs listed: only CPU:0 of the node, whatever `cpus` says.
    assert [name for name, _ in r.cpu_devices] == ["127.0.0.1:CPU:0"]
    assert [name for name, _ in r.gpu_devices] == ["127.0.0.1:GPU:0"]
    assert r.node_gpu_devices == {"127.0.0.1": ["127.0.0.1:GPU:0"]}
    assert r.num_cpus == 1 and r.num_gpus == 1
    # One node is the chief without saying so.
    assert r.chief == "127.0.0.1"
    device = dict(r.gpu_devices)["127.0.0.1:GPU:0"]
    assert device.device_type is drover.resource_spec.DeviceType.GPU
    assert device.host_device.name_string() == "127.0.0.1:CPU:0"
    assert drover.resource_spec.DeviceSpec.from_string("127.0.0.1:GPU:0") == device

    r = ResourceSpec(write(tmp_path, SPECS["one_node_gpus"], "c.yml"))
    assert sorted(name for name, _ in r.devices) == [
        "localhost:CPU:0", "localhost:GPU:0", "localhost:GPU:1"]


def test_ssh_config_map_on_the_chief_only(tmp_path):
    remote = ResourceSpec(write(tmp_path, SPECS["two_nodes_one_gpu"]))
    # The chief (10.20.41.57) is not this host: AutoDist builds no ssh map.
    assert remote.ssh_config_map == {}
    assert remote.ssh_group == {"10.20.41.57": "conf", "10.20.41.146": "conf"}

    here = ResourceSpec(write(tmp_path, """
        nodes:
          - address: localhost
            chief: true
            ssh_config: conf
        ssh:
          conf:
            username: alice
            key_file: ~/.ssh/id_ed25519
            python_venv: source /venv/bin/activate
            shared_envs:
              LD_LIBRARY_PATH: /usr/local/cuda/lib64
        """, "here.yml"))
    config = here.ssh_config_map["localhost"]
    assert (config.username, config.port, config.key_file) == ("alice", 22, "~/.ssh/id_ed25519")
    assert config.python_venv == "source /venv/bin/activate"
    assert config.pkey is None
    # AutoDist's default remote environment, then the group's shared_envs.
    assert config.env == {"TF_CPP_MIN_LOG_LEVEL": 0, "LD_LIBRARY_PATH": "/usr/local/cuda/lib64"}


def test_errors_as_autodist(tmp_path):
    with pytest.raises(ValueError, match="chief"):
        ResourceSpec(write(tmp_path, """
            nodes:
              - address: 10.0.0.1
                ssh_config: c
              - address: 10.0.0.2
                ssh_config: c
            ssh:
              c: {username: root}
            """))
    with pytest.raises(ValueError, match="ssh_config"):
        ResourceSpec(write(tmp_path, """
            nodes:
              - address: 10.0.0.1
                chief: true
              - address: 10.0.0.2
            """, "b.yml"))
    with pytest.raises(ValueError, match="loopback"):
        ResourceSpec(write(tmp_path, """
            nodes:
              - address: 127.0.0.1
                chief: true
              - address: 10.0.0.2
                ssh_config: c
            ssh:
              c: {username: root}
            """, "c.yml"))
    empty = ResourceSpec()
    assert empty.chief is None and empty.nodes == set() and empty.num_cpus == 0


# SSHCluster with a ResourceSpec, without reaching any host -----------------------


def test_ssh_cluster_takes_a_resource_spec(tmp_path):
    spec = ResourceSpec(write(tmp_path, SPECS["two_nodes_one_gpu"]))
    with drover.SSHCluster(spec) as cluster:
        assert cluster.cluster_spec == {"worker": ["10.20.41.146:15000", "10.20.41.57:15001"]}
        assert cluster.is_chief("10.20.41.57")
        assert cluster.get_address_from_task("worker", 0) == "10.20.41.146"
        assert cluster.subprocesses == []
    with pytest.raises(ValueError, match="no nodes"):
        drover.SSHCluster(ResourceSpec())


DEBUG_SCRIPT = r'''
import sys
import drover
cluster = drover.SSHCluster(sys.argv[1])
proc = cluster.remote_exec(["touch", sys.argv[2]], "10.20.41.146")
print("returned", proc)
cluster.start()          # AutoDist's start(): printed, not run
print("subprocesses", cluster.subprocesses)
cluster.close()
'''


def test_autodist_debug_remote_prints_and_runs_nothing(tmp_path):
    spec = write(tmp_path, SPECS["two_nodes_one_gpu"])
    marker = tmp_path / "touched"
    script = tmp_path / "debug.py"
    script.write_text(DEBUG_SCRIPT)
    env = dict(os.environ, AUTODIST_DEBUG_REMOTE="True")
    result = subprocess.run([sys.executable, str(script), spec, str(marker)], env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    ssh_lines = [line for line in lines if line.startswith("$ ") and "ssh" in line]
    # remote_exec, then start()'s server on the non-chief node; both carry
    # AutoDist's default environment and the node's port and user.
    assert len(ssh_lines) == 2, lines
    assert "TF_CPP_MIN_LOG_LEVEL=0" in ssh_lines[0] and "touch" in ssh_lines[0]
    assert "12345" in ssh_lines[0] and "root" in ssh_lines[0]
    assert "--job_name=worker" in ssh_lines[1] and "--task_index=0" in ssh_lines[1]
    # The chief's own server command, printed too.
    assert any(line.startswith("$ ") and "--task_index=1" in line and "ssh" not in line
               for line in lines), lines
    assert "returned None" in lines and "subprocesses []" in lines
    assert not marker.exists()


def test_default_remote_environment_yields_to_shared_envs(tmp_path, capfd, monkeypatch):
    monkeypatch.setenv("AUTODIST_DEBUG_REMOTE", "True")
    spec = write(tmp_path, SPECS["two_nodes_one_gpu"].replace(
        "port: 12345", "port: 12345\n            shared_envs: {TF_CPP_MIN_LOG_LEVEL: 3}"))
    with drover.SSHCluster(spec) as cluster:
        assert cluster.remote_exec(["true"], "10.20.41.146") is None
    out = capfd.readouterr().out
    assert "TF_CPP_MIN_LOG_LEVEL=0" not in out and "TF_CPP_MIN_LOG_LEVEL=3" in out
    # Anything but exactly "True" leaves it off, as AutoDist reads it.
    monkeypatch.setenv("AUTODIST_DEBUG_REMOTE", "true")
    assert drover.ssh._debug_remote() is False


@pytest.mark.skipif(importlib.util.find_spec("tensorflow") is not None,
                    reason="checks the error raised where TensorFlow is missing")
def test_start_without_command_names_the_host_without_tensorflow(tmp_path):
    # One node, this host, the chief: start() runs its server here, for real.
    spec = write(tmp_path, SPECS["one_node_cpu"])
    cluster = drover.SSHCluster(spec)
    try:
        with pytest.raises(RuntimeError) as error:
            cluster.start(timeout=120)
    finally:
        cluster.close()
    message = str(error.value)
    assert "worker:0 on localhost" in message
    assert "TensorFlow is missing on this host" in message
    assert "drover-tf-server: TensorFlow is missing" in message
    assert cluster.subprocesses == []
    with open("/tmp/autodist/cluster_spec.json") as written:
        assert written.read() == '{"worker": ["localhost:15000"]}'
