#!/usr/bin/env bash
# The writes of ExtentSizeHintTests, run in ROOT (a kernel XFS mount or an xfswin FUSE mount of a copy of the same
# empty volume) with xfs_io 6.13; each command's output and exit status, paths relative to ROOT. Block size 4 KiB.
set -u
R=$1 X=${XFS_IO:-xfs_io}
cd "$R"
q() { echo "== $*"; "$@" 2>&1 | sed -e "s#$R/##g" -e 's/([0-9.]* [A-Za-z/]*)//g' -e 's/[0-9.]* [KMG]\?i\?B\/sec//g' -e 's/[0-9.]* ops\/sec//g' | grep -v '^[0-9.]* ops\|^wrote\|ops/sec'; echo "rc=${PIPESTATUS[0]}"; }
# One aligned 1 MiB allocation for a 4 KiB write at 100 KiB.
q $X -f -c "extsize 1m" -c "pwrite -q -S 0x61 100k 4k" -c extsize a
# A write across a hint boundary: 8 KiB at 60 KiB with a 64 KiB hint.
q $X -f -c "extsize 64k" -c "pwrite -q -S 0x62 60k 8k" b
# A hint inherited from a directory (EXTSZINHERIT), a write far past EOF.
q mkdir d
q $X -c "extsize 1m" -c extsize d
q $X -f -c extsize -c "pwrite -q -S 0x63 3076k 4k" d/c
# Writes into a sparse file: inside its size, across an extent's end, and extending it.
q $X -f -c "extsize 256k" -c "truncate 2m" -c "pwrite -q -S 0x64 0 4k" -c "pwrite -q -S 0x65 1036k 8k" \
    -c "pwrite -q -S 0x66 200k 100k" -c "pwrite -q -S 0x67 3m 4k" -c "stat" e | grep -e '^==' -e '^rc' -e 'stat.size' -e 'fsxattr.extsize'
# A previous extent not on a hint boundary (truncate shortened it): the allocation starts where it ends.
q $X -f -c "extsize 64k" -c "pwrite -q -S 0x68 0 64k" -c "truncate 20k" -c "pwrite -q -S 0x69 30k 4k" f
# A hole too small for a whole hint between two extents (punched): the allocation fills the hole.
q $X -f -c "extsize 64k" -c "pwrite -q -S 0x6a 0 64k" -c "pwrite -q -S 0x6b 128k 64k" -c "fpunch 136k 8k" -c "pwrite -q -S 0x6c 140k 2k" g
# fallocate rounds out too.
q $X -f -c "extsize 1m" -c "falloc -k 100k 4k" -c "falloc 2100k 8k" h
sync
