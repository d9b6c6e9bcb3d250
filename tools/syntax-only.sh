#!/usr/bin/env bash
# A compile command run as a syntax check: the compiler and its arguments, without -c and
# -o FILE, with -fsyntax-only; then FILE is created empty, so that the build tool sees the
# step done and checks the header again only when it changes. The compiler launcher of the
# header checks (tests/core/CMakeLists.txt): half the time of compiling each one to an object,
# in the sanitizer build where they run.
set -euo pipefail
args=()
out=""
while (($#)); do
  case "$1" in
    -o) out=$2; shift 2 ;;
    -c) shift ;;
    *) args+=("$1"); shift ;;
  esac
done
"${args[@]}" -fsyntax-only
if [[ -n $out ]]; then : >"$out"; fi
