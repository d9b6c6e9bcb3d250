#!/usr/bin/env bash
# N hosts in network namespaces for the fault tests (netns_faults_tests.cpp), bridged to the
# root namespace, each with an sshd. Needs root, iproute2 and openssh-server.
#
#   netns_lab.sh up   DIR PREFIX NET N   # NET: the first three octets, e.g. 10.213.42
#   netns_lab.sh down DIR PREFIX NET N
#
# Layout (NET.0/24 exists only on this bridge and inside these namespaces):
#   root ns  : bridge PREFIXbr at NET.1/24, and the safety route "blackhole NET.0/24 metric
#              4000": when a link goes down, traffic for the range hits the blackhole, never
#              the default route
#   PREFIX-I : eth0 at NET.(10+I)/24 (its root-side peer is PREFIXvI), lo up, no default
#              route; sshd on NET.(10+I):22 (PID in DIR/hostI/sshd.pid.launcher), key-only
#              root login with DIR/id_ed25519, host key in DIR/known_hosts
# PREFIX holds the PID of the test that made the lab ("tln<pid>"), so a later run can tell a
# lab left behind by a killed test; every name stays within the 15 characters of a link.
set -euo pipefail
cmd=${1:?up|down}; DIR=${2:?DIR}; P=${3:?PREFIX}; NET=${4:?NET}; N=${5:?N}
BR=${P}br

down() {
  local i pid
  for i in $(seq 1 "$N"); do
    # Every process left in the namespace is the lab's: its sshd and what it started.
    for pid in $(ip netns pids "$P-$i" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
    ip netns del "$P-$i" 2>/dev/null || true  # also destroys eth0 and so its peer
    ip link del "${P}v$i" 2>/dev/null || true
  done
  ip link del "$BR" 2>/dev/null || true
  ip route del blackhole "$NET.0/24" metric 4000 2>/dev/null || true
  rm -rf "$DIR"
}

case "$cmd" in
up)
  trap 'down' ERR
  mkdir -p "$DIR" /run/sshd; chmod 700 "$DIR"; chmod 755 /run/sshd
  ssh-keygen -q -t ed25519 -N '' -C tlaunch-netns-client -f "$DIR/id_ed25519"
  ssh-keygen -q -t ed25519 -N '' -C tlaunch-netns-host -f "$DIR/host_key"
  cp "$DIR/id_ed25519.pub" "$DIR/authorized_keys"; chmod 600 "$DIR/authorized_keys"
  : >"$DIR/known_hosts"
  ip route replace blackhole "$NET.0/24" metric 4000
  ip link add "$BR" type bridge
  ip addr add "$NET.1/24" dev "$BR"
  sysctl -qw "net.ipv6.conf.$BR.disable_ipv6=1"  # IPv4 only: no link-local chatter
  ip link set "$BR" up
  for i in $(seq 1 "$N"); do
    ns=$P-$i addr=$NET.$((10 + i))
    ip netns add "$ns"
    ip link add "${P}v$i" type veth peer name "${P}n$i"
    ip link set "${P}v$i" master "$BR" up
    ip link set "${P}n$i" netns "$ns"
    ip -n "$ns" link set "${P}n$i" name eth0
    ip -n "$ns" addr add "$addr/24" dev eth0
    ip netns exec "$ns" sysctl -qw net.ipv6.conf.eth0.disable_ipv6=1
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
    mkdir -p "$DIR/host$i"
    # ClientAlive: a session whose client is cut off ends within seconds (and with it the
    # agent and its nodes), so a test can check that nothing is left on a cut host.
    cat >"$DIR/host$i/sshd_config" <<EOF
ListenAddress $addr:22
HostKey $DIR/host_key
PidFile $DIR/host$i/sshd.pid
AuthorizedKeysFile $DIR/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PrintMotd no
UseDNS no
MaxStartups 100:30:200
MaxSessions 100
ClientAliveInterval 1
ClientAliveCountMax 3
Subsystem sftp internal-sftp
LogLevel VERBOSE
EOF
    ip netns exec "$ns" /usr/sbin/sshd -D -e -f "$DIR/host$i/sshd_config" \
      </dev/null >>"$DIR/host$i/sshd.log" 2>&1 &
    echo $! >"$DIR/host$i/sshd.pid.launcher"
    echo "$addr $(awk '{print $1, $2}' "$DIR/host_key.pub")" >>"$DIR/known_hosts"
  done
  for i in $(seq 1 "$N"); do
    ok=
    for _ in $(seq 1 100); do
      if (exec 3<>"/dev/tcp/$NET.$((10 + i))/22") 2>/dev/null; then ok=1; break; fi
      sleep 0.05
    done
    [ -n "$ok" ] || { echo "netns_lab: sshd on $NET.$((10 + i)) does not answer:" >&2
                      cat "$DIR/host$i/sshd.log" >&2; exit 1; }
  done
  ;;
down) down ;;
*) echo "usage: $0 up|down DIR PREFIX NET N" >&2; exit 2 ;;
esac
