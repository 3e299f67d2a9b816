#!/usr/bin/env bash
# Workers in one line: files named in payloads are gzipped by 'leasewal run'
# (4 children at once), with everything that goes wrong in real life: a runner
# SIGKILLed mid-job (its task re-leased after expiry, its children gone), a job
# that outlives its lease duration (extended meanwhile), a flaky job retried
# then FAILED, a permanent exit code, and an operator's abort of a running job
# (its child killed, LOST). Asserts every outcome, the outputs, that no
# process is left behind, and verify.
source "$(dirname "$0")/lib.sh"
DIR=$(mktemp -d)
export LEASEWAL_WAL=$DIR/gzip.wal
mkdir -p "$DIR/files"
MARK="leasewal-workers-$$" # in every child's command line, to find leftovers

# leftovers lists the processes whose command line or environment holds
# MARK (the pattern's brackets keep grep from finding itself; the
# environment is inherited by whatever a marked process starts).
leftovers() { grep -l -s "[${MARK:0:1}]${MARK:1}" /proc/[0-9]*/cmdline /proc/[0-9]*/environ || true; }
no_leftovers() { [ -z "$(leftovers)" ]; }

# waiting_on_inotify PID: PID holds an inotify instance, i.e. it is waiting
# for the WAL to change.
waiting_on_inotify() {
	local fd
	for fd in /proc/"$1"/fd/*; do
		[ "$(readlink "$fd" 2>/dev/null)" = "anon_inode:inotify" ] && return 0
	done
	return 1
}

# worker WANT ARGS...: 'leasewal -o json run ARGS...' (the flags go before the
# command, which follows --), requiring exit WANT; its lines in OUT.
worker() {
	local want=$1 code
	shift
	set +e
	OUT=$("$LEASEWAL" -o json run "$@" 2>"$ERRFILE")
	code=$?
	set -e
	[ "$code" = "$want" ] || fail "leasewal run $* exited $code, want $want: $OUT $(cat "$ERRFILE")"
	echo "   leasewal run $* -> exit $code"
}

step "the story: 8 files to gzip, a worker pool of 4, in three lines"
for i in 1 2 3 4 5 6 7 8; do
	head -c 20000 /dev/urandom >"$DIR/files/f$i"
	run 0 submit --payload "$DIR/files/f$i" --request-id "gz-$i"
done
worker 0 --worker W1 --jobs 4 -- sh -c 'read f && gzip -f "$f" # '"$MARK"
[ "$(printf '%s\n' "$OUT" | grep -c '"outcome":"COMMITTED"')" = 8 ] || fail "not 8 COMMITTED: $OUT"
for i in 1 2 3 4 5 6 7 8; do [ -f "$DIR/files/f$i.gz" ] || fail "f$i was not gzipped"; done
worker 4 --worker W1 -- true
echo "   8 files gzipped; a second run finds nothing: exit 4"

step "a job that outlives its lease duration is extended while it runs"
run 0 submit --payload slow --request-id slow
# The job runs until its lease has been extended three times (it watches the
# WAL), however long a loaded machine takes for that.
worker 0 --worker W2 --duration 2s -- sh -c 'start=$(date +%s)
until [ "$(grep -c "\"type\":\"LeaseExtended\"" "$LEASEWAL_WAL")" -ge 3 ]; do
	[ $(($(date +%s) - start)) -lt '"$HANG_GUARD"' ] || { echo "hang guard: no 3 extensions" >&2; exit 1; }
	sleep 0.1
done # '"$MARK"
expect task_id T9 outcome COMMITTED exit 0
run 0 log --task T9
extensions=$(printf '%s\n' "$OUT" | grep -c '"type":"LeaseExtended"')
[ "$extensions" -ge 3 ] || fail "only $extensions extensions for a job that outlived three"
echo "   a job that outlived a 2 s lease: $extensions extensions, COMMITTED"

step "a flaky job is retried after the default 1s backoff, then FAILED with the last line of its stderr"
run 0 submit --payload flaky --max-attempts 2 --request-id flaky
worker 11 --worker W3 --wait 3s -- sh -c 'echo "upstream timeout on attempt $LEASEWAL_ATTEMPT" >&2; exit 1 # '"$MARK"
printf '%s\n' "$OUT" | grep -q '"task_id":"T10","lease_id":"L10","attempt":1,"outcome":"RETRY","exit":1' || fail "no RETRY: $OUT"
printf '%s\n' "$OUT" | grep -q '"task_id":"T10","lease_id":"L11","attempt":2,"outcome":"FAILED","exit":1' || fail "no FAILED: $OUT"
run 0 inspect T10
expect state FAILED reason "attempts exhausted: exit 1: upstream timeout on attempt 2"

step "a permanent exit code fails the task at once"
run 0 submit --payload bad-input --request-id perm
worker 11 --worker W3 --permanent-exit 2,64-78 -- sh -c 'echo "bad input" >&2; exit 65 # '"$MARK"
expect task_id T11 attempt 1 outcome FAILED exit 65
run 0 inspect T11
expect state FAILED reason "permanent failure: exit 65: bad input"

step "an operator aborts a running job: its child is killed, the task LOST"
run 0 submit --payload long --request-id long
"$LEASEWAL" -o json run --worker W4 --duration 3s -- sh -c 'touch "$0"; sleep 60 | cat # '"$MARK" "$DIR/long.started" >"$DIR/abort.out" 2>"$DIR/abort.err" &
runner=$!
wait_for "the long job to start" has_file "$DIR/long.started"
run 0 abort T12 --reason 'operator: wrong file'
code=0
wait $runner || code=$?
[ "$code" = 3 ] || fail "run exited $code after the abort, want 3 (a lease ended LOST)"
grep -q '"task_id":"T12".*"outcome":"LOST","exit":null' "$DIR/abort.out" || fail "abort: $(cat "$DIR/abort.out" "$DIR/abort.err")"
SHOW=leftovers wait_for "the aborted job's processes to go" no_leftovers
echo "   LOST within one extension, exit 3; the child and its pipe partner gone"

step "a runner SIGKILLed mid-job leaves no process behind; its task is re-leased after expiry"
run 0 submit --payload crashy --request-id crashy
"$LEASEWAL" run --worker W5 --duration 1s -- sh -c 'touch "$0"; sleep 60 | cat # '"$MARK" "$DIR/crashy.started" >/dev/null 2>&1 &
runner=$!
wait_for "the crashy job to start" has_file "$DIR/crashy.started"
kill -9 $runner
wait $runner 2>/dev/null || true
SHOW=leftovers wait_for "the SIGKILLed runner's processes to go" no_leftovers
worker 0 --worker W6 --wait 5m --max-tasks 1 -- sh -c 'cat >/dev/null # '"$MARK"
expect task_id T13 attempt 2 outcome COMMITTED
echo "   no process left; re-leased as attempt 2 after the lease lapsed"

step "a child that floods stdout and never reads its stdin is fine"
run 0 submit --payload flood --request-id flood
worker 0 --worker W7 -- sh -c 'head -c 5000000 /dev/zero # '"$MARK"
expect task_id T14 outcome COMMITTED exit 0
echo "   5 MB on stdout (to run's stderr with -o json): COMMITTED"

step "a grandchild that leaves the process group (setsid) and ignores SIGTERM dies with its SIGKILLed runner"
run 0 submit --payload escapee --request-id escapee
"$LEASEWAL" run --worker W9 --duration 1m --kill-grace 500ms -- sh -c 'trap "" TERM
MARKED=$1 setsid sh -c "trap \"\" TERM; sleep 300; true" &
touch "$0"; sleep 300; true' "$DIR/escapee.started" "$MARK" >/dev/null 2>&1 &
runner=$!
wait_for "the escapee's parent to start" has_file "$DIR/escapee.started"
escaped() { grep -q -s "MARKED=[${MARK:0:1}]${MARK:1}" /proc/[0-9]*/environ; }
wait_for "the setsid grandchild to start" escaped
kill -9 $runner
wait $runner 2>/dev/null || true
SHOW=leftovers wait_for "every process of the runner, the setsid one included, to go" no_leftovers
echo "   the setsid grandchild ignoring SIGTERM was killed by the child's supervisor (a subreaper)"

step "a WAL deleted while a runner waits: the runner finds it gone and stops for want of tasks"
cp "$LEASEWAL_WAL" "$DIR/kept.wal"
"$LEASEWAL" -o json run --worker W8 --wait 3s -- true >"$DIR/deleted.out" 2>"$DIR/deleted.err" &
runner=$!
# On a loaded machine the runner may have ended its wait before the WAL goes;
# either way it must write nothing and leave no WAL behind.
waiting_or_gone() { waiting_on_inotify "$1" || ! kill -0 "$1" 2>/dev/null; }
wait_for "the runner to wait on the WAL" waiting_or_gone $runner
rm "$LEASEWAL_WAL"
code=0
wait $runner || code=$?
[ "$code" = 4 ] || fail "run exited $code after its WAL was deleted: $(cat "$DIR/deleted.err")"
[ ! -e "$LEASEWAL_WAL" ] || fail "the runner wrote a new WAL after its WAL was deleted"
mv "$DIR/kept.wal" "$LEASEWAL_WAL"
echo "   exit 4 (no task leased), nothing written to a WAL that is gone"

step "every record obeys every invariant"
run 0 verify
expect result OK
run 0 inspect
expect COMPLETED 11 FAILED 2 DEAD 1
rm -rf "$DIR"
echo "workers: OK"
