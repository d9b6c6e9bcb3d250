#!/usr/bin/env bash
# Fails when a header of include/tlaunch includes a header of a higher layer.
#
#   tools/check_layers.sh [--graph] [INCLUDE_DIR]
#
# Layers, bottom up (docs/ARCHITECTURE.md): detail (leaf helpers: includes no other
# tlaunch folder) < wire < vocabulary (the public types every layer above uses: error.hpp,
# service.hpp, batched.hpp, call_options.hpp, node_options.hpp, launch_options.hpp) < rpc
# < public (the other include/tlaunch/*.hpp) < store < launch < umbrella
# (main.hpp, start.hpp, tlaunch.hpp, testing.hpp, impl/). A header may include its own layer and those
# below. Reads `#include "..."` (relative to the header, then to INCLUDE_DIR) and
# `#include <tlaunch/...>` lines. --graph also prints the include edges by layer with
# their counts. INCLUDE_DIR defaults to the include/ beside this script's folder.
# Exit status: 0 when every include goes down or sideways, 1 otherwise, 2 on bad usage.
set -euo pipefail

graph=0
root=
for arg in "$@"; do
  case "$arg" in
    --graph) graph=1 ;;
    -h | --help)
      sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'
      exit 0
      ;;
    -*)
      echo "check_layers: unknown option $arg" >&2
      exit 2
      ;;
    *)
      if [[ -n "$root" ]]; then
        echo "check_layers: one include directory only" >&2
        exit 2
      fi
      root=$arg
      ;;
  esac
done
[[ -n "$root" ]] || root="$(cd "$(dirname "$0")/.." && pwd)/include"
if [[ ! -d "$root/tlaunch" ]]; then
  echo "check_layers: $root has no tlaunch/ folder" >&2
  exit 2
fi
root=$(cd "$root" && pwd)

layer_names=(detail wire vocabulary rpc public store launch umbrella)

# Sets `layer` to the layer index of a path relative to $root (tlaunch/...), or -1.
# Functions here set variables rather than print: no subshell per include.
layer_of() {
  case "${1#tlaunch/}" in
    detail/*) layer=0 ;;
    wire/*) layer=1 ;;
    error.hpp | service.hpp | batched.hpp | call_options.hpp | node_options.hpp | launch_options.hpp) layer=2 ;;
    rpc/*) layer=3 ;;
    store/*) layer=5 ;;
    launch/*) layer=6 ;;
    main.hpp | start.hpp | tlaunch.hpp | testing.hpp | impl/*) layer=7 ;;
    */*) layer=-1 ;;  # a folder that has no layer yet
    *) layer=4 ;;
  esac
}

# Sets `normal` to an absolute path with its . and .. parts resolved.
normalize() {
  local IFS=/ part out=()
  for part in $1; do
    case "$part" in
      '' | .) ;;
      ..) ((${#out[@]})) && unset 'out[${#out[@]}-1]' ;;
      *) out+=("$part") ;;
    esac
  done
  normal="/${out[*]}"
}

declare -A edges=()
violations=0
while IFS= read -r -d '' file; do
  rel=${file#"$root"/}
  layer_of "$rel"
  from=$layer
  if ((from < 0)); then
    echo "check_layers: $rel: folder ${rel%/*} has no layer (add it to tools/check_layers.sh and docs/ARCHITECTURE.md)"
    violations=$((violations + 1))
    continue
  fi
  dir=${file%/*}
  while IFS= read -r line; do
    lineno=${line%%:*}
    text=${line#*:}
    target=
    if [[ "$text" =~ ^[[:space:]]*#[[:space:]]*include[[:space:]]*\"([^\"]+)\" ]]; then
      inc=${BASH_REMATCH[1]}
      if [[ -f "$dir/$inc" ]]; then
        normalize "$dir/$inc"
        target=$normal
      elif [[ -f "$root/$inc" ]]; then
        normalize "$root/$inc"
        target=$normal
      fi
    elif [[ "$text" =~ ^[[:space:]]*#[[:space:]]*include[[:space:]]*\<(tlaunch/[^\>]+)\> ]]; then
      inc=${BASH_REMATCH[1]}
      target="$root/$inc"
    fi
    [[ -n "$target" ]] || continue
    case "$target" in
      "$root"/tlaunch/*) ;;
      *) continue ;;  # not one of ours
    esac
    to_rel=${target#"$root"/}
    layer_of "$to_rel"
    to=$layer
    if ((to < 0)); then
      echo "check_layers: $rel:$lineno includes $inc: folder ${to_rel%/*} has no layer"
      violations=$((violations + 1))
      continue
    fi
    key="${layer_names[from]} -> ${layer_names[to]}"
    edges[$key]=$((${edges[$key]:-0} + 1))
    if ((to > from)); then
      echo "check_layers: $rel:$lineno includes $inc: ${layer_names[from]} may not include ${layer_names[to]} (a higher layer)"
      violations=$((violations + 1))
    fi
  done < <(grep -n '^[[:space:]]*#[[:space:]]*include' "$file" || true)
done < <(find "$root/tlaunch" -name '*.hpp' -print0 | sort -z)

if ((graph)); then
  echo "include edges by layer (count of #include lines; ^ marks an upward edge):"
  for from in "${!layer_names[@]}"; do
    for to in "${!layer_names[@]}"; do
      key="${layer_names[from]} -> ${layer_names[to]}"
      [[ -n "${edges[$key]:-}" ]] || continue
      mark=
      ((to > from)) && mark=" ^"
      printf '  %-22s %3d%s\n' "$key" "${edges[$key]}" "$mark"
    done
  done
fi

if ((violations)); then
  echo "check_layers: $violations include(s) against the layering (see docs/ARCHITECTURE.md)"
  exit 1
fi
