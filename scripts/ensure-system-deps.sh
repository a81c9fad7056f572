#!/usr/bin/env bash
# Make sure the servers the test suite talks to are installed: redis-server, prometheus, promtool;
# wrk, the load generator of bench/bench_http.py, and valgrind, the instruction counter of
# bench/bench_lua.py and bench/bench_http_work.py (`make bench`).
# As root they are installed from Debian's packages; otherwise the run stops and names the package.
set -euo pipefail

declare -A package_of=([redis-server]=redis-server [redis-cli]=redis-tools [prometheus]=prometheus [promtool]=prometheus [wrk]=wrk [valgrind]=valgrind)
missing=()
for binary in redis-server redis-cli prometheus promtool wrk valgrind; do
  command -v "$binary" >/dev/null 2>&1 || missing+=("${package_of[$binary]}")
done
[ ${#missing[@]} -eq 0 ] && exit 0

# Deduplicate (prometheus provides both prometheus and promtool).
mapfile -t packages < <(printf '%s\n' "${missing[@]}" | sort -u)
if [ "$(id -u)" -ne 0 ]; then
  echo "error: missing system packages: ${packages[*]}" >&2
  echo "       install them with: sudo apt-get install -y ${packages[*]}" >&2
  exit 1
fi
echo "installing system packages: ${packages[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
# policy-rc.d keeps the packages' own services from starting: tests run private servers.
apt-get install -y -qq --no-install-recommends "${packages[@]}" >/dev/null
for binary in redis-server redis-cli prometheus promtool wrk valgrind; do
  command -v "$binary" >/dev/null 2>&1 || { echo "error: $binary still missing after install" >&2; exit 1; }
done
