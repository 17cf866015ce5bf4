#!/usr/bin/env bash
# Runs two builds of hookd-bench leg by leg, alternated (before, after, then after,
# before) so a drift of the disk's state over the sitting falls on both: the way a change
# is shown to cost nothing (docs/performance.md). Each run prints its own fsync probe.
#
#   bench/compare.sh BEFORE_BENCH AFTER_BENCH [LEG...]     (legs: unary batch by default)
#
# Build each side first, e.g. the before side in a worktree with its own target dir:
#   git worktree add /tmp/before REV && (cd /tmp/before && cargo build --release -p hookd-bench)
#   cargo build --release -p hookd-bench
#   bench/compare.sh /tmp/before/target/release/hookd-bench target/release/hookd-bench
# Run it on a quiet box: no build or test beside it.
set -euo pipefail
if [ $# -lt 2 ]; then
    sed -n '2,12p' "$0"
    exit 2
fi
before=$1
after=$2
shift 2
legs=("$@")
[ ${#legs[@]} -gt 0 ] || legs=(unary batch)
for pass in 1 2; do
    for leg in "${legs[@]}"; do
        if [ "$pass" = 1 ]; then order=(before after); else order=(after before); fi
        for side in "${order[@]}"; do
            bin=$before
            [ "$side" = after ] && bin=$after
            echo "=== pass $pass, leg $leg, $side ($(date -u +%T))"
            "$bin" --only "$leg"
        done
    done
done
echo "=== done ($(date -u +%T))"
