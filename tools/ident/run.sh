#!/bin/bash
# Run every built-in scenario (small and full; scale small only) with two
# overbook binaries and compare their outputs: byte for byte, or equal but
# for numbers within 1e-9 relative (numdiff.py). For changes that must not
# move the simulator's results.
#   tools/ident/run.sh OLD-BINARY NEW-BINARY [OUT-DIR]
set -euo pipefail
old=$(realpath "$1") new=$(realpath "$2") out=${3:-out/ident}
here=$(dirname "$(realpath "$0")")
rm -rf "$out" && mkdir -p "$out"
for s in $("$old" sim --list --names); do
  for size in small full; do
    [ "$s" = scale ] && [ "$size" = full ] && continue
    flag=""; [ "$size" = small ] && flag=--small
    for b in old new; do
      bin=$old; [ "$b" = new ] && bin=$new
      "$bin" sim --scenario "$s" $flag --no-plots --no-progress --per-task-csv --jobs 2 \
        --out "$out/$b/$s-$size" > "$out/$b-$s-$size.log" 2>&1 \
        || { echo "$b: $s $size failed: $out/$b-$s-$size.log" >&2; exit 1; }
    done
  done
done
"$here/numdiff.py" "$out/old" "$out/new"
