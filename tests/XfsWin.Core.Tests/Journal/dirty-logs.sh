#!/usr/bin/env bash
# Makes XFS volumes whose log the Linux kernel left dirty, and the kernel's own replay of each.
# usage: dirty-logs.sh SCENARIO OUTDIR
# Writes OUTDIR/SCENARIO.dirty (never replayed), OUTDIR/SCENARIO.kernel (mounted and unmounted by the
# kernel: its replay), OUTDIR/SCENARIO.json (manifest of the kernel's view after replay), and for
# external-log scenarios OUTDIR/SCENARIO.logdev.dirty / .logdev.kernel. Needs root and loop devices.
set -euo pipefail
SCEN=$1; OUT=$2
HERE=$(cd "$(dirname "$0")" && pwd)
MANIFEST=${XFSWIN_MANIFEST:-$HERE/manifest.py}
CACHE="${XFSWIN_CACHE:-/var/cache/xfswin}"
MKFS=mkfs.xfs
WORK=$(mktemp -d /tmp/xfswin-dirtylog.XXXXXX)
MNT=$WORK/mnt; mkdir -p "$MNT"
LOOP=""; LOGLOOP=""
cleanup() {
    mountpoint -q "$MNT" && umount "$MNT" || true
    [[ -n $LOOP ]] && losetup -d "$LOOP" 2>/dev/null || true
    [[ -n $LOGLOOP ]] && losetup -d "$LOGLOOP" 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

IMG=$WORK/img; LOGIMG=""
MOUNTOPTS=""; MKFSOPTS="-m rmapbt=1,reflink=1"; SIZE=1G
case $SCEN in
    crash) ;;
    cow) ;;
    # mkfs 6.x refuses logs under 64 MiB unless run the way fstests runs it (TEST_DIR, TEST_DEV, QA_CHECK_FS).
    # mkfs 6.x refuses logs under 64 MiB unless run the way fstests runs it (TEST_DIR, TEST_DEV, QA_CHECK_FS).
    wrap) SIZE=512M; MKFSOPTS="$MKFSOPTS -l size=3200b"; export TEST_DIR=/tmp TEST_DEV=/dev/null QA_CHECK_FS=xfs ;;
    xhdr4k) MKFSOPTS="$MKFSOPTS -s size=4096"; MOUNTOPTS="logbsize=256k" ;;
    extlog) LOGIMG=$WORK/logdev; truncate -s 80M "$LOGIMG"; MKFSOPTS="$MKFSOPTS -l logdev=$LOGIMG,size=16384b" ;;
    mkfs613) MKFS="$CACHE/xfsprogs-6.13/bin/mkfs.xfs"; MKFSOPTS="-n parent=1 -i exchange=1"
             [[ -x $MKFS ]] || { echo "dirty-logs.sh: $MKFS missing: run scripts/oracles/install.sh" >&2; exit 2; } ;;
    *) echo "dirty-logs.sh: unknown scenario $SCEN" >&2; exit 2 ;;
esac

truncate -s $SIZE "$IMG"
$MKFS -q -f $MKFSOPTS "$IMG" >/dev/null
LOOP=$(losetup --find --show "$IMG")
opts=$MOUNTOPTS
if [[ -n $LOGIMG ]]; then LOGLOOP=$(losetup --find --show "$LOGIMG"); opts="${opts:+$opts,}logdev=$LOGLOOP"; fi
mount -t xfs ${opts:+-o $opts} "$LOOP" "$MNT"

M=$MNT
workload_common() {
    mkdir -p $M/d1/sub $M/big $M/links $M/attrs
    for i in $(seq 1 200); do echo "file $i" > $M/d1/f$i; done
    for i in $(seq 1 50); do mkdir $M/d1/sub/dir$i; echo x > $M/d1/sub/dir$i/x; done
    head -c 20M /dev/urandom > $M/big/large
    head -c 256K /dev/urandom > $M/big/app
    for i in $(seq 1 30); do head -c 12288 /dev/urandom >> $M/big/app; done
    truncate -s 5M $M/big/large
    xfs_io -c 'fpunch 1M 512k' $M/big/large
    truncate -s 100M $M/big/sparse; echo tail >> $M/big/sparse
    for i in $(seq 1 40); do mv $M/d1/f$i $M/d1/renamed$i; done
    for i in $(seq 41 80); do rm $M/d1/f$i; done
    for i in $(seq 81 100); do ln $M/d1/f$i $M/links/h$i; done
    setfattr -n user.small -v abc $M/attrs/ 
    touch $M/attrs/a1 $M/attrs/a2 $M/attrs/a3 $M/attrs/a4 $M/attrs/a5
    setfattr -n user.small -v abc $M/attrs/a1
    setfattr -n user.medium -v "$(head -c 300 /dev/zero | tr '\0' m)" $M/attrs/a2
    for i in $(seq 1 60); do setfattr -n user.key$i -v "value number $i" $M/attrs/a3; done
    python3 -c "import os,sys; os.setxattr(sys.argv[1], 'user.remote', b'R' * 20000)" $M/attrs/a4
    python3 -c "import os,sys; os.setxattr(sys.argv[1], 'user.big', bytes(range(256)) * 200)" $M/attrs/a5
    setfattr -n trusted.t1 -v tv $M/attrs/a1
    cp --reflink=always $M/big/large $M/big/reflinked
    ln -s /some/target/path $M/links/sym1
    ln -s "$(head -c 300 /dev/zero | tr '\0' s)" $M/links/symlong
    mkfifo $M/links/fifo; mknod $M/links/chr c 1 3
    mkdir $M/grow; for i in $(seq 1 1500); do : > $M/grow/name_with_some_length_$i; done
    for i in $(seq 1 1400); do rm $M/grow/name_with_some_length_$i; done
    chmod 600 $M/d1/f150; chown 1234:567 $M/d1/f151; touch -d '2001-02-03 04:05:06.123456789' $M/d1/f152
    sync
    # Changes below live only in the log when the volume is shut down.
    for i in $(seq 1 100); do echo late$i > $M/d1/late$i; done
    for i in $(seq 1 20); do mv $M/d1/late$i $M/d1/sub/late$i; done
    rm -rf $M/d1/sub/dir1 $M/d1/sub/dir2
    setfattr -n user.late -v 1 $M/d1/late50
    setfattr -x user.key7 $M/attrs/a3
    head -c 3M /dev/urandom >> $M/big/app
    mkdir $M/late_dir; for i in $(seq 1 300); do : > $M/late_dir/entry_$i; done
    for i in $(seq 1 250); do rm $M/late_dir/entry_$i; done
    ln $M/d1/f190 $M/links/late_hard; mv $M/d1/f191 $M/late_dir/moved
    # Enough logged work after the last sync for many records between tail and head.
    mkdir $M/late_many; for i in $(seq 1 3000); do : > $M/late_many/a_fairly_long_file_name_$i; done
    for i in $(seq 1 200); do setfattr -n user.late -v "late value $i" $M/late_many/a_fairly_long_file_name_$i; done
    for i in $(seq 1 1000); do rm $M/late_many/a_fairly_long_file_name_$i; done
}

case $SCEN in
    crash|xhdr4k|extlog|mkfs613) workload_common ;;
    cow)
        workload_common
        dd if=/dev/urandom of=$M/big/reflinked bs=4k count=2 seek=10 conv=notrunc status=none
        echo held > $M/d1/held; exec 3<$M/d1/held; rm $M/d1/held
        ;;
    wrap)
        # Churn (syncing each round) until the log head sits just before the physical end of the small log,
        # then a last round that stays in the log only: the live part of the log straddles the wrap point.
        python3 - $M $IMG <<'PY'
import os, struct, sys
mnt, img = sys.argv[1], sys.argv[2]
root = os.path.join(mnt, "churn"); os.mkdir(root)
def log_head():
    with open(img, "rb") as f:
        sb = f.read(512)
        bs, = struct.unpack(">I", sb[4:8]); logstart, = struct.unpack(">Q", sb[48:56])
        agblocks, = struct.unpack(">I", sb[84:88]); logblocks, = struct.unpack(">I", sb[96:100]); agblklog = sb[124]
        base = ((logstart >> agblklog) * agblocks + (logstart & ((1 << agblklog) - 1))) * bs
        n = logblocks * bs // 512
        f.seek(base); data = f.read(n * 512)
    def cyc(i):
        w0, w1 = struct.unpack(">II", data[i*512:i*512+8])
        return w1 if w0 == 0xFEEDBABE else w0
    c0 = cyc(0)
    for i in range(1, n):
        if cyc(i) != c0: return c0, i, n
    return c0, n, n
def round_(r, count=600):
    for i in range(count):
        with open(os.path.join(root, f"file_{i}"), "w") as f: f.write(f"{r} {i}")
    for i in range(count): os.rename(os.path.join(root, f"file_{i}"), os.path.join(root, f"moved_{r}_{i}"))
    for i in range(count - 5): os.unlink(os.path.join(root, f"moved_{r}_{i}"))
for r in range(2000):
    round_(r)
    os.sync()
    cycle, head, n = log_head()
    if cycle >= 2 and 0.88 * n <= head <= 0.97 * n:
        break
else:
    sys.exit("wrap scenario: the log head never settled just before the end of the log")
def force_log():
    # fsync forces the log to disk without writing the metadata back (the tail stays where it is).
    fd = os.open(root, os.O_RDONLY); os.fsync(fd); os.close(fd)
for r in range(2000, 2030):
    round_(r, 1000)
    force_log()
    if log_head()[0] > cycle:
        break
else:
    sys.exit("wrap scenario: the log did not wrap past its end")
PY
        ;;
esac
xfs_io -x -c 'shutdown -f' $M
exec 3<&-
umount $M
[[ -n $LOGLOOP ]] && { losetup -d $LOGLOOP; LOGLOOP=""; }
losetup -d $LOOP; LOOP=""

mkdir -p "$OUT"
cp --sparse=always "$IMG" "$OUT/$SCEN.dirty.tmp"
[[ -n $LOGIMG ]] && cp --sparse=always "$LOGIMG" "$OUT/$SCEN.logdev.dirty.tmp"

# The kernel's replay: mount read-write (recovery), unmount; then record what it shows.
LOOP=$(losetup --find --show "$IMG")
opts=""
if [[ -n $LOGIMG ]]; then LOGLOOP=$(losetup --find --show "$LOGIMG"); opts="logdev=$LOGLOOP"; fi
mount -t xfs ${opts:+-o $opts} "$LOOP" "$MNT"
umount "$MNT"
mount -t xfs -o ro${opts:+,$opts} "$LOOP" "$MNT"
python3 "$MANIFEST" "$MNT" "$OUT/$SCEN.json.tmp"
umount "$MNT"
[[ -n $LOGLOOP ]] && { losetup -d $LOGLOOP; LOGLOOP=""; }
losetup -d $LOOP; LOOP=""
cp --sparse=always "$IMG" "$OUT/$SCEN.kernel.tmp"
[[ -n $LOGIMG ]] && { cp --sparse=always "$LOGIMG" "$OUT/$SCEN.logdev.kernel"; mv "$OUT/$SCEN.logdev.dirty.tmp" "$OUT/$SCEN.logdev.dirty"; }
mv "$OUT/$SCEN.kernel.tmp" "$OUT/$SCEN.kernel"
mv "$OUT/$SCEN.json.tmp" "$OUT/$SCEN.json"
mv "$OUT/$SCEN.dirty.tmp" "$OUT/$SCEN.dirty"
echo "dirty-logs.sh: $SCEN ready in $OUT"
