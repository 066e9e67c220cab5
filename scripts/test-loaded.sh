#!/usr/bin/env bash
# test-loaded.sh [PACKAGE...]: every package's tests under -race while two CPU burners take both
# cores, COUNT (5) times each, against GoAws, then the SQS packages against fauxqs. A test that
# passes on a quiet machine and fails here depends on which goroutine gets the CPU first: a defect
# of the test (or the product), never of the machine. Run it before you stop; it is not part of
# `make test`, which must stay inside CI's budget (this takes about an hour at COUNT=5).
#
#   scripts/test-loaded.sh                      # every package, COUNT=5
#   COUNT=10 scripts/test-loaded.sh ./inbox/    # one package, ten times
#   BURNERS=0 scripts/test-loaded.sh ./worker/  # the same run without burners, for comparison
#
# It prints one line per package and pass (ok/FAIL, with the time), then the failing tests' names,
# and exits non-zero if any package failed.
set -uo pipefail
cd "$(dirname "$0")/.."
count=${COUNT:-5}
burners=${BURNERS:-2}
fauxqs_pkgs=$(make -s -f - print <<<'include Makefile
print: ; @echo $(FAUXQS_PACKAGES)')
mapfile -t pkgs < <(go list "${@:-./...}")

pids=()
stop_burners() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; }
trap stop_burners EXIT INT TERM
for ((i = 0; i < burners; i++)); do
  sh -c 'while :; do :; done' &
  pids+=($!)
done
echo "# ${#pkgs[@]} package(s), -count=$count, $burners CPU burner(s), $(nproc) cores"

logs=$(mktemp -d)
failed=0
run() { # server package
  local server=$1 pkg=$2 log start rc
  log="$logs/$(echo "$server-$pkg" | tr '/.' '__').log"
  start=$(date +%s)
  SQSINBOX_TEST_SQS=$server go test -race -count="$count" -timeout 60m "$pkg" >"$log" 2>&1
  rc=$?
  if [ $rc -eq 0 ]; then
    printf 'ok    %-7s %-60s %5ds\n' "$server" "$pkg" $(($(date +%s) - start))
  else
    failed=$((failed + 1))
    printf 'FAIL  %-7s %-60s %5ds  %s\n' "$server" "$pkg" $(($(date +%s) - start)) "$log"
    grep -E -- '^\s*--- FAIL' "$log" | sort | uniq -c | sed 's/^/        /'
  fi
}
for pkg in "${pkgs[@]}"; do
  run goaws "$pkg"
done
for pkg in "${pkgs[@]}"; do
  rel=./${pkg#github.com/sqsinbox/sqsinbox/}/
  case " $fauxqs_pkgs " in *" $rel "*) run fauxqs "$pkg" ;; esac
done
echo "# $failed package run(s) failed; logs in $logs"
[ $failed -eq 0 ]
