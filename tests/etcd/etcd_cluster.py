"""A real etcd cluster for pytest suites: N members of Debian's /usr/bin/etcd
on free loopback ports, their data directories and logs under a directory the
test owns (pytest's tmp_path). Standard library only.

    sys.path.insert(0, str(REPO / "tests" / "etcd"))
    from etcd_cluster import EtcdCluster

    with EtcdCluster(tmp_path, members=3) as cluster:
        run_drover("--rendezvous", cluster.address("run1"))
        cluster.kill(0)

Every member runs in its own session and gets SIGKILL when the process that
started it dies (PR_SET_PDEATHSIG), so a test killed midway leaves no etcd
behind; stop() (or leaving the `with`) kills and reaps them all. When the
cluster does not come up, or the `with` body raises, the members' logs are
printed to stderr for pytest to show."""

import ctypes
import json
import os
import shutil
import signal
import ssl
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

_PR_SET_PDEATHSIG = 1


def _die_with_parent():
    # Runs in the child between fork and exec. The signal is tied to the
    # thread that forked: start clusters from the test's main thread.
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except Exception:  # noqa: BLE001 - best effort; stop() still kills them
        pass


def _free_ports(count):
    """`count` distinct free loopback ports (free once we close our sockets:
    start() tries again with fresh ports when a member cannot bind)."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


def _healthy(endpoint, tls=None):
    try:
        context = None
        scheme = "http"
        if tls is not None:
            scheme = "https"
            context = ssl.create_default_context(cafile=str(tls.ca))
            context.load_cert_chain(str(tls.client_cert), str(tls.client_key))
        with urllib.request.urlopen("%s://%s/health" % (scheme, endpoint), timeout=2,
                                    context=context) as response:
            return json.loads(response.read().decode()).get("health") == "true"
    except (OSError, ValueError, urllib.error.URLError):
        return False


class TlsFiles:
    """A CA, a server certificate for 127.0.0.1 and a client certificate,
    made with the openssl command in `directory`."""

    def __init__(self, directory):
        d = Path(directory)
        d.mkdir(parents=True, exist_ok=True)
        self.ca, self.ca_key = d / "ca.pem", d / "ca-key.pem"
        self.server_cert, self.server_key = d / "server.pem", d / "server-key.pem"
        self.client_cert, self.client_key = d / "client.pem", d / "client-key.pem"

        def run(*args):
            subprocess.run(["openssl", *args], check=True, capture_output=True)

        run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
            "/CN=drover-test-ca", "-keyout", str(self.ca_key), "-out", str(self.ca))
        ext = d / "server.ext"
        ext.write_text("subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n")
        for cert, key, name in ((self.server_cert, self.server_key, "127.0.0.1"),
                                (self.client_cert, self.client_key, "drover-test-client")):
            csr = d / (name + ".csr")
            run("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=" + name, "-keyout",
                str(key), "-out", str(csr))
            run("x509", "-req", "-in", str(csr), "-CA", str(self.ca), "-CAkey", str(self.ca_key),
                "-CAcreateserial", "-days", "2", "-extfile", str(ext), "-out", str(cert))


class EtcdCluster:
    """N etcd members on loopback. `endpoints`: "127.0.0.1:PORT" per member,
    member i at [i]."""

    def __init__(self, tmp_path, members=3, etcd="etcd", extra_args=(), start_timeout=30,
                 tls=None):
        self.tmp_path = Path(tmp_path)
        self.dir = None  # a fresh directory under tmp_path, made by start()
        self.members = members
        self.etcd = shutil.which(etcd) or etcd
        self.extra_args = list(extra_args)
        self.start_timeout = start_timeout
        self.endpoints = []
        self.logs = []
        self._processes = []
        self._attempt = 0
        # A TlsFiles: clients speak https and must show a certificate of the CA.
        self.tls = tls

    # -- lifecycle

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is not None:
            self.print_logs()
        self.stop()
        return False

    def start(self):
        """Starts the members and waits until each says it is healthy (a
        leader is elected). RuntimeError with the logs when they do not."""
        if shutil.which(self.etcd) is None:
            raise RuntimeError("etcd is not installed (Debian: etcd-server etcd-client)")
        # Fresh each time: etcd ignores --initial-cluster for a data
        # directory that exists, and would look for its old peers.
        self.tmp_path.mkdir(parents=True, exist_ok=True)
        self.dir = Path(tempfile.mkdtemp(prefix="etcd-", dir=str(self.tmp_path)))
        error = None
        for _ in range(3):
            try:
                self._start_once()
                return self
            except RuntimeError as e:  # a port taken meanwhile, most likely
                error = e
                self.print_logs()
                self.stop()
        raise error

    def _start_once(self):
        self._attempt += 1
        ports = _free_ports(2 * self.members)
        scheme = "https" if self.tls else "http"
        client_urls = ["%s://127.0.0.1:%d" % (scheme, ports[2 * i]) for i in range(self.members)]
        tls_args = []
        if self.tls:
            tls_args = ["--cert-file=%s" % self.tls.server_cert,
                        "--key-file=%s" % self.tls.server_key,
                        "--trusted-ca-file=%s" % self.tls.ca, "--client-cert-auth"]
        peer_urls = ["http://127.0.0.1:%d" % ports[2 * i + 1] for i in range(self.members)]
        cluster = ",".join("m%d=%s" % (i, url) for i, url in enumerate(peer_urls))
        token = "drover-pytest-%d-%d-%d" % (os.getpid(), id(self), self._attempt)
        self.endpoints = ["127.0.0.1:%d" % ports[2 * i] for i in range(self.members)]
        self.logs = []
        self._processes = []
        for i in range(self.members):
            data_dir = self.dir / ("a%d-m%d" % (self._attempt, i))
            log_path = self.dir / ("a%d-m%d.log" % (self._attempt, i))
            argv = [self.etcd, "--name=m%d" % i, "--data-dir=%s" % data_dir,
                    "--listen-client-urls=" + client_urls[i],
                    "--advertise-client-urls=" + client_urls[i],
                    "--listen-peer-urls=" + peer_urls[i],
                    "--initial-advertise-peer-urls=" + peer_urls[i],
                    "--initial-cluster=" + cluster, "--initial-cluster-state=new",
                    "--initial-cluster-token=" + token, "--logger=zap"] + tls_args + self.extra_args
            with open(log_path, "wb") as log:
                process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                           stderr=subprocess.STDOUT, start_new_session=True,
                                           preexec_fn=_die_with_parent)
            self._processes.append(process)
            self.logs.append(log_path)
        deadline = time.monotonic() + self.start_timeout
        for i, endpoint in enumerate(self.endpoints):
            while not _healthy(endpoint, self.tls):
                for j, process in enumerate(self._processes):
                    if process.poll() is not None:
                        raise RuntimeError("etcd member m%d at %s exited with %s before the "
                                           "cluster was healthy" %
                                           (j, self.endpoints[j], process.returncode))
                if time.monotonic() >= deadline:
                    raise RuntimeError("etcd member m%d at %s not healthy after %s s" %
                                       (i, endpoint, self.start_timeout))
                time.sleep(0.05)

    def kill(self, i):
        """SIGKILLs member i (its whole session) and reaps it."""
        process = self._processes[i]
        if process.poll() is None:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        process.wait()

    def stop(self):
        """Kills and reaps every member; their data and logs stay in `dir`."""
        for i in range(len(self._processes)):
            self.kill(i)

    # -- views

    def alive(self, i):
        return self._processes[i].poll() is None

    def address(self, prefix):
        """The drover address of the cluster: "etcd://EP1,EP2,EP3/prefix"."""
        return "etcd://%s/%s" % (",".join(self.endpoints), prefix.lstrip("/"))

    def client_urls(self, alive_only=True):
        """ "http://EP1,http://EP2", for etcdctl --endpoints."""
        return ",".join("http://" + ep for i, ep in enumerate(self.endpoints)
                        if not alive_only or self.alive(i))

    def etcdctl(self, *args, check=True):
        """Runs etcdctl against the members still running; its stdout."""
        result = subprocess.run(["etcdctl", "--endpoints=" + self.client_urls()] + list(args),
                                 capture_output=True, text=True, timeout=60)
        if check and result.returncode != 0:
            raise RuntimeError("etcdctl %s failed (%d): %s%s" %
                               (" ".join(args), result.returncode, result.stdout, result.stderr))
        return result.stdout

    def read_logs(self, tail_bytes=4000):
        out = []
        for i, path in enumerate(self.logs):
            try:
                text = Path(path).read_bytes()[-tail_bytes:].decode(errors="replace")
            except OSError as e:
                text = "(cannot read: %s)\n" % e
            out.append("--- etcd member m%d (%s)\n%s" % (i, path, text))
        return "".join(out)

    def print_logs(self):
        if self.logs:
            sys.stderr.write(self.read_logs())
