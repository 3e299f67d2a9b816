#!/usr/bin/env bash
# A three-node raft cluster of `leasewal serve` processes on 127.0.0.1, and
# chaos: while one client submits tasks (each with a request id) and another
# leases and completes them, the leader is SIGKILLed and restarted again and
# again. Afterwards every acknowledged submit is in the WAL exactly once, no
# task was completed twice, every node's WAL passes verify, and the three
# WALs are the same file byte for byte.
# CLUSTER_KILLS (default 5) and CLUSTER_TASKS (default 60) size it.
source "$(dirname "$0")/lib.sh"
KILLS=${CLUSTER_KILLS:-5}
TASKS=${CLUSTER_TASKS:-60}
DIR=$(mktemp -d)
BASE=$((10000 + RANDOM % 20000)) # below Linux's ephemeral ports (32768 on), which other tests' connections take
declare -a PIDS
trap 'for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null && wait "$p" 2>/dev/null; done; rm -rf "$DIR" "$ERRFILE"' EXIT

http_port() { echo $((BASE + $1)); }
raft_port() { echo $((BASE + 10 + $1)); }
url() { echo "http://127.0.0.1:$(http_port "$1")"; }

# start N [--join URL]: run node N in the background, logging to DIR/nN.err.
start() {
	local n=$1
	shift
	"$LEASEWAL" --wal "$DIR/n$n.wal" serve --listen "127.0.0.1:$(http_port "$n")" \
		--raft-id "n$n" --raft-dir "$DIR/n$n.raft" --raft-bind "127.0.0.1:$(raft_port "$n")" "$@" \
		2>>"$DIR/n$n.err" &
	PIDS[$n]=$!
}

# status N: node N's GET /v1/status, through bash's /dev/tcp (no curl here).
status() {
	local answer
	answer=$( (exec 3<>"/dev/tcp/127.0.0.1/$(http_port "$1")" &&
		printf 'GET /v1/status HTTP/1.0\r\n\r\n' >&3 && cat <&3) 2>/dev/null) || true
	printf '%s' "${answer##*$'\r\n\r\n'}"
}

# leading: prints the number of the node that says it leads, if one does.
leading() {
	for n in 1 2 3; do
		if status "$n" | grep -q '"role":"leader"'; then
			echo "$n"
			return 0
		fi
	done
	return 1
}

# leader: the number of the node that leads, once one does.
leader() {
	SHOW="tail -n 3 $DIR/n1.err $DIR/n2.err $DIR/n3.err" wait_for "a leader" leading >/dev/null
	leading
}

# definite ARGS...: run a command through the cluster until its outcome is
# known: exit 10 (unknown) and "no server answered" are sent again, which a
# request id (or the same lease, for complete) makes safe. Prints stdout.
definite() {
	local code out start=$SECONDS
	while [ $((SECONDS - start)) -lt "$HANG_GUARD" ]; do
		set +e
		out=$("$LEASEWAL" "$@" -o json 2>"$DIR/client.err")
		code=$?
		set -e
		if [ "$code" != 10 ] && ! { [ "$code" = 1 ] && grep -q "no server answered" "$DIR/client.err"; }; then
			printf '%s\n' "$out"
			return "$code"
		fi
		sleep 0.2
	done
	fail "hang guard: leasewal $* had no definite answer in ${HANG_GUARD}s: $(cat "$DIR/client.err")"
}

step "three nodes: n1 founds the cluster, n2 and n3 join it"
start 1
leader >/dev/null
start 2 --join "$(url 1)"
start 3 --join "$(url 1)"
for n in 2 3; do
	SHOW="cat $DIR/n$n.err" wait_for "n$n to join" grep -q "joined the cluster" "$DIR/n$n.err"
done
export LEASEWAL_SERVER="$(url 1),$(url 2),$(url 3)" LEASEWAL_WAL=$DIR/not-used.wal
echo "   leader: n$(leader)"

step "a local writer refuses a node's WAL; a local reader works"
LEASEWAL_SERVER= run 2 --wal "$DIR/n2.wal" submit --payload local
grep -q "raft node n2" "$ERRFILE" || fail "the refusal does not name the node: $(cat "$ERRFILE")"
LEASEWAL_SERVER= run 0 --wal "$DIR/n2.wal" inspect

step "chaos: $TASKS submits and a worker, the leader SIGKILLed $KILLS times"
(
	for i in $(seq "$TASKS"); do
		definite submit --payload "job-$i" --request-id "s-$i" --window 10m >/dev/null
	done
	echo done >"$DIR/submitted"
) &
submitter=$!
(
	j=0
	while :; do
		j=$((j + 1))
		set +e
		out=$(definite lease --worker W --duration 1m --request-id "w-$j")
		code=$?
		set -e
		if [ "$code" = 0 ]; then
			task=$(printf '%s' "$out" | grep -o '"task_id":"[^"]*"' | head -n 1 | cut -d'"' -f4)
			lease=$(printf '%s' "$out" | grep -o '"lease_id":"[^"]*"' | head -n 1 | cut -d'"' -f4)
			definite complete --task "$task" --lease "$lease" >/dev/null || fail "complete $task $lease exited $?"
			echo "$task" >>"$DIR/completed"
		elif [ -e "$DIR/submitted" ]; then
			break
		else
			sleep 0.2
		fi
	done
) &
worker=$!
for k in $(seq "$KILLS"); do
	sleep 1
	n=$(leader)
	kill -9 "${PIDS[$n]}"
	wait "${PIDS[$n]}" 2>/dev/null || true
	echo "   kill $k: SIGKILLed the leader n$n"
	sleep 0.5
	start "$n"
done
wait $submitter || fail "the submitter failed"
wait $worker || fail "the worker failed"

step "every node converges: the same WAL, every acknowledged submit once, nothing completed twice"
statuses() { for n in 1 2 3; do status "$n"; echo; done; }
converged() {
	local seqs
	seqs=$(for n in 1 2 3; do status "$n" | grep -o '"last_seq":[0-9]*'; done)
	[ "$(printf '%s\n' "$seqs" | grep -c .)" = 3 ] && [ "$(printf '%s\n' "$seqs" | sort -u | wc -l)" = 1 ]
}
SHOW=statuses wait_for "every node to reach the same last seq" converged
for n in 1 2 3; do
	LEASEWAL_SERVER= run 0 --wal "$DIR/n$n.wal" verify
done
cmp "$DIR/n1.wal" "$DIR/n2.wal" || fail "n1 and n2 hold different WALs"
cmp "$DIR/n1.wal" "$DIR/n3.wal" || fail "n1 and n3 hold different WALs"
created=$(grep -c '"type":"TaskCreated"' "$DIR/n1.wal")
[ "$created" = "$TASKS" ] || fail "$created tasks created for $TASKS acknowledged submits"
completed=$(grep -c '"type":"TaskCompleted"' "$DIR/n1.wal")
[ "$completed" = "$(sort -u "$DIR/completed" | wc -l)" ] || fail "$completed completions recorded, $(sort -u "$DIR/completed" | wc -l) acknowledged"
[ "$(sort "$DIR/completed" | uniq -d | wc -l)" = 0 ] || fail "a task was completed twice"
echo "   $created tasks, $completed completed, $(grep -c '"type":"LeaseGranted"' "$DIR/n1.wal") leases, $KILLS leaders killed"
echo "cluster: OK"
