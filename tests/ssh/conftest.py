"""Real SSH hosts for the ssh engine's tests: three network namespaces on this
machine (10.200.0.11-13 behind the bridge 10.200.0.1), each running its own
sshd with its own host key, brought up by scripts/ssh-hosts/up.sh (needs
root). The client config /tmp/ssh-ci/ssh_config checks host keys against a
pre-filled known_hosts and uses a generated client key; it matches h1..h3
and the hosts' IP addresses."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python" / "tests"))

SSH_DIR = Path(os.environ.get("SSH_CI_DIR", "/tmp/ssh-ci"))
NET = "10.200.0"


class SshHosts:
    def __init__(self, count):
        self.config = str(SSH_DIR / "ssh_config")
        self.key_file = str(SSH_DIR / "id_ed25519")
        self.names = ["h%d" % (i + 1) for i in range(count)]
        self.addresses = ["%s.%d" % (NET, 11 + i) for i in range(count)]
        self.driver_address = NET + ".1"

    def ssh(self, host, command, check=True, **kwargs):
        """Runs a shell command on a host; returns the CompletedProcess."""
        return subprocess.run(["ssh", "-F", self.config, host, command], check=check,
                              capture_output=True, text=True, timeout=60, **kwargs)

    def resource_spec(self, path, addresses=None, chief=0, extra_ssh=""):
        """Writes an AutoDist resource spec naming `addresses` (all hosts by
        default), the `chief`-th one the chief, reached as root with the test key."""
        addresses = addresses or self.addresses
        lines = ["nodes:"]
        for i, address in enumerate(addresses):
            lines.append("  - address: %s" % address)
            if i == chief:
                lines.append("    chief: true")
            lines.append("    ssh_config: ci")
        lines += ["ssh:", "  ci:", "    username: root", "    key_file: %s" % self.key_file,
                  "    port: 22"]
        if extra_ssh:
            lines.append(extra_ssh)
        Path(path).write_text("\n".join(lines) + "\n")
        return str(path)


@pytest.fixture(scope="session")
def ssh_hosts():
    count = 3
    env = dict(os.environ, HOSTS=str(count), SSH_CI_MASK_RC="1")
    subprocess.run(["bash", str(REPO / "scripts" / "ssh-hosts" / "up.sh")], check=True, env=env,
                   timeout=300)
    yield SshHosts(count)
    if os.environ.get("DROVER_KEEP_SSH_HOSTS") != "1":
        subprocess.run(["bash", str(REPO / "scripts" / "ssh-hosts" / "down.sh")], check=False,
                       timeout=120)
