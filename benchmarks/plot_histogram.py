#!/usr/bin/env python3
"""Draws rpc_bench's sequential latency histograms as a PNG.

    rpc_bench --launch=local_mp -- --json > result.json
    python3 plot_histogram.py result.json latency.png

Reads the report that `rpc_bench --json` prints (with or without the launcher's
"[driver/0] " prefix), takes its "histograms" (log-scale buckets, four per power
of two) and draws one bar per series in every bucket: the share of that series'
calls whose round trip fell in the bucket. Needs only the Python standard library.
"""

import json
import math
import re
import struct
import sys
import zlib

WIDTH, HEIGHT = 900, 420
LEFT, RIGHT, TOP, BOTTOM = 70, 20, 60, 60
SCALE = 2  # font pixels per glyph pixel

SERIES = [  # (name in the report, legend label, colour)
    ("baseline_sequential", "baseline", (136, 136, 136)),
    ("tlaunch_sequential", "tlaunch", (42, 111, 219)),
    ("grpc_sequential", "grpc", (230, 126, 34)),
    ("raw_sequential", "raw socket", (46, 160, 67)),
]
AXIS = (40, 40, 40)
BACKGROUND = (255, 255, 255)

# 5x7 glyphs for the characters the picture uses (g, p, q, y have two more rows
# for their tails).
FONT = {
    "0": ["01110", "10001", "10011", "10101", "11001", "10001", "01110"],
    "1": ["00100", "01100", "00100", "00100", "00100", "00100", "01110"],
    "2": ["01110", "10001", "00001", "00010", "00100", "01000", "11111"],
    "3": ["11110", "00001", "00001", "01110", "00001", "00001", "11110"],
    "4": ["00010", "00110", "01010", "10010", "11111", "00010", "00010"],
    "5": ["11111", "10000", "11110", "00001", "00001", "10001", "01110"],
    "6": ["00110", "01000", "10000", "11110", "10001", "10001", "01110"],
    "7": ["11111", "00001", "00010", "00100", "01000", "01000", "01000"],
    "8": ["01110", "10001", "10001", "01110", "10001", "10001", "01110"],
    "9": ["01110", "10001", "10001", "01111", "00001", "00010", "01100"],
    ".": ["00000", "00000", "00000", "00000", "00000", "01100", "01100"],
    "%": ["11000", "11001", "00010", "00100", "01000", "10011", "00011"],
    "(": ["00010", "00100", "01000", "01000", "01000", "00100", "00010"],
    ")": ["01000", "00100", "00010", "00010", "00010", "00100", "01000"],
    ",": ["00000", "00000", "00000", "00000", "01100", "00100", "01000"],
    "-": ["00000", "00000", "00000", "11111", "00000", "00000", "00000"],
    " ": ["00000"] * 7,
    "a": ["00000", "00000", "01110", "00001", "01111", "10001", "01111"],
    "b": ["10000", "10000", "10110", "11001", "10001", "10001", "11110"],
    "c": ["00000", "00000", "01110", "10000", "10000", "10001", "01110"],
    "d": ["00001", "00001", "01101", "10011", "10001", "10001", "01111"],
    "e": ["00000", "00000", "01110", "10001", "11111", "10000", "01110"],
    "f": ["00110", "01001", "01000", "11100", "01000", "01000", "01000"],
    "g": ["00000", "00000", "01111", "10001", "10001", "10001", "01111", "00001", "01110"],
    "h": ["10000", "10000", "10110", "11001", "10001", "10001", "10001"],
    "i": ["00100", "00000", "01100", "00100", "00100", "00100", "01110"],
    "k": ["10000", "10000", "10010", "10100", "11000", "10100", "10010"],
    "l": ["01100", "00100", "00100", "00100", "00100", "00100", "01110"],
    "m": ["00000", "00000", "11010", "10101", "10101", "10001", "10001"],
    "n": ["00000", "00000", "10110", "11001", "10001", "10001", "10001"],
    "o": ["00000", "00000", "01110", "10001", "10001", "10001", "01110"],
    "p": ["00000", "00000", "11110", "10001", "10001", "10001", "11110", "10000", "10000"],
    "q": ["00000", "00000", "01111", "10001", "10001", "10001", "01111", "00001", "00001"],
    "r": ["00000", "00000", "10110", "11001", "10000", "10000", "10000"],
    "s": ["00000", "00000", "01110", "10000", "01110", "00001", "11110"],
    "t": ["01000", "01000", "11100", "01000", "01000", "01001", "00110"],
    "u": ["00000", "00000", "10001", "10001", "10001", "10011", "01101"],
    "w": ["00000", "00000", "10001", "10001", "10101", "10101", "01010"],
    "x": ["00000", "00000", "10001", "01010", "00100", "01010", "10001"],
    "y": ["00000", "00000", "10001", "10001", "10001", "10001", "01111", "00001", "01110"],
}
class Canvas:
    def __init__(self, width, height, colour):
        self.width, self.height = width, height
        self.rows = [bytearray(bytes(colour) * width) for _ in range(height)]

    def rect(self, x0, y0, x1, y1, colour):
        """Fills [x0, x1) x [y0, y1), clipped to the canvas."""
        x0, x1 = max(0, x0), min(self.width, x1)
        y0, y1 = max(0, y0), min(self.height, y1)
        if x0 >= x1:
            return
        run = bytes(colour) * (x1 - x0)
        for y in range(y0, y1):
            self.rows[y][3 * x0:3 * x1] = run

    def text(self, x, y, s, colour):
        """Draws s with its top-left corner at (x, y); returns the width drawn."""
        for i, ch in enumerate(s):
            glyph = FONT.get(ch, FONT[" "])
            for gy, line in enumerate(glyph):
                for gx, bit in enumerate(line):
                    if bit == "1":
                        px = x + (6 * i + gx) * SCALE
                        py = y + gy * SCALE
                        self.rect(px, py, px + SCALE, py + SCALE, colour)
        return text_width(s)

    def png(self):
        raw = b"".join(b"\x00" + bytes(r) for r in self.rows)  # filter type 0 per row

        def chunk(kind, data):
            body = kind + data
            return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

        header = struct.pack(">IIBBBBB", self.width, self.height, 8, 2, 0, 0, 0)
        return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) +
                chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def text_width(s):
    return len(s) * 6 * SCALE


def format_ns(ns):
    if ns < 1e3:
        return f"{ns:.0f}ns"
    if ns < 1e6:
        return f"{ns / 1e3:.3g}us"
    if ns < 1e9:
        return f"{ns / 1e6:.3g}ms"
    return f"{ns / 1e9:.3g}s"


def read_report(text):
    """The report object, from rpc_bench's output with or without line prefixes."""
    for line in text.splitlines():
        line = re.sub(r"^\[[^\]]*\] ", "", line.strip())
        if line.startswith('{"config"'):
            return json.loads(line)
    raise ValueError("no rpc_bench --json report found (expected a line starting with "
                     '{"config")')


def bucket_key(from_ns):
    """Buckets are 2^(k/4) ns: k identifies one across series."""
    return round(math.log2(from_ns) * 4)


def layout(report):
    """The series drawn, the bucket keys on the x axis and the y axis maximum (a share)."""
    histograms = report.get("histograms") or {}
    series = []
    for name, label, colour in SERIES:
        buckets = histograms.get(name)
        total = sum(b["count"] for b in buckets) if buckets else 0
        if total:
            shares = {bucket_key(b["from_ns"]): b["count"] / total for b in buckets}
            series.append((label, colour, shares))
    if not series:
        raise ValueError("the report has no sequential latency histograms "
                         "(rpc_bench writes them with --json)")
    keys = sorted({k for _, _, shares in series for k in shares})
    keys = list(range(keys[0], keys[-1] + 1))
    peak = max(max(shares.values()) for _, _, shares in series)
    return series, keys, peak


def draw(report):
    series, keys, peak = layout(report)
    c = Canvas(WIDTH, HEIGHT, BACKGROUND)
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM
    base_y = TOP + plot_h
    slot = plot_w / len(keys)
    bar = max(1, int(slot * 0.8 / len(series)))
    for k_index, k in enumerate(keys):
        x0 = LEFT + int(k_index * slot + slot * 0.1)
        for s_index, (_, colour, shares) in enumerate(series):
            h = round(shares.get(k, 0) / peak * plot_h)
            if shares.get(k, 0) > 0 and h == 0:
                h = 1  # a rare outlier still shows
            x = x0 + s_index * bar
            c.rect(x, base_y - h, x + bar, base_y, colour)
    # Axes, an x label per power of two, the y axis' top share.
    c.rect(LEFT - 2, TOP, LEFT, base_y + 2, AXIS)
    c.rect(LEFT - 2, base_y, LEFT + plot_w, base_y + 2, AXIS)
    last_label_end = -1
    for k_index, k in enumerate(keys):
        if k % 4:
            continue
        x = LEFT + int(k_index * slot)
        c.rect(x, base_y, x + 1, base_y + 6, AXIS)
        label = format_ns(2 ** (k / 4))
        lx = x - text_width(label) // 2
        if lx > last_label_end:
            last_label_end = lx + c.text(lx, base_y + 10, label, AXIS) + 8
    top_label = f"{peak * 100:.0f}%"
    c.text(LEFT - 8 - text_width(top_label), TOP, top_label, AXIS)
    c.text(LEFT - 8 - text_width("0%"), base_y - 14, "0%", AXIS)
    c.text(LEFT, HEIGHT - 24, "round trip (log scale), share of calls per bucket", AXIS)
    # Title and legend.
    x = LEFT
    x += c.text(x, 12, "sequential latency", AXIS) + 30
    for label, colour, _ in series:
        c.rect(x, 12, x + 14, 26, colour)
        x += 20 + c.text(x + 20, 12, label, AXIS) + 24
    return c.png()


def main(argv):
    if len(argv) != 3 or argv[1] in ("-h", "--help"):
        print("usage: plot_histogram.py REPORT.json|- OUT.png\n"
              "  REPORT: the output of rpc_bench ... -- --json ('-' reads stdin)",
              file=sys.stderr)
        return 2
    try:
        text = sys.stdin.read() if argv[1] == "-" else open(argv[1], encoding="utf-8").read()
        png = draw(read_report(text))
    except (OSError, ValueError) as e:
        print(f"plot_histogram.py: {argv[1]}: {e}", file=sys.stderr)
        return 1
    with open(argv[2], "wb") as out:
        out.write(png)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
