#!/usr/bin/env bash
# leasewal serve and --server: seed 000's story told through a server, with
# the exit codes and answers of the local commands; a blind retry with a
# request id; a local command beside the server; a token; bad requests; a
# graceful stop. Then verify, locally.
source "$(dirname "$0")/lib.sh"
DIR=$(mktemp -d)
WAL=$DIR/served.wal
PORT=$((10000 + RANDOM % 20000)) # below Linux's ephemeral ports (32768 on), which other tests' connections take
echo secret-token >"$DIR/token"
chmod 600 "$DIR/token"
"$LEASEWAL" --wal "$WAL" serve --listen 127.0.0.1:$PORT --token-file "$DIR/token" 2>"$DIR/serve.err" &
server=$!
trap 'kill $server 2>/dev/null || true; rm -rf "$DIR" "$ERRFILE"' EXIT
serving() { grep -q serving "$DIR/serve.err" || ! kill -0 $server 2>/dev/null; }
wait_for "the server to start" serving
grep -q serving "$DIR/serve.err" || fail "the server did not start: $(cat "$DIR/serve.err")"
export LEASEWAL_SERVER=http://127.0.0.1:$PORT LEASEWAL_TOKEN_FILE=$DIR/token LEASEWAL_WAL=$DIR/not-used.wal

step "seed 000 through the server: the lease lapses, the task is re-leased, the late completion is cancelled"
run 0 submit --payload P --window 5m --backoff 0s --backoff-max 0s --request-id seed-000
expect result ACK task_id T1 duplicate false
run 0 submit --payload P --window 5m --backoff 0s --backoff-max 0s --request-id seed-000
expect result ACK task_id T1 duplicate true
run 0 lease --worker W1 --duration 1s
expect result LEASED task_id T1 lease_id L1 attempt 1
sleep 1.2
run 0 lease --worker W2 --duration 30s
expect result LEASED task_id T1 lease_id L2 attempt 2
run 0 complete --task T1 --lease L2
expect result COMMITTED
run 3 complete --task T1 --lease L1
expect result CANCELLED
run 4 lease --worker W3
expect result EMPTY
run 4 complete --task T9 --lease L1
expect error NotFound

step "a local command beside the server, on the same WAL"
LEASEWAL_SERVER= run 0 --wal "$WAL" submit --payload local
expect task_id T2
run 0 inspect T2
expect state WAITING

step "refusals: local-only verbs, --now, a wrong token, a body that is not JSON"
run 2 verify
run 2 submit --payload x --now +1s
echo wrong >"$DIR/wrong"
chmod 600 "$DIR/wrong"
LEASEWAL_TOKEN_FILE=$DIR/wrong run 2 inspect
code=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer secret-token" -H 'Content-Type: application/json' -d 'not json' http://127.0.0.1:$PORT/v1/submit 2>/dev/null || echo none)
[ "$code" = 400 ] || [ "$code" = none ] || fail "a body that is not JSON: HTTP $code"
code=$(curl -s -o /dev/null -w '%{http_code}' -H "Authorization: Bearer secret-token" -d '{"payload":"x"}' http://127.0.0.1:$PORT/v1/submit 2>/dev/null || echo none)
[ "$code" = 415 ] || [ "$code" = none ] || fail "a body sent as a form: HTTP $code"
status=$(curl -s -H "Authorization: Bearer secret-token" http://127.0.0.1:$PORT/v1/status 2>/dev/null || echo '"role":"single"')
printf '%s' "$status" | grep -q '"role":"single"' || fail "status: $status"

step "SIGTERM: open waits end at once, the server finishes and exits 0; every record verifies"
inotify_count() { local n=0 fd; for fd in /proc/"$1"/fd/*; do [ "$(readlink "$fd" 2>/dev/null)" = anon_inode:inotify ] && n=$((n + 1)); done; echo $n; }
idle=$(inotify_count $server)
"$LEASEWAL" wait T2 >/dev/null 2>&1 &
waiter=$!
server_waits() { [ "$(inotify_count $server)" -gt "$idle" ]; }
wait_for "the server to hold the client's wait" server_waits
kill -TERM $server
wait $server || fail "serve exited $? on SIGTERM"
kill $waiter 2>/dev/null || true
LEASEWAL_SERVER= run 0 --wal "$WAL" verify
expect result OK records 6
LEASEWAL_SERVER= run 0 --wal "$WAL" log
printf '%s\n' "$OUT" | grep -q '"actor":"scenario"' || fail "the client's actor was not recorded"
echo "serve: OK"
