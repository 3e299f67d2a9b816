#!/usr/bin/env bash
# Output for scripts and for people: -o tsv round-trips through cut and awk
# (tabs and newlines in a payload escaped, one row per task), --no-headers,
# tables that fit COLUMNS, the payload only in wide and json, log --follow
# printing records as they are appended, --version.
source "$(dirname "$0")/lib.sh"
DIR=$(mktemp -d)
export LEASEWAL_WAL=$DIR/out.wal

step "three tasks, one payload with a tab and a newline in it"
run 0 submit --payload 'plain' --now 2026-01-01T00:00:00Z
run 0 submit --payload "$(printf 'with\ttab\nand newline')" --queue mail --now +1s
run 0 submit --payload 'third' --priority 5 --now +1s
run 0 lease --worker W1 --now +1s

step "-o tsv --no-headers: one row per task, fields by tab"
rows=$("$LEASEWAL" inspect -o tsv --no-headers --now +1s)
[ "$(printf '%s\n' "$rows" | wc -l)" = 3 ] || fail "not 3 rows: $rows"
[ "$(printf '%s\n' "$rows" | cut -f1,2 | tr '\t' ' ' | paste -sd, -)" = "T1 WAITING,T2 WAITING,T3 LEASED" ] || fail "cut: $rows"
[ "$(printf '%s\n' "$rows" | awk -F'\t' '$2 == "WAITING" { n++ } END { print n }')" = 2 ] || fail "awk: $rows"
header=$("$LEASEWAL" inspect -o tsv --now +1s | head -n 1)
[ "$(printf '%s' "$header" | cut -f1)" = "TASK" ] || fail "the tsv header: $header"
fields=$("$LEASEWAL" log -o tsv | awk -F'\t' '{ print NF }' | sort -u)
[ "$fields" = 8 ] || fail "log rows of unequal width: $fields"
[ "$("$LEASEWAL" log -o tsv --no-headers --task T2 | wc -l)" = 1 ] || fail "a payload's newline split a TSV row"
"$LEASEWAL" inspect T2 -o tsv --no-headers --now +1s | grep -q '^T2	WAITING' || fail "inspect T2 as TSV"
echo "   inspect and log as TSV: cut and awk read them"

step "tables fit COLUMNS; the payload only with -o wide or json"
for cols in 60 100; do
	widest=$(COLUMNS=$cols "$LEASEWAL" log | wc -L) # the widest line, in terminal cells
	[ "$widest" -le "$cols" ] || fail "log on $cols columns has a line of $widest"
done
head -c 3000 /dev/zero | tr '\0' x >"$DIR/big.txt"
run 0 submit --payload-file "$DIR/big.txt" --now +1s
COLUMNS=80 "$LEASEWAL" lease --worker W2 --task T4 --now +0s | grep -q xxxxxxxx && fail "the table printed the payload"
"$LEASEWAL" inspect T4 -o json | grep -q '"payload":"xxxx' || fail "json lost the payload"
echo "   60 and 100 columns fit; a 3000-byte payload stays out of the table"

step "log --follow prints records as they are appended"
"$LEASEWAL" log --follow -o json >"$DIR/follow.out" 2>"$DIR/follow.err" &
follower=$!
followed() { [ "$(grep -c '"type":"TaskCreated"' "$DIR/follow.out")" = "$1" ]; }
wait_for "log --follow to print the records so far" followed 4
run 0 submit --payload 'followed' --request-id followed
wait_for "log --follow to print the new record" grep -q '"request_id":"followed"' "$DIR/follow.out"
kill -INT $follower
wait $follower || fail "log --follow exited $? on SIGINT: $(cat "$DIR/follow.err")"
grep -q '"request_id":"followed"' "$DIR/follow.out" || fail "log --follow did not print the new record: $(cat "$DIR/follow.out")"
[ "$(grep -c '"type":"TaskCreated"' "$DIR/follow.out")" = 5 ] || fail "log --follow printed records twice or missed some"
echo "   the new record appeared; SIGINT ends it with exit 0"

step "--version"
"$LEASEWAL" --version | grep -q '^leasewal [0-9]' || fail "--version"
"$LEASEWAL" version -o json | grep -q '"wal_reads":\[1,2,3,4\]' || fail "version -o json"
rm -rf "$DIR"
echo "output: OK"
