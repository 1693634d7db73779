#!/usr/bin/env bash
# The Debian packages a make target needs, installed when missing (apt-get update first), only those.
#
#   infra/system-deps.sh test   what `make test` needs: PostgreSQL, Graphviz, Java, Maven, runuser,
#                               Prometheus (promtool and a server, for the alert tests)
#   infra/system-deps.sh demo   what `olstream demo` needs: Java 17 and Maven (a local Kafka broker,
#                               its jars from Maven Central), and Graphviz's `dot` for its picture
#
# Installing needs root or passwordless sudo; nothing is done when nothing is missing. Without
# either, `test` names what is missing and exits 1; `demo` does too when Java 17 or Maven is
# missing, in one line that says how to install them. A missing Graphviz only costs the demo its
# picture (`olstream demo` says "graph not rendered"): one line says so, and the demo goes on.
set -euo pipefail

target=${1:-test}
missing=()   # packages the target cannot run without
optional=()  # packages it runs without, doing less

has() {  # a command on PATH, or in $<HOME_VAR>/bin as olstream finds Java and Maven (JAVA_HOME, MAVEN_HOME)
  command -v "$1" >/dev/null 2>&1 || { [ -n "${2:-}" ] && [ -n "${!2:-}" ] && [ -x "${!2}/bin/$1" ]; }
}

java_major() {  # 17 for `openjdk version "17.0.15"`, 8 for `"1.8.0_292"`; 0 when it does not say
  local java=java version
  [ -n "${JAVA_HOME:-}" ] && [ -x "$JAVA_HOME/bin/java" ] && java="$JAVA_HOME/bin/java"
  version=$("$java" -version 2>&1 | sed -n 's/.* version "\([^"]*\)".*/\1/p' | head -n 1)
  version=${version#1.}
  echo "${version%%[.+-]*}" | grep -E '^[0-9]+$' || echo 0
}

if ! has java JAVA_HOME || [ "$(java_major)" -lt 17 ]; then
  missing+=(openjdk-17-jre-headless)
fi
has mvn MAVEN_HOME || missing+=(maven)

case "$target" in
  demo)
    has dot || optional+=(graphviz)
    ;;
  test)
    dpkg -s postgresql >/dev/null 2>&1 || compgen -G '/usr/lib/postgresql/*/bin/pg_ctl' >/dev/null \
      || missing+=(postgresql)
    has dot || missing+=(graphviz)
    has runuser || missing+=(util-linux)
    has promtool || missing+=(prometheus)  # promtool and a server, for the alert tests
    ;;
  *)
    echo "usage: $0 test|demo" >&2
    exit 2
    ;;
esac

wanted=("${missing[@]}" "${optional[@]}")
if [ ${#wanted[@]} -eq 0 ]; then
  exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
  sudo=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  sudo=(sudo -n)
elif [ "$target" = demo ] && [ ${#missing[@]} -gt 0 ]; then
  echo "make demo needs Java 17 and Maven (missing: ${missing[*]}): sudo apt-get install -y ${wanted[*]}" >&2
  exit 1
elif [ "$target" = demo ]; then
  echo "no Graphviz: the demo runs but draws no picture (for it: sudo apt-get install -y graphviz)" >&2
  exit 0
else
  echo "missing system packages: ${missing[*]} (install them, or run as root)" >&2
  exit 1
fi

echo "installing missing system packages: ${wanted[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
"${sudo[@]}" apt-get update -q
"${sudo[@]}" apt-get install -y -q --no-install-recommends "${wanted[@]}"
# The Debian package starts its own cluster on 5432; olstream runs its own servers, so stop it.
if [[ " ${wanted[*]} " == *" postgresql "* ]] && command -v service >/dev/null 2>&1; then
  "${sudo[@]}" service postgresql stop >/dev/null 2>&1 || true
fi
# Likewise Debian's prometheus (a server on :9090 scraping the host): the tests start their own.
if [[ " ${wanted[*]} " == *" prometheus "* ]]; then
  if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
    "${sudo[@]}" systemctl disable --now prometheus >/dev/null 2>&1 || true
  elif command -v service >/dev/null 2>&1; then
    "${sudo[@]}" service prometheus stop >/dev/null 2>&1 || true
  fi
fi
