#!/usr/bin/env bash
# Makes XFS volumes whose log the Linux kernel left dirty, and the kernel's own replay of each.
# usage: dirty-logs.sh SCENARIO OUTDIR
# Writes OUTDIR/SCENARIO.dirty (never replayed), OUTDIR/SCENARIO.kernel (mounted and unmounted by the
# kernel: its replay), OUTDIR/SCENARIO.json (manifest of the kernel's view after replay), and for
# external-log scenarios OUTDIR/SCENARIO.logdev.dirty / .logdev.kernel, for quota scenarios OUTDIR/SCENARIO.quota
# (xfs_quota's report after the kernel's replay). Needs root and loop devices.
# Scenarios the machine's kernel cannot run (quota, quotaoff: it is built without XFS quota support) run their
# kernel steps in user-mode Linux (uml.sh; quotaoff in Linux 5.10, the last to switch quota accounting off on a
# mounted volume, logging quotaoff items), which calls this script back inside the guest:
#   dirty-logs.sh --guest workload SCENARIO -        mount /dev/ubda, run the workload, shut down, unmount
#   dirty-logs.sh --guest replay SCENARIO PREFIX     mount (the kernel replays), unmount; mount read-only and
#                                                    write PREFIX.json, PREFIX.quota
#   dirty-logs.sh --guest report SCENARIO PREFIX     mount read-only; write PREFIX.json, PREFIX.quota and the
#                                                    kernel's messages of that mount to PREFIX.dmesg
# and for the tests, on the host:
#   dirty-logs.sh --report SCENARIO IMAGE PREFIX     the guest's report step on IMAGE, in the scenario's kernel
set -euo pipefail
GUEST=""; REPORT_IMAGE=""
if [[ ${1:-} == --guest ]]; then GUEST=$2; shift 2; fi
if [[ ${1:-} == --report ]]; then REPORT_IMAGE=$(readlink -f "$3"); set -- "$2" "$4"; fi
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
MOUNTOPTS=""; MKFSOPTS="-m rmapbt=1,reflink=1"; SIZE=1G; KERNEL=host; UMLKERNEL=6.1
REPLAYOPTS=""  # mount options of the kernel's replay and of the report mounts, when not MOUNTOPTS
XFSPROGS613="$CACHE/xfsprogs-6.13/bin"
case $SCEN in
    crash) ;;
    cow) ;;
    # mkfs 6.x refuses logs under 64 MiB unless run the way fstests runs it (TEST_DIR, TEST_DEV, QA_CHECK_FS).
    wrap) SIZE=512M; MKFSOPTS="$MKFSOPTS -l size=3200b"; export TEST_DIR=/tmp TEST_DEV=/dev/null QA_CHECK_FS=xfs ;;
    xhdr4k) MKFSOPTS="$MKFSOPTS -s size=4096"; MOUNTOPTS="logbsize=256k" ;;
    extlog) LOGIMG=$WORK/logdev; truncate -s 80M "$LOGIMG"; MKFSOPTS="$MKFSOPTS -l logdev=$LOGIMG,size=16384b" ;;
    intents) ;;
    unlinked|unlinkedmany) ;;
    mkfs613|pairs|intents613) MKFS="$XFSPROGS613/mkfs.xfs"; MKFSOPTS="-n parent=1 -i exchange=1"
             [[ -x $MKFS ]] || { echo "dirty-logs.sh: $MKFS missing: run scripts/oracles/install.sh" >&2; exit 2; } ;;
    quota) MOUNTOPTS="uquota,gquota,pquota"; KERNEL=uml ;;
    # Linux 5.10 mounts what mkfs 6.1 makes, but calls bigtime and inobtcount experimental: leave them out.
    # After the workload switched user quota off, the superblock says group and project quota only: the kernel
    # replays with those (asking for user quota too would make it run a quotacheck after the replay).
    quotaoff) MOUNTOPTS="uquota,gquota,pquota"; REPLAYOPTS="gquota,pquota"; KERNEL=uml; UMLKERNEL=5.10
              MKFSOPTS="-m rmapbt=1,reflink=1,bigtime=0,inobtcount=0 -i nrext64=0" ;;
    *) echo "dirty-logs.sh: unknown scenario $SCEN" >&2; exit 2 ;;
esac

M=$MNT
BG=""          # workload processes the shutdown interrupts
HOLDER=""      # a process holding unlinked inodes open until the shutdown; it must exit 0 after it
LATE_FROM=""   # log block where the work that must stay in the log began (host scenarios)
# The log block of the head, read from the image (or external log) the loop device writes through.
log_head() {
    python3 - "${LOGIMG:-$IMG}" ${LOGIMG:+external} <<'PY'
import struct, sys
path, external = sys.argv[1], len(sys.argv) > 2
with open(path, "rb") as f:
    if external:
        base, n = 0, None
    else:
        sb = f.read(512)
        bs, = struct.unpack(">I", sb[4:8]); logstart, = struct.unpack(">Q", sb[48:56])
        agblocks, = struct.unpack(">I", sb[84:88]); logblocks, = struct.unpack(">I", sb[96:100]); agblklog = sb[124]
        base = ((logstart >> agblklog) * agblocks + (logstart & ((1 << agblklog) - 1))) * bs
        n = logblocks * bs // 512
    f.seek(base); data = f.read(n * 512 if n else -1)
n = len(data) // 512
def cyc(i):
    w0, w1 = struct.unpack(">II", data[i*512:i*512+8])
    return w1 if w0 == 0xFEEDBABE else w0
c0 = cyc(0)
print(next((i for i in range(1, n) if cyc(i) != c0), n))
PY
}
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
    (cd $M/d1 && rm f{41..80})
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
    (cd $M/grow && rm name_with_some_length_{1..1400})
    chmod 600 $M/d1/f150; chown 1234:567 $M/d1/f151; touch -d '2001-02-03 04:05:06.123456789' $M/d1/f152
    sync
    # Changes below live only in the log when the volume is shut down (checked after the shutdown).
    LATE_FROM=$(log_head)
    for i in $(seq 1 100); do echo late$i > $M/d1/late$i; done
    for i in $(seq 1 20); do mv $M/d1/late$i $M/d1/sub/late$i; done
    rm -rf $M/d1/sub/dir1 $M/d1/sub/dir2
    setfattr -n user.late -v 1 $M/d1/late50
    setfattr -x user.key7 $M/attrs/a3
    head -c 3M /dev/urandom >> $M/big/app
    mkdir $M/late_dir; for i in $(seq 1 300); do : > $M/late_dir/entry_$i; done
    (cd $M/late_dir && rm entry_{1..250})
    ln $M/d1/f190 $M/links/late_hard; mv $M/d1/f191 $M/late_dir/moved
    # Enough logged work after the last sync for many records between tail and head.
    mkdir $M/late_many; for i in $(seq 1 3000); do : > $M/late_many/a_fairly_long_file_name_$i; done
    for i in $(seq 1 200); do setfattr -n user.late -v "late value $i" $M/late_many/a_fairly_long_file_name_$i; done
    (cd $M/late_many && rm a_fairly_long_file_name_{1..1000})
    # Unlinked inodes are freed in the background: wait for that (the blockgc ioctl flushes inode inactivation) and
    # force the log, so that the last checkpoint (the one a torn last record drops) unlinks nothing and its loss
    # leaves no inode on the unlinked lists.
    xfs_spaceman -c 'prealloc -s' $M
    sync
    mkdir $M/late_tail; for i in $(seq 1 400); do echo "tail $i" > $M/late_tail/f$i; done
}

quota_setup() {
    # Two projects (one by project file, one by chproj), limits of a user, a group and a project, and files owned by
    # three users and groups and the two projects.
    mkdir -p $M/proj10 $M/proj20 $M/users
    echo "10:$M/proj10" > $WORK/projects; echo "proj10:10" > $WORK/projid
    xfs_quota -x -D $WORK/projects -P $WORK/projid -c 'project -s proj10' $M >/dev/null
    xfs_io -c 'chproj 20' -c 'chattr +P' $M/proj20
    xfs_quota -x -c 'limit -u bsoft=10m bhard=20m isoft=100 ihard=200 1001' -c 'limit -g bhard=50m 2001' \
        -c 'limit -p bhard=30m ihard=500 20' $M
    for u in 1001 1002 1003; do
        mkdir $M/users/u$u; chown $u:$((u + 1000)) $M/users/u$u
        for i in $(seq 1 20); do head -c $((u * 10 + i * 100)) /dev/urandom > $M/users/u$u/f$i; chown $u:$((u + 1000)) $M/users/u$u/f$i; done
    done
    for i in $(seq 1 30); do head -c 40000 /dev/urandom > $M/proj10/p$i; head -c 7000 /dev/urandom > $M/proj20/p$i; done
}

workload_quota() {
    # Usage and limits of several users, groups and projects change; the last changes (after the final
    # sync) reach only the log, as logged dquots.
    quota_setup
    sync
    for i in $(seq 1 10); do
        rm $M/users/u1001/f$i; chown 1002:3002 $M/users/u1003/f$i; head -c 100000 /dev/urandom >> $M/proj10/p$i
        mv $M/proj20/p$i $M/users/u1002/moved$i
    done
    for i in $(seq 1 15); do head -c 5000 /dev/urandom > $M/users/u1001/late$i; chown 1004:3004 $M/users/u1001/late$i; done
    xfs_quota -x -c 'limit -u bhard=99m 1002' -c 'limit -p ihard=77 10' -c 'limit -g isoft=40 3002' $M
    sync
    # Only in the log from here on.
    for i in $(seq 11 15); do chown 1003:2001 $M/users/u1002/f$i; rm $M/proj10/p$((i + 10)); done
    chgrp 3004 $M/users/u1003/f20; rm $M/users/u1001/late1
    xfs_quota -x -c 'limit -u ihard=150 1003' $M
}

workload_quotaoff() {
    # Usage and limits of users, groups and projects change; then user quota accounting is switched off (Linux 5.10
    # logs a quotaoff item when the switch-off starts and one when it ends, and writes the user dquots back), and
    # later changes log group and project dquots only. Replay must leave every logged user dquot and user dquot
    # buffer alone, as the kernel does.
    quota_setup
    for i in $(seq 1 10); do rm $M/users/u1001/f$i; chown 1002:3002 $M/users/u1003/f$i; mv $M/proj20/p$i $M/users/u1002/moved$i; done
    xfs_quota -x -c 'limit -u bhard=99m 1002' -c 'limit -u ihard=150 1003' $M
    sync
    xfs_quota -x -c 'off -u' $M
    xfs_quota -x -c 'state -u' $M | grep -q 'Accounting: OFF' || { echo "dirty-logs.sh: quotaoff: user accounting is still on" >&2; exit 1; }
    # User quota is off from here on: only group and project dquots are logged.
    for i in $(seq 11 20); do
        chown 1004:3004 $M/users/u1001/f$i; head -c 30000 /dev/urandom >> $M/proj10/p$i; rm $M/proj20/p$i
        echo "after $i" > $M/users/u1002/after$i; chgrp 3005 $M/users/u1002/after$i
    done
    xfs_quota -x -c 'limit -g isoft=40 3002' -c 'limit -p ihard=77 10' $M
    sync
}

workload_pairs() {
    # Intents with their done items: reflink and copy-on-write (BUI, CUI, RUI), extent exchange (XMI), parent
    # pointers (ATTRI). An intent and its done item committed while both are still in the CIL never reach the
    # log (whiteouts), so a second process forces the log all the time: pairs are split across checkpoints, by
    # chance. Rounds of work go on until xfs_logprint shows a finished pair of every kind in the log.
    mkdir $M/src $M/ns
    # Files made here inherit a one-block copy-on-write extent size hint: no speculative CoW staging extent outlives
    # the writes (leftover ones are the kernel's to remove at mount, and in-place recovery refuses them).
    xfs_io -c 'cowextsize 4096' $M/src
    python3 - $M/src/frag $M/src/other <<'PY2'
import os, sys
for p in sys.argv[1:]:
    fd = os.open(p, os.O_WRONLY | os.O_CREAT, 0o644)
    for i in range(0, 4000, 2): os.pwrite(fd, os.urandom(4096), i * 4096)
    os.fsync(fd); os.close(fd)
PY2
    sync
    python3 - $M/forcer <<'PY2' & local forcer=$!
import os, sys, time
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT, 0o644)
end, i = time.time() + 600, 0
while time.time() < end and not os.path.exists(sys.argv[1] + ".stop"):
    os.pwrite(fd, b"x", i % 4096); os.fsync(fd); i += 1
PY2
    local round
    for round in 1 2 3 4 5 6 7 8; do
        cp --reflink=always $M/src/frag $M/src/clone$round
        python3 - $M/src/clone$round $M/ns/r$round <<'PY2'
import os, sys
clone, ns = sys.argv[1], sys.argv[2]
fd = os.open(clone, os.O_WRONLY)          # copy-on-write over shared extents
for i in range(0, 4000, 6): os.pwrite(fd, os.urandom(4096), i * 4096)
os.fsync(fd); os.close(fd)
os.mkdir(ns); os.mkdir(os.path.join(ns, "sub"))   # parent pointers change with every name
for i in range(200):
    with open(os.path.join(ns, f"f{i}"), "w") as f: f.write(str(i))
for i in range(50):
    os.rename(os.path.join(ns, f"f{i}"), os.path.join(ns, f"g{i}"))
    os.link(os.path.join(ns, f"f{i + 50}"), os.path.join(ns, f"h{i}"))
    os.unlink(os.path.join(ns, f"f{i + 100}"))
    os.rename(os.path.join(ns, f"f{i + 150}"), os.path.join(ns, "sub", f"f{i + 150}"))
PY2
        "$XFSPROGS613/xfs_io" -c "exchangerange $M/src/other" $M/src/frag
        sync
        "$XFSPROGS613/xfs_logprint" -t "$IMG" >"$WORK/logprint" 2>/dev/null || true
        local kind missing=""
        for kind in BUI BUD CUI CUD RUI RUD ATTRI ATTRD XMI XMD; do
            [[ $(count_lines "$WORK/logprint" "^$kind: cnt:") -gt 0 ]] || missing="$missing $kind"
        done
        [[ -z $missing ]] && break
    done
    touch $M/forcer.stop; wait $forcer; rm $M/forcer $M/forcer.stop
    # Everything done reaches the log: nothing is left for the kernel to finish at mount.
    sync
}

wait_for_holder() { # SECONDS: until the holder process says it holds its inodes (or dies)
    local waited
    for waited in $(seq 1 $(($1 * 10))); do [[ -e $WORK/held.ready ]] && break; kill -0 $HOLDER 2>/dev/null || break; sleep 0.1; done
    [[ -e $WORK/held.ready ]] || { echo "dirty-logs.sh: $SCEN: the holder did not get ready" >&2; exit 1; }
}

workload_unlinked() {
    # Inodes unlinked while a process holds them open at the shutdown: they stay on the AGI unlinked lists, and the
    # kernel frees them (both forks, inobt/finobt, rmap, counters) when it mounts. No extent is ever shared: no
    # copy-on-write staging extent is left. Ordinary files are made around the held ones, so their inode chunks stay
    # in use once the held inodes are freed. Two directories: mkdir spreads them over two AGs.
    mkdir $M/h1 $M/h2 $M/keep
    keep() { local d=$1 from=$2 to=$3 i; for i in $(seq $from $to); do echo "keep $i" > $d/k$i; done; }
    keep $M/h1 1 10
    head -c 10000 /dev/urandom > $M/h1/small                               # (a) one extent
    keep $M/h1 11 20
    # (b) every other 4 KiB block: thousands of extents, a data fork in btree format
    python3 - $M/h1/frag <<'PY'
import os, sys
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT, 0o644)
for i in range(0, 12000, 2): os.pwrite(fd, os.urandom(4096), i * 4096)
os.fsync(fd); os.close(fd)
PY
    keep $M/h1 21 30
    # (c) a remote attr value and several local ones: an attr fork in extents format (leaf block + remote blocks)
    echo attrs > $M/h1/attrs
    python3 - $M/h1/attrs <<'PY'
import os, sys
os.setxattr(sys.argv[1], "user.remote", os.urandom(30000))
for i in range(12): os.setxattr(sys.argv[1], f"user.name{i}", f"value {i}".encode() * 8)
os.setxattr(sys.argv[1], "trusted.t", b"tv")
PY
    keep $M/h1 31 60
    keep $M/h2 1 10
    mkdir $M/h2/gone; setfattr -n user.d -v dirattr $M/h2/gone            # (e) removed while it is the cwd
    keep $M/h2 11 20
    ln -s "$(head -c 900 /dev/zero | tr '\0' L)" $M/h2/symlong              # (f) a remote symlink block
    keep $M/h2 21 60
    for i in $(seq 1 20); do mkdir $M/keep/d$i; echo x > $M/keep/d$i/x; done
    # The holder opens them all and makes (d), an O_TMPFILE file with data (never linked, on an unlinked list from the
    # start); syncs and writes everything back; unlinks the others (the unlinks and the AGI bucket updates reach only
    # the log); writes the inode numbers it holds; and waits for the shutdown (fstat then fails with EIO), so that it
    # holds them until then. (f) stays on the unlinked list too: the O_PATH fd holds the symlink's inode.
    python3 - $M $WORK/held $WORK/held.ready <<'PY' & HOLDER=$!
import errno, os, subprocess, sys, time
m, held, ready = sys.argv[1:4]
h1, h2 = os.path.join(m, "h1"), os.path.join(m, "h2")
fds = {
    "small": os.open(os.path.join(h1, "small"), os.O_RDONLY),
    "frag": os.open(os.path.join(h1, "frag"), os.O_RDONLY),
    "attrs": os.open(os.path.join(h1, "attrs"), os.O_RDONLY),
    "dir": os.open(os.path.join(h2, "gone"), os.O_RDONLY | os.O_DIRECTORY),
    "symlink": os.open(os.path.join(h2, "symlong"), os.O_PATH | os.O_NOFOLLOW),
}
os.chdir(os.path.join(h2, "gone"))
t = os.open(h2, os.O_TMPFILE | os.O_RDWR, 0o600)
for i in range(6): os.pwrite(t, os.urandom(8192), i * 16384)
os.fsync(t); fds["tmpfile"] = t
inos = {k: os.fstat(fd).st_ino for k, fd in fds.items()}
# sync only forces the log; a freeze also writes all logged metadata back in place, so the dirty volume shows every
# held inode as it was before its unlink (xfs_db can check their forks there), and the log holds little but the unlinks.
os.sync()
subprocess.run(["fsfreeze", "-f", m], check=True); subprocess.run(["fsfreeze", "-u", m], check=True)
os.unlink(os.path.join(h1, "small")); os.unlink(os.path.join(h1, "frag")); os.unlink(os.path.join(h1, "attrs"))
os.rmdir(os.path.join(h2, "gone")); os.unlink(os.path.join(h2, "symlong"))
with open(held, "w") as f:
    for k, ino in inos.items(): f.write(f"{k} {ino}\n")
open(ready, "w").close()
end = time.time() + 600
while time.time() < end:
    try:
        for fd in fds.values(): os.fstat(fd)
    except OSError as e:
        if e.errno == errno.EIO: sys.exit(0)
        raise
    time.sleep(0.05)
sys.exit("unlinked holder: no shutdown came")
PY
    wait_for_holder 60
}

workload_unlinked_many() {
    # Thousands of inodes unlinked while held open, chosen so that freeing them changes the shape of the trees:
    # every other one-block file (2000 separate free extents: the bno and cnt btrees split, the AGFL is refilled)
    # and a run of 12000 empty files (187 whole inode chunks released: inobt and finobt blocks join, the inobt
    # root shrinks, rmap records go). The inode numbers of a few of them are written for the test.
    mkdir $M/many
    python3 - $M/many <<'PY'
import os, sys
d = sys.argv[1]
for i in range(4000):
    fd = os.open(os.path.join(d, f"b{i:05d}"), os.O_WRONLY | os.O_CREAT, 0o644); os.write(fd, b"b" * 4096); os.close(fd)
for i in range(20000):
    os.close(os.open(os.path.join(d, f"e{i:05d}"), os.O_WRONLY | os.O_CREAT, 0o644))
PY
    python3 - $M $WORK/held $WORK/held.ready <<'PY' & HOLDER=$!
import errno, os, resource, subprocess, sys, time
m, held, ready = sys.argv[1:4]
d = os.path.join(m, "many")
resource.setrlimit(resource.RLIMIT_NOFILE, (20000, 20000))
names = [f"b{i:05d}" for i in range(1, 4000, 2)] + [f"e{i:05d}" for i in range(3000, 15000)]
fds = {n: os.open(os.path.join(d, n), os.O_RDONLY) for n in names}
os.sync()
subprocess.run(["fsfreeze", "-f", m], check=True); subprocess.run(["fsfreeze", "-u", m], check=True)
for n in names: os.unlink(os.path.join(d, n))
with open(held, "w") as f:
    for n in ("b00001", "b03999", "e03000", "e09000", "e14999"): f.write(f"{n} {os.fstat(fds[n]).st_ino}\n")
open(ready, "w").close()
end = time.time() + 600
probe = fds["e03000"]
while time.time() < end:
    try:
        os.fstat(probe)
    except OSError as e:
        if e.errno == errno.EIO: sys.exit(0)
        raise
    time.sleep(0.05)
sys.exit("unlinkedmany holder: no shutdown came")
PY
    wait_for_holder 120
}

run_workload() {
case $SCEN in
    crash|xhdr4k|extlog|mkfs613) workload_common ;;
    quota) workload_quota ;;
    quotaoff) workload_quotaoff ;;
    pairs) workload_pairs ;;
    unlinked) workload_unlinked ;;
    unlinkedmany) workload_unlinked_many ;;
    intents613)
        # An extent exchange of two files of 20000 extents, cut short by the shutdown: the exchange (XMI) and the
        # mapping updates of its current step (BUI) are in the middle of their chains. a and b have the same layout
        # and contents, so how far the exchange got does not show in the tree.
        python3 - $M/a $M/b <<'PY'
import os, sys
for p in sys.argv[1:]:
    fd = os.open(p, os.O_WRONLY | os.O_CREAT, 0o644)
    for i in range(0, 40000, 2): os.pwrite(fd, b"y" * 4096, i * 4096)
    os.fsync(fd); os.close(fd)
PY
        sync
        "$XFSPROGS613/xfs_io" -c "exchangerange $M/b" $M/a 2>/dev/null & BG="$BG $!"
        sleep 0.5   # the exchange takes seconds
        ;;
    intents)
        # Truncating a file of 20000 extents takes many chained transactions; shutting down in the middle
        # leaves free-extent and rmap intents whose done items never reached the log.
        python3 - $M/frag <<'PY'
import os, sys
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT, 0o644)
for i in range(0, 40000, 2): os.pwrite(fd, b"x" * 4096, i * 4096)
os.fsync(fd); os.close(fd)
PY
        echo keep > $M/kept
        sync
        truncate -s 0 $M/frag 2>/dev/null & BG="$BG $!"
        sleep 0.05
        ;;
    cow)
        workload_common
        # A copy-on-write over shared blocks, written back (fsync): the CoW fork's speculative preallocation (the
        # default CoW extent size hint) becomes staging extents on disk that outlive the write; the kernel removes
        # them at mount, and in-place recovery refuses them.
        dd if=/dev/urandom of=$M/big/reflinked bs=4k count=2 seek=10 conv=notrunc,fsync status=none
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
}

quota_report() {
    # Numeric ids, blocks and inodes, no header (it names the mount point and device).
    local t
    for t in u g p; do echo "[$t]"; xfs_quota -x -c "report -$t -n -N -b -i" "$1" 2>/dev/null; done
}

# Lines of a saved `xfs_logprint -t` listing that match an extended regular expression.
count_lines() { grep -cE "$2" "$1" || true; }

REPLAYOPTS=${REPLAYOPTS:-$MOUNTOPTS}
# The guest's steps in the scenario's kernel: this script again, inside user-mode Linux (uml.sh).
in_guest() {
    local image=$1; shift
    bash "$HERE/uml.sh" run --kernel "$UMLKERNEL" "$image" -- \
        env XFSWIN_MANIFEST="$MANIFEST" XFSWIN_CACHE="$CACHE" bash "$HERE/dirty-logs.sh" --guest "$@"
}

if [[ -n $REPORT_IMAGE ]]; then
    [[ $KERNEL == uml ]] || { echo "dirty-logs.sh --report: $SCEN is not a user-mode Linux scenario" >&2; exit 2; }
    in_guest "$REPORT_IMAGE" report "$SCEN" "$OUT"
    exit
fi

# ---- steps run inside the user-mode Linux guest (see uml.sh) ----
if [[ -n $GUEST ]]; then
    DEV=/dev/ubda
    case $GUEST in
        workload)
            # quotaoff needs its quotaoff items and the user dquot buffers before them to stay between tail and head;
            # the guest's kernel is the scenario's own: stop its periodic log worker (which writes logged metadata
            # back and covers the log when idle) for the workload, however slowly a busy machine runs it.
            [[ $SCEN == quotaoff ]] && echo 720000 > /proc/sys/fs/xfs/xfssyncd_centisecs
            mount -t xfs ${MOUNTOPTS:+-o $MOUNTOPTS} $DEV $M
            run_workload
            xfs_io -x -c 'shutdown -f' $M
            umount $M ;;
        replay)
            mount -t xfs ${REPLAYOPTS:+-o $REPLAYOPTS} $DEV $M
            umount $M
            mount -t xfs -o ro${REPLAYOPTS:+,$REPLAYOPTS} $DEV $M
            python3 "$MANIFEST" $M "$OUT.json"
            quota_report $M > "$OUT.quota"
            umount $M ;;
        report)
            dmesg -C
            mount -t xfs -o ro${REPLAYOPTS:+,$REPLAYOPTS} $DEV $M
            python3 "$MANIFEST" $M "$OUT.json"
            quota_report $M > "$OUT.quota"
            dmesg > "$OUT.dmesg"
            umount $M ;;
        *) echo "dirty-logs.sh: unknown guest step $GUEST" >&2; exit 2 ;;
    esac
    exit 0
fi


truncate -s $SIZE "$IMG"
$MKFS -q -f $MKFSOPTS "$IMG" >/dev/null
if [[ $KERNEL == uml ]]; then
    in_guest "$IMG" workload "$SCEN" -
else
    LOOP=$(losetup --find --show "$IMG")
    opts=$MOUNTOPTS
    if [[ -n $LOGIMG ]]; then LOGLOOP=$(losetup --find --show "$LOGIMG"); opts="${opts:+$opts,}logdev=$LOGLOOP"; fi
    mount -t xfs ${opts:+-o $opts} "$LOOP" "$MNT"
    run_workload
    xfs_io -x -c 'shutdown -f' $M
    for pid in $BG; do wait $pid || true; done
    if [[ -n $HOLDER ]] && ! wait $HOLDER; then
        echo "dirty-logs.sh: $SCEN: the process holding the unlinked inodes did not live until the shutdown" >&2; exit 1
    fi
    exec 3<&-
    umount $M
    [[ -n $LOGLOOP ]] && { losetup -d $LOGLOOP; LOGLOOP=""; }
    losetup -d $LOOP; LOOP=""
    # The kernel writes logged metadata back now and then (every xfssyncd_centisecs, or when memory is reclaimed,
    # e.g. by someone's drop_caches), which moves the log tail on: the work meant to stay in the log must still be
    # between tail and head.
    if [[ -n $LATE_FROM ]]; then
        tail=$(xfs_logprint -t ${LOGIMG:+-l "$LOGIMG"} "$IMG" 2>/dev/null | sed -n 's/.*log tail: \([0-9]*\) head.*/\1/p')
        if [[ -z $tail ]] || (( tail > LATE_FROM )); then
            echo "dirty-logs.sh: $SCEN: metadata was written back during the workload (log tail ${tail:-?} is past block $LATE_FROM, where the late work began); run again" >&2; exit 3
        fi
    fi
fi

if [[ $SCEN == intents ]] && ! xfs_logprint -t "$IMG" 2>/dev/null | grep -qE '^(EFI|RUI):'; then
    echo "dirty-logs.sh: intents: the shutdown came too late, no intent is in the log; run again" >&2; exit 3
fi
if [[ $SCEN == intents613 ]]; then
    # Intents whose done item is not in the log, by kind, from xfs_logprint's listing (items in log order).
    "$XFSPROGS613/xfs_logprint" -t "$IMG" >"$WORK/logprint" 2>/dev/null
    unfinished=$(python3 - "$WORK/logprint" <<'PY'
import re, sys
done_of = {"EFD": "EFI", "RUD": "RUI", "CUD": "CUI", "BUD": "BUI", "ATTRD": "ATTRI", "XMD": "XMI"}
pending = []
for line in open(sys.argv[1], errors="replace"):
    m = re.match(r"\s*([A-Z]+):\s+#regs:.*\bid:\s*(0x[0-9a-f]+)", line)
    if not m: continue
    kind, ident = m.groups()
    if kind in done_of.values(): pending.append((kind, ident))
    elif kind in done_of and (done_of[kind], ident) in pending: pending.remove((done_of[kind], ident))
print(" ".join(sorted({k for k, _ in pending})))
PY
)
    for kind in XMI BUI; do
        if [[ " $unfinished " != *" $kind "* ]]; then
            echo "dirty-logs.sh: intents613: no unfinished $kind in the log (unfinished: ${unfinished:-none}); run again" >&2; exit 3
        fi
    done
fi
if [[ $SCEN == quota ]]; then
    xfs_logprint -t "$IMG" >"$WORK/logprint" 2>/dev/null
    if [[ $(count_lines "$WORK/logprint" '^[[:space:]]*DQUOT: #regs') -eq 0 ]]; then
        echo "dirty-logs.sh: quota: no DQUOT item is in the dirty log (xfs_logprint -t)" >&2; exit 1
    fi
    # The mount switched quota on; its superblock must not have been written back (every 30 s the kernel writes
    # logged metadata back): the quota flags are then only in the log, the case the replay must get right.
    if ! xfs_db -r -c 'sb 0' -c 'print qflags' "$IMG" | grep -qx 'qflags = 0'; then
        echo "dirty-logs.sh: quota: the superblock with the quota flags was written back before the shutdown; run again" >&2; exit 3
    fi
fi
if [[ $SCEN == quotaoff ]]; then
    # The switch-off logs two quotaoff items (its start and its end), both for user quota, and group and project
    # dquots are logged after it.
    xfs_logprint -t "$IMG" >"$WORK/logprint" 2>/dev/null
    qoff=$(count_lines "$WORK/logprint" '^[[:space:]]*QUOTAOFF: #regs:.*type: USER')
    if [[ $qoff -ne $(count_lines "$WORK/logprint" '^[[:space:]]*QUOTAOFF: #regs') ]]; then
        echo "dirty-logs.sh: quotaoff: quotaoff items for other types than user in the dirty log (xfs_logprint -t)" >&2; exit 1
    fi
    if [[ $qoff -lt 2 ]]; then
        # Written back before the shutdown, the switch-off's items fall behind the tail.
        echo "dirty-logs.sh: quotaoff: $qoff quotaoff items in the dirty log (xfs_logprint -t); run again" >&2; exit 3
    fi
    if ! sed -n '/QUOTAOFF: #regs/,$p' "$WORK/logprint" | grep -q '^[[:space:]]*DQUOT: #regs'; then
        echo "dirty-logs.sh: quotaoff: no dquot is logged after the quotaoff items" >&2; exit 1
    fi
    # What makes the switch-off matter to replay: a user dquot buffer (blf_flags bit 0x4), logged when the dquots of
    # the users were allocated, still between tail and head. Replayed, it would overwrite the user dquots the
    # switch-off wrote back. Metadata written back before the shutdown can move the tail past it: run again.
    if ! sed -n '1,/QUOTAOFF: #regs/p' "$WORK/logprint" | python3 -c '
import re, sys
sys.exit(0 if any(int(m.group(1), 16) & 0x4 for m in re.finditer(r"^\s*BUF: +#regs:.*flags:(0x[0-9a-f]+)", sys.stdin.read(), re.M)) else 1)'; then
        echo "dirty-logs.sh: quotaoff: no user dquot buffer is in the log before the quotaoff items; run again" >&2; exit 3
    fi
fi
if [[ $SCEN == pairs ]]; then
    # Every kind must be in the log, each intent with its done item (6.13's xfs_logprint knows them all).
    # Whiteouts depend on timing: run again.
    "$XFSPROGS613/xfs_logprint" -t "$IMG" >"$WORK/logprint" 2>/dev/null
    for pair in BUI:BUD CUI:CUD RUI:RUD ATTRI:ATTRD XMI:XMD; do
        i=$(count_lines "$WORK/logprint" "^${pair%:*}: cnt:"); d=$(count_lines "$WORK/logprint" "^${pair#*:}: cnt:")
        if [[ $i -eq 0 || $i -ne $d ]]; then
            echo "dirty-logs.sh: pairs: $i ${pair%:*} and $d ${pair#*:} items in the log (xfs_logprint -t); run again" >&2; exit 3
        fi
    done
fi
mkdir -p "$OUT"
cp --sparse=always "$IMG" "$OUT/$SCEN.dirty.tmp"
# Inode numbers the holder kept open, unlinked, until the shutdown ("name ino" lines).
[[ -n $HOLDER ]] && cp "$WORK/held" "$OUT/$SCEN.held"
[[ -n $LOGIMG ]] && cp --sparse=always "$LOGIMG" "$OUT/$SCEN.logdev.dirty.tmp"

# The kernel's replay: mount read-write (recovery), unmount; then record what it shows.
if [[ $KERNEL == uml ]]; then
    in_guest "$IMG" replay "$SCEN" "$WORK/replay"
    grep -q '^#' "$WORK/replay.quota" || { echo "dirty-logs.sh: $SCEN: xfs_quota reported nothing after the replay" >&2; exit 1; }
    cp "$WORK/replay.json" "$OUT/$SCEN.json.tmp"
    cp "$WORK/replay.quota" "$OUT/$SCEN.quota"
else
    LOOP=$(losetup --find --show "$IMG")
    # nouuid: the shut-down mount of this very volume may not have left the kernel's UUID table yet (seen once:
    # "duplicate UUID", the scenario failed to build); it changes nothing in the replay.
    opts="nouuid"
    if [[ -n $LOGIMG ]]; then LOGLOOP=$(losetup --find --show "$LOGIMG"); opts="$opts,logdev=$LOGLOOP"; fi
    mount -t xfs ${opts:+-o $opts} "$LOOP" "$MNT"
    umount "$MNT"
    mount -t xfs -o ro${opts:+,$opts} "$LOOP" "$MNT"
    python3 "$MANIFEST" "$MNT" "$OUT/$SCEN.json.tmp"
    umount "$MNT"
    [[ -n $LOGLOOP ]] && { losetup -d $LOGLOOP; LOGLOOP=""; }
    losetup -d $LOOP; LOOP=""
fi
cp --sparse=always "$IMG" "$OUT/$SCEN.kernel.tmp"
[[ -n $LOGIMG ]] && { cp --sparse=always "$LOGIMG" "$OUT/$SCEN.logdev.kernel"; mv "$OUT/$SCEN.logdev.dirty.tmp" "$OUT/$SCEN.logdev.dirty"; }
mv "$OUT/$SCEN.kernel.tmp" "$OUT/$SCEN.kernel"
mv "$OUT/$SCEN.json.tmp" "$OUT/$SCEN.json"
mv "$OUT/$SCEN.dirty.tmp" "$OUT/$SCEN.dirty"
echo "dirty-logs.sh: $SCEN ready in $OUT"
