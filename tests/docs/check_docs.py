#!/usr/bin/env python3
"""Checks that the documentation says what the code does.

  check_docs.py snippets ROOT
      Every ```cpp block of ROOT/README.md and ROOT/docs/**/*.md must appear in the sources
      that compile and run it: tests/readme/*.cpp, tests/docs/*.cpp, tests/observe/*.cpp (run
      by observe_prometheus_tests) or examples/*.cpp
      (examples are built and run by tests/integration). Lines are compared with their
      leading and trailing whitespace removed, so a snippet may sit indented in a test.
      A block right after an HTML comment `<!-- not compiled: REASON -->` is skipped.

  check_docs.py flags ROOT BINARY
      The block between `<!-- flags: begin -->` and `<!-- flags: end -->` in
      ROOT/docs/flags.md must be exactly what `./hello_world --help` prints (BINARY run
      with argv[0] "./hello_world").
"""
import pathlib
import re
import subprocess
import sys

SNIPPET_SOURCES = ["tests/readme/*.cpp", "tests/docs/*.cpp", "tests/observe/*.cpp", "examples/*.cpp"]
NOT_COMPILED = re.compile(r"<!--\s*not compiled:\s*\S.*?-->")


def doc_files(root):
    files = [root / "README.md"]
    files += sorted(p for p in (root / "docs").rglob("*.md"))
    return [f for f in files if f.is_file()]


def cpp_blocks(text):
    """Yields (line number, lines, skipped) for each ```cpp block."""
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        if lines[i].strip() == "```cpp":
            start = i
            # The nearest non-blank line before the fence says whether it is compiled.
            j = i - 1
            while j >= 0 and lines[j].strip() == "":
                j -= 1
            skipped = j >= 0 and NOT_COMPILED.search(lines[j]) is not None
            i += 1
            body = []
            while i < len(lines) and lines[i].strip() != "```":
                body.append(lines[i])
                i += 1
            yield start + 1, body, skipped
        i += 1


def normalized(lines):
    out = [l.strip() for l in lines]
    while out and out[0] == "":
        out.pop(0)
    while out and out[-1] == "":
        out.pop()
    return out


def contains(haystack, needle):
    if not needle:
        return True
    n = len(needle)
    first = needle[0]
    for i in range(len(haystack) - n + 1):
        if haystack[i] == first and haystack[i:i + n] == needle:
            return True
    return False


def check_snippets(root):
    sources = {}
    for pattern in SNIPPET_SOURCES:
        for p in sorted(root.glob(pattern)):
            sources[p] = normalized(p.read_text().split("\n"))
    failures, checked, skipped_count = [], 0, 0
    for doc in doc_files(root):
        for line, body, skipped in cpp_blocks(doc.read_text()):
            if skipped:
                skipped_count += 1
                continue
            checked += 1
            block = normalized(body)
            if not any(contains(src, block) for src in sources.values()):
                failures.append(f"{doc.relative_to(root)}:{line}: this cpp block is in no tested "
                                f"source ({', '.join(SNIPPET_SOURCES)})")
    for f in failures:
        print(f)
    print(f"{checked} cpp blocks checked, {skipped_count} marked not compiled, "
          f"{len(failures)} not found")
    if failures:
        print("Copy the block into tests/readme/readme_tests.cpp (between `// ---- ... ----` "
              "markers, where it compiles and runs), or make the doc say what the test says.")
    return 1 if failures else 0


BEGIN, END = "<!-- flags: begin -->", "<!-- flags: end -->"


def check_flags(root, binary):
    page = root / "docs" / "flags.md"
    text = page.read_text()
    if BEGIN not in text or END not in text:
        print(f"{page}: no {BEGIN} ... {END} block")
        return 1
    block = text.split(BEGIN, 1)[1].split(END, 1)[0].strip("\n")
    m = re.fullmatch(r"```text\n(.*)\n```", block, re.S)
    if not m:
        print(f"{page}: the flags block must be one ```text fence")
        return 1
    documented = m.group(1)
    run = subprocess.run(["./hello_world", "--help"], executable=binary, capture_output=True,
                         text=True, timeout=60)
    if run.returncode != 0:
        print(f"{binary} --help exited with {run.returncode}: {run.stderr}")
        return 1
    actual = run.stdout.rstrip("\n")
    if documented == actual:
        print(f"docs/flags.md matches --help ({len(actual.splitlines())} lines)")
        return 0
    import difflib
    sys.stdout.writelines(difflib.unified_diff(
        (documented + "\n").splitlines(True), (actual + "\n").splitlines(True),
        "docs/flags.md", "hello_world --help"))
    print("\ndocs/flags.md differs from --help. Regenerate it with "
          "`python3 tests/docs/check_docs.py regenerate . build/<dir>/examples/hello_world` "
          "(it rewrites the block between the flags markers), and review the diff.")
    return 1


def regenerate_flags(root, binary):
    page = root / "docs" / "flags.md"
    text = page.read_text()
    run = subprocess.run(["./hello_world", "--help"], executable=binary, capture_output=True,
                         text=True, timeout=60, check=True)
    before, rest = text.split(BEGIN, 1)
    _, after = rest.split(END, 1)
    page.write_text(f"{before}{BEGIN}\n```text\n{run.stdout.rstrip(chr(10))}\n```\n{END}{after}")
    print(f"rewrote {page}")
    return 0


def main(argv):
    if len(argv) == 3 and argv[1] == "snippets":
        return check_snippets(pathlib.Path(argv[2]).resolve())
    if len(argv) == 4 and argv[1] == "flags":
        return check_flags(pathlib.Path(argv[2]).resolve(), argv[3])
    if len(argv) == 4 and argv[1] == "regenerate":
        return regenerate_flags(pathlib.Path(argv[2]).resolve(), argv[3])
    print(__doc__)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
