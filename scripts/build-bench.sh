#!/usr/bin/env bash
# Incremental build times, after (this tree) and before (9c25bc9), one target dir,
# each warmed for both commands first.
set -u
# Usage: scripts/build-bench.sh (from anywhere; needs the tree built once). Prints
# seconds per step; BENCHMARKS.md "Build" reports the ratios.
ROOT=$(cd "$(dirname "$0")/.." && pwd)
export CARGO_TARGET_DIR=$ROOT/target
t() { local s=$(date +%s.%N); "$@" >/dev/null 2>&1; local rc=$?; echo "$(echo "$(date +%s.%N) - $s" | bc) rc=$rc"; }
measure() { # dir label agent plugin mesh
  cd "$1"
  cargo test --workspace --no-run >/dev/null 2>&1; cargo build -p weft --bin weftd >/dev/null 2>&1
  cargo test --workspace --no-run >/dev/null 2>&1
  touch "$3"; echo "$2 test-no-run agent: $(t cargo test --workspace --no-run)"
  touch "$4"; echo "$2 test-no-run plugin-host: $(t cargo test --workspace --no-run)"
  touch "$5"; echo "$2 test-no-run clustermesh: $(t cargo test --workspace --no-run)"
  cargo build -p weft --bin weftd >/dev/null 2>&1
  touch "$3"; echo "$2 build weftd agent: $(t cargo build -p weft --bin weftd)"
}
measure $ROOT after host/src/agent/start.rs host/plugins/src/host.rs host/clustermesh/src/mesh.rs
rm -rf /tmp/before; git -C $ROOT worktree add -f /tmp/before 9c25bc9 >/dev/null 2>&1
measure /tmp/before before host/src/agent.rs host/src/plugins/host.rs host/src/clustermesh/mesh.rs
git -C $ROOT worktree remove --force /tmp/before; git -C $ROOT worktree prune
# The two checkouts share artifact names: make this tree's own again.
cd $ROOT && find host api cni tests -name '*.rs' -exec touch {} + && cargo test --workspace --no-run >/dev/null 2>&1 && cargo build -p weft --bin weftd >/dev/null 2>&1
echo done
