#!/usr/bin/env bash
# bench-compare.sh OLD [NEW]: the same benchmarks built from two commits and run in one script,
# interleaved (OLD, NEW, OLD, NEW), so that a regression is told from the machine's noise.
#
#   scripts/bench-compare.sh 4c2c24a          # OLD against the working tree's HEAD
#   ROUNDS=3 MSGS=3000 CONC=8,32 scripts/bench-compare.sh OLD NEW
#
# Each round runs, for each commit: workerbench (worker end to end against GoAws and the fake,
# beside the raw GoAws and inbox-only rates of the same run) and the inbox benchmark against
# pgbench. Each build runs from a worktree of its own commit. The output is each run's tables,
# labelled; compare the ratios (absolute rates move with the machine's load).
set -euo pipefail
old=${1:?usage: bench-compare.sh OLD [NEW]}
new=${2:-HEAD}
rounds=${ROUNDS:-2}
msgs=${MSGS:-3000}
conc=${CONC:-8,32}
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tmp=$(mktemp -d)
cleanup() {
	for c in old new; do git -C "$repo" worktree remove --force "$tmp/$c" 2>/dev/null || true; done
	rm -rf "$tmp"
}
trap cleanup EXIT
# workerbench_dir prints the bench's package in checkout $1: harness/cmd/workerbench, or
# internal/cmd/workerbench in commits from before the harness left internal/.
workerbench_dir() { if [[ -d $1/harness/cmd/workerbench ]]; then echo ./harness/cmd/workerbench; else echo ./internal/cmd/workerbench; fi; }
for c in old new; do
	rev=$old
	[[ $c == new ]] && rev=$new
	git -C "$repo" worktree add -q --detach "$tmp/$c" "$rev"
	(cd "$tmp/$c" && go build -o "$tmp/$c.workerbench" "$(workerbench_dir "$tmp/$c")" && go test -c -o "$tmp/$c.inbox.test" ./inbox/)
	echo "bench-compare: $c = $(git -C "$repo" rev-parse --short "$rev")"
done
for r in $(seq "$rounds"); do
	for c in old new; do
		echo "=== round $r: $c workerbench -n $msgs -c $conc"
		(cd "$tmp/$c" && "$tmp/$c.workerbench" -n "$msgs" -c "$conc" -inflight 1000)
		echo "=== round $r: $c inbox vs pgbench"
		(cd "$tmp/$c/inbox" && "$tmp/$c.inbox.test" -test.run '^$' -test.bench BenchmarkInboxVsPgbench -test.benchtime 1x -test.timeout 30m)
	done
done
