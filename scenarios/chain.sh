#!/usr/bin/env bash
# Work that waits for work: three files go through convert -> upload ->
# notify, a summary waits for every notify (a fan-in) and a cleanup for
# every convert to end, whatever its outcome; the whole graph is one batch
# file, written at once. 'leasewal run' workers do the steps; one worker is
# SIGKILLed in the middle of a chain (its step re-leased after its lease
# lapses, the chain going on), and one file's convert fails for good: its
# upload and notify end DEAD, and so does the summary, which expire records
# in one write, while the cleanup runs. Asserts the order of every step,
# that none ran twice, what waits and why, and verify.
source "$(dirname "$0")/lib.sh"
DIR=$(mktemp -d)
export LEASEWAL_WAL=$DIR/chain.wal
MARK="leasewal-chain-$$"
leftovers() { grep -l -s "[${MARK:0:1}]${MARK:1}" /proc/[0-9]*/cmdline || true; }
no_leftovers() { [ -z "$(leftovers)" ]; }

step "the graph: three chains of three steps, a fan-in and a cleanup, in one batch"
for i in 1 2 3; do
	printf '{"payload":"convert %s","request_id":"convert-%s"}\n' "$i" "$i"
	printf '{"payload":"upload %s","request_id":"upload-%s","after":["convert-%s"]}\n' "$i" "$i" "$i"
	printf '{"payload":"notify %s","request_id":"notify-%s","after":["upload-%s"]}\n' "$i" "$i" "$i"
done >"$DIR/graph.jsonl"
printf '{"payload":"summary","request_id":"summary","after":["notify-1","notify-2","notify-3"]}\n' >>"$DIR/graph.jsonl"
printf '{"payload":"cleanup","request_id":"cleanup","after_ended":["convert-1","convert-2","convert-3"]}\n' >>"$DIR/graph.jsonl"
run 0 submit --batch-file "$DIR/graph.jsonl"
[ "$(printf '%s\n' "$OUT" | grep -c '"duplicate":false')" = 11 ] || fail "not 11 tasks: $OUT"
run 0 submit --batch-file "$DIR/graph.jsonl"
[ "$(printf '%s\n' "$OUT" | grep -c '"duplicate":true')" = 11 ] || fail "the same batch again wrote something: $OUT"
run 0 why T10
printf '%s' "$OUT" | grep -q '"because":"waiting_for_dependencies"' || fail "why the summary: $OUT"
run 0 stats
expect waiting 11 eligible 3 blocked 8
echo "   11 tasks, 8 of them waiting for others; the same batch again wrote nothing"

# The job: append the step to the order file; convert 3 fails for good;
# upload 2 waits for the file that stops it in its first attempt (its
# worker is SIGKILLed then). MARK finds the job's processes.
JOB='read step
case "$step:$LEASEWAL_ATTEMPT" in
"convert 3:"*) echo "unreadable input" >&2; exit 65 ;;
"upload 2:1") touch "$0"; sleep 300 ;;
esac
echo "$step" >>"$1" # '"$MARK"

step "a worker SIGKILLed in the middle of a chain"
"$LEASEWAL" run --worker W1 --duration 2s --jobs 2 --wait 30s --permanent-exit 65 -- sh -c "$JOB" "$DIR/upload2.started" "$DIR/order" >/dev/null 2>"$DIR/w1.err" &
runner=$!
wait_for "upload 2 to start" has_file "$DIR/upload2.started"
kill -9 $runner
wait $runner 2>/dev/null || true
SHOW=leftovers wait_for "the SIGKILLed worker's processes to go" no_leftovers
grep -q "^convert 2$" "$DIR/order" || fail "upload 2 ran before convert 2: $(cat "$DIR/order")"
echo "   upload 2 was running when its worker died"

step "workers finish the graph; convert 3's failure ends its chain and the summary"
set +e
OUT=$("$LEASEWAL" -o json run --worker W2 --jobs 2 --wait 5s --permanent-exit 65 -- sh -c "$JOB" "$DIR/upload2.started" "$DIR/order" 2>"$ERRFILE")
code=$?
set -e
# (exit 11 when this worker ran convert 3; the first may have)
[ "$code" = 0 ] || [ "$code" = 11 ] || fail "the second worker exited $code: $OUT $(cat "$ERRFILE")"
printf '%s\n' "$OUT" | grep -q '"task_id":"T5","lease_id":"L[0-9]*","attempt":2,"outcome":"COMMITTED"' || fail "upload 2 was not run again: $OUT"
run 0 inspect T7
expect state FAILED reason "permanent failure: exit 65: unreadable input"
run 0 why T8
expect because dependency_failed
run 0 why T9
printf '%s' "$OUT" | grep -q "T8 is DEAD: the next 'leasewal expire' records what that means" || fail "why notify 3: $OUT"
run 0 expire
[ "$(printf '%s' "$OUT" | grep -o '"type":"TaskDead"' | wc -l)" = 3 ] || fail "expire: $OUT"
run 0 expire
expect transitions "[]"
echo "   upload 3, notify 3 and the summary DEAD in one expire; a second finds nothing"

step "every step completed once, in its chain's order; the cleanup after every convert"
# A step whose worker was killed after the step's work but before its
# completion was recorded runs again (at least once, as leases promise);
# what follows it starts only once a completion is recorded.
line() { grep -n "^$1\$" "$DIR/order" | head -n 1 | cut -d: -f1; }
for step in "convert 1" "upload 1" "notify 1" "convert 2" "upload 2" "notify 2" cleanup; do
	n=$(grep -c "^$step\$" "$DIR/order")
	[ "$n" -ge 1 ] && [ "$n" -le 2 ] || fail "$step ran $n times: $(cat "$DIR/order")"
done
for step in "upload 3" "notify 3" summary; do
	! grep -q "^$step\$" "$DIR/order" || fail "$step ran though what it waits for failed"
done
for i in 1 2; do
	[ "$(line "convert $i")" -lt "$(line "upload $i")" ] && [ "$(line "upload $i")" -lt "$(line "notify $i")" ] || fail "chain $i out of order: $(cat "$DIR/order")"
	[ "$(line "convert $i")" -lt "$(line cleanup)" ] || fail "the cleanup ran before convert $i: $(cat "$DIR/order")"
done
run 0 inspect
expect COMPLETED 7 FAILED 1 DEAD 3
run 0 log --type TaskCompleted
[ "$(printf '%s\n' "$OUT" | grep -c '"type":"TaskCompleted"')" = 7 ] || fail "not 7 completions: $OUT"
[ "$(printf '%s\n' "$OUT" | grep -o '"task_id":"T[0-9]*"' | sort -u | wc -l)" = 7 ] || fail "a task completed twice: $OUT"
run 0 verify
expect result OK
rm -rf "$DIR"
echo "chain: OK"
