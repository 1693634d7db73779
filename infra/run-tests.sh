#!/usr/bin/env bash
# Runs the test suite with its own temp directory; whatever Kafka brokers, PostgreSQL servers and
# Prometheus servers the session started (fixtures, tests) are stopped afterwards, even when pytest
# fails or is interrupted.
# Usage: infra/run-tests.sh [pytest args...]   (default: the whole suite, unit and integration)
#
# The whole suite (no arguments, or just `tests`) runs as two pytest sessions at once, each with its
# own temp directory and its own broker: the chart's, the sink's and the wheel's integration tests,
# the mixed-fault and outage-log tests and the unit tests beside the rest. The suite mostly waits (outages, timeouts, JVMs starting): one
# session kept 2 cores 34% busy. Timings are in docs/testing.md. Output of the second session
# follows the first's; the run fails when either does.
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
  if [ -n "${beside_pid:-}" ] && kill -0 "$beside_pid" 2>/dev/null; then
    kill -TERM "$beside_pid" 2>/dev/null || true  # its fixtures stop their servers on SIGTERM
    wait "$beside_pid" 2>/dev/null || true
  fi
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
beside=(tests/integration/deploy tests/integration/connectors/sink tests/integration/test_install.py
  tests/integration/test_mixed_faults.py tests/integration/test_outage_logs.py tests/unit)
if [ $# -eq 0 ] || { [ $# -eq 1 ] && [ "${1%/}" = tests ]; }; then
  ignored=()
  for path in "${beside[@]}"; do ignored+=("--ignore=$path"); done
  mkdir -m 755 "$run_dir/main" "$run_dir/beside"
  TMPDIR="$run_dir/beside" "$bin/pytest" -p no:cacheprovider "${beside[@]}" >"$run_dir/beside.out" 2>&1 &
  beside_pid=$!
  set +e
  TMPDIR="$run_dir/main" "$bin/pytest" -p no:cacheprovider tests "${ignored[@]}"
  rc=$?
  wait "$beside_pid"
  beside_rc=$?
  set -e
  echo
  echo "==== beside the run above (infra/run-tests.sh): ${beside[*]}"
  cat "$run_dir/beside.out"
  echo "==== exit codes: $rc for the run above, $beside_rc beside it"
  if [ "$rc" -eq 0 ] && [ "$beside_rc" -ne 0 ]; then rc="$beside_rc"; fi
else
  set +e
  TMPDIR="$run_dir" "$bin/pytest" -p no:cacheprovider "$@"
  rc=$?
  set -e
fi

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
