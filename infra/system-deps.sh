#!/usr/bin/env bash
# Installs the Debian packages `make test` needs, only those that are missing (apt-get update first).
# Needs root or passwordless sudo when something is missing; does nothing otherwise.
set -euo pipefail

missing=()
dpkg -s postgresql >/dev/null 2>&1 || compgen -G '/usr/lib/postgresql/*/bin/pg_ctl' >/dev/null || missing+=(postgresql)
command -v dot >/dev/null 2>&1 || missing+=(graphviz)
command -v java >/dev/null 2>&1 || missing+=(openjdk-17-jre-headless)
command -v mvn >/dev/null 2>&1 || missing+=(maven)
command -v runuser >/dev/null 2>&1 || missing+=(util-linux)
command -v promtool >/dev/null 2>&1 || missing+=(prometheus)  # promtool and a server, for the alert tests

if [ ${#missing[@]} -eq 0 ]; then
  exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
  sudo=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  sudo=(sudo -n)
else
  echo "missing system packages: ${missing[*]} (install them, or run as root)" >&2
  exit 1
fi

echo "installing missing system packages: ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -q
"${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
# The Debian package starts its own cluster on 5432; olstream runs its own servers, so stop it.
if [[ " ${missing[*]} " == *" postgresql "* ]] && command -v service >/dev/null 2>&1; then
  "${sudo[@]}" service postgresql stop >/dev/null 2>&1 || true
fi
# Likewise Debian's prometheus (a server on :9090 scraping the host): the tests start their own.
if [[ " ${missing[*]} " == *" prometheus "* ]]; then
  if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
    "${sudo[@]}" systemctl disable --now prometheus >/dev/null 2>&1 || true
  elif command -v service >/dev/null 2>&1; then
    "${sudo[@]}" service prometheus stop >/dev/null 2>&1 || true
  fi
fi
