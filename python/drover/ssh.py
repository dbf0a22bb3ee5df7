"""AutoDist's SSHCluster on drover: the nodes of an AutoDist resource spec
reached through the system's OpenSSH client (so ~/.ssh/config, the agent and
ProxyJump apply).

::

    from drover.ssh import SSHCluster        # also drover.SSHCluster

    cluster = SSHCluster("resource_spec.yml", ssh_config="~/.ssh/config")
    cluster.is_chief()                       # AutoDist's Cluster questions
    cluster.remote_copy("train.py", "/tmp/autodist", "10.0.0.2")
    cluster.remote_file_write("/tmp/autodist/cluster_spec.json", text, "10.0.0.2")
    proc = cluster.remote_exec(["python", "/tmp/autodist/train.py"], "10.0.0.2")
    cluster.start(["python", "train.py"])    # `drover run --engine ssh` on every node
    cluster.terminate()

    cluster = SSHCluster(drover.ResourceSpec("resource_spec.yml"))
    cluster.start()                          # AutoDist's: a TensorFlow server per node

``remote_exec`` sets AutoDist's default remote environment
(TF_CPP_MIN_LOG_LEVEL=0, unless the node's shared_envs say otherwise); with
AUTODIST_DEBUG_REMOTE=True in the environment it prints the ssh command and
runs nothing (returns None), as AutoDist's does.

A hostname is a node address exactly as the resource spec writes it; the
node's ssh group (username, port, key_file, python_venv, shared_envs)
applies. All ssh calls of one SSHCluster share a ControlMaster connection per
host, so only the first pays the handshake; ``close()`` (or the end of the
object) stops them.

Errors: ValueError for a hostname that is not a node of the spec or a local
path that does not exist; RuntimeError when ssh itself fails (the message
names the host and carries ssh's own error line); PermissionError when the
remote side refuses; OSError for other remote failures; TimeoutError when a
transfer or start() takes longer than its timeout.
"""

import atexit
import collections
import json
import os
import queue
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
import weakref

from drover import _drover
from drover._paths import drover_binary, guarded
from drover.resource_spec import DEFAULT_REMOTE_ENV, ResourceSpec

__all__ = ["SSHCluster"]

# `drover run` says "drover run: cluster <id> formed: <roles>" once every node
# has registered (src/driver/driver.cc).
_STDERR = object()  # start()'s default log: sys.stderr as it is at the call

_FORMED = re.compile(r"^drover run: cluster \S*\s*formed\b")

# AutoDist's working directory on every node (autodist.const).
DEFAULT_WORKING_DIR = "/tmp/autodist"


def _debug_remote():
    """AutoDist's AUTODIST_DEBUG_REMOTE: exactly "True" turns it on."""
    return os.environ.get("AUTODIST_DEBUG_REMOTE", "False") == "True"


class _Run:
    """A `drover run` child in its own process group, under `drover guard`
    tied to this interpreter's life; terminate() is idempotent and registered
    with atexit, so an interpreter that exits stops it, and one that is
    killed ends the guard's stdin, which stops it too."""

    def __init__(self, argv, log):
        self.argv = argv
        self._log = log
        self._tail = collections.deque(maxlen=20)
        self._formed = threading.Event()
        self._ended = threading.Event()
        # Under a guard whose stdin is this process's lifeline: the run and
        # its agents do not outlive the interpreter, even a SIGKILLed one.
        self.process = subprocess.Popen(guarded(argv), stdin=subprocess.PIPE,
                                        stderr=subprocess.PIPE, start_new_session=True)
        atexit.register(self.terminate)
        self._reader = threading.Thread(target=self._read_stderr, name="drover-run-stderr",
                                        daemon=True)
        self._reader.start()

    def _read_stderr(self):
        try:
            for raw in iter(self.process.stderr.readline, b""):
                line = raw.decode("utf-8", "replace")
                self._tail.append(line.rstrip("\n"))
                if _FORMED.match(line):
                    self._formed.set()
                if self._log is not None:
                    try:
                        self._log.write(line)
                        self._log.flush()
                    except (OSError, ValueError):
                        pass
        finally:
            self._ended.set()

    def tail(self):
        return "\n".join(self._tail)

    def wait_formed(self, timeout):
        """True once the run printed that the cluster formed; False when it
        ended first. Raises TimeoutError after `timeout` seconds."""
        waited = 0.0
        step = 0.05
        while not self._formed.is_set():
            if self._ended.is_set() or self.process.poll() is not None:
                self._ended.wait(5)
                return self._formed.is_set()
            if timeout is not None and waited >= timeout:
                raise TimeoutError(
                    "drover run did not print 'drover run: cluster ... formed' on stderr within "
                    "%g s (command: %s); its last stderr lines:\n%s"
                    % (timeout, shlex.join(self.argv), self.tail() or "(none)"))
            self._formed.wait(step)
            waited += step
        return True

    def terminate(self, timeout=30):
        """SIGTERM to the run's process group, SIGKILL after `timeout` s."""
        process = self.process
        if process.poll() is None:
            try:
                os.killpg(process.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                try:
                    os.killpg(process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                process.wait()
        self._reader.join(5)
        if process.stderr is not None:
            process.stderr.close()
        try:
            atexit.unregister(self.terminate)
        except Exception:  # noqa: BLE001 - interpreter shutting down
            pass
        return process.returncode


def _flags(run_options):
    """`drover run` flags from keyword arguments: driver_address="a" ->
    --driver-address a; True -> the bare flag; False/None -> nothing; a
    list -> the flag repeated; a dict -> --flag NAME=VALUE per item."""
    argv = []
    for key, value in run_options.items():
        flag = "--" + key.replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            argv.append(flag)
        elif isinstance(value, dict):
            for name, item in value.items():
                argv += [flag, "%s=%s" % (name, item)]
        elif isinstance(value, (list, tuple)):
            for item in value:
                argv += [flag, str(item)]
        else:
            argv += [flag, str(value)]
    return argv


class SSHCluster:
    """An AutoDist Cluster based on SSH (AutoDist's ``SSHCluster``).

    Args:
        resource_spec (drover.ResourceSpec or str): the AutoDist resource
            spec (or its YAML file) naming the nodes, the chief and the ssh
            groups.
        ssh_config (str): an ssh client config file (``ssh -F``); None: the
            user's ~/.ssh/config.
        check_host_keys (bool): check host keys against known_hosts; False
            accepts any key and records none (AutoDist's
            ``StrictHostKeyChecking=no``).
        ssh_options (list): more ``ssh -o`` options, e.g. ``["Ciphers=aes128-ctr"]``.
        timeout (float): seconds each remote_file_write / remote_copy may take.
    """

    def __init__(self, resource_spec, ssh_config=None, check_host_keys=True,
                 ssh_options=(), timeout=300):
        if isinstance(resource_spec, ResourceSpec):
            if resource_spec.resource_file is None:
                raise ValueError("SSHCluster: the ResourceSpec has no nodes (it was made "
                                 "without a resource file)")
            self._spec_path = resource_spec.resource_file
        else:
            self._spec_path = os.path.abspath(os.fspath(resource_spec))
        self._ssh_config = (os.path.abspath(os.path.expanduser(os.fspath(ssh_config)))
                            if ssh_config is not None else None)
        self._check_host_keys = bool(check_host_keys)
        self._ssh_options = [str(option) for option in ssh_options]
        self._impl = _drover._SSHCluster(self._spec_path, self._ssh_config,
                                         self._check_host_keys, self._ssh_options, float(timeout))
        self._run = None
        self._spec = _drover._load_resource_spec(self._spec_path)
        # AutoDist's attributes: the TensorFlow cluster of start() (one
        # "worker" task per node, addresses sorted, ports from 15000) and
        # the processes start() began.
        resolver = _drover.ResourceSpecClusterResolver(self._spec_path)
        self.cluster_spec = resolver.cluster_spec().as_dict()
        self.subprocesses = []

    # AutoDist's Cluster questions ------------------------------------------

    def is_chief(self, address=None):
        """Check whether an address is chief or not.

        If the argument address is not provided, it will check whether the
        local address is chief.

        Args:
            address (str): node address e.g. ip

        Returns:
            bool: Whether address or self is chief
        """
        return self._impl.is_chief(address)

    def get_address_from_task(self, job_name, task_index):
        """Given a job name and task index, return the address.

        Args:
            job_name (str): job name
            task_index (int): task index

        Returns:
            str: The address for that task
        """
        return self._impl.get_address_from_task(job_name, task_index)

    def get_local_address(self):
        """Get the local (ip) address.

        If labelled as AUTODIST_WORKER (or DROVER_WORKER) by the environment
        variable, the value of it is the address of the local node; otherwise
        the local node is chief.

        Returns:
            str: Worker ip or chief address by default.
        """
        return self._impl.get_local_address()

    def get_local_worker_task_index(self):
        """Get the (first) TensorFlow task index of the "worker" for the local.

        Returns:
            int: Task index
        """
        return self._impl.get_local_worker_task_index()

    def get_local_session_target(self):
        """Get the session target of the local session.

        Returns:
            str: Local session target, e.g. "grpc://localhost:15000"
        """
        return self._impl.get_local_session_target()

    @property
    def addresses(self):
        """The node addresses, in the resource spec's order."""
        return self._impl.addresses

    # Remote operations -----------------------------------------------------

    def ssh_argv(self, hostname, command):
        """argv of ``ssh ... HOST -- COMMAND`` with this cluster's ssh options,
        the node's user, port and key, and the shared ControlMaster."""
        return self._impl.ssh_argv(hostname, command)

    def remote_exec(self, args, hostname, **popen_kwargs):
        """Execute a bash script remotely.

        The words of ``args`` are joined with spaces and run by ``bash -c`` on
        the host (so ``;``, ``&&`` and redirections work; quote words
        yourself, e.g. with ``shlex.quote``), after the node's python_venv and
        with its shared_envs set, stdin from /dev/null.

        The remote command lives as long as its local ssh process (what
        AutoDist got from ``ssh -tt``, without a terminal mangling the
        output): ``proc.terminate()`` or ``proc.kill()``, or this interpreter
        exiting, sends the remote command's process group SIGTERM (SIGKILL
        10 s later). ``proc.returncode`` is the command's exit code; 255 means
        ssh itself failed. The process runs in a new session, as AutoDist's
        did. ssh's stdin is that lifeline: pass ``stdin=`` only to control it
        yourself (its end of file ends the remote command).

        Args:
            args (list): bash commands
            hostname (str): host name or address
            **popen_kwargs: passed to subprocess.Popen (e.g. ``stdout=PIPE``)

        AutoDist's default remote environment applies: TF_CPP_MIN_LOG_LEVEL=0
        is exported first unless the node's shared_envs set it. With
        AUTODIST_DEBUG_REMOTE=True in this process's environment the ssh
        command is printed ("$ ssh ...") and nothing runs.

        Returns:
            subprocess.Popen: process handle (None with AUTODIST_DEBUG_REMOTE)
        """
        if isinstance(args, str):
            args = [args]
        args = [str(arg) for arg in args]
        node_env = self._node_env(hostname)
        defaults = ["%s=%s" % (key, value) for key, value in DEFAULT_REMOTE_ENV.items()
                    if key not in node_env]
        if defaults:
            args = ["export"] + defaults + [";"] + args
        command = self._impl.remote_exec_command(args, hostname)
        argv = self._impl.ssh_argv(hostname, command)
        if _debug_remote():
            print("$ %s" % shlex.join(argv), flush=True)
            return None
        popen_kwargs.setdefault("start_new_session", True)
        if "stdin" in popen_kwargs:
            return subprocess.Popen(argv, **popen_kwargs)
        # ssh's stdin is the remote command's lifeline: a pipe whose write end
        # lives as long as the Popen object, so communicate() (which closes
        # proc.stdin) does not end the command, and ending ssh does.
        lifeline, held = os.pipe()
        try:
            proc = subprocess.Popen(argv, stdin=lifeline, **popen_kwargs)
        except BaseException:
            os.close(held)
            raise
        finally:
            os.close(lifeline)
        weakref.finalize(proc, os.close, held)
        return proc

    def remote_file_write(self, remote_path, data, hostname):
        """Write a remote file.

        Missing parent directories are created; str data is written as UTF-8,
        bytes exactly. A relative path, or one starting with "~/", is in the
        remote user's home directory.

        Args:
            remote_path (str): remote file path
            data (str or bytes): data to be written
            hostname (str): host name or address
        """
        if isinstance(data, str):
            data = data.encode("utf-8")
        self._impl.remote_file_write(os.fspath(remote_path), bytes(data), hostname)

    def remote_copy(self, local_path, remote_path, hostname):
        """Copy a file to a remote directory.

        ``local_path`` may also be a directory, copied recursively. It lands
        as ``remote_path/<its name>``; ``remote_path`` is created when missing.
        Mode bits and modification times are kept; owners are not.

        Args:
            local_path (str): local file path to be copied
            remote_path (str): remote directory path
            hostname (str): host name or address
        """
        self._impl.remote_copy(os.fspath(local_path), os.fspath(remote_path), hostname)

    def remote_pre_start_tf_server(self, hostname, tf_server_starter_filepath,
                                   working_dir=DEFAULT_WORKING_DIR):
        """Prepare to start a TensorFlow server remotely (AutoDist's): copy
        the starter file into ``working_dir`` on the host and write the
        cluster's ``cluster_spec.json`` beside it.

        Args:
            hostname (str): host name or address
            tf_server_starter_filepath (str): local starter file path
            working_dir (str): remote working directory
        """
        self.remote_copy(local_path=tf_server_starter_filepath, remote_path=working_dir,
                         hostname=hostname)
        self.remote_file_write(remote_path=os.path.join(working_dir, "cluster_spec.json"),
                               data=json.dumps(self.cluster_spec), hostname=hostname)

    def _node(self, hostname):
        for node in self._spec["nodes"]:
            if node["address"] == hostname:
                return node
        raise ValueError("%r is not a node of %s (nodes: %s)"
                         % (hostname, self._spec_path,
                            ", ".join(n["address"] for n in self._spec["nodes"])))

    def _node_env(self, hostname):
        group = self._node(hostname)["ssh_config"]
        return self._spec["ssh"].get(group, {}).get("env", {}) if group else {}

    # The whole cluster -----------------------------------------------------

    def run_argv(self, command, nodes=None, **run_options):
        """The ``drover run --engine ssh`` command line start() runs."""
        if isinstance(command, str):
            command = shlex.split(command)
        command = [str(word) for word in command]
        if not command:
            raise ValueError("start: no command given")
        argv = [drover_binary(), "run", "--engine", "ssh", "--hosts", self._spec_path]
        if self._ssh_config is not None:
            argv += ["--ssh-config", self._ssh_config]
        for option in self._ssh_options:
            argv += ["--ssh-option", option]
        if not self._check_host_keys:
            argv.append("--no-host-key-check")
        argv += ["--nodes", str(nodes if nodes is not None else len(self.addresses))]
        argv += _flags(run_options)
        return argv + ["--"] + command

    def start(self, command=None, timeout=120, nodes=None, log=_STDERR, **run_options):
        """Start ``command`` on every node: ``drover run --engine ssh`` over
        this resource spec. Without a command, do what AutoDist's start()
        does: start a TensorFlow server for every task of ``cluster_spec``
        (see _start_tf_servers) and return None.

        Runs it as a child process in its own process group and returns once
        it printed that the cluster formed (every node registered). Only the
        chief should call this.

        Args:
            command (list or str): the program and its arguments (a str is
                split like a shell would)
            timeout (float): seconds to wait for the cluster to form; None waits
                as long as the run lives
            nodes (int): ``--nodes``; default: one per node of the spec
            log: where the run's stderr lines go (a text file object; by
                default sys.stderr; None drops them)
            **run_options: more ``drover run`` flags, e.g.
                ``driver_address="10.0.0.1"``, ``env={"NCCL_DEBUG": "INFO"}``

        Returns:
            subprocess.Popen: the ``drover run`` process

        Raises:
            RuntimeError: a run started by this cluster is still going, or the
                run ended before the cluster formed (its exit code and last
                stderr lines are in the message).
            TimeoutError: the cluster did not form within ``timeout``; the run
                is terminated.
        """
        if command is None:
            if run_options or nodes is not None:
                raise TypeError("start() without a command starts TensorFlow servers and takes "
                                "only timeout; got %s" % sorted(
                                    list(run_options) + (["nodes"] if nodes is not None else [])))
            return self._start_tf_servers(timeout)
        if self._run is not None and self._run.process.poll() is None:
            raise RuntimeError("SSHCluster.start: a run is already going (pid %d); "
                               "call terminate() first" % self._run.process.pid)
        if log is _STDERR:
            log = sys.stderr
        run = _Run(self.run_argv(command, nodes=nodes, **run_options), log)
        self._run = run
        try:
            formed = run.wait_formed(timeout)
        except BaseException:
            run.terminate()
            raise
        if not formed:
            code = run.terminate()
            raise RuntimeError(
                "drover run ended (exit code %s) before the cluster formed (command: %s); "
                "its last stderr lines:\n%s" % (code, shlex.join(run.argv), run.tail() or "(none)"))
        return run.process

    def _start_tf_servers(self, timeout):
        """AutoDist's start(): the chief writes cluster_spec.json to
        DEFAULT_WORKING_DIR and starts its server here; every other node gets
        the starter and the spec (remote_pre_start_tf_server) and starts its
        server through remote_exec. Waits until each server says it is ready;
        a server that exits first (TensorFlow missing on its host, a port
        taken) stops them all and raises RuntimeError naming the task and
        host and quoting its output. TimeoutError past ``timeout`` seconds."""
        from drover.compat import tf_server_starter as starter
        atexit.register(self.terminate)
        module_file = starter.__file__
        envs = ["AUTODIST_MIN_LOG_LEVEL=ERROR"]
        started = []
        try:
            for job_name, tasks in self.cluster_spec.items():
                for task_index, full_address in enumerate(tasks):
                    address = full_address.rsplit(":", 1)[0]
                    node = self._node(address)
                    cpus = 1 + (0 if node["gpus"] else len([c for c in node["cpus"] if c]))
                    args = ["--job_name=%s" % job_name, "--task_index=%d" % task_index,
                            "--cpu_device_num=%d" % cpus]
                    envs_cuda = [] if node["gpus"] else ['CUDA_VISIBLE_DEVICES=""']
                    task = "%s:%d" % (job_name, task_index)
                    if self.is_chief(address):
                        cmd = envs + envs_cuda + [shlex.quote(sys.executable), "-u",
                                                  shlex.quote(module_file)] + args
                        if _debug_remote():
                            print("$ %s" % " ".join(cmd), flush=True)
                            continue
                        os.makedirs(DEFAULT_WORKING_DIR, exist_ok=True)
                        with open(os.path.join(DEFAULT_WORKING_DIR, "cluster_spec.json"),
                                  "w") as out:
                            json.dump(self.cluster_spec, out)
                        proc = subprocess.Popen(" ".join(cmd), shell=True, start_new_session=True,
                                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
                    else:
                        if not _debug_remote():
                            self.remote_pre_start_tf_server(address, module_file)
                        remote_file = os.path.join(DEFAULT_WORKING_DIR,
                                                   os.path.basename(module_file))
                        # AutoDist runs `python` after the venv; fall back to python3
                        # where a host has no `python` (Debian).
                        python = '"$(command -v python || command -v python3)"'
                        bash = envs + envs_cuda + [python, "-u", remote_file] + args
                        proc = self.remote_exec(bash, hostname=address, stdout=subprocess.PIPE,
                                                stderr=subprocess.STDOUT)
                        if proc is None:  # AUTODIST_DEBUG_REMOTE: printed, not run
                            continue
                    self.subprocesses.append(proc)
                    started.append((task, address, proc))
            _await_servers(started, timeout)
        except BaseException:
            self.terminate()
            raise

    def terminate(self, timeout=30):
        """Terminate: SIGTERM to the run start() began (its whole process
        group), SIGKILL after ``timeout`` seconds, and likewise to every
        TensorFlow server start() began (AutoDist's terminate). Idempotent;
        also runs when the interpreter exits.

        Returns:
            int or None: the run's exit code; None when no run was started.
        """
        servers, self.subprocesses = self.subprocesses, []
        for proc in servers:
            _stop_group(proc, timeout)
        if self._run is None:
            return None
        return self._run.terminate(timeout)

    def close(self):
        """terminate(), then stop the ssh ControlMasters. Idempotent."""
        self.terminate()
        self._impl.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self):
        return "SSHCluster(%r, nodes=%r)" % (self._spec_path,
                                             None if self._impl.closed else self.addresses)


def _stop_group(proc, timeout):
    """SIGTERM to a process group, SIGKILL after `timeout` seconds."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if proc.poll() is not None:
            break
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            continue
    proc.wait()
    if proc.stdout is not None:
        proc.stdout.close()


def _await_servers(started, timeout):
    """Waits until every (task, address, proc) has printed the starter's
    ready line or ended; RuntimeError naming each that ended first, and
    saying where TensorFlow is missing."""
    from drover.compat.tf_server_starter import MISSING_LINE, READY_LINE
    lines = queue.Queue()

    def read(task, address, proc):
        for raw in iter(proc.stdout.readline, b""):
            lines.put((task, address, raw.decode("utf-8", "replace").rstrip("\n")))
        lines.put((task, address, None))

    output = {task: [] for task, _, _ in started}
    for entry in started:
        threading.Thread(target=read, args=entry, daemon=True).start()
    waiting = {task for task, _, _ in started}
    failed = []
    deadline = None if timeout is None else time.monotonic() + timeout
    while waiting:
        left = None if deadline is None else deadline - time.monotonic()
        if left is not None and left <= 0:
            raise TimeoutError("SSHCluster.start: the TensorFlow servers of %s did not say they "
                               "were ready within %g s" % (", ".join(sorted(waiting)), timeout))
        try:
            task, address, line = lines.get(timeout=left)
        except queue.Empty:
            continue
        if line is not None:
            output[task].append(line)
            if line.startswith(READY_LINE):
                waiting.discard(task)
        elif task in waiting:
            waiting.discard(task)
            failed.append((task, address))
    if not failed:
        return
    reports = []
    for task, address in failed:
        said = "\n".join("  | " + text for text in output[task][-20:]) or "  (no output)"
        if any(text.startswith(MISSING_LINE) for text in output[task]):
            why = ("TensorFlow is missing on this host (install tensorflow for the Python the "
                   "node runs, after its python_venv)")
        else:
            why = "the TensorFlow server ended before it was ready"
        reports.append("%s on %s: %s; its output:\n%s" % (task, address, why, said))
    raise RuntimeError("SSHCluster.start: %d of %d TensorFlow servers did not start:\n%s"
                       % (len(failed), len(started), "\n".join(reports)))
