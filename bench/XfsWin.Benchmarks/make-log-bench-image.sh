#!/usr/bin/env bash
# Makes a sparse XFS image of SIZE whose log Linux left full of metadata work (for LogRecoveryBenchmark).
# usage: make-log-bench-image.sh SIZE LOGSIZE OUT.img     e.g. 1T 512m /var/cache/xfswin/bench/1t.img
# Both benchmark images get the same log size and the same workload, so their logs hold about the
# same amount of work: replay time should follow the log, not the volume size.
set -euo pipefail
SIZE=$1; LOGSIZE=$2; OUT=$3
WORK=$(mktemp -d /tmp/xfswin-logbench.XXXXXX); MNT=$WORK/mnt; mkdir -p "$MNT"; LOOP=""
# The log worker pushes every dirty item to disk every xfssyncd_centisecs (30 s): stretch it while the
# workload runs so the log fills up (only the AIL's 75%-full threshold moves the tail), then restore it.
SYNCD=/proc/sys/fs/xfs/xfssyncd_centisecs; OLD_SYNCD=$(cat $SYNCD)
cleanup() { echo "$OLD_SYNCD" > $SYNCD; mountpoint -q "$MNT" && umount "$MNT" || true; [[ -n $LOOP ]] && losetup -d "$LOOP" || true; rm -rf "$WORK"; }
trap cleanup EXIT
truncate -s "$SIZE" "$WORK/img"
mkfs.xfs -q -f -m rmapbt=1,reflink=1 -l size="$LOGSIZE" "$WORK/img"
LOOP=$(losetup --find --show "$WORK/img")
echo 720000 > $SYNCD
mount -t xfs "$LOOP" "$MNT"
python3 - "$MNT" <<'PY'
import os, sys
root = sys.argv[1]
for d in range(300):
    dp = os.path.join(root, f"dir{d:03}")
    os.mkdir(dp)
    for i in range(1000):
        p = os.path.join(dp, f"file_with_a_long_name_{i:05}")
        with open(p, "wb") as f:
            f.write(b"x" * (i % 700))
        os.setxattr(p, "user.tag", b"v" * (i % 90 + 1))
    for i in range(0, 1000, 2):
        os.rename(os.path.join(dp, f"file_with_a_long_name_{i:05}"), os.path.join(dp, f"renamed_{i:05}"))
    for i in range(1, 1000, 4):
        os.unlink(os.path.join(dp, f"file_with_a_long_name_{i:05}"))
PY
xfs_io -x -c 'shutdown -f' "$MNT"
umount "$MNT"; losetup -d "$LOOP"; LOOP=""
mkdir -p "$(dirname "$OUT")"
mv "$WORK/img" "$OUT"
