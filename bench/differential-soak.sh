#!/bin/bash
# Runs the differential harness (tests/XfsWin.Fuse.Tests, DifferentialTests.Long_sequences_match_the_kernel) over a
# range of seeds: each seed is 1,500 random VFS operations of every kind on a kernel loop mount and on an xfswin rw
# mount of copies of one kernel-made volume (odd seeds mkfs.xfs 6.13, even 6.1), compared step by step, then as trees
# live and after both images are mounted again by the kernel, then xfs_repair -n on ours. A failure prints the seed,
# the step (or the whole sequence, for a tree difference) and the difference; rerun one seed with
# `bench/differential-soak.sh SEED 1`. About 3 s per seed on 2 cores. Needs root (loop mounts, FUSE) and what
# scripts/test.sh installs.
# Usage: bench/differential-soak.sh [FIRST_SEED [COUNT]]   (default 1000 100)
#   XFSWIN_DIFF_MKFS="-n parent=1 -b size=1024"   mkfs.xfs options for every volume (then mkfs.xfs 6.13 for all seeds)
#   XFSWIN_DIFF_SIZE=1G                           the volumes' size (default 300M; 64 KiB blocks need 1G)
#   XFSWIN_DIFF_KEEP=DIR                          keep both images of a seed whose final comparison fails
#   XFSWIN_DIFF_OPS=N                             operations per seed (default 1500; fewer finds the first failing step)
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" -eq 0 ] || { echo "Run as root: the harness loop-mounts images and mounts FUSE." >&2; exit 1; }
first=${1:-1000}
count=${2:-100}
dotnet build tests/XfsWin.Fuse.Tests -v quiet -nologo > /dev/null
XFSWIN_DIFF_SEEDS="$first $count" dotnet test tests/XfsWin.Fuse.Tests --no-build \
  --filter "FullyQualifiedName~DifferentialTests.Long_sequences_match_the_kernel" --logger "console;verbosity=normal"
