#!/usr/bin/env bash
# A bounded chaos run (self-terminating, under 2 minutes): tasks with a mix of
# retry policies; 5 worker loops leasing, extending, completing and failing in
# parallel, some deliberately slow so that their leases expire and their late
# completions are cancelled; an expire loop; and a killer that SIGKILLs random
# leasewal processes, many of them held in the middle of an append by a delay
# failpoint. Every killed call is retried blindly, as a client that lost its
# answer would. At the end it checks the WAL against every answer the workers
# received and prints a summary line.
#
# CHAOS_TASKS (default 100) sizes the run; the killer stops after
# CHAOS_SECONDS (default 90). The run ends when every task is terminal, which
# the tasks' windows (CHAOS_WINDOW, default 30s) bound however slow the
# machine is; a hang guard of
# LEASEWAL_HANG_GUARD seconds (default 600) fails it with the counts it saw.
set -uo pipefail
LEASEWAL=${LEASEWAL:-leasewal}
DIR=$(mktemp -d)
export LEASEWAL_WAL=${LEASEWAL_WAL:-$DIR/chaos.wal}
export NO_COLOR=1
TASKS=${CHAOS_TASKS:-100}
WINDOW=${CHAOS_WINDOW:-30s}
LIMIT=$((SECONDS + ${CHAOS_SECONDS:-90}))
HANG_GUARD=${LEASEWAL_HANG_GUARD:-600}
mkdir -p "$DIR/pids" "$DIR/count"
trap 'touch "$DIR/stop"; wait; rm -rf "$DIR"' EXIT

fail() {
	echo "FAIL: $*" >&2
	exit 1
}

count() { echo >>"$DIR/count/$1"; }
total() { [ -f "$DIR/count/$1" ] && wc -l <"$DIR/count/$1" || echo 0; }

# call ARGS...: run leasewal until it answers; one call in four runs with a
# delay failpoint that holds it in the middle of its write, where the killer
# may find it. A killed call (no answer) is retried blindly. Sets OUT and CODE.
call() {
	local tries=0 fp="" outf="$DIR/out.$BASHPID"
	while :; do
		count commands
		case $((RANDOM % 12)) in
		0) fp="mid-write:sleep=300ms" ;;
		1) fp="after-write:sleep=200ms" ;;
		2) fp="before-write:sleep=100ms" ;;
		*) fp="" ;;
		esac
		LEASEWAL_FAILPOINT=$fp "$LEASEWAL" "$@" -o json >"$outf" 2>/dev/null &
		local pid=$!
		: >"$DIR/pids/$pid"
		wait "$pid" 2>/dev/null
		CODE=$?
		rm -f "$DIR/pids/$pid"
		OUT=$(cat "$outf")
		if [ "$CODE" -ne 137 ] && [ -n "$OUT" ]; then
			return 0
		fi
		count retries
		tries=$((tries + 1))
		[ "$tries" -lt 50 ] || fail "leasewal $* never answered"
	done
}

field() { printf '%s' "$OUT" | grep -o "\"$1\":\"[^\"]*\"" | head -n 1 | cut -d'"' -f4; }

echo "== submitting $TASKS tasks"
for i in $(seq 1 "$TASKS"); do
	case $((i % 4)) in
	0) policy=(--max-attempts 1) ;;
	1) policy=(--max-attempts 3 --backoff 200ms) ;;
	2) policy=(--max-attempts 5 --backoff 100ms --backoff-max 400ms) ;;
	3) policy=(--max-attempts 2) ;;
	esac
	call submit --payload "job $i" --window "$WINDOW" "${policy[@]}" --request-id "job-$i"
	[ "$(field result)" = ACK ] || fail "submit: $OUT"
done

worker() {
	local w=$1 n=0 task lease
	while [ ! -e "$DIR/stop" ]; do
		n=$((n + 1))
		call lease --worker "W$w" --duration 1s --request-id "W$w-$n"
		if [ "$(field result)" != LEASED ]; then
			sleep 0.$((RANDOM % 3))
			continue
		fi
		task=$(field task_id) lease=$(field lease_id)
		if [ "$w" = 5 ] || [ $((RANDOM % 8)) = 0 ]; then
			sleep 1.3 # too slow: the lease expires under this worker
		else
			sleep 0.0$((RANDOM % 10))
			if [ $((RANDOM % 3)) = 0 ]; then
				call extend --task "$task" --lease "$lease" --duration 1s
			fi
		fi
		if [ $((RANDOM % 5)) = 0 ]; then
			call fail --task "$task" --lease "$lease" --reason "flaky"
		else
			call complete --task "$task" --lease "$lease"
		fi
		case $(field result) in
		COMMITTED) echo "$task $lease $w" >>"$DIR/committed" ;;
		CANCELLED) echo "$task $lease $w" >>"$DIR/cancelled" ;;
		esac
	done
}

expirer() {
	while [ ! -e "$DIR/stop" ]; do
		call expire
		sleep 0.5
	done
}

killer() {
	while [ ! -e "$DIR/stop" ] && [ $SECONDS -lt $LIMIT ]; do
		sleep 0.$((RANDOM % 3 + 1))
		local victims=("$DIR"/pids/*)
		[ -e "${victims[0]}" ] || continue
		local victim=${victims[RANDOM % ${#victims[@]}]}
		kill -9 "${victim##*/}" 2>/dev/null && count kills
	done
}

echo "== chaos: 5 workers, an expire loop and a killer, until every task is terminal"
for w in 1 2 3 4 5; do worker "$w" & done
expirer &
killer &
start=$SECONDS
while :; do
	sleep 1
	"$LEASEWAL" inspect -o json >"$DIR/inspect" 2>/dev/null || continue
	grep -q '"WAITING"\|"LEASED"' "$DIR/inspect" || break
	if [ $((SECONDS - start)) -ge "$HANG_GUARD" ]; then
		fail "hang guard: after ${HANG_GUARD}s tasks are still live: $(grep -o '"counts":{[^}]*}' "$DIR/inspect")"
	fi
done
touch "$DIR/stop"
wait

echo "== checks"
"$LEASEWAL" repair >/dev/null || fail "repair after the run"
"$LEASEWAL" expire >/dev/null || fail "expire after the run"
"$LEASEWAL" verify -o json >"$DIR/verify" || fail "verify: $(cat "$DIR/verify")"
"$LEASEWAL" inspect -o json >"$DIR/inspect" || fail "inspect after the run"
if grep -q '"state":"WAITING"\|"state":"LEASED"' "$DIR/inspect"; then
	fail "a task is live again after the run: $(grep -o '"counts":{[^}]*}' "$DIR/inspect")"
fi
grep -o '"type":"TaskCompleted","actor":"[^"]*","task_id":"[^"]*","lease_id":"[^"]*"' "$LEASEWAL_WAL" |
	sed 's/.*"task_id":"\([^"]*\)","lease_id":"\([^"]*\)"/\1 \2/' | sort >"$DIR/completed"
duplicates=$(cut -d' ' -f1 "$DIR/completed" | uniq -d | wc -l)
[ "$duplicates" = 0 ] || fail "tasks completed twice: $(cut -d' ' -f1 "$DIR/completed" | uniq -d | tr '\n' ' ')"
touch "$DIR/committed" "$DIR/cancelled"
while read -r task lease worker; do
	grep -qx "$task $lease" "$DIR/completed" || fail "W$worker got COMMITTED for $task under $lease, but no TaskCompleted record has that lease"
done <"$DIR/committed"
while read -r task lease worker; do
	if grep -qx "$task $lease" "$DIR/completed"; then
		fail "W$worker got CANCELLED for $task under $lease, yet $lease is the completing lease"
	fi
done <"$DIR/cancelled"

counts=$(grep -o '"counts":{[^}]*}' "$DIR/inspect" | sed 's/"counts"://')
# Each kill that landed mid-write left a torn tail, which the next writer cut
# and kept beside the WAL.
torn=$(find "$(dirname "$LEASEWAL_WAL")" -name "$(basename "$LEASEWAL_WAL").torn-*" | wc -l)
echo "chaos summary: tasks=$TASKS records=$(grep -o '"records":[0-9]*' "$DIR/verify" | cut -d: -f2) commands=$(total commands)" \
	"killed=$(total kills) killed_mid_write=$torn retries=$(total retries) committed=$(wc -l <"$DIR/committed") cancelled=$(wc -l <"$DIR/cancelled")" \
	"duplicates=$duplicates final=$counts seconds=$SECONDS"
echo "PASS chaos"
