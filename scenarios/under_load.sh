#!/usr/bin/env bash
# The README's test command, 3 times in a row, each beside 2 CPU burners per
# core (busy loops at normal priority), after one run on the quiet machine.
# Prints each run's wall time and stops at the first red run. On demand only
# (TestScenarios skips it): about 15 minutes on 2 cores.
#
# UNDER_LOAD_RUNS (default 3) and UNDER_LOAD_BURNERS (default 2 x nproc) size it;
# UNDER_LOAD_CMD overrides the command (default: go test -count=1 ./...).
set -uo pipefail
cd "$(dirname "$0")/.."
RUNS=${UNDER_LOAD_RUNS:-3}
BURNERS=${UNDER_LOAD_BURNERS:-$((2 * $(nproc)))}
CMD=${UNDER_LOAD_CMD:-go test -count=1 ./...}
LOG=$(mktemp -d)
burners=()
stop_burners() {
	[ ${#burners[@]} -gt 0 ] && kill "${burners[@]}" 2>/dev/null
	wait "${burners[@]}" 2>/dev/null
	burners=()
}
trap stop_burners EXIT

# timed NAME: run CMD, log its output to LOG/NAME, print its wall time.
timed() {
	local start=$SECONDS code
	$CMD >"$LOG/$1" 2>&1
	code=$?
	printf '%-10s %4ds  exit %d  load %s\n' "$1" $((SECONDS - start)) "$code" "$(cut -d' ' -f1-3 /proc/loadavg)"
	if [ "$code" != 0 ]; then
		grep -E -e '--- FAIL|^FAIL|hang guard|panic' "$LOG/$1" | head -n 20
		echo "the whole output: $LOG/$1"
		exit 1
	fi
}

echo "$CMD on $(nproc) cores, then $RUNS times beside $BURNERS CPU burners ($(date -u +%Y-%m-%d))"
go test -count=1 -run '^$' ./... >/dev/null || exit 1 # builds the test binaries once, outside the timings
timed quiet
for _ in $(seq "$BURNERS"); do
	(while :; do :; done) &
	burners+=($!)
done
for i in $(seq "$RUNS"); do
	timed "loaded-$i"
done
stop_burners
echo "under load: $RUNS of $RUNS green"
rm -rf "$LOG"
