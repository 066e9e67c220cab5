#!/usr/bin/env bash
# bench-relay-ab.sh OLD [NEW]: the outbox relay at its defaults built from two commits, each with
# NEW's benchmark files, run interleaved (OLD, NEW, NEW, OLD, ... ROUNDS times each) on the SQS
# server SERVER (fauxqs: GoAws's SendMessageBatch results are broken). Every run is one round of
# BenchmarkRelay: MSGS rows, and the raw SendMessageBatch loop at its best of 4, 16 and 64
# senders, with SQS direct and RTT ms away (the delaying proxy of harness/latency). It prints
# each run, then per commit and cell the median and spread (min-max) of the relay's rate, of
# relay / raw and of the relay's rate against its own with SQS direct, and NEW / OLD of the
# medians of the relay's rate: a before/after claim from the same machine at the same time.
#
#   ROUNDS=10 MSGS=10000 scripts/bench-relay-ab.sh 953c66f HEAD
#
# With FIFO=1 each run is one BenchmarkRelayFIFO instead: MSGS rows to a FIFO queue spread over
# 1, 10 and 100 groups; the cells are the group counts, the columns the relay's rate and relay /
# raw (the raw loop at 4 senders).
#   FIFO=1 ROUNDS=10 MSGS=5000 scripts/bench-relay-ab.sh OLD NEW
set -euo pipefail
old=${1:?usage: bench-relay-ab.sh OLD [NEW]}
new=${2:-HEAD}
rounds=${ROUNDS:-10}
msgs=${MSGS:-10000}
server=${SERVER:-fauxqs}
rtt=${RTT:-20}
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
	echo "bench-relay-ab: $c = $(git -C "$repo" rev-parse --short "$rev")"
done
for f in bench_test.go bench_fifo_test.go; do
	cp "$tmp/new/outbox/$f" "$tmp/old/outbox/$f"
done
# A relay from before RelayStats.Senders reports no senders count.
grep -q 'Senders: int(' "$tmp/old/outbox/relay.go" || sed -i 's/rl\.Stats()\.Senders/0/' "$tmp/old/outbox/bench_fifo_test.go"
for c in old new; do
	(cd "$tmp/$c" && go test -c -o "$tmp/$c.test" ./outbox/)
done
out=$tmp/runs
: >"$out"
run() {
	local c=$1 i=$2
	if [[ ${FIFO:-} == 1 ]]; then
		(cd "$tmp/$c/outbox" && SQSINBOX_TEST_SQS=$server SQSINBOX_BENCH_FIFO_N=$msgs \
			"$tmp/$c.test" -test.run '^$' -test.bench 'BenchmarkRelayFIFO$' -test.benchtime 1x) |
			awk -v c="$c" -v i="$i" '/^FIFO, [0-9]+ groups:/ {
				cell = $2 "groups"
				match($0, /relay [0-9]+ msgs/); relay = substr($0, RSTART + 6, RLENGTH - 11)
				match($0, /ratio [0-9.]+/); ratio = substr($0, RSTART + 6, RLENGTH - 6)
				print c, i, cell, relay, ratio, "-", "-" }' | tee -a "$out"
		return
	fi
	(cd "$tmp/$c/outbox" && SQSINBOX_TEST_SQS=$server SQSINBOX_BENCH_ROUNDS=1 SQSINBOX_BENCH_N=$msgs SQSINBOX_BENCH_SQS_RTT=0,$rtt \
		"$tmp/$c.test" -test.run '^$' -test.bench 'BenchmarkRelay$' -test.benchtime 1x) |
		awk -v c="$c" -v i="$i" '/^round 1, SQS RTT/ {
			cell = $5; sub(/ms$|s$/, "", cell); sub(/ms|s/, "", cell)
			match($0, /relay [0-9]+ msgs/); relay = substr($0, RSTART + 6, RLENGTH - 11)
			match($0, /ratio [0-9.]+/); ratio = substr($0, RSTART + 6, RLENGTH - 6)
			match($0, /at 0s: [0-9.]+/); own = substr($0, RSTART + 7, RLENGTH - 7)
			match($0, /\([0-9]+ senders/); snd = substr($0, RSTART + 1, RLENGTH - 9)
			cell = $5; pending = 1; next }
			pending && /CPU µs per message/ {
				match($0, /test process [0-9]+/); self = substr($0, RSTART + 13, RLENGTH - 13)
				match($0, /PostgreSQL [0-9]+/); pg = substr($0, RSTART + 11, RLENGTH - 11)
				print c, i, cell, relay, ratio, own, snd, pg, self; pending = 0 }' | tee -a "$out"
}
echo "commit run rtt relay_msgs/s relay/raw relay/own_direct senders_at_end postgres_cpu_us/msg relay_process_cpu_us/msg"
for i in $(seq 1 "$rounds"); do
	if ((i % 2)); then run old "$i"; run new "$i"; else run new "$i"; run old "$i"; fi
done
echo
echo "| cell | measure | old median | spread | new median | spread | new / old |"
echo "|---|---|---:|---:|---:|---:|---:|"
cells=(0s "${rtt}ms")
cols=(4 5 6 8 9)
if [[ ${FIFO:-} == 1 ]]; then
	cells=(1groups 10groups 100groups)
	cols=(4 5)
fi
for cell in "${cells[@]}"; do
	for col in "${cols[@]}"; do
		names=([4]="relay msgs/s" [5]="relay / raw (best N)" [6]="relay / its rate direct" [8]="PostgreSQL CPU µs/msg" [9]="relay process CPU µs/msg")
		name=${names[$col]}
		stats() { awk -v c="$1" -v cell="$cell" -v k="$col" '$1 == c && $3 == cell { print $k }' "$out" | sort -g |
			awk '{ v[NR] = $1 } END { m = (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2; printf "%s %s-%s\n", m, v[1], v[NR] }'; }
		read -r om os < <(stats old)
		read -r nm ns < <(stats new)
		printf "| %s | %s | %s | %s | %s | %s | %.3f |\n" "$cell" "$name" "$om" "$os" "$nm" "$ns" "$(awk -v a="$nm" -v b="$om" 'BEGIN { print (b > 0) ? a / b : 0 }')"
	done
done
