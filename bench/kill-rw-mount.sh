#!/usr/bin/env bash
# kill -9 of a busy `xfswin mount -o rw` server, KILLS times (the CI sample: 4): three threads create, append, rename
# and unlink files with fsync, fdatasync, O_DSYNC and O_SYNC while one of them SIGKILLs the server after a seeded
# number of its operations. Every file a returned durability call covered must be intact after recovery, by the
# kernel's mount or by a new xfswin mount (alternately), and xfs_repair -n (6.1 and 6.13) must be clean.
# Volumes: mkfs.xfs 6.1 and 6.13 defaults, filled by the kernel, alternately. Seeds FIRST_SEED.. (default 100).
# Needs root (loop devices, FUSE), fuse3, xfsprogs 6.13 (scripts/install-deps.sh), the .NET SDK.
# Usage: bench/kill-rw-mount.sh [KILLS] [FIRST_SEED]   (default 200 kills)
set -euo pipefail
cd "$(dirname "$0")/.."
kills=${1:-200}
seed=${2:-100}
. bench/lib.sh
bench_require_root "it mounts through FUSE and loop devices."
bench_machine
XFSWIN_KILLS=$kills XFSWIN_KILL_SEED=$seed \
  bench_run_tests tests/XfsWin.Fuse.Tests "FullyQualifiedName~KilledServerTests" '^ +(ok|FAIL) |^ +total: '
