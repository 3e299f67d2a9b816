#!/usr/bin/env bash
# Seed 001, end to end: one task submitted, leased, completed; the WAL holds
# exactly TaskCreated, LeaseGranted, TaskCompleted and verifies.
source "$(dirname "$0")/lib.sh"
export LEASEWAL_WAL=${LEASEWAL_WAL:-$(mktemp -d)/happy_path.wal}

step "1. the client submits P with a 5m window and no backoff, as the seed did"
run 0 submit --payload P --window 5m --backoff 0s --backoff-max 0s --now 2026-01-01T00:00:00Z
expect result ACK task_id T1 request_id R1 duplicate false
run 0 inspect T1 --now +0s
expect state WAITING attempt 0 lease_id null

step "2. worker W1 asks for a lease"
run 0 lease --worker W1 --duration 30s --now 2026-01-01T00:00:01Z
expect result LEASED task_id T1 lease_id L1 worker_id W1 attempt 1 payload P expiry 2026-01-01T00:00:31.000Z
run 0 inspect T1 --now +0s
expect state LEASED attempt 1 lease_id L1

step "3. W1 heartbeats while it works (no WAL write)"
before=$(records)
run 0 heartbeat --worker W1 --now 2026-01-01T00:00:10Z
expect result OK lease_id L1
[ "$(records)" = "$before" ] || fail "heartbeat wrote to the WAL"

step "4. W1 completes under L1"
run 0 complete --task T1 --lease L1 --now 2026-01-01T00:00:20Z
expect result COMMITTED task_id T1 lease_id L1
run 0 inspect T1 --now +0s
expect state COMPLETED attempt 1 lease_id null

step "5. replay is truth"
run 0 log
[ "$(records)" = 3 ] || fail "the WAL has $(records) records, want 3"
grep -q '"type":"TaskCreated"' "$LEASEWAL_WAL" && grep -q '"type":"LeaseGranted"' "$LEASEWAL_WAL" && grep -q '"type":"TaskCompleted"' "$LEASEWAL_WAL" || fail "records missing"
run 0 verify
expect result OK records 3
echo "PASS happy_path"
