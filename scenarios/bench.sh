#!/usr/bin/env bash
# Benchmark: builds leasewal, generates realistic WALs of 10k, 100k and 1M
# records, and prints one table comparing per-command latency with the sqlite3
# CLI doing the equivalent transaction, the replay throughput of verify, and
# peak RSS. It prints figures and does not fail on timing.
# Usage: bash scenarios/bench.sh [-sizes 10000,100000] [-reps 15]
set -euo pipefail
cd "$(dirname "$0")/.."
if ! command -v sqlite3 >/dev/null 2>&1; then
	echo "sqlite3 is missing: installing it (apt-get install -y sqlite3) for the comparison"
	if ! { apt-get update -qq && apt-get install -y -qq sqlite3; } >/dev/null 2>&1; then
		echo "could not install sqlite3: its columns will say n/a"
	fi
fi
bin=$(mktemp -d)
trap 'rm -rf "$bin"' EXIT
# Static binaries: no dynamic loader at start-up (see the README's Speed section).
CGO_ENABLED=0 go build -o "$bin/leasewal" .
CGO_ENABLED=0 go build -o "$bin/floor" ./scenarios/bench/floor
go run ./scenarios/bench -leasewal "$bin/leasewal" -floor "$bin/floor" "$@"
