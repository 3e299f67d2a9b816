#!/usr/bin/env bash
# An operator's day (#26): a per-queue limit, a queue paused during an
# incident (its windows stand still), a periodic task, results kept with
# the tasks, a lease given back, and the figures a monitor reads.
source "$(dirname "$0")/lib.sh"
export LEASEWAL_WAL=${LEASEWAL_WAL:-$(mktemp -d)/operate.wal}

step "1. the api queue takes at most one lease at a time"
run 0 queue limit api 1 --now 2026-01-01T08:00:00Z
run 0 submit --payload a1 --queue api --now 2026-01-01T08:00:00Z
run 0 submit --payload a2 --queue api --now 2026-01-01T08:00:00Z
run 0 lease --worker W1 --queue api --now 2026-01-01T08:00:00Z
expect task_id T1
run 4 lease --worker W2 --queue api --now 2026-01-01T08:00:01Z
expect result EMPTY next_eligible_at null

step "2. W1 gives its lease back (release): the attempt does not count, W2 takes the task"
run 0 release --task T1 --lease L1 --now 2026-01-01T08:00:02Z
expect result RELEASED state WAITING attempt 0
run 0 lease --worker W2 --queue api --now 2026-01-01T08:00:02Z
expect task_id T1 lease_id L2 attempt 1

step "3. W2 finishes with a result, which stays with the task"
run 0 complete --task T1 --lease L2 --result 'resized to 640x480' --now 2026-01-01T08:00:05Z
run 0 inspect T1 --now 2026-01-01T08:00:05Z
expect result OK
printf '%s' "$OUT" | grep -q '"result":"resized to 640x480"' || fail "no result in: $OUT"

step "4. the mail relay is down: pause mail; its tasks wait, and do not die"
run 0 submit --payload m1 --queue mail --window 10m --now 2026-01-01T08:01:00Z
run 0 pause mail --reason 'relay down' --now 2026-01-01T08:02:00Z
expect queue mail until null reason 'relay down'
run 4 lease --worker W3 --queue mail --now 2026-01-01T08:05:00Z
run 0 expire --now 2026-01-01T09:00:00Z
run 0 inspect T3 --now 2026-01-01T09:00:00Z
expect state WAITING
run 0 stats --now 2026-01-01T09:00:00Z
printf '%s' "$OUT" | grep -q '"paused":\[{"queue":"mail"' || fail "stats does not list the pause: $OUT"

step "5. resumed after 58 minutes: the deadline moved by as much, and a lease takes the task"
run 0 resume mail --now 2026-01-01T09:00:00Z
run 0 inspect T3 --now 2026-01-01T09:00:00Z
expect deadline 2026-01-01T09:09:00.000Z
run 0 lease --worker W3 --queue mail --now 2026-01-01T09:00:00Z
expect task_id T3

step "6. a report every hour: the next write after each slot submits it, once"
OUT=$("$LEASEWAL" schedule add hourly --every 1h --now 2026-01-01T09:00:00Z -o json -- --payload 'build the report' --queue reports)
expect next_slot 2026-01-01T10:00:00.000Z
run 0 expire --now 2026-01-01T10:00:30Z
run 0 expire --now 2026-01-01T10:00:40Z
[ "$(grep -c '"request_id":"hourly@2026-01-01T10:00:00.000Z"' "$LEASEWAL_WAL")" = 1 ] || fail "the 10:00 slot did not fire exactly once"
run 0 lease --worker W4 --queue reports --now 2026-01-01T10:01:00Z
expect payload 'build the report'

step "7. the figures, for Prometheus, and the log still verifies"
"$LEASEWAL" stats -o prom --now 2026-01-01T10:01:00Z | grep -q '^leasewal_leases_total{event="released"} 1$' || fail "no released counter"
run 0 verify
