#!/bin/bash
# Runs the damaged-volume write tests (tests/XfsWin.Core.Tests, Oracle/DamagedWriteTests) over a range of seeds. Each
# seed damages a copy of one of four oracle images (rmap-nrext64, mkfs613, b1k, default, in turn) twice over: once with
# `xfs_db blocktrash` (20 random bit flips in metadata), once with `xfs_db fuzz` of one field of an AGF, an AGI, a
# free-space or inode btree block, or a file's or directory's inode, its CRC kept valid. Each copy is then opened
# read-write and changed (create, write, append, xattr, rename, mkdir, truncate, unlink in every directory, and the
# fuzzed inode itself first). Every call must succeed or fail with an XfsException (never another exception, never a
# hang); once corruption is reported no change may succeed; and where xfs_repair -n found nothing wrong with the fuzzed
# copy, it must find nothing wrong after the changes. About 1 to 5 s per seed and image on 2 cores.
# Usage: bench/damage-soak.sh [FIRST_SEED [COUNT]]   (default 1 200)
#   XFSWIN_DAMAGE_LOG=FILE   append each seed's outcome (what was damaged, changes done and refused, errors seen)
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" -eq 0 ] || { echo "Run as root: the oracle images are made with loop mounts." >&2; exit 1; }
first=${1:-1}
count=${2:-200}
dotnet build tests/XfsWin.Core.Tests -v quiet -nologo > /dev/null
XFSWIN_DAMAGE_SEEDS="$first $count" dotnet test tests/XfsWin.Core.Tests --no-build \
  --filter "FullyQualifiedName~DamagedWriteTests.Changes_to_a" --logger "console;verbosity=normal"
