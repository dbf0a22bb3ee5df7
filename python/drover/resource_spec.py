"""AutoDist's ResourceSpec: the nodes, devices and ssh groups of a resource
spec YAML (the format of docs/ssh.md), with AutoDist's properties.

    spec = drover.ResourceSpec("resource_spec.yml")
    spec.chief, spec.nodes, spec.num_gpus, spec.node_gpu_devices
    cluster = drover.SSHCluster(spec)

The file is read by drover's C++ parser (the one `drover run --engine ssh`
and ResourceSpecClusterResolver use), so its errors name the file and line;
this module adds AutoDist's device rules: every node has its CPU:0, its other
CPUs count only when it lists no GPUs, and a node without
network_bandwidth gets 1.
"""

import enum
import ipaddress
import re
import socket
from typing import NamedTuple, Optional

from drover import _drover

__all__ = ["DeviceSpec", "DeviceType", "ResourceSpec", "SSHConfig", "SSHConfigMap"]

# Set on every remote command of AutoDist's SSHConfig, before shared_envs.
DEFAULT_REMOTE_ENV = {"TF_CPP_MIN_LOG_LEVEL": 0}


class DeviceType(enum.Enum):
    """AutoDist's device types."""

    CPU = 0
    GPU = 1


class DeviceSpec:
    """One device of a node: ``<address>:CPU:<i>`` or ``<address>:GPU:<i>``."""

    def __init__(self, host_address, host_device=None, device_type=DeviceType.CPU,
                 device_index=None):
        self.host_address = host_address
        self.device_type = device_type
        self.device_index = device_index
        if device_type is DeviceType.GPU:
            if host_device is not None and host_device.device_type is not DeviceType.CPU:
                raise ValueError("Host device must be a CPU")
            self.host_device = host_device if host_device is not None else DeviceSpec(host_address)
        else:
            self.host_device = self

    def name_string(self):
        return "%s:%s:%s" % (self.host_address, self.device_type.name, self.device_index)

    @classmethod
    def from_string(cls, name_string):
        """The DeviceSpec of a name string such as ``10.0.0.1:GPU:0``."""
        match = re.match(r"(\S+):([a-zA-Z]+):(\d+)$", name_string)
        if match is None:
            raise ValueError("not a device name (<address>:CPU|GPU:<index>): %r" % (name_string,))
        address, device_type, index = match.groups()
        return cls(address, device_type=DeviceType[device_type], device_index=int(index))

    def __hash__(self):
        return hash(self.name_string())

    def __eq__(self, other):
        return isinstance(other, DeviceSpec) and self.name_string() == other.name_string()

    def __repr__(self):
        return "<DeviceSpec: %s>" % self.name_string()

    def __str__(self):
        return self.name_string()


class SSHConfig(NamedTuple):
    """One ssh group (AutoDist's SSHConfig). ``pkey`` is always None: the
    system's ssh client reads ``key_file`` itself."""

    username: str
    port: int
    python_venv: str
    key_file: str
    pkey: Optional[object]
    env: dict


class SSHConfigMap(dict):
    """Node address -> its SSHConfig (None for a node without ssh_config)."""

    def __init__(self, groups, node_groups):
        super().__init__()
        configs = {
            name: SSHConfig(username=group["username"], port=group["port"],
                            python_venv=group["python_venv"], key_file=group["key_file"],
                            pkey=None, env=dict(DEFAULT_REMOTE_ENV, **group["env"]))
            for name, group in groups.items()
        }
        for address, group in node_groups.items():
            self[address] = configs.get(group)


def _ip_of(address):
    host = address.rsplit(":", 1)[0] if address.count(":") == 1 else address
    if host == "localhost":
        return ipaddress.ip_address("127.0.0.1")
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        try:
            return ipaddress.ip_address(socket.gethostbyname(host))
        except OSError:
            return None


def _local_ipv4_addresses():
    """The IPv4 addresses of this host's interfaces."""
    import fcntl
    import struct
    found = set()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        for _, name in socket.if_nameindex():
            try:
                packed = fcntl.ioctl(probe.fileno(), 0x8915,  # SIOCGIFADDR
                                     struct.pack("256s", name[:15].encode()))
            except OSError:
                continue
            found.add(ipaddress.ip_address(socket.inet_ntoa(packed[20:24])))
    return found


def is_local_address(address):
    """Whether ``address`` (an IP, a host name, optionally with a port) is one
    of this host's, loopback included (AutoDist's is_local_address)."""
    ip = _ip_of(address)
    return ip is not None and (ip.is_loopback or ip in _local_ipv4_addresses())


class ResourceSpec:
    """AutoDist's ResourceSpec over drover's resource spec parser.

    Args:
        resource_file (str): the resource spec YAML; None gives an empty spec
            (no nodes, no chief), as AutoDist's.

    Raises ValueError for a spec the parser refuses (the message names the
    file and line), OSError when the file cannot be read.
    """

    def __init__(self, resource_file=None):
        self.resource_file = None
        self._devices = {}
        self._chief = None
        self._ssh_group = {}
        self._network_bandwidth = {}
        self._ssh_config_map = {}
        if resource_file is None:
            return
        import os
        self.resource_file = os.path.abspath(os.fspath(resource_file))
        parsed = _drover._load_resource_spec(self.resource_file)
        for node in parsed["nodes"]:
            self._add_node(node)
        self._chief = parsed["chief"]
        if is_local_address(self._chief):
            self._ssh_config_map = SSHConfigMap(parsed["ssh"], self._ssh_group)

    def _add_node(self, node):
        address = node["address"]
        host_cpu = DeviceSpec(address, device_index=0)
        self._devices.setdefault(host_cpu.name_string(), host_cpu)
        if not node["gpus"]:
            for index in node["cpus"]:
                if index != 0:
                    cpu = DeviceSpec(address, host_cpu, DeviceType.CPU, index)
                    self._devices.setdefault(cpu.name_string(), cpu)
        for index in node["gpus"]:
            gpu = DeviceSpec(address, host_cpu, DeviceType.GPU, index)
            self._devices.setdefault(gpu.name_string(), gpu)
        self._ssh_group[address] = node["ssh_config"]
        bandwidth = node["network_bandwidth"]
        if bandwidth and bandwidth == int(bandwidth):
            bandwidth = int(bandwidth)
        self._network_bandwidth[address] = bandwidth or 1

    @property
    def chief(self):
        """The chief's address."""
        return self._chief

    @property
    def devices(self):
        """(name, DeviceSpec) pairs of every device."""
        return self._devices.items()

    @property
    def nodes(self):
        """The set of node addresses."""
        return {device.host_address for device in self._devices.values()}

    @property
    def cpu_devices(self):
        """(name, DeviceSpec) pairs of the CPU devices."""
        return {k: v for k, v in self._devices.items() if v.device_type is DeviceType.CPU}.items()

    @property
    def gpu_devices(self):
        """(name, DeviceSpec) pairs of the GPU devices."""
        return {k: v for k, v in self._devices.items() if v.device_type is DeviceType.GPU}.items()

    @property
    def num_cpus(self):
        return len(self.cpu_devices)

    @property
    def num_gpus(self):
        return len(self.gpu_devices)

    @property
    def node_cpu_devices(self):
        """Node address -> names of its CPU devices."""
        result = {}
        for name, device in self.cpu_devices:
            result.setdefault(device.host_address, []).append(name)
        return result

    @property
    def node_gpu_devices(self):
        """Node address -> names of its GPU devices (nodes with GPUs only)."""
        result = {}
        for name, device in self.gpu_devices:
            result.setdefault(device.host_address, []).append(name)
        return result

    @property
    def ssh_config_map(self):
        """Node address -> SSHConfig; empty when the chief is not this host
        (AutoDist builds it only on the chief)."""
        return self._ssh_config_map

    @property
    def ssh_group(self):
        """Node address -> the name of its ssh group (None for the chief
        without one)."""
        return self._ssh_group

    @property
    def network_bandwidth(self):
        """Node address -> bandwidth (Gbit/s as written; 1 when not given)."""
        return self._network_bandwidth

    def __repr__(self):
        return "ResourceSpec(%r, chief=%r, nodes=%d)" % (self.resource_file, self._chief,
                                                         len(self._ssh_group))
