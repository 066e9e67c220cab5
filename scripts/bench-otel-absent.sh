#!/usr/bin/env bash
# bench-otel-absent.sh OLD [NEW]: what the OpenTelemetry support costs a worker that does not use
# it, and what tracing costs one that does. workerbench is built from OLD (a commit before the
# hooks, such as c70602e, the parent of the inbox.Config.Hooks commit) and from NEW (default
# HEAD), and run in one script, interleaved (old, new, new -otel; again each round):
#
#   scripts/bench-otel-absent.sh c70602e
#   ROUNDS=5 MSGS=2000 CONC=8 ONLY=fake,goaws scripts/bench-otel-absent.sh c70602e HEAD
#
# new/old compares the worker with the adapter absent (NEW has the hooks, nil) against OLD;
# everything else that changed between the two commits is in that ratio too. on/off compares
# NEW with workerotel.Middleware and InboxHooks (every message sampled, spans batched to an
# exporter that drops them) against NEW without. Each figure is the median of the rounds: the
# worker's rate, its process's CPU per message (from /proc, 10 ms resolution over the run, so
# keep MSGS high enough) and its allocations per message, on the in-process SQS fake by default
# (ONLY=fake: the worker and PostgreSQL only, no GoAws to add noise). The raw tables follow.
set -euo pipefail
old=${1:?usage: bench-otel-absent.sh OLD [NEW]}
new=${2:-HEAD}
rounds=${ROUNDS:-3}
msgs=${MSGS:-1000}
conc=${CONC:-8}
only=${ONLY:-fake}
col=${only%%,*} # the column the ratios read: fake or goaws
case $col in fake | goaws) ;; *)
	echo "bench-otel-absent: ONLY must start with fake or goaws" >&2
	exit 2
	;;
esac
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
	echo "bench-otel-absent: $c = $(git -C "$repo" rev-parse --short "$rev")"
done
if ! "$tmp/new.workerbench" -h 2>&1 | grep -q -- '-otel'; then
	echo "bench-otel-absent: NEW's workerbench has no -otel flag" >&2
	exit 2
fi

# figures FILE: "RATE CPU_US ALLOCS" of the first concurrency's row, for column $col.
figures() {
	awk -v col="$col" '
		function us(d) { # a Go duration (933µs, 1.467ms, 0s) in microseconds
			if (d ~ /µs$/) { sub(/µs$/, "", d); return d + 0 }
			if (d ~ /ms$/) { sub(/ms$/, "", d); return d * 1000 }
			if (d ~ /ns$/) { sub(/ns$/, "", d); return d / 1000 }
			if (d ~ /s$/) { sub(/s$/, "", d); return d * 1000000 }
			return d + 0
		}
		/^\| conc \| raw GoAws/ { t = 1; next }
		/^\| conc \| worker process/ { t = 3; next }
		/^\| conc / { t = 0; next }
		/^\| [0-9]/ && t == 1 && !rate {
			split($0, f, "|"); gsub(/[ \/s]/, "", f[col == "fake" ? 8 : 5]); rate = f[col == "fake" ? 8 : 5]
			allocs = f[col == "fake" ? 10 : 11] + 0
		}
		/^\| [0-9]/ && t == 3 && !cpu { split($0, f, "|"); gsub(/ /, "", f[col == "fake" ? 9 : 3]); cpu = us(f[col == "fake" ? 9 : 3]) }
		END { printf "%s %s %s\n", rate, cpu, allocs }' "$1"
}

variants=(old new new-otel)
for r in $(seq "$rounds"); do
	for v in "${variants[@]}"; do
		bin=$tmp/${v%-otel}.workerbench
		args=(-n "$msgs" -c "$conc" -only "$only" -inflight 0)
		[[ $v == new-otel ]] && args+=(-otel)
		echo "=== round $r: $v: workerbench ${args[*]}"
		(cd "$tmp/${v%-otel}" && "$bin" "${args[@]}") | tee "$tmp/$v.$r.out"
		figures "$tmp/$v.$r.out" >>"$tmp/$v.figures"
	done
done

# median COLUMN FILE
median() { awk -v k="$1" '{print $k}' "$2" | sort -g | awk '{a[NR] = $1} END {print (NR % 2 ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2)}'; }
echo
echo "bench-otel-absent: $rounds rounds of $msgs messages at concurrency $conc, column worker+$col; medians"
echo
echo "| build | rate | worker CPU per message | allocs per message |"
echo "|---|---:|---:|---:|"
for v in "${variants[@]}"; do
	printf "| %s | %s/s | %s µs | %s |\n" "$v" "$(median 1 "$tmp/$v.figures")" "$(median 2 "$tmp/$v.figures")" "$(median 3 "$tmp/$v.figures")"
done
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b == 0) print "n/a"; else printf "%.3f", a / b }'; }
echo
echo "adapter absent, new/old: rate $(ratio "$(median 1 "$tmp/new.figures")" "$(median 1 "$tmp/old.figures")"), CPU per message $(ratio "$(median 2 "$tmp/new.figures")" "$(median 2 "$tmp/old.figures")"), allocs per message $(ratio "$(median 3 "$tmp/new.figures")" "$(median 3 "$tmp/old.figures")")"
echo "tracing on/off (new): rate $(ratio "$(median 1 "$tmp/new-otel.figures")" "$(median 1 "$tmp/new.figures")"), CPU per message $(ratio "$(median 2 "$tmp/new-otel.figures")" "$(median 2 "$tmp/new.figures")"), allocs per message $(ratio "$(median 3 "$tmp/new-otel.figures")" "$(median 3 "$tmp/new.figures")")"
