#!/usr/bin/env bash
# Runs the test suite with its own temp directory; whatever Kafka brokers, PostgreSQL servers and
# Prometheus servers the session started (fixtures, tests) are stopped afterwards, even when pytest
# fails or is interrupted.
# Usage: infra/run-tests.sh [pytest args...]   (default: the whole suite, unit and integration)
set -euo pipefail

repo="$(cd "$(dirname "$0")/.." && pwd)"
bin="$repo/.venv/bin"
run_dir="$(mktemp -d /tmp/olstream-test.XXXXXX)"
chmod 755 "$run_dir"  # PostgreSQL runs as the `postgres` account when tests run as root

stop_prometheus() {
  # tests/support/prometheus.py writes each server's pid to prometheus.pid in its folder
  local pid="$1" cmd
  cmd="$(tr '\0' ' ' < "/proc/$pid/cmdline" 2>/dev/null)" || return 0
  [[ "$cmd" == *prometheus* ]] || return 0  # gone, and the pid reused: not ours
  kill -TERM "$pid" 2>/dev/null || return 0
  for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || return 0; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
}

stop_leftovers() {
  while IFS= read -r state; do
    stop_prometheus "$(head -n1 "$state")"
  done < <(find "$run_dir" -name prometheus.pid 2>/dev/null)
  # Every `olstream kafka up` / `olstream postgres up` records its server in broker.json / postgres.json,
  # every `olstream mirror up` its MirrorMaker 2 in mirror.json (stopped first: it reads the brokers).
  while IFS= read -r state; do
    "$bin/olstream" mirror down --data-dir "$(dirname "$state")" >/dev/null 2>&1 || true
  done < <(find "$run_dir" -name mirror.json 2>/dev/null)
  while IFS= read -r state; do
    "$bin/olstream" kafka down --data-dir "$(dirname "$state")" >/dev/null 2>&1 || true
  done < <(find "$run_dir" -name broker.json 2>/dev/null)
  while IFS= read -r state; do
    "$bin/olstream" postgres down --data-dir "$(dirname "$state")" >/dev/null 2>&1 || true
  done < <(find "$run_dir" -name postgres.json 2>/dev/null)
  # every `olstream registry up` (the schema_registry fixture) its Apicurio in registry.pid
  while IFS= read -r state; do
    "$bin/olstream" registry down --data-dir "$(dirname "$state")" >/dev/null 2>&1 || true
  done < <(find "$run_dir" -name registry.pid 2>/dev/null)
  rm -rf "$run_dir"
}
trap stop_leftovers EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

cd "$repo"
set +e
TMPDIR="$run_dir" "$bin/pytest" -p no:cacheprovider "${@:-tests}"
rc=$?
set -e

if [ "$rc" -eq 5 ]; then
  # pytest's "no tests collected": fine only when the project has no test modules at all.
  if find tests -name 'test_*.py' | grep -q .; then
    echo "pytest collected no tests although test modules exist: failing" >&2
    exit 5
  fi
  echo "no test modules yet: nothing to run" >&2
  exit 0
fi
exit "$rc"
