#!/usr/bin/env bash
# bench-ab.sh OLD [NEW]: the worker's batched default (Concurrency 10, HandlerBatch 10, its
# default prefetch and pollers) draining MSGS messages through the inbox, built from two commits
# and run interleaved, ROUNDS times each (OLD, NEW, OLD, NEW, ...), on each SQS server of SERVERS.
# It prints every run's rate, worker CPU and allocations per message, then per server each
# commit's median and spread (min-max) of each, and the ratio of the medians, NEW / OLD: a
# before/after claim from the same machine at the same time.
#
#   scripts/bench-ab.sh db619ef                    # OLD against HEAD
#   ROUNDS=10 MSGS=5000 SERVERS=goaws,fauxqs scripts/bench-ab.sh OLD NEW
#
# With LAT=1 it measures instead the worker at its defaults (pollers and prefetch 0, and
# Concurrency LATC_OLD or LATC_NEW, 0 by default: sized) in two cells of workerbench's latency
# table: PostgreSQL direct and 1 ms away, with SQS LAT_SQS ms away (0 by default: direct); the
# columns are then the two rates and the worker's CPU per message in each. OLD and NEW may be one
# commit with two Concurrency values:
#   LAT=1 LATC_OLD=10 scripts/bench-ab.sh HEAD HEAD
#   LAT=1 LAT_SQS=20 scripts/bench-ab.sh OLD NEW
set -euo pipefail
old=${1:?usage: bench-ab.sh OLD [NEW]}
new=${2:-HEAD}
rounds=${ROUNDS:-10}
msgs=${MSGS:-5000}
servers=${SERVERS:-goaws,fauxqs}
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
	(cd "$tmp/$c" && go build -o "$tmp/$c.workerbench" "$(workerbench_dir "$tmp/$c")")
	echo "bench-ab: $c = $(git -C "$repo" rev-parse --short "$rev")"
done
# measure runs one measurement and prints the worker's msgs/s, its CPU per message (µs), its
# allocations per message, and the inbox's batched rate alone, without SQS (the "worker+SERVER
# batched", "CPU/msg worker", "allocs/msg" and "inbox-only batched" columns).
measure() {
	local c=$1 server=$2
	if [[ ${LAT:-} == 1 ]]; then
		local lc=${LATC_NEW:-0}
		[[ $c == old ]] && lc=${LATC_OLD:-0}
		local sd=${LAT_SQS:-0}
		(cd "$tmp/$c" && "$tmp/$c.workerbench" -sqs "$server" -n "$msgs" -c '' -inflight 0 -lat-sqs "$sd" -lat-pg 0,1 -refc 0 -lat-c "$lc") |
			awk -F'|' -v sd="$( [[ $sd == 0 ]] && echo 0s || echo "${sd}ms")" '
			/^\| SQS RTT /{ for (i = 1; i <= NF; i++) if ($i ~ /^ CPU\/msg worker $/) k = i }
			$2 == " " sd " " && $3 == " 0s " {r0 = $4; c0 = $k}
			$2 == " " sd " " && $3 == " 1ms " {r1 = $4; c1 = $k} END {
				gsub(/[ \/s]/, "", r0); gsub(/[ \/s]/, "", r1)
				gsub(/ |µs/, "", c0); gsub(/ |µs/, "", c1)
				print r0, r1, c0, c1 }'
		return
	fi
	(cd "$tmp/$c" && "$tmp/$c.workerbench" -sqs "$server" -only goaws,inbox -n "$msgs" -c 8 -inflight 0 \
		-batch 10 -bc 10 -n1c 0 -rawpollers 1) |
		awk -F'|' '/^\| c=10 N=10 /{
			r = $5; gsub(/[ \/s]/, "", r)
			c = $11; gsub(/ /, "", c)
			if (c ~ /ms$/) { sub(/ms$/, "", c); c *= 1000 } else { sub(/µs$/, "", c) }
			a = $15; gsub(/ /, "", a)
			i = $4; gsub(/[ \/s]/, "", i)
			print r, c, a, i }'
}
IFS=, read -ra list <<<"$servers"
for server in "${list[@]}"; do
	: >"$tmp/$server.old"
	: >"$tmp/$server.new"
	for r in $(seq "$rounds"); do
		for c in old new; do
			v=$(measure "$c" "$server")
			echo "$v" >>"$tmp/$server.$c"
			echo "round $r $server $c: $v"
		done
	done
done
# stats prints the median and the spread (min-max) of column k of file f.
stats() { awk -v k="$2" '{print $k}' "$1" | sort -n | awk '{a[NR]=$1} END {m=(NR%2)?a[(NR+1)/2]:(a[NR/2]+a[NR/2+1])/2; printf "%g %g-%g", m, a[1], a[NR]}'; }
echo
echo "| server | measure | old median | old spread | new median | new spread | new / old |"
echo "|---|---|---:|---:|---:|---:|---:|"
for server in "${list[@]}"; do
	for k in 1 2 3 4; do
		names="msgs/s worker-CPU-µs/msg allocs/msg inbox-alone-msgs/s"
		[[ ${LAT:-} == 1 ]] && names="msgs/s(PG-0) msgs/s(PG-1ms) CPU-µs/msg(PG-0) CPU-µs/msg(PG-1ms)"
		name=$(echo "$names" | cut -d' ' -f"$k")
		read -r om os <<<"$(stats "$tmp/$server.old" "$k")"
		read -r nm ns <<<"$(stats "$tmp/$server.new" "$k")"
		awk -v s="$server" -v n="$name" -v om="$om" -v os="$os" -v nm="$nm" -v ns="$ns" \
			'BEGIN {printf "| %s | %s | %s | %s | %s | %s | %.3f |\n", s, n, om, os, nm, ns, (om > 0 ? nm/om : 0)}'
	done
done
