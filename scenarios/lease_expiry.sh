#!/usr/bin/env bash
# Seed 000, end to end: W1's lease expires mid-execution, T1 is re-leased to
# W2, W2 commits, and W1's late completion is CANCELLED (exit 3) and recorded.
source "$(dirname "$0")/lib.sh"
export LEASEWAL_WAL=${LEASEWAL_WAL:-$(mktemp -d)/lease_expiry.wal}

step "1. the client submits P (the seed's 5m window, no backoff)"
run 0 submit --payload P --window 5m --backoff 0s --backoff-max 0s --now 2026-01-01T00:00:00Z
expect result ACK task_id T1

step "2. T1 is leased to W1 until t0+30s"
run 0 lease --worker W1 --duration 30s --now 2026-01-01T00:00:00Z
expect result LEASED lease_id L1 attempt 1 expiry 2026-01-01T00:00:30.000Z

step "3-4. W1 stalls; at t0+31s its lease has expired, with no record written"
run 0 inspect T1 --now 2026-01-01T00:00:31Z
expect state WAITING attempt 1 lease_id null
run 3 extend --task T1 --lease L1 --now 2026-01-01T00:00:31Z
expect result CANCELLED lease_id L1
[ "$(records)" = 2 ] || fail "an expiry must not need a record: $(records) records"

step "5. T1 is re-leased to W2 (attempt 2, lease L2)"
run 0 lease --worker W2 --duration 30s --now 2026-01-01T00:00:40Z
expect result LEASED task_id T1 lease_id L2 worker_id W2 attempt 2

step "6. W2 completes: COMMITTED"
run 0 complete --task T1 --lease L2 --now 2026-01-01T00:00:50Z
expect result COMMITTED lease_id L2

step "7. W1 finally finishes: CANCELLED, exit 3, TaskCancelled recorded, T1 stays COMPLETED"
run 3 complete --task T1 --lease L1 --now 2026-01-01T00:00:55Z
expect result CANCELLED task_id T1 lease_id L1
tail -n 1 "$LEASEWAL_WAL" | grep -q '"type":"TaskCancelled","actor":"[^"]*","task_id":"T1","lease_id":"L1"' || fail "no TaskCancelled record"
run 0 inspect T1 --now +0s
expect state COMPLETED attempt 2 lease_id null

step "replay: every prefix is a valid state"
run 0 inspect T1 --until 2
expect state LEASED lease_id L1
run 0 inspect T1 --until 3
expect state LEASED attempt 2 lease_id L2
run 0 inspect T1 --until 4
expect state COMPLETED
run 0 verify
expect result OK records 5
echo "PASS lease_expiry"
