#!/usr/bin/env bash
# A fresh `make test`, as CI runs it, for each revision given (default: 9c25bc9, the
# last commit before the workspace split, then HEAD), one after the other: a clean
# clone with its own empty target directory, CARGO_INCREMENTAL=0. Prints per revision
# the test build's time (cargo's `Finished test profile` line), the time of the builds
# the tests start on first use (the nested cargo's `Finished dev profile` lines), the
# whole run's seconds and its exit status. BENCHMARKS.md "Build" reports the ratios.
# Needs root (the tests make namespaces) and the Debian packages (scripts/deps.sh).
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
revs=("$@"); [ ${#revs[@]} -gt 0 ] || revs=(9c25bc9 "$(git -C "$ROOT" rev-parse --short HEAD)")
secs() { # cargo's "1m 23s" or "45.67s" -> seconds
  sed -E 's/.* in //; s/m /*60+/; s/s$//' <<<"$1" | bc
}
for rev in "${revs[@]}"; do
  dir=/tmp/fresh-$rev; rm -rf "$dir"
  git clone -q "$ROOT" "$dir" && git -C "$dir" checkout -q "$rev" || exit 1
  start=$(date +%s)
  (cd "$dir" && CARGO_INCREMENTAL=0 make test) >"$dir.log" 2>&1
  rc=$?; total=$(( $(date +%s) - start ))
  build=$(grep -m1 'Finished `test` profile' "$dir.log"); build=$(secs "$build")
  nested=0
  while read -r l; do nested=$(echo "$nested + $(secs "$l")" | bc); done \
    < <(grep 'Finished `dev` profile' "$dir.log")
  echo "$rev test-build=${build}s nested-builds=${nested}s total=${total}s rc=$rc log=$dir.log"
  rm -rf "$dir"
done
