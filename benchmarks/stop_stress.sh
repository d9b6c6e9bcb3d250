#!/usr/bin/env bash
# Runs stop_stress (benchmarks/stop_stress.cpp) RUNS times under CPU load, alternating
# 4 and 8 workers, and counts the runs that did not end as a stop should: exit code not
# 0, or a line saying a node failed or that a run() ended with an error. Not run by CI.
#
#   benchmarks/stop_stress.sh BINARY [RUNS] [-- EXTRA LAUNCH FLAGS]
#   benchmarks/stop_stress.sh build/rel/benchmarks/stop_stress 48 -- --tls
#
# HOGS (default 4) busy processes (`yes >/dev/null`) load the CPUs meanwhile; they are
# ended by their PIDs when the script ends. LOG_DIR keeps each bad run's output.
set -uo pipefail

if [[ $# -lt 1 || ! -x "$1" ]]; then
  echo "usage: $0 BINARY [RUNS] [-- EXTRA FLAGS]" >&2
  exit 2
fi
bin=$1
shift
runs=48
if [[ $# -gt 0 && "$1" != "--" ]]; then
  runs=$1
  shift
fi
[[ $# -gt 0 && "$1" == "--" ]] && shift
extra=("$@")
hogs=${HOGS:-4}
log_dir=${LOG_DIR:-$(mktemp -d -t stop_stress.XXXXXX)}
mkdir -p "$log_dir"

hog_pids=()
stop_hogs() {
  for p in "${hog_pids[@]}"; do kill "$p" 2>/dev/null; done
  for p in "${hog_pids[@]}"; do wait "$p" 2>/dev/null; done
  hog_pids=()
}
trap stop_hogs EXIT
for ((i = 0; i < hogs; ++i)); do
  yes >/dev/null &
  hog_pids+=($!)
done

nonzero=0
error_lines=0
for ((r = 1; r <= runs; ++r)); do
  workers=$((r % 2 == 0 ? 8 : 4))
  out="$log_dir/run$r.txt"
  timeout 120 "$bin" --launch=local_mp --color=never --replicas=worker=$workers "${extra[@]}" \
    >"$out" 2>&1
  code=$?
  bad_line=0
  grep -qE 'failed|ended with an error|exited with code [1-9]' "$out" && bad_line=1
  if [[ $code -ne 0 ]]; then
    nonzero=$((nonzero + 1))
    echo "run $r ($workers workers): exit $code" >&2
    grep -E 'failed|ended with an error' "$out" | head -3 >&2
  fi
  [[ $bad_line -eq 1 ]] && error_lines=$((error_lines + 1))
  [[ $code -eq 0 && $bad_line -eq 0 ]] && rm -f "$out"
done
stop_hogs
echo "runs=$runs nonzero_exits=$nonzero runs_with_error_lines=$error_lines flags=${extra[*]:-(none)} logs=$log_dir"
