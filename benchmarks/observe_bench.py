#!/usr/bin/env python3
"""What observing a program costs its launcher: CPU while it serves --dashboard and --metrics.

Runs PROGRAM (tests/observe/metrics_program, with the program argument `idle`: its workers
make no calls) under local_mp with N workers, waits until every process is running, then
measures the launcher's CPU (utime + stime of /proc/PID/stat) over SECONDS in each phase, in
turn, in the same launch:

  gathering   --dashboard and --metrics on, nobody reading: the launcher asks every process
              for its sample each second and keeps the answers
  dashboard   as a browser with the page open does: GET /api/state every second
  prometheus  as a Prometheus server does: GET /metrics every second

and, as the baseline, the same program launched without either flag (the launcher idle).
Also the size of one /api/state and one /metrics answer, and how long they take (median).

  observe_bench.py PROGRAM [--counts 64,256,1023] [--seconds 20]
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import time
import urllib.request


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def launch(program, workers, observe):
    args = [program, "--launch=local_mp", "--color=never", "--start-timeout=300",
            "--replicas", f"worker={workers}"]
    if observe:
        args += ["--dashboard=127.0.0.1:0", "--metrics=127.0.0.1:0"]
    args += ["--", "idle"]
    return subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def read_ports(p):
    ports = {}
    deadline = time.time() + 120
    while len(ports) < 2 and time.time() < deadline:
        line = p.stderr.readline()
        m = re.search(r"(dashboard|metrics) at http://[^ ]*:(\d+)/", line)
        if m:
            ports[m.group(1)] = int(m.group(2))
    # The rest of its output is not needed; keep the pipe drained.
    subprocess.Popen(["cat"], stdin=p.stderr, stdout=subprocess.DEVNULL)
    return ports


def get(port, path):
    t = time.perf_counter()
    with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=30) as r:
        body = r.read()
    return body, time.perf_counter() - t


def wait_running(port, processes, timeout=300):
    deadline = time.time() + timeout
    while time.time() < deadline:
        body, _ = get(port, "/api/state")
        if body.count(b'"state":"running"') >= processes:
            return True
        time.sleep(1)
    return False


def phase(pid, seconds, poll=None):
    start, t0 = cpu_seconds(pid), time.time()
    times, size = [], 0
    while time.time() - t0 < seconds:
        if poll:
            body, took = poll()
            times.append(took)
            size = len(body)
        time.sleep(1)
    cpu = cpu_seconds(pid) - start
    return 100 * cpu / (time.time() - t0), size, statistics.median(times) if times else None


def stop(p):
    p.terminate()
    try:
        p.wait(60)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("program")
    ap.add_argument("--counts", default="64,256,1023")
    ap.add_argument("--seconds", type=float, default=20)
    a = ap.parse_args()
    rows = []
    for workers in [int(x) for x in a.counts.split(",")]:
        processes = workers + 1
        # Baseline: no endpoints. Its processes are running once its launcher is quiet.
        base = launch(a.program, workers, False)
        time.sleep(max(5, processes / 50))
        baseline, _, _ = phase(base.pid, a.seconds)
        stop(base)

        p = launch(a.program, workers, True)
        ports = read_ports(p)
        if len(ports) < 2 or not wait_running(ports["dashboard"], processes):
            print(f"{processes} processes: the launch did not come up", file=sys.stderr)
            stop(p)
            rows.append((processes, None))
            continue
        gathering, _, _ = phase(p.pid, a.seconds)
        dashboard, state_size, state_time = phase(
            p.pid, a.seconds, lambda: get(ports["dashboard"], "/api/state"))
        prometheus, metrics_size, metrics_time = phase(
            p.pid, a.seconds, lambda: get(ports["metrics"], "/metrics"))
        stop(p)
        rows.append((processes, (baseline, gathering, dashboard, prometheus, state_size,
                                 state_time, metrics_size, metrics_time)))

    print("| processes | launcher CPU, no endpoints (baseline) | gathering, nobody reading | "
          "+ dashboard (/api/state 1/s) | + Prometheus (/metrics 1/s) | /api/state | /metrics |")
    print("|---:|---:|---:|---:|---:|---|---|")
    for processes, r in rows:
        if r is None:
            print(f"| {processes} | failed | | | | | |")
            continue
        b, g, d, m, ss, st, ms, mt = r
        print(f"| {processes} | {b:.1f} % | {g:.1f} % | {d:.1f} % | {m:.1f} % | "
              f"{ss / 1024:.0f} KiB, {st * 1e3:.1f} ms | {ms / 1024:.0f} KiB, {mt * 1e3:.1f} ms |")


if __name__ == "__main__":
    main()
