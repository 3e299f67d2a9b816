# Helpers for the scenario scripts: run leasewal, assert exit codes and JSON
# fields without jq (a fresh machine has only Go and a shell).
set -euo pipefail

LEASEWAL=${LEASEWAL:-leasewal}
ERRFILE=$(mktemp)
trap 'rm -f "$ERRFILE"' EXIT

fail() {
	echo "FAIL: $*" >&2
	exit 1
}

step() { echo "== $*"; }

# HANG_GUARD is how many seconds a wait may last before it is taken for a
# hang. It is no deadline of the story: every wait below ends at the event it
# waits for, and the guard only keeps a broken run from hanging for ever.
HANG_GUARD=${LEASEWAL_HANG_GUARD:-300}

# wait_for WHAT CMD...: run CMD every 0.1 s until it succeeds; after
# HANG_GUARD seconds, fail saying WHAT was awaited and, when SHOW names a
# command, what that command prints of the state it saw.
SHOW=
wait_for() {
	local what=$1 start=$SECONDS
	shift
	until "$@"; do
		if [ $((SECONDS - start)) -ge "$HANG_GUARD" ]; then
			fail "hang guard: waited ${HANG_GUARD}s for $what${SHOW:+; saw: $($SHOW 2>&1)}"
		fi
		sleep 0.1
	done
}

# has_file PATH: PATH exists (a condition for wait_for).
has_file() { [ -e "$1" ]; }

# run WANT ARGS...: run leasewal with -o json, require exit code WANT, keep stdout in OUT.
run() {
	local want=$1 code
	shift
	set +e
	OUT=$("$LEASEWAL" "$@" -o json 2>"$ERRFILE")
	code=$?
	set -e
	[ "$code" = "$want" ] || fail "leasewal $* exited $code, want $want: $OUT $(cat "$ERRFILE")"
	echo "   leasewal $* -> exit $code"
}

# field NAME: the first value of NAME in OUT (string or number or null).
field() {
	printf '%s' "$OUT" | grep -o "\"$1\":\(\"[^\"]*\"\|[^,}]*\)" | head -n 1 | sed 's/^"[^"]*"://; s/^"//; s/"$//'
}

# expect NAME VALUE...: each named field of OUT has the given value.
expect() {
	while [ $# -ge 2 ]; do
		local got
		got=$(field "$1")
		[ "$got" = "$2" ] || fail "$1 is '$got', want '$2' in: $OUT"
		shift 2
	done
}

# wal_lines: the number of records in the WAL (the header is line 1).
records() { echo $(($(wc -l <"$LEASEWAL_WAL") - 1)); }
