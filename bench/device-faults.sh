#!/usr/bin/env bash
# Device faults under a read-write volume: runs DeviceFaultTests with FAULTS faults per workload (the five crash-point
# workloads; the CI sample uses 3). Each fault fails one seeded write (some of its leading sectors may land) or flush,
# transient or persistent; the volume must shut down (EIO for the failing call and every later change, nothing more
# written), and the image as the device left it is mounted by the kernel (replaying our log) with every fsynced file
# intact, then checked by xfs_repair -n (6.13). Failing images are kept in KEEP_DIR.
# Needs root (loop devices), xfsprogs 6.13 (scripts/install-deps.sh), the .NET SDK.
# Usage: bench/device-faults.sh [FAULTS] [KEEP_DIR]   (default: 40 per workload, 200 in all)
set -euo pipefail
cd "$(dirname "$0")/.."
faults=${1:-40}
keep=${2:-/var/tmp/xfswin-fault-failures}
[ "$(id -u)" -eq 0 ] || { echo "Run as root: the images are mounted through loop devices." >&2; exit 1; }

echo "machine: $(nproc) CPUs, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), kernel $(uname -r)"
dotnet build tests/XfsWin.Core.Tests -c Release -v quiet -nologo >/dev/null
start=$(date +%s)
status=0
XFSWIN_FAULTS=$faults XFSWIN_CRASH_KEEP=$keep dotnet test tests/XfsWin.Core.Tests -c Release --no-build -nologo \
  --filter "FullyQualifiedName~DeviceFaultTests.A_failed" --logger "console;verbosity=detailed" \
  | grep -E '^ +[a-z-]+: |^ +total: |^ +FAIL |Passed!|Failed!' || status=$?
echo "faults that hit the workload: see 'during the workload' lines above; wall time: $(( $(date +%s) - start )) s; failing images (if any) in $keep"
exit $status
