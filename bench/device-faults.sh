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
. bench/lib.sh
bench_require_root "the images are mounted through loop devices."
bench_machine
status=0
XFSWIN_FAULTS=$faults XFSWIN_CRASH_KEEP=$keep \
  bench_run_tests tests/XfsWin.Core.Tests "FullyQualifiedName~DeviceFaultTests.A_failed" '^ +[a-z-]+: |^ +total: |^ +FAIL ' || status=$?
echo "faults that hit the workload: see 'during the workload' lines above; failing images (if any) in $keep"
exit $status
