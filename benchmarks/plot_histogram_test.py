#!/usr/bin/env python3
"""Test of plot_histogram.py on a real report: a short rpc_bench --json run under
local_mp, drawn as a PNG that is then decoded and checked against the report.

    plot_histogram_test.py RPC_BENCH PLOT_HISTOGRAM_PY
"""

import importlib.util
import os
import struct
import subprocess
import sys
import tempfile
import zlib


def fail(message):
    print(f"plot_histogram_test: FAILED: {message}", file=sys.stderr)
    sys.exit(1)


def decode_png(data):
    """(width, height, rows of RGB tuples) of an 8-bit RGB PNG with filter 0."""
    if not data.startswith(b"\x89PNG\r\n\x1a\n"):
        fail("not a PNG signature")
    at, idat, width, height = 8, b"", 0, 0
    while at < len(data):
        (length,) = struct.unpack(">I", data[at:at + 4])
        kind, body = data[at + 4:at + 8], data[at + 8:at + 8 + length]
        (crc,) = struct.unpack(">I", data[at + 8 + length:at + 12 + length])
        if zlib.crc32(kind + body) != crc:
            fail(f"bad CRC in chunk {kind!r}")
        if kind == b"IHDR":
            width, height, depth, colour_type = struct.unpack(">IIBB", body[:10])
            if (depth, colour_type) != (8, 2):
                fail(f"expected 8-bit RGB, got depth {depth} colour type {colour_type}")
        elif kind == b"IDAT":
            idat += body
        at += 12 + length
    raw = zlib.decompress(idat)
    stride = 1 + 3 * width
    if len(raw) != stride * height:
        fail(f"pixel data is {len(raw)} bytes, want {stride * height}")
    rows = []
    for y in range(height):
        row = raw[y * stride:(y + 1) * stride]
        if row[0] != 0:
            fail(f"row {y} uses filter {row[0]}")
        rows.append([tuple(row[1 + 3 * x:4 + 3 * x]) for x in range(width)])
    return width, height, rows


def main():
    rpc_bench, script = sys.argv[1], sys.argv[2]
    spec = importlib.util.spec_from_file_location("plot_histogram", script)
    plot = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(plot)

    run = subprocess.run([rpc_bench, "--launch=local_mp", "--", "--count=300", "--warmup=20",
                          "--inflight=8", "--bulk-count=0", "--rounds=2", "--json"],
                         capture_output=True, text=True, timeout=120)
    if run.returncode != 0:
        fail(f"rpc_bench exited with {run.returncode}: {run.stderr}")
    report = plot.read_report(run.stdout)
    for name in ("baseline_sequential", "tlaunch_sequential", "raw_sequential"):
        buckets = report["histograms"].get(name)
        if not buckets or sum(b["count"] for b in buckets) != 300:
            fail(f"histogram {name} does not count the 300 timed calls: {buckets}")

    with tempfile.TemporaryDirectory() as tmp:
        report_path, png_path = os.path.join(tmp, "r.json"), os.path.join(tmp, "h.png")
        with open(report_path, "w", encoding="utf-8") as f:
            f.write(run.stdout)  # as printed: with the launcher's [driver/0] prefix
        drawn = subprocess.run([sys.executable, script, report_path, png_path],
                               capture_output=True, text=True)
        if drawn.returncode != 0:
            fail(f"plot_histogram.py exited with {drawn.returncode}: {drawn.stderr}")
        width, height, rows = decode_png(open(png_path, "rb").read())

        # A file that is not a report is refused by name.
        bad = os.path.join(tmp, "bad.json")
        with open(bad, "w", encoding="utf-8") as f:
            f.write("hello\n")
        refused = subprocess.run([sys.executable, script, bad, png_path],
                                 capture_output=True, text=True)
        if refused.returncode != 1 or "bad.json" not in refused.stderr:
            fail(f"a non-report was not refused by name: {refused.returncode} {refused.stderr}")

    if (width, height) != (plot.WIDTH, plot.HEIGHT):
        fail(f"picture is {width}x{height}")
    series, _, peak = plot.layout(report)
    plot_h = plot.HEIGHT - plot.TOP - plot.BOTTOM
    base_y = plot.TOP + plot_h
    for label, colour, shares in series:
        # Each series' tallest bar (below the legend) stands in proportion to its
        # largest share of calls.
        tallest = 0
        for x in range(plot.LEFT, width):
            h = 0
            while base_y - 1 - h >= plot.TOP and rows[base_y - 1 - h][x] == colour:
                h += 1
            tallest = max(tallest, h)
        want = round(max(shares.values()) / peak * plot_h)
        if abs(tallest - want) > 1:
            fail(f"{label}: tallest bar is {tallest} px, want {want} px")
    print(f"plot_histogram_test: ok ({len(series)} series, {width}x{height})")


if __name__ == "__main__":
    main()
