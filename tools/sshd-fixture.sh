#!/usr/bin/env bash
# A throwaway OpenSSH sshd on loopback for the SSH tests: key-only root login, no PAM, not
# daemonized, listening on 127.0.0.1, 127.0.0.2 and 127.0.0.3 (three "hosts" on one machine).
#
# Usage:
#   sshd-fixture.sh start DIR [PORT]        # PORT: a free one is picked when not given
#   sshd-fixture.sh stop  DIR
#   sshd-fixture.sh run   DIR [PORT] -- CMD...   # start, run CMD with TLAUNCH_SSHD_ENV set, stop;
#                                                # exits with CMD's status (for Meson, CI, by hand)
#
# After "start", DIR/env holds KEY=VALUE lines (shell-sourceable):
#   PORT         the port sshd listens on
#   IDENTITY     client private key accepted for root
#   KNOWN_HOSTS  known_hosts with the host key for [127.0.0.2]:PORT and [127.0.0.3]:PORT
#   HOSTS        the addresses sshd listens on
#   USER         the user to log in as (root)
#   SSHD_PID     the sshd listener's PID
# Other files: DIR/sshd.log (sshd -e output), DIR/sshd.pid.launcher (PID that "stop" kills).
set -euo pipefail

ADDRS=(127.0.0.1 127.0.0.2 127.0.0.3)

usage() { echo "usage: $0 start|stop DIR [PORT] | run DIR [PORT] -- CMD..." >&2; exit 2; }

# State of a PID: "X" when gone, "Z" for a zombie (PID 1 here reaps orphans lazily, and
# kill -0 succeeds on a zombie).
proc_state() { awk '{print $3}' "/proc/$1/stat" 2>/dev/null || echo X; }
alive() { local st; st=$(proc_state "$1"); [ "$st" != X ] && [ "$st" != Z ]; }

port_in_use() {
  local a
  for a in "${ADDRS[@]}"; do
    if (exec 3<>"/dev/tcp/$a/$1") 2>/dev/null; then return 0; fi
  done
  return 1
}

stop_sshd() {
  local DIR=$1 pid i
  [ -f "$DIR/sshd.pid.launcher" ] || return 0
  pid=$(cat "$DIR/sshd.pid.launcher")
  if alive "$pid"; then
    kill "$pid" 2>/dev/null || true
    for i in $(seq 1 50); do alive "$pid" || break; sleep 0.1; done
  fi
  rm -f "$DIR/sshd.pid.launcher"
}

write_config() {
  local DIR=$1 PORT=$2 a
  {
    echo "Port $PORT"
    for a in "${ADDRS[@]}"; do echo "ListenAddress $a"; done
    cat <<EOF
HostKey $DIR/ssh_host_ed25519_key
PidFile $DIR/sshd.pid
AuthorizedKeysFile $DIR/authorized_keys .ssh/authorized_keys
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
# DIR may live under /tmp (mode 1777): StrictModes would reject authorized_keys there
StrictModes no
PrintMotd no
PrintLastLog no
UseDNS no
# the tests open many sessions and channels at once
MaxStartups 100:30:200
MaxSessions 100
Subsystem sftp internal-sftp
LogLevel VERBOSE
EOF
  } >"$DIR/sshd_config"
}

# Tries to bring sshd up on PORT; returns 1 (with sshd gone) when it could not bind.
try_start() {
  local DIR=$1 PORT=$2 pid i a
  port_in_use "$PORT" && return 1
  write_config "$DIR" "$PORT"
  /usr/sbin/sshd -t -f "$DIR/sshd_config"
  # -D: no daemonizing, so $! is the listener itself; -e: log to stderr
  /usr/sbin/sshd -D -e -f "$DIR/sshd_config" >>"$DIR/sshd.log" 2>&1 &
  pid=$!
  echo "$pid" >"$DIR/sshd.pid.launcher"
  for a in "${ADDRS[@]}"; do
    for i in $(seq 1 100); do
      alive "$pid" || break 2
      if (exec 3<>"/dev/tcp/$a/$PORT") 2>/dev/null; then break; fi
      sleep 0.05
    done
  done
  # a second sshd on a taken port exits ("Cannot bind any address") while the probe succeeds
  sleep 0.1
  if ! alive "$pid"; then
    rm -f "$DIR/sshd.pid.launcher"
    return 1
  fi
  for a in "${ADDRS[@]}"; do
    if ! (exec 3<>"/dev/tcp/$a/$PORT") 2>/dev/null; then
      echo "sshd $pid runs but does not accept connections on $a:$PORT; log:" >&2
      tail -20 "$DIR/sshd.log" >&2
      stop_sshd "$DIR"
      exit 1
    fi
  done
  return 0
}

start_sshd() {
  local DIR=$1 PORT=${2:-} p n key
  if [ ! -x /usr/sbin/sshd ]; then
    echo "sshd-fixture: /usr/sbin/sshd is missing; install it with" \
         "'apt-get install openssh-server' (or run tools/install-deps.sh)" >&2
    exit 1
  fi
  mkdir -p "$DIR"; chmod 700 "$DIR"
  DIR=$(cd "$DIR" && pwd)  # sshd needs absolute paths
  stop_sshd "$DIR"         # a previous run that was never stopped
  mkdir -p /run/sshd; chmod 755 /run/sshd  # sshd -D refuses to start without it
  [ -f "$DIR/ssh_host_ed25519_key" ] || ssh-keygen -q -t ed25519 -N '' -C tlaunch-test-host -f "$DIR/ssh_host_ed25519_key"
  [ -f "$DIR/id_ed25519" ] || ssh-keygen -q -t ed25519 -N '' -C tlaunch-test-client -f "$DIR/id_ed25519"
  cp "$DIR/id_ed25519.pub" "$DIR/authorized_keys"; chmod 600 "$DIR/authorized_keys"
  : >"$DIR/sshd.log"

  if [ -n "$PORT" ]; then
    try_start "$DIR" "$PORT" || {
      echo "sshd-fixture: cannot listen on port $PORT (in use?); log:" >&2
      tail -5 "$DIR/sshd.log" >&2; exit 1; }
  else
    for n in $(seq 1 20); do
      p=$((20000 + RANDOM % 20000))
      if try_start "$DIR" "$p"; then PORT=$p; break; fi
    done
    [ -n "$PORT" ] || { echo "sshd-fixture: found no free port; log:" >&2; tail -5 "$DIR/sshd.log" >&2; exit 1; }
  fi

  key=$(awk '{print $1, $2}' "$DIR/ssh_host_ed25519_key.pub")
  {
    echo "[127.0.0.2]:$PORT $key"
    echo "[127.0.0.3]:$PORT $key"
  } >"$DIR/known_hosts"
  {
    echo "PORT=$PORT"
    echo "IDENTITY=$DIR/id_ed25519"
    echo "KNOWN_HOSTS=$DIR/known_hosts"
    echo "HOSTS=\"${ADDRS[*]}\""
    echo "USER=root"
    echo "SSHD_PID=$(cat "$DIR/sshd.pid.launcher")"
  } >"$DIR/env"
  echo "sshd $(cat "$DIR/sshd.pid.launcher") listening on ${ADDRS[*]} port $PORT (env: $DIR/env)"
}

cmd=${1:-}; DIR=${2:-}
[ -n "$cmd" ] && [ -n "$DIR" ] || usage
case "$cmd" in
start) start_sshd "$DIR" "${3:-}" ;;
stop) stop_sshd "$DIR" ;;
run)
  shift 2
  PORT=
  if [ "${1:-}" != "--" ]; then PORT=${1:-}; shift || true; fi
  [ "${1:-}" = "--" ] || usage
  shift
  [ $# -gt 0 ] || usage
  start_sshd "$DIR" "$PORT"
  DIR=$(cd "$DIR" && pwd)
  trap 'stop_sshd "$DIR"' EXIT
  trap 'exit 130' INT TERM
  rc=0
  TLAUNCH_SSHD_ENV="$DIR/env" "$@" || rc=$?
  exit $rc
  ;;
*) usage ;;
esac
