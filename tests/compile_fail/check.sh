#!/usr/bin/env bash
# Compiles one compile_fail case with -fsyntax-only (as a file of a program linked to the
# compiled library, the default build) and checks the outcome against the
# expectations written in the case's own comments:
#   // expect: compiles            the program must compile (the control case), or
#   // expect-message: TEXT        the program must be rejected (exit status 1, not a crash)
#                                  and the diagnostics contain TEXT, the static_assert text;
#   // expect-line: REGEX          and one diagnostic line matches REGEX (grep -E); repeatable;
#   // expect-first: REGEX         the first error line matches REGEX: the culprit is named in
#                                  the error itself, not in an "in instantiation of" line;
#   // expect-first-gcc: REGEX     the same, only when the compiler is g++ (-clang: clang),
#                                  for what the two compilers print differently;
#   // expect-line-gcc: REGEX      (-clang) an expect-line for one compiler only;
#   // expect-only-error           with clang too, the first error is the only one.
# A rejected case needs expect-message or an expect-first. With GCC the first error is
# always the only one.
# In a REGEX, {{name}} stands for node name `name` as either compiler prints it: g++ shows
# fixed_string<N>{"name"}, clang shows the char pack 'n', 'a', 'm', 'e' that the checks
# carry for it (tlaunch::detail::spelled).
#
#   check.sh --cxx WORD [--cxx WORD]... --include DIR [--include DIR]... [--flag F]... SOURCE
# --cxx words form the compiler command (e.g. `--cxx ccache --cxx g++`).
set -uo pipefail

cxx=() includes=() flags=() source=""
while (($#)); do
  case $1 in
    --cxx) cxx+=("$2"); shift 2 ;;
    --include) includes+=("-I$2"); shift 2 ;;
    --flag) flags+=("$2"); shift 2 ;;
    -*) echo "check.sh: unknown option '$1'" >&2; exit 2 ;;
    *) source=$1; shift ;;
  esac
done
if ((${#cxx[@]} == 0 || ${#includes[@]} == 0)) || [[ -z $source ]]; then
  echo "usage: check.sh --cxx WORD... --include DIR... [--flag F]... SOURCE" >&2
  exit 2
fi
if [[ ! -r $source ]]; then
  echo "check.sh: cannot read $source" >&2
  exit 2
fi

# The expectations: text after the marker, up to the end of the line.
expectation() { sed -n "s|^// $1: ||p" "$source"; }
compiles=$(expectation expect)
message=$(expectation expect-message)
only_error=$(grep -c '^// expect-only-error$' "$source")
if "${cxx[@]}" --version 2>/dev/null | grep -q "Free Software Foundation"; then
  compiler=gcc
elif "${cxx[@]}" --version 2>/dev/null | grep -q "clang"; then
  compiler=clang
else
  compiler=other
fi
mapfile -t firsts < <(expectation expect-first; expectation "expect-first-$compiler")
mapfile -t lines < <(expectation expect-line; expectation "expect-line-$compiler")
if [[ $compiles != compiles && -z $message && -z $(expectation 'expect-first[a-z-]*') ]]; then
  echo "check.sh: $source has neither '// expect: compiles' nor '// expect-message: ...'" \
    "nor '// expect-first: ...'" >&2
  exit 2
fi

# {{name}} -> (\{"name"\}|'n', 'a', 'm', 'e')
expand_names() {
  local re=$1 out="" name spelled i
  while [[ $re =~ ^(.*)\{\{([A-Za-z0-9_]+)\}\}(.*)$ ]]; do
    name=${BASH_REMATCH[2]}
    spelled=""
    for ((i = 0; i < ${#name}; i++)); do
      spelled+="${spelled:+, }'${name:i:1}'"
    done
    out="(\\{\"$name\"\\}|$spelled)${BASH_REMATCH[3]}$out"
    re=${BASH_REMATCH[1]}
  done
  printf '%s' "$re$out"
}

# ASCII quotes and no colors, so the patterns depend on neither the locale nor a terminal.
export LC_ALL=C
log=$(mktemp)
trap 'rm -f "$log"' EXIT
"${cxx[@]}" -std=c++20 -DASIO_STANDALONE -DASIO_HAS_CO_AWAIT=1 -DTLAUNCH_SEPARATE_COMPILATION \
  -DASIO_SEPARATE_COMPILATION "${includes[@]}" "${flags[@]}" \
  -fsyntax-only -fdiagnostics-color=never "$source" >"$log" 2>&1
status=$?

fail() {
  echo "FAIL: $source (${cxx[*]}): $1"
  echo "---- compiler output (exit status $status, first 60 lines) ----"
  head -n 60 "$log"
  exit 1
}

if [[ $compiles == compiles ]]; then
  ((status == 0)) || fail "a correct program does not compile"
  echo "ok: $source compiles"
  exit 0
fi

((status != 0)) || fail "the program compiled, but it must be rejected"
((status == 1)) || fail "the compiler did not report errors normally (it crashed or was killed)"
# The first error is the one that says what is wrong; with GCC it is the only one
# (clang, unless the case says expect-only-error, may also report where the failed check's
# value is used).
errors=$(grep -E '(^|: )error: ' "$log")
first=$(head -n 1 <<<"$errors")
if [[ -n $message ]]; then
  grep -qF -- "$message" "$log" || fail "the diagnostics do not contain the message: $message"
  [[ $first == *"$message"* ]] || fail "the first error is not the message: $first"
fi
for re in "${firsts[@]}"; do
  full=$(expand_names "$re")
  grep -qE -- "$full" <<<"$first" || fail "the first error does not match: $re (as $full)"
done
n=$(grep -c . <<<"$errors")
if [[ $compiler == gcc ]] || ((only_error)); then
  ((n == 1)) || fail "$compiler reports $n errors; only the first was expected"
fi
for re in "${lines[@]}"; do
  full=$(expand_names "$re")
  grep -qE -- "$full" "$log" || fail "no diagnostic line matches: $re (as $full)"
done
echo "ok: $source is rejected; the diagnostics say:"
cut -c1-400 <<<"$first"
for re in "${lines[@]}"; do grep -E -- "$(expand_names "$re")" "$log" | head -n 1 | cut -c1-400; done
