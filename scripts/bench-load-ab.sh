#!/usr/bin/env bash
# bench-load-ab.sh OLD [NEW]: workerbench's load table (SQS requests per message and send-to-commit
# latency, at a backlog and at offered loads below the worker's capacity) built from two commits
# and run interleaved (OLD, NEW, NEW, OLD, ... ROUNDS times each) on the SQS server SERVER. Each
# run is one `workerbench -load LOADS -load-sqs SQS_RTT -load-pg PG_RTT -load-refc 0`. It prints
# each run's rows, then per cell (SQS RTT, PostgreSQL RTT, load) and commit the median and spread
# (min-max) of the requests per 1,000 messages and of the worker's p50 and p99: a before/after
# claim from the same machine at the same time.
#
#   ROUNDS=10 scripts/bench-load-ab.sh 65e5384 HEAD
set -euo pipefail
old=${1:?usage: bench-load-ab.sh OLD [NEW]}
new=${2:-HEAD}
rounds=${ROUNDS:-10}
server=${SERVER:-goaws}
loads=${LOADS:-10,50}
sqsrtt=${SQS_RTT:-0,20}
pgrtt=${PG_RTT:-0}
secs=${SECS:-6}
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tmp=$(mktemp -d)
cleanup() {
	for c in old new; do git -C "$repo" worktree remove --force "$tmp/$c" 2>/dev/null || true; done
	rm -rf "$tmp"
}
trap cleanup EXIT
for c in old new; do
	rev=$old
	[[ $c == new ]] && rev=$new
	git -C "$repo" worktree add -q --detach "$tmp/$c" "$rev"
	echo "bench-load-ab: $c = $(git -C "$repo" rev-parse --short "$rev")"
	(cd "$tmp/$c" && go build -o "$tmp/$c.bin" ./harness/cmd/workerbench)
done
out=$tmp/runs
: >"$out"
# A row of the load table: | SQS RTT | PG RTT | load | offered | all | receives | deletes | ... | p50 | p99 | ...
run() {
	local c=$1 i=$2
	(cd "$repo" && "$tmp/$c.bin" -n 3000 -c '' -inflight 0 -sqs "$server" -load "$loads" -load-sqs "$sqsrtt" \
		-load-pg "$pgrtt" -load-secs "$secs" -load-refc 0) |
		awk -F' *\\| *' -v c="$c" -v i="$i" '/^\| [0-9]+m?s \|/ {
			p50 = $11; p99 = $12; if ($4 == "backlog") { p50 = "-"; p99 = "-" }
			sub(/ms$/, "", p50); sub(/ms$/, "", p99)
			print c, i, $2 "/" $3 "/" $4, $6, p50, p99 }' | tee -a "$out"
}
echo "commit run cell(sqs/pg/load) requests_per_1000 p50_ms p99_ms"
for i in $(seq 1 "$rounds"); do
	if ((i % 2)); then run old "$i"; run new "$i"; else run new "$i"; run old "$i"; fi
done
echo
echo "| SQS / PG / load | measure | old median | spread | new median | spread | new / old |"
echo "|---|---|---:|---:|---:|---:|---:|"
names=([4]="requests / 1,000 msgs" [5]="worker p50 ms" [6]="worker p99 ms")
awk '{ print $3 }' "$out" | awk '!seen[$0]++' | while read -r cell; do
	for col in 4 5 6; do
		name=${names[$col]}
		stats() { awk -v c="$1" -v cell="$cell" -v k="$col" '$1 == c && $3 == cell && $k != "-" { print $k }' "$out" | sort -g |
			awk '{ v[NR] = $1 } END { if (NR == 0) { print "- -"; exit } m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%s %s-%s\n", m, v[1], v[NR] }'; }
		read -r om os < <(stats old)
		read -r nm ns < <(stats new)
		[[ $om == - ]] && continue
		printf "| %s | %s | %s | %s | %s | %s | %.3f |\n" "$cell" "$name" "$om" "$os" "$nm" "$ns" "$(awk -v a="$nm" -v b="$om" 'BEGIN { print (b > 0) ? a / b : 0 }')"
	done
done
