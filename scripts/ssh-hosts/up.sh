#!/bin/bash
# (From ../shared/tools/ssh-hosts, with "Host h* 10.200.0.*" so the hosts answer by address too.)
# N fake "hosts" = N network namespaces (ci-h1..ci-hN) on a private bridge ci-br0
# (10.200.0.0/24, exists only on this machine: bridge 10.200.0.1 in the root ns,
# host i = 10.200.0.(10+i) inside namespace ci-hi). Each runs its own sshd with its
# own host key and its own UTS namespace (so `hostname` prints h1, h2, ...).
# Client: ssh -F $SSH_CI_DIR/ssh_config h1 hostname
# Idempotent. Needs root (ip netns). No systemd.
set -euo pipefail
N=${HOSTS:-3}
BASE=${SSH_CI_DIR:-/tmp/ssh-ci}
NET=${SSH_CI_NET:-10.200.0}
BR=ci-br0
T0=$(date +%s.%N)
command -v sshd >/dev/null && command -v ip >/dev/null && command -v unshare >/dev/null || {
  DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y --no-install-recommends openssh-server openssh-client iproute2 util-linux >/dev/null; }
mkdir -p "$BASE" /run/sshd; chmod 0755 /run/sshd
chmod 0700 "$BASE"

# ---- keys (client key + per-host host keys), generated once ----
[ -f "$BASE/id_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -C ssh-ci -f "$BASE/id_ed25519"
cp "$BASE/id_ed25519.pub" "$BASE/authorized_keys"; chmod 0600 "$BASE/authorized_keys"

# ---- bridge in the root ns ----
if ! ip link show "$BR" >/dev/null 2>&1; then
  ip link add "$BR" type bridge
  ip addr add "$NET.1/24" dev "$BR"
fi
ip link set "$BR" up

: > "$BASE/known_hosts"
{
  echo "Host h* $NET.*"
  echo "  User root"
  echo "  IdentityFile $BASE/id_ed25519"
  echo "  IdentitiesOnly yes"
  echo "  UserKnownHostsFile $BASE/known_hosts"
  echo "  StrictHostKeyChecking yes"
  echo "  BatchMode yes"
  echo "  LogLevel ERROR"
  echo "  ConnectTimeout 5"
  echo "Host *-mux"
  echo "  ControlMaster auto"
  echo "  ControlPath $BASE/cm-%h-%p"
  echo "  ControlPersist 60"
} > "$BASE/ssh_config"

for i in $(seq 1 "$N"); do
  ns=ci-h$i; ip4=$NET.$((10+i)); d=$BASE/h$i
  mkdir -p "$d"
  [ -f "$d/ssh_host_ed25519_key" ] || ssh-keygen -q -t ed25519 -N '' -f "$d/ssh_host_ed25519_key"
  ip netns list | grep -qw "$ns" || ip netns add "$ns"
  if ! ip link show "veth-h$i" >/dev/null 2>&1; then
    ip link add "veth-h$i" type veth peer name eth0 netns "$ns"
    ip link set "veth-h$i" master "$BR" up
    ip -n "$ns" addr add "$ip4/24" dev eth0
  fi
  ip -n "$ns" link set lo up
  ip -n "$ns" link set eth0 up
  cat > "$d/sshd_config" <<CFG
Port 22
ListenAddress $ip4
HostKey $d/ssh_host_ed25519_key
PidFile $d/sshd.pid
AuthorizedKeysFile $BASE/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
UseDNS no
PrintMotd no
MaxStartups 100:30:200
MaxSessions 100
AcceptEnv LANG LC_* CI_*
Subsystem sftp /usr/lib/openssh/sftp-server
CFG
  if ! { [ -f "$d/sshd.pid" ] && kill -0 "$(cat "$d/sshd.pid")" 2>/dev/null; }; then
    # own UTS ns so that `hostname` differs per host; sshd daemonizes and writes PidFile
    # SSH_CI_MASK_RC=1: also a private mount ns in which root's ~/.bashrc is an empty file
    # (root's .bashrc here runs `pyenv init`, ~150 ms on every ssh command).
    if [ "${SSH_CI_MASK_RC:-0}" = 1 ]; then
      : > "$BASE/empty_rc"
      ip netns exec "$ns" unshare --uts --mount --propagation private sh -c \
        "hostname h$i; mount --bind $BASE/empty_rc \$HOME/.bashrc; exec /usr/sbin/sshd -f $d/sshd_config -E $d/sshd.log"
    else
      ip netns exec "$ns" unshare --uts sh -c "hostname h$i; exec /usr/sbin/sshd -f $d/sshd_config -E $d/sshd.log"
    fi
  fi
  echo "Host h$i h$i-mux"          >> "$BASE/ssh_config"
  echo "  HostName $ip4"           >> "$BASE/ssh_config"
  echo "h$i,$ip4 $(cut -d' ' -f1,2 "$d/ssh_host_ed25519_key.pub")" >> "$BASE/known_hosts"
done
# ssh_config: first match wins per option, so put specific Host blocks before "Host h*"
awk '/^Host h[0-9]+ /{p=1} p' "$BASE/ssh_config" > "$BASE/ssh_config.hosts"
awk '/^Host h[0-9]+ /{exit} 1' "$BASE/ssh_config" > "$BASE/ssh_config.common"
cat "$BASE/ssh_config.hosts" "$BASE/ssh_config.common" > "$BASE/ssh_config"; rm -f "$BASE"/ssh_config.{hosts,common}

for i in $(seq 1 "$N"); do   # wait for every sshd to answer
  for _ in $(seq 1 50); do ssh -F "$BASE/ssh_config" "h$i" true 2>/dev/null && break; sleep 0.1; done
done
printf 'ssh: %d hosts up in %.2fs: ssh -F %s/ssh_config h1 hostname\n' "$N" "$(echo "$(date +%s.%N) - $T0" | bc)" "$BASE"
