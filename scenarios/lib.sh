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
