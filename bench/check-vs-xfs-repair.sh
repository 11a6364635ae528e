#!/usr/bin/env bash
# `xfswin check` against `xfs_repair -n` on the same image, cold (page cache dropped before every
# run) and warm (run again at once). Both only read. The default image is the oracle matrix's
# `default` volume (1 GiB, ~112,000 inodes, a 100,000-entry directory, a 10,240-extent file),
# built once by scripts/oracles/make-images.sh into $XFSWIN_BENCH_CACHE (/var/tmp/xfswin-bench). Needs root (to drop caches),
# xfsprogs, the .NET SDK.
# Usage: bench/check-vs-xfs-repair.sh [IMAGE] [RUNS]   (default: the oracle `default` image, 3 runs)
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${2:-3}
[ "$(id -u)" -eq 0 ] || { echo "Run as root: it drops the page cache between runs." >&2; exit 1; }

img=${1:-}
if [ -z "$img" ]; then
  cache=${XFSWIN_BENCH_CACHE:-/var/tmp/xfswin-bench}
  img=$cache/default.img
  if [ ! -f "$cache/default.meta.json" ]; then
    echo "Building the oracle default image (once; cached in $cache, about a minute)..."
    mkdir -p "$cache"
    bash scripts/oracles/make-images.sh default "$cache"
  fi
fi
[ -f "$img" ] || { echo "no such image: $img" >&2; exit 1; }

dotnet build src/XfsWin.Cli -c Release -v quiet -nologo >/dev/null
xfswin=src/XfsWin.Cli/bin/Release/net10.0/xfswin
# The xfs_repair the check is judged against (6.13, scripts/install-deps.sh), else the system's.
repair=${XFSWIN_CACHE:-/var/cache/xfswin}/xfsprogs-6.13/bin/xfs_repair
[ -x "$repair" ] || repair=$(command -v xfs_repair)

# Seconds taken by a command (its exit status 0 or 1 is what both tools say about the volume).
seconds() {
  local start end
  start=$(date +%s.%N)
  "$@" >/dev/null 2>&1 || [ $? -eq 1 ]
  end=$(date +%s.%N)
  echo "$end - $start" | bc
}
drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }

echo "image: $img ($(du -h --apparent-size "$img" | cut -f1) apparent, $(du -h "$img" | cut -f1) allocated)"
echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), $(uname -r)"
echo "xfs_repair: $("$repair" -V) ($repair)"
printf '%-5s %-22s %10s %10s\n' run tool cold_s warm_s
for r in $(seq 1 "$runs"); do
  drop; cold=$(seconds "$repair" -n "$img"); warm=$(seconds "$repair" -n "$img")
  printf '%-5s %-22s %10.2f %10.2f\n' "$r" "xfs_repair -n" "$cold" "$warm"
  drop; cold=$(seconds "$xfswin" check --no-progress "$img"); warm=$(seconds "$xfswin" check --no-progress "$img")
  printf '%-5s %-22s %10.2f %10.2f\n' "$r" "xfswin check" "$cold" "$warm"
done
