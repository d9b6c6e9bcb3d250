#!/usr/bin/env python3
"""The launch benchmark: how long a multi-process launch takes and how much memory it uses.

For each instance count it runs PROGRAM (tests/ssh_launch/remote_program, mode `rss`: every
worker logs its resident set once running, then ends) under local_mp and with --launch=ssh on
the three loopback hosts of tools/sshd-fixture.sh (127.0.0.1-3), with one agent per host and,
for comparison, with one SSH exec per node (--ssh-per-node-exec). Times come from the
launcher's own TLAUNCH_TIMINGS=1 line (sessions up, upload, start of the nodes to the
last host's agent running (its login shell done) and to all registered, stop); the
launcher's peak RSS is its VmHWM, sampled every 10 ms until it exits; an idle node's RSS
is what the workers report once running (the median worker).

  launch_bench.py PROGRAM SSHD_ENV [--counts 4,16,32,64] [--runs 5]
                  [--modes local_mp,agent,per_node] [--per-node-counts 4,16]

Modes: local_mp, local_mp_exec (--exec-nodes: node processes executed, not forked), agent
(one agent per host, which forks the nodes), agent_exec (the agents execute them), per_node
(--ssh-per-node-exec).

Prints one table (medians, min-max over the runs); a failed launch shows as "failed".
Exit status 1 when any launch failed.
"""
import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

TIMINGS = re.compile(
    r"timings: (\d+) nodes.*?(?:ssh sessions (\d+) ms; upload (\d+) ms; )?"
    r"(?:agents up (\d+) ms; )?"
    r"start of the nodes to all registered (\d+) ms; stop (\d+) ms")
RSS = re.compile(r"\] rss_kb=(\d+) hwm_kb=(\d+)")


def read_env(path):
    env = {}
    with open(path) as f:
        for line in f:
            if "=" in line:
                k, v = line.rstrip("\n").split("=", 1)
                env[k] = v.strip('"')
    return env


def vm_hwm_kb(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def run_once(program, mode, count, fixture, known_hosts, timeout):
    argv = [program, "--color=never", "--replicas", f"worker={count}", "--grace=5"]
    if mode.startswith("local_mp"):
        argv.append("--launch=local_mp")
        if mode == "local_mp_exec":
            argv.append("--exec-nodes")
    else:
        hosts = ",".join(f"{fixture['USER']}@127.0.0.{i}:{fixture['PORT']}" for i in (1, 2, 3))
        argv += ["--launch=ssh", f"--hosts={hosts}", f"--ssh-identity={fixture['IDENTITY']}",
                 f"--known-hosts={known_hosts}", "--ssh-accept-new", "--start-timeout=60"]
        if mode == "per_node":
            argv.append("--ssh-per-node-exec")
        if mode == "agent_exec":
            argv.append("--exec-nodes")
    argv += ["--", "rss"]
    env = dict(os.environ, TLAUNCH_TIMINGS="1")
    began = time.monotonic()
    p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
    peak = 0
    # Sample the launcher's high-water mark while it runs; the pipes are drained after
    # (the output of 64 workers is a few KiB, well under a pipe's buffer).
    while p.poll() is None:
        hwm = vm_hwm_kb(p.pid)
        if hwm:
            peak = max(peak, hwm)
        if time.monotonic() - began > timeout:
            p.kill()
            break
        time.sleep(0.01)
    out, err = p.communicate()
    wall = (time.monotonic() - began) * 1000
    m = TIMINGS.search(err)
    rss = sorted(int(r[0]) for r in RSS.findall(out))
    if p.returncode != 0 or not m or len(rss) != count:
        tail = "\n".join(err.strip().splitlines()[-3:])
        print(f"  {mode} {count}: failed (exit {p.returncode}, {len(rss)} of {count} workers "
              f"ran): {tail}", file=sys.stderr)
        return None
    return {
        "sessions": int(m.group(2)) if m.group(2) else None,
        "upload": int(m.group(3)) if m.group(3) else None,
        "agents": int(m.group(4)) if m.group(4) else None,
        "registered": int(m.group(5)),
        "stop": int(m.group(6)),
        "wall": wall,
        "launcher_rss": peak / 1024,
        "node_rss": statistics.median(rss) / 1024,
    }


def cell(values, fmt="{:.0f}"):
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    med = statistics.median(values)
    if len(values) == 1:
        return fmt.format(med)
    return f"{fmt.format(med)} ({fmt.format(min(values))}-{fmt.format(max(values))})"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("program")
    ap.add_argument("sshd_env")
    ap.add_argument("--counts", default="4,16,32,64")
    ap.add_argument("--per-node-counts", default="4,16")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--modes", default="local_mp,agent,per_node")
    ap.add_argument("--timeout", type=float, default=120)
    a = ap.parse_args()
    fixture = read_env(a.sshd_env)
    counts = [int(c) for c in a.counts.split(",")]
    per_node_counts = [int(c) for c in a.per_node_counts.split(",")]
    modes = a.modes.split(",")
    tmp = tempfile.mkdtemp(prefix="tlaunch-launch-bench-")
    known = os.path.join(tmp, "known_hosts")
    shutil.copy(fixture["KNOWN_HOSTS"], known)  # 127.0.0.1's key is accepted into the copy
    failed = False
    rows = []
    try:
        for mode in modes:
            for n in counts:
                if mode == "per_node" and n not in per_node_counts:
                    continue
                results = []
                for _ in range(a.runs):
                    r = run_once(a.program, mode, n, fixture, known, a.timeout)
                    if r is None:
                        failed = True
                        break
                    results.append(r)
                rows.append((mode, n, results))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    label = {"local_mp": "local_mp", "local_mp_exec": "local_mp, --exec-nodes",
             "agent": "ssh, agent per host", "agent_exec": "ssh, agent per host, --exec-nodes",
             "per_node": "ssh, exec per node"}
    print(f"launch benchmark: {a.runs} runs each, median (min-max); ssh on 3 loopback hosts")
    print("| launch | instances | sessions up ms | upload ms | agents up ms | all registered ms "
          "| stop ms | wall ms | launcher peak RSS MB | idle node RSS MB |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for mode, n, rs in rows:
        if not rs:
            print(f"| {label[mode]} | {n} | failed | | | | | | | |")
            continue
        col = lambda k, f="{:.0f}": cell([r[k] for r in rs], f)
        print(f"| {label[mode]} | {n} | {col('sessions')} | {col('upload')} | {col('agents')} "
              f"| {col('registered')} "
              f"| {col('stop')} | {col('wall')} | {col('launcher_rss', '{:.1f}')} "
              f"| {col('node_rss', '{:.1f}')} |")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
