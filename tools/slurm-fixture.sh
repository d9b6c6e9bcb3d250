#!/usr/bin/env bash
# A throwaway Slurm cluster on this machine for the Slurm tests: munged (unless one already
# answers), slurmctld and N slurmd (nodes node1..nodeN, all on 127.0.0.1), each a foreground
# process started here and stopped by PID. No systemd, no cgroups (proctrack/linuxproc,
# task/none), no accounting database; the daemons run as root, munged as user munge.
# Needs root and the Debian packages slurm-wlm and munge (tools/install-deps.sh).
#
# Usage:
#   slurm-fixture.sh start DIR [N]            # N slurmd (default 2); free ports are picked
#   slurm-fixture.sh stop  DIR                # stops what start started, by PID
#   slurm-fixture.sh run   DIR [N] -- CMD...  # start, run CMD with TLAUNCH_SLURM_ENV set, stop;
#                                             # exits with CMD's status (for Meson, by hand)
#
# After "start", DIR/env holds KEY=VALUE lines (shell-sourceable):
#   SLURM_CONF   the slurm.conf the client commands (srun, sbatch, salloc, squeue) need
#   NODES        the node names ("node1 node2")
# Logs: DIR/slurmctld.log, DIR/slurmd-nodeI.log, DIR/*.out.
set -euo pipefail

usage() { echo "usage: $0 start|stop DIR [N] | run DIR [N] -- CMD..." >&2; exit 2; }

# "X" when gone, "Z" for a zombie (PID 1 here reaps orphans lazily; kill -0 succeeds on one).
proc_state() { awk '{print $3}' "/proc/$1/stat" 2>/dev/null || echo X; }
alive() { local st; st=$(proc_state "$1"); [ "$st" != X ] && [ "$st" != Z ]; }

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

stop_cluster() {
  local D=$1 f pid i
  # jobs first: their slurmstepd and tasks are not children of slurmd and would outlive it
  if [ -f "$D/slurmctld.launcher.pid" ] && alive "$(cat "$D/slurmctld.launcher.pid")"; then
    SLURM_CONF=$D/slurm.conf scancel --partition=debug 2>/dev/null || true
    for i in $(seq 1 100); do
      [ -z "$(SLURM_CONF=$D/slurm.conf squeue -h 2>/dev/null)" ] && break; sleep 0.1; done
  fi
  # slurmd first (they end their steps), then slurmctld, then a munged we started
  for f in "$D"/slurmd-*.launcher.pid "$D/slurmctld.launcher.pid" "$D/munged.launcher.pid"; do
    [ -f "$f" ] || continue
    pid=$(cat "$f")
    if alive "$pid"; then
      kill "$pid" 2>/dev/null || true
      for i in $(seq 1 100); do alive "$pid" || break; sleep 0.1; done
      alive "$pid" && kill -9 "$pid" 2>/dev/null || true
    fi
    rm -f "$f"
  done
}

start_cluster() {
  local D=$1 N=$2 i base nodes
  for c in slurmctld slurmd munged srun; do
    command -v "$c" >/dev/null || [ -x "/usr/sbin/$c" ] || {
      echo "slurm-fixture: $c is missing; install slurm-wlm and munge" \
           "(tools/install-deps.sh)" >&2; exit 1; }
  done
  mkdir -p "$D"; D=$(cd "$D" && pwd)
  stop_cluster "$D"  # a previous run that was never stopped
  rm -rf "$D/state" "$D/spool"
  mkdir -p "$D/state"
  for i in $(seq 1 "$N"); do mkdir -p "$D/spool/node$i"; done  # slurmd does not create it

  # munge: the key comes from the package's postinst; one munged serves every user of it
  if [ ! -s /etc/munge/munge.key ]; then
    mungekey --create --force 2>/dev/null ||
      dd if=/dev/urandom bs=1 count=1024 of=/etc/munge/munge.key status=none
    chown munge:munge /etc/munge/munge.key; chmod 400 /etc/munge/munge.key
  fi
  if ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    install -d -m 0755 -o munge -g munge /run/munge
    # setpriv execs (runuser would stay as the parent), so $! is munged itself
    setpriv --reuid=munge --regid=munge --init-groups /usr/sbin/munged -F >"$D/munged.out" 2>&1 &
    echo $! >"$D/munged.launcher.pid"
    for i in $(seq 1 50); do munge -n 2>/dev/null | unmunge >/dev/null 2>&1 && break; sleep 0.1; done
  fi

  # slurmctld on base, slurmd on base+1..base+N: free ports, so two clusters can coexist
  for i in $(seq 1 30); do
    base=$((20000 + RANDOM % 20000)); local ok=1
    for p in $(seq "$base" $((base + N))); do port_free "$p" || ok=0; done
    [ $ok = 1 ] && break
  done
  if [ "$N" = 1 ]; then
    nodes="NodeName=node1 NodeHostname=localhost NodeAddr=127.0.0.1 Port=$((base + 1))"
  else
    # several slurmd on one host: one NodeName and port each, %n in their paths
    nodes="NodeName=node[1-$N] NodeHostname=localhost NodeAddr=127.0.0.1 Port=[$((base + 1))-$((base + N))]"
  fi
  cat >"$D/slurm.conf" <<EOF
ClusterName=tlaunch-ci
SlurmctldHost=localhost
SlurmctldPort=$base
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation=$D/state
SlurmdSpoolDir=$D/spool/%n
SlurmctldPidFile=$D/slurmctld.pid
SlurmdPidFile=$D/slurmd-%n.pid
SlurmctldLogFile=$D/slurmctld.log
SlurmdLogFile=$D/slurmd-%n.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
MpiDefault=none
SchedulerType=sched/backfill
ReturnToService=2
SlurmctldTimeout=30
SlurmdTimeout=30
MinJobAge=10
KillWait=2
$nodes CPUs=$(nproc) RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF

  /usr/sbin/slurmctld -D -f "$D/slurm.conf" >"$D/slurmctld.out" 2>&1 &
  echo $! >"$D/slurmctld.launcher.pid"
  for i in $(seq 1 "$N"); do
    /usr/sbin/slurmd -D -N "node$i" -f "$D/slurm.conf" >"$D/slurmd-node$i.out" 2>&1 &
    echo $! >"$D/slurmd-node$i.launcher.pid"
  done
  export SLURM_CONF=$D/slurm.conf
  for i in $(seq 1 150); do
    [ "$(sinfo -h -N -t idle -o '%N' 2>/dev/null | sort -u | wc -l)" = "$N" ] && break
    if [ "$i" = 150 ]; then
      echo "slurm-fixture: nodes not idle after 30 s" >&2
      sinfo -N >&2 || true; tail -5 "$D"/*.out "$D"/*.log >&2 || true
      stop_cluster "$D"; exit 1
    fi
    sleep 0.2
  done
  {
    echo "SLURM_CONF=$D/slurm.conf"
    echo "NODES=\"$(seq -f 'node%g' -s ' ' 1 "$N")\""
  } >"$D/env"
  echo "slurm: slurmctld $(cat "$D/slurmctld.launcher.pid") on port $base, $N slurmd idle (env: $D/env)"
}

cmd=${1:-}; DIR=${2:-}
[ -n "$cmd" ] && [ -n "$DIR" ] || usage
case "$cmd" in
start) start_cluster "$DIR" "${3:-2}" ;;
stop) [ -d "$DIR" ] && stop_cluster "$(cd "$DIR" && pwd)" ;;
run)
  shift 2
  N=2
  if [ "${1:-}" != "--" ]; then N=${1:-2}; shift || true; fi
  [ "${1:-}" = "--" ] || usage
  shift
  [ $# -gt 0 ] || usage
  start_cluster "$DIR" "$N"
  DIR=$(cd "$DIR" && pwd)
  trap 'stop_cluster "$DIR"' EXIT
  trap 'exit 130' INT TERM
  rc=0
  TLAUNCH_SLURM_ENV="$DIR/env" "$@" || rc=$?
  exit $rc
  ;;
*) usage ;;
esac
