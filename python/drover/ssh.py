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
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import weakref

from drover import _drover
from drover._paths import drover_binary, guarded

__all__ = ["SSHCluster"]

# `drover run` says "drover run: cluster <id> formed: <roles>" once every node
# has registered (src/driver/driver.cc).
_STDERR = object()  # start()'s default log: sys.stderr as it is at the call

_FORMED = re.compile(r"^drover run: cluster \S*\s*formed\b")


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
        resource_spec_path (str): the AutoDist resource spec (YAML) naming the
            nodes, the chief and the ssh groups.
        ssh_config (str): an ssh client config file (``ssh -F``); None: the
            user's ~/.ssh/config.
        check_host_keys (bool): check host keys against known_hosts; False
            accepts any key and records none (AutoDist's
            ``StrictHostKeyChecking=no``).
        ssh_options (list): more ``ssh -o`` options, e.g. ``["Ciphers=aes128-ctr"]``.
        timeout (float): seconds each remote_file_write / remote_copy may take.
    """

    def __init__(self, resource_spec_path, ssh_config=None, check_host_keys=True,
                 ssh_options=(), timeout=300):
        self._spec_path = os.path.abspath(os.fspath(resource_spec_path))
        self._ssh_config = (os.path.abspath(os.path.expanduser(os.fspath(ssh_config)))
                            if ssh_config is not None else None)
        self._check_host_keys = bool(check_host_keys)
        self._ssh_options = [str(option) for option in ssh_options]
        self._impl = _drover._SSHCluster(self._spec_path, self._ssh_config,
                                         self._check_host_keys, self._ssh_options, float(timeout))
        self._run = None

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

        Returns:
            subprocess.Popen: process handle
        """
        if isinstance(args, str):
            args = [args]
        command = self._impl.remote_exec_command([str(arg) for arg in args], hostname)
        argv = self._impl.ssh_argv(hostname, command)
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

    def start(self, command, timeout=120, nodes=None, log=_STDERR, **run_options):
        """Start ``command`` on every node: ``drover run --engine ssh`` over
        this resource spec (AutoDist's start(), which started tf.servers).

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

    def terminate(self, timeout=30):
        """Terminate: SIGTERM to the run start() began (its whole process
        group), SIGKILL after ``timeout`` seconds. Idempotent; also runs when
        the interpreter exits.

        Returns:
            int or None: the run's exit code; None when nothing was started.
        """
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
