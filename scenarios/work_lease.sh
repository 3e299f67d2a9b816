#!/usr/bin/env bash
# Seed 003's six sanity scenarios through the built binary, with exact results
# and exit codes, then verify.
source "$(dirname "$0")/lib.sh"
export LEASEWAL_WAL=${LEASEWAL_WAL:-$(mktemp -d)/work_lease.wal}
export LEASEWAL_NOW=2026-01-01T00:00:00Z

step "1. happy path"
run 0 worklease acquire --domain A --offset 1
expect result ACQUIRED token K1
run 0 worklease succeed --domain A --token K1
expect result NO_BACKLOG processed 1

step "2. queue then orchestrated hand-off"
run 0 worklease acquire --domain A --offset 10
expect result ACQUIRED token K2
run 0 worklease acquire --domain A --offset 11
expect result ENQUEUED offset 11
run 0 worklease acquire --domain A --offset 12
expect result ENQUEUED offset 12
run 0 worklease succeed --domain A --token K2
expect result NEXT_HINT offset 11 processed 10
run 0 worklease inspect --domain A
expect lease null
printf '%s' "$OUT" | grep -q '"backlog":\[11,12\]' || fail "succeed must not hand off: $OUT"
run 0 worklease acquire --domain A --offset 11
expect result ACQUIRED offset 11 token K3

step "3. out-of-order acquire is a hard error (exit 7), nothing written"
run 0 worklease succeed --domain A --token K3
expect result NEXT_HINT offset 12
before=$(cksum <"$LEASEWAL_WAL")
run 7 worklease acquire --domain A --offset 13
expect result ERROR error BacklogOrdering
grep -q 'expected 12, got 13' "$ERRFILE" || fail "the message must name the expected head and the offset given"
[ "$(cksum <"$LEASEWAL_WAL")" = "$before" ] || fail "a contract error wrote to the WAL"

step "4. retry keeps the lease; acquired_at never changes"
run 0 worklease acquire --domain A --offset 12
expect result ACQUIRED token K4
export LEASEWAL_NOW=2026-01-01T00:05:00Z
run 0 worklease fail --domain A --token K4 --max-retries 2
expect result RETRY_SCHEDULED retry_count 1
run 0 worklease fail --domain A --token K4 --max-retries 2
expect result RETRY_SCHEDULED retry_count 2
run 0 worklease inspect --domain A
expect offset 12 token K4 acquired_at 2026-01-01T00:00:00.000Z retry_count 2

step "5. final give-up"
run 0 worklease fail --domain A --token K4 --max-retries 2
expect result GIVE_UP_NO_BACKLOG failed 12
run 7 worklease fail --domain A --token K4
expect error LeaseNotFound

step "6. idempotence: terminal offsets are never re-enqueued nor re-acquired"
run 0 worklease acquire --domain A --offset 1
expect result ALREADY_PROCESSED
run 0 worklease acquire --domain A --offset 12
expect result ALREADY_FAILED
run 0 worklease acquire --domain A --offset 20
run 0 worklease acquire --domain A --offset 10
expect result ALREADY_PROCESSED
run 0 worklease inspect --domain A
printf '%s' "$OUT" | grep -q '"backlog":\[\],"processed":\[1,10,11\],"failed":\[12\]' || fail "terminal sets: $OUT"

step "fencing: a stale token is refused"
run 7 worklease succeed --domain A --token K4
expect error TokenMismatch

run 0 verify
echo "PASS work_lease"
