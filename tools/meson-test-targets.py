#!/usr/bin/env python3
"""Prints the build outputs (paths relative to the build directory) that a Meson build's
tests need, leaving out the tests of the suites named with --no-suite: what
`ninja -C BUILDDIR $(tools/meson-test-targets.py BUILDDIR --no-suite ssh)` builds before
`meson test --no-rebuild --no-suite ssh` runs. The static libraries they link are built as
their dependencies.

  meson-test-targets.py BUILDDIR [--no-suite SUITE]...
"""
import json
import os
import subprocess
import sys


def introspect(builddir, what):
    out = subprocess.run(["meson", "introspect", "--" + what, builddir], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)


def main(argv):
    if len(argv) < 2 or argv[1].startswith("-"):
        print(__doc__, file=sys.stderr)
        return 2
    builddir = os.path.abspath(argv[1])
    skip = set()
    args = argv[2:]
    while args:
        if args[0] == "--no-suite" and len(args) > 1:
            skip.add(args[1])
            args = args[2:]
        else:
            print(f"meson-test-targets: unknown argument {args[0]}\n{__doc__}", file=sys.stderr)
            return 2
    targets = introspect(builddir, "targets")
    by_id = {t["id"]: t for t in targets}
    by_file = {os.path.abspath(f): t for t in targets for f in t["filename"]}
    wanted = {}
    for test in introspect(builddir, "tests"):
        # Suites are "project:suite"; --no-suite takes the suite's own name.
        suites = {s.split(":", 1)[-1] for s in test["suite"]}
        if suites & skip:
            continue
        for dep in test.get("depends", []):
            if dep in by_id:
                wanted[dep] = by_id[dep]
        for word in test["cmd"]:
            t = by_file.get(os.path.abspath(word)) if os.path.isabs(word) else None
            if t:
                wanted[t["id"]] = t
    if not wanted:
        print("meson-test-targets: no test needs a target (wrong build directory?)", file=sys.stderr)
        return 1
    for t in sorted(wanted.values(), key=lambda t: t["filename"][0]):
        for f in t["filename"]:
            print(os.path.relpath(f, builddir))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
