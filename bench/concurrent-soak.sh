#!/bin/bash
# Runs the concurrent-changes harness (tests/XfsWin.Fuse.Tests, ConcurrentChangesTests) over a range of seeds: per seed,
# a fresh kernel-made volume (mkfs.xfs 6.13) mounted with `xfswin mount -o rw`, four threads each changing a tree of
# their own at once (creates, overwrites, appends, truncates, punched holes, copy_file_range, renames, links, unlinks,
# directories, xattrs, symlinks, fsyncs; every read checked against the thread's model) while a fifth reads all trees;
# then each tree checked through the mount, xfs_repair -n after the clean unmount, and every tree checked again as the
# kernel shows it. About 8 s per seed at 1,500 operations per thread on 2 cores. Needs root (loop mounts, FUSE) and
# what scripts/test.sh installs.
# Usage: bench/concurrent-soak.sh [FIRST_SEED [COUNT [OPERATIONS]]]   (default 500 20 1500)
#   XFSWIN_STRESS_MOUNT_OPTIONS=OPTIONS         more mount options: max_threads=1 serves one request at a time,
#                                               log=FILE keeps the server's messages
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" -eq 0 ] || { echo "Run as root: the harness loop-mounts images and mounts FUSE." >&2; exit 1; }
first=${1:-500}
count=${2:-20}
operations=${3:-1500}
dotnet build tests/XfsWin.Fuse.Tests -v quiet -nologo > /dev/null
XFSWIN_STRESS_SEED="$first" XFSWIN_STRESS_ROUNDS="$count" XFSWIN_STRESS_OPS="$operations" dotnet test tests/XfsWin.Fuse.Tests --no-build \
  --filter "FullyQualifiedName~ConcurrentChangesTests" --logger "console;verbosity=detailed"
