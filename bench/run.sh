#!/usr/bin/env bash
# Builds the benchmarks in Release, makes (or reuses) the benchmark volume, runs every benchmark
# and prints the summaries. Needs root (the image is made through a loop mount).
#
#   bench/run.sh                 # everything (about 12 minutes on 2 idle cores)
#   bench/run.sh --filter '*Lookup*'   # any BenchmarkDotNet arguments replace the default filter
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(dirname "$here")

echo "== machine"
echo "nproc: $(nproc)"
echo "cpu: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //')"
echo "ram: $(awk '/MemTotal/ {printf "%.1f GiB", $2 / 1048576}' /proc/meminfo)"
echo "kernel: $(uname -r)"
echo "dotnet: $(dotnet --version)"
echo "load before: $(uptime)"

echo "== benchmark volume"
XFSWIN_BENCH_DIR=$("$here/make-bench-images.sh")
export XFSWIN_BENCH_DIR
echo "image: $XFSWIN_BENCH_DIR/bench.img on $(df --output=fstype "$XFSWIN_BENCH_DIR" | tail -1) ($(df --output=source "$XFSWIN_BENCH_DIR" | tail -1))"

echo "== build (Release)"
dotnet build -c Release "$repo/bench/XfsWin.Benchmarks" -v quiet -nologo

echo "== run"
args=("$@")
# The read-path benchmarks of this script's images (LogRecoveryBenchmark has its own images and script).
[[ ${#args[@]} -gt 0 ]] || args=(--filter '*SequentialReadBenchmarks*' '*DirectoryListingBenchmarks*' '*DirectoryLookupBenchmarks*' '*ExtentBenchmarks*')
artifacts="$repo/BenchmarkDotNet.Artifacts"
cd "$repo"
dll="$repo/bench/XfsWin.Benchmarks/bin/Release/net10.0/XfsWin.Benchmarks.dll"
dotnet "$dll" "${args[@]}" --artifacts "$artifacts"
echo "load after BenchmarkDotNet: $(uptime)"
if [[ $# -eq 0 ]]; then
    echo "== sequential read, interleaved rounds (ratio against raw in the same round)"
    dotnet "$dll" interleaved 6 | tee "$artifacts/interleaved-sequential-read.md"
    echo "== lookups in CPU time (the process's CPU time per lookup, robust to other jobs' load)"
    dotnet "$dll" lookup-cpu 5 | tee "$artifacts/lookup-cpu-time.md"
    echo "== the kernel's XFS reading the same file (O_DIRECT), next to raw dd of the image"
    "$here/kernel-read.sh" "$XFSWIN_BENCH_DIR" 3 | tee "$artifacts/kernel-read.md"
    echo "load after: $(uptime)"
fi

echo "== summaries"
for report in "$artifacts"/results/*-report-github.md "$artifacts"/*.md; do
    [[ -f "$report" ]] || continue
    echo "--- $(basename "$report" -report-github.md)"
    cat "$report"
done
