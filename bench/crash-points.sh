#!/usr/bin/env bash
# Crash consistency at many points: runs CrashPointTests with POINTS plain and TORN torn crash points per workload
# recording (five workloads, each recorded ROUNDS times with different seeds, default 3; the CI sample uses one
# recording of each and 10 and 4 points). Every point is a crash image built from the recorded write stream
# (writes up to the last flush, then none / all / a prefix / a random subset of the writes after it); torn points also
# leave writes of log records and file data in part (some 512-byte sectors new, others old), and are replayed twice: by
# the kernel and by XfsWin's read-write open. The kernel mounts each image (replaying our log), every fsynced file is
# checked, and xfs_repair -n (6.13) runs after the kernel's unmount. Failing images are kept in KEEP_DIR.
# TEAR=all also tears metadata blocks written in place (a property of the format, not a test of XfsWin: see
# docs/crash-consistency.md). Needs root (loop devices), xfsprogs 6.13 (scripts/install-deps.sh), the .NET SDK.
# Usage: bench/crash-points.sh [POINTS] [TORN] [KEEP_DIR]   (default: 210 and 40 per recording; a short write stream
#        has fewer distinct crash images than that, and each is judged once)
#   ROUNDS=N   recordings of each workload (default 3)
#   CHECKPOINT_BYTES=N   CIL size at which a commit takes a checkpoint, written behind the workload by the log's worker
#              (default 0: the volume's own, an eighth of the log, which these workloads never fill)
set -euo pipefail
cd "$(dirname "$0")/.."
points=${1:-210}
torn=${2:-40}
keep=${3:-/var/tmp/xfswin-crash-failures}
. bench/lib.sh
bench_require_root "crash images are mounted through loop devices."
bench_machine
status=0
XFSWIN_CRASH_POINTS=$points XFSWIN_CRASH_TORN=$torn XFSWIN_CRASH_ROUNDS=${ROUNDS:-3} XFSWIN_CRASH_KEEP=$keep XFSWIN_CRASH_TEAR=${TEAR:-} \
XFSWIN_CRASH_CHECKPOINT_BYTES=${CHECKPOINT_BYTES:-0} \
  bench_run_tests tests/XfsWin.Core.Tests "FullyQualifiedName~CrashPointTests" '^ +[a-z-]+: |^ +total: |^ +FAIL ' || status=$?
echo "failing images (if any) in $keep"
exit $status
