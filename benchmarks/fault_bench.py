#!/usr/bin/env python3
"""Detection and recovery times of faults on real network namespaces.

Three hosts (network namespaces with an sshd each, tests/netns/netns_lab.sh) and
tests/integration/faulty launched over --launch=ssh: worker/0 on host 1, target/0 on host 2,
worker/1 on host 3. For each fault, with the default settings and with --heartbeat=SECONDS,
a few runs measure the time from the fault to the line that names it. The default settings
are --liveness=1 (TCP keepalive, the unanswered-data check, the watch of stopped processes by
their parent), without heartbeats:

  stopped node   SIGSTOP of worker/0          -> "[launcher] node worker/0@... failed"
  killed node    SIGKILL of worker/0          -> the same
  link down      ip link set down on host 1   -> the same
  partition      nftables drop between hosts 1 and 2 (both still reach the launcher), while
                 worker/0 calls target/0 without a deadline -> "call failed after" (unavailable)
  healed         the partition removed --hold seconds after its notice (or after --cap)
                                              -> "calls succeed again"

Needs root, iproute2, nftables and openssh-server. Sends traffic only to the lab's own
addresses (10.214.N.0/24, on a bridge it creates) and removes everything it made.

  benchmarks/fault_bench.py --faulty build/rel/tests/integration/faulty [--heartbeat 0.5] [--runs 3]
"""
import argparse
import os
import re
import signal
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
LAB = os.path.join(HERE, "..", "tests", "netns", "netns_lab.sh")
HOSTS = 3
TARGETS = {  # the targets (with the default settings: --liveness=1)
    "stopped node": 3.0,
    "killed node": 3.0,
    "link down": 3.0,
    "partition": 3.0,
    "healed": 1.0,
}


def sh(cmd, check=True):
    return subprocess.run(cmd, shell=True, check=check, stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL).returncode


class Lab:
    def __init__(self):
        pid = os.getpid()
        self.prefix = f"tlnb{pid}"
        self.net = f"10.214.{20 + pid % 200}"
        self.dir = f"/tmp/{self.prefix}-lab"
        self.args = f"{self.dir} {self.prefix} {self.net} {HOSTS}"
        subprocess.run(f"bash {LAB} up {self.args}", shell=True, check=True)

    def down(self):
        sh(f"bash {LAB} down {self.args}", check=False)

    def addr(self, i):
        return f"{self.net}.{10 + i}"

    def ns(self, i):
        return f"{self.prefix}-{i}"

    def listener(self, i):
        with open(f"{self.dir}/host{i}/sshd.pid.launcher") as f:
            return int(f.read())

    def pids(self, i):
        """Processes in host i's namespace other than its sshd listener."""
        out = subprocess.run(["ip", "netns", "pids", self.ns(i)], capture_output=True, text=True)
        return [int(p) for p in out.stdout.split() if int(p) != self.listener(i)]

    def node_pid(self, i, role):
        for p in self.pids(i):
            try:
                with open(f"/proc/{p}/cmdline", "rb") as f:
                    if f"--tlaunch-role={role}\0".encode() in f.read():
                        return p
            except OSError:
                pass
        return None

    def partition(self, a, b):
        for i, j in ((a, b), (b, a)):
            sh(f"ip netns exec {self.ns(i)} nft add table inet tlpart \\; "
               f"add chain inet tlpart in '{{ type filter hook input priority 0 ; }}' \\; "
               f"add rule inet tlpart in ip saddr {self.addr(j)} drop")

    def heal(self):
        for i in range(1, HOSTS + 1):
            sh(f"ip netns exec {self.ns(i)} nft delete table inet tlpart", check=False)

    def reset(self):
        """Links up, no partition, and (after a few seconds) nothing but the sshd listeners."""
        self.heal()
        for i in range(1, HOSTS + 1):
            sh(f"ip -n {self.ns(i)} link set eth0 up", check=False)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and any(self.pids(i) for i in range(1, HOSTS + 1)):
            time.sleep(0.1)
        for i in range(1, HOSTS + 1):
            for p in self.pids(i):  # the lab's own processes only
                os.kill(p, signal.SIGKILL)


class Launch:
    """The launcher, its output lines timestamped as they arrive."""

    def __init__(self, lab, faulty, mode, extra):
        argv = [faulty, "--launch=ssh",
                f"--hosts=root@{lab.addr(1)},root@{lab.addr(2)},root@{lab.addr(3)}",
                f"--ssh-identity={lab.dir}/id_ed25519", f"--known-hosts={lab.dir}/known_hosts",
                "--place", f"worker={lab.addr(1)},{lab.addr(3)}", "--place",
                f"target={lab.addr(2)}", "--grace=2"] + extra + ["--", mode]
        self.p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  stdin=subprocess.DEVNULL, text=True)
        self.lines = []  # (time, line)
        self.cv = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.p.stdout:
            with self.cv:
                self.lines.append((time.monotonic(), line.rstrip("\n")))
                self.cv.notify_all()
        with self.cv:
            self.lines.append((time.monotonic(), None))
            self.cv.notify_all()

    def wait_line(self, pattern, timeout, after=0.0):
        """The time of the first line matching pattern that arrived after `after`, or None."""
        rx = re.compile(pattern)
        deadline = time.monotonic() + timeout
        with self.cv:
            while True:
                for t, line in self.lines:
                    if line is not None and t >= after and rx.search(line):
                        return t
                if any(line is None for _, line in self.lines):
                    return None
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self.cv.wait(left)

    def kill(self):
        if self.p.poll() is None:
            self.p.kill()
        self.p.wait()


def one_run(lab, faulty, fault, extra, cap, hold):
    """Seconds from the fault to its detection for one run: {fault: seconds or None}."""
    mode = "outage" if fault == "partition" else "idle"
    launch = Launch(lab, faulty, mode, extra)
    out = {}
    try:
        ready = r"first call served" if mode == "outage" else r"\[worker/1@.*ready pid="
        if launch.wait_line(ready, 60) is None or (
                mode == "idle" and launch.wait_line(r"\[worker/0@.*ready pid=", 60) is None):
            raise RuntimeError("the program did not start:\n" +
                               "\n".join(l for _, l in launch.lines if l))
        named = r"\[launcher\] node worker/0@.*failed"
        if fault in ("stopped node", "killed node"):
            pid = lab.node_pid(1, "worker/0")
            t0 = time.monotonic()
            os.kill(pid, signal.SIGSTOP if fault == "stopped node" else signal.SIGKILL)
            t = launch.wait_line(named, cap, t0)
            out[fault] = None if t is None else t - t0
        elif fault == "link down":
            t0 = time.monotonic()
            sh(f"ip -n {lab.ns(1)} link set eth0 down")
            t = launch.wait_line(named, cap, t0)
            out[fault] = None if t is None else t - t0
        else:
            t0 = time.monotonic()
            lab.partition(1, 2)
            t = launch.wait_line(r"call failed after", cap, t0)
            out["partition"] = None if t is None else t - t0
            time.sleep(hold)  # a partition that lasts: callers keep dialing into it
            t1 = time.monotonic()
            lab.heal()
            t = launch.wait_line(r"calls succeed again", cap, t1)
            out["healed"] = None if t is None else t - t1
    finally:
        launch.kill()
        lab.reset()
    return out


def fmt(values, cap):
    done = sorted(v for v in values if v is not None)
    missed = len(values) - len(done)
    if not done:
        return f"none in {cap:g} s"
    p50 = statistics.median(done)
    s = f"{p50:.2f} / {done[-1]:.2f}"
    if missed:
        s += f" ({missed} of {len(values)} none in {cap:g} s)"
    return s


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--faulty", required=True, help="the faulty binary (tests/integration)")
    ap.add_argument("--heartbeat", type=float, default=0.5, help="the --heartbeat to compare")
    ap.add_argument("--runs", type=int, default=3, help="runs per fault and setting")
    ap.add_argument("--cap", type=float, default=10.0, help="seconds to wait for a detection")
    ap.add_argument("--hold", type=float, default=5.0,
                    help="seconds the partition lasts after its notice")
    ap.add_argument("--faults", default=",".join(k for k in TARGETS if k != "healed"),
                    help="comma-separated subset of: stopped node,killed node,link down,partition")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("fault_bench: needs root (network namespaces)")
    settings = [("default", []), (f"--heartbeat={a.heartbeat:g}", [f"--heartbeat={a.heartbeat:g}"])]
    faults = [f.strip() for f in a.faults.split(",")]
    lab = Lab()
    results = {}  # (setting, fault) -> [seconds or None]
    try:
        for name, extra in settings:
            for fault in faults:
                for run in range(a.runs):
                    got = one_run(lab, os.path.abspath(a.faulty), fault, extra, a.cap, a.hold)
                    for k, v in got.items():
                        results.setdefault((name, k), []).append(v)
                    print(f"{name:>16} {fault:<13} run {run + 1}: " +
                          ", ".join(f"{k} {'none' if v is None else f'{v:.2f} s'}"
                                    for k, v in got.items()), flush=True)
    finally:
        lab.down()
    shown = [f for f in TARGETS if any((n, f) in results for n, _ in settings)]
    print(f"\nseconds from the fault to its notice, median / max of {a.runs} runs")
    header = ["fault", "target"] + [n for n, _ in settings]
    rows = [[f, f"{TARGETS[f]:g} s"] + [fmt(results.get((n, f), []), a.cap) for n, _ in settings]
            for f in shown]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for r in rows:
        print("| " + " | ".join(r) + " |")


if __name__ == "__main__":
    main()
