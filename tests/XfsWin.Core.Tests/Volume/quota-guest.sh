#!/usr/bin/env bash
# The kernel side of QuotaKernelTests, run inside user-mode Linux (../Journal/uml.sh: a kernel with XFS quota, which
# the machine's own kernel lacks) with the test's image attached as /dev/ubda.
#
# usage: quota-guest.sh fill OPTIONS               mount with OPTIONS, make the starting content (owners, a project,
#                                                  limits), unmount
#        quota-guest.sh crash-unlinked OPTIONS     mount, unlink two open files, shut down after a log flush
#        quota-guest.sh limits OPTIONS             mount with OPTIONS, make the starting content of the enforcement
#                                                  scenario (../../XfsWin.Fuse.Tests/quota-edquot.py) and its limits
#        quota-guest.sh defaults OPTIONS           mount with OPTIONS (a quotacheck when quota was off), set default
#                                                  limits no ordinary use of a 300 MiB volume reaches, unmount
#        quota-guest.sh scenario OPTIONS SCRIPT RESULT
#                                                  mount with OPTIONS, run python3 SCRIPT MOUNTPOINT RESULT, unmount
#        quota-guest.sh report OPTIONS PREFIX      mount with OPTIONS (replaying the log if dirty), write
#                                                  PREFIX.u, PREFIX.g, PREFIX.p (xfs_quota block and inode reports
#                                                  without headers) and PREFIX.dmesg (the kernel's messages), unmount
set -euo pipefail
cmd=$1 opts=$2
M=$(mktemp -d /tmp/xfswin-quota-guest.XXXXXX)
trap 'rmdir "$M"' EXIT
case $cmd in
fill)
    mount -t xfs -o "$opts" /dev/ubda "$M"
    # Project 10 on directory p (inherited by what is made in it), files of two users and groups, a directory.
    mkdir "$M/p" "$M/d"
    xfs_io -c 'chproj 10' -c 'chattr +P' "$M/p"
    for u in 1001 1002; do head -c $((u * 10)) /dev/zero >"$M/u$u"; chown $u:$((u + 1000)) "$M/u$u"; done
    head -c 5000 /dev/zero >"$M/p/inproj"
    chown 1001:2001 "$M/d"
    # Limits: a user's soft block limit the test's writes pass (its timer starts), a group's and a project's.
    xfs_quota -x -c 'limit -u bsoft=100k bhard=10m isoft=4 ihard=50 1001' -c 'limit -g bsoft=1m ihard=9 2002' \
        -c 'limit -p isoft=3 bhard=20m 10' "$M"
    umount "$M"
    ;;
crash-unlinked)
    # Files of two owners (one in project 10) unlinked while open, then a shutdown after a log flush: the log holds
    # the unlinks, the inodes are still on the AGI unlinked lists, their dquots still count them.
    mount -t xfs -o "$opts" /dev/ubda "$M"
    head -c 50000 /dev/zero >"$M/held"; chown 1001:2001 "$M/held"
    head -c 20000 /dev/zero >"$M/p/held2"; chown 1002:2002 "$M/p/held2"
    sync
    exec 3<"$M/held" 4<"$M/p/held2"
    rm "$M/held" "$M/p/held2"
    xfs_io -x -c 'shutdown -f' "$M"
    exec 3<&- 4<&-
    umount "$M"
    ;;
limits)
    mount -t xfs -o "$opts" /dev/ubda "$M"
    mkdir -m 0777 "$M/w" "$M/pj"
    chown 1000:1000 "$M/w"
    xfs_io -c 'chproj 20' -c 'chattr +P' "$M/pj"
    head -c 100000 /dev/zero >"$M/u1001"; chown 1001:1001 "$M/u1001"
    # Grace periods and the group default limit are set on the id 0 dquots.
    xfs_quota -x -c 'limit -u bsoft=256k bhard=1m isoft=5 ihard=12 1000' -c 'limit -u isoft=3 ihard=6 1002' \
        -c 'limit -u bsoft=64k bhard=10m 1001' -c 'limit -u bhard=640k 1006' -c 'limit -u bhard=600k 1007' -c 'limit -g bhard=2m 0' -c 'limit -p ihard=3 20' -c 'limit -p bhard=64k 30' \
        -c 'timer -u -b 3d' -c 'timer -u -i 2d' "$M"
    umount "$M"
    ;;
defaults)
    mount -t xfs -o "$opts" /dev/ubda "$M"
    xfs_quota -x -c 'limit -u bsoft=400m bhard=500m isoft=100000 ihard=200000 0' -c 'limit -g bhard=500m ihard=200000 0' "$M"
    umount "$M"
    ;;
scenario)
    mount -t xfs -o "$opts" /dev/ubda "$M"
    python3 "$3" "$M" "$4"
    umount "$M"
    ;;
report)
    prefix=$3
    dmesg -C
    mount -t xfs -o "$opts" /dev/ubda "$M"
    for t in u g p; do xfs_quota -x -c "report -${t}bnN" -c "report -${t}inN" "$M" >"$prefix.$t"; done
    umount "$M"
    dmesg >"$prefix.dmesg"
    ;;
*)
    echo "usage: quota-guest.sh fill|crash-unlinked|limits|defaults OPTIONS | scenario OPTIONS SCRIPT RESULT | report OPTIONS PREFIX" >&2; exit 2 ;;
esac
