#!/usr/bin/env bash
# Builds one oracle image: made by the real mkfs.xfs, filled by the Linux kernel through a loop mount,
# checked with xfs_repair -n, and described by a manifest of what the kernel shows (mounted read-only).
#
#   make-images.sh NAME OUTDIR        NAME: default v4 v4-ftype0 rmap-nrext64 b1k b64k dir64k mkfs613
#   make-images.sh all OUTDIR
#
# Writes OUTDIR/NAME.img (sparse), OUTDIR/NAME.json (manifest) and, last, OUTDIR/NAME.meta.json
# (how it was made); a NAME.meta.json therefore means the image is complete.
# Needs root (loop devices, mount). Environment: XFSWIN_CACHE (xfsprogs 6.13 location).
set -euo pipefail

HERE=$(cd "$(dirname "$0")" && pwd)
CACHE="${XFSWIN_CACHE:-/var/cache/xfswin}"
XFS613="$CACHE/xfsprogs-6.13/bin"

usage() { echo "usage: $0 NAME|all OUTDIR" >&2; exit 2; }
[[ $# -eq 2 ]] || usage
NAME=$1
OUTDIR=$2
mkdir -p "$OUTDIR"
OUTDIR=$(cd "$OUTDIR" && pwd)

if [[ $NAME == all ]]; then
    for n in default v4 v4-ftype0 rmap-nrext64 b1k b64k dir64k mkfs613; do
        "$0" "$n" "$OUTDIR"
    done
    exit 0
fi

[[ $(id -u) -eq 0 ]] || { echo "make-images.sh: must run as root (loop devices and mounts)" >&2; exit 1; }

# name -> xfsprogs version, image size, mkfs options, fill scale ("proto" for V4: no kernel mount)
case $NAME in
    default)      VER=6.1;  SIZE=1G;   OPTS="";                                              SCALE=full ;;
    rmap-nrext64) VER=6.1;  SIZE=512M; OPTS="-m rmapbt=1 -i nrext64=1";                      SCALE=small ;;
    b1k)          VER=6.1;  SIZE=512M; OPTS="-b size=1024";                                  SCALE=small ;;
    b64k)         VER=6.1;  SIZE=1G;   OPTS="-b size=65536 -n size=65536";                   SCALE=small ;;
    dir64k)       VER=6.1;  SIZE=512M; OPTS="-n size=65536";                                 SCALE=small ;;
    mkfs613)      VER=6.13; SIZE=512M; OPTS="-n parent=1 -i exchange=1 -m metadir=1";        SCALE=small ;;
    v4)           VER=6.1;  SIZE=512M; OPTS="-m crc=0";                                      SCALE=proto ;;
    v4-ftype0)    VER=6.1;  SIZE=512M; OPTS="-m crc=0 -n ftype=0";                           SCALE=proto ;;
    *) echo "make-images.sh: unknown image '$NAME'" >&2; usage ;;
esac

if [[ $VER == 6.13 ]]; then
    [[ -x $XFS613/mkfs.xfs ]] || bash "$HERE/install.sh"
    MKFS=$XFS613/mkfs.xfs; REPAIR=$XFS613/xfs_repair; DB=$XFS613/xfs_db
else
    for t in mkfs.xfs xfs_repair xfs_db xfs_io setfacl; do
        command -v $t >/dev/null || bash "$HERE/install.sh"
    done
    MKFS=mkfs.xfs; REPAIR=xfs_repair; DB=xfs_db
fi

WORK=$(mktemp -d "$OUTDIR/.build-$NAME.XXXXXX")
IMG="$WORK/$NAME.img"
MNT="$WORK/mnt"
LOOP=""
mkdir -p "$MNT"

cleanup() {
    if mountpoint -q "$MNT"; then umount "$MNT" || umount -l "$MNT"; fi
    if [[ -n $LOOP ]]; then losetup -d "$LOOP" 2>/dev/null || true; fi
    rm -rf "$WORK"
}
trap cleanup EXIT

mount_image() {  # ro|rw
    LOOP=$(losetup --find --show "$IMG")
    mount -t xfs -o "$1" "$LOOP" "$MNT"
}
umount_image() {
    umount "$MNT"
    losetup -d "$LOOP"
    LOOP=""
}

start=$(date +%s)
truncate -s "$SIZE" "$IMG"
FTYPE=true
[[ $NAME == v4-ftype0 ]] && FTYPE=false

if [[ $SCALE == proto ]]; then
    # This kernel cannot mount V4: mkfs.xfs fills the volume from a protofile, and the manifest
    # comes from the protofile's own description (proto.py), cross-checked against xfs_db.
    python3 "$HERE/proto.py" generate "$WORK/proto" "$WORK/proto.txt" "$WORK/proto-desc.json"
    # shellcheck disable=SC2086
    if ! $MKFS -q -f $OPTS -L "$NAME" -p "$WORK/proto.txt" "$IMG" >"$WORK/mkfs.log" 2>&1; then
        cat "$WORK/mkfs.log" >&2
        echo "make-images.sh: mkfs.xfs -p failed for $NAME" >&2
        exit 1
    fi
    python3 "$HERE/proto.py" manifest "$WORK/proto-desc.json" "$IMG" "$DB" "$WORK/$NAME.json"
    SOURCE=protofile
else
    # shellcheck disable=SC2086
    $MKFS -q -f $OPTS -L "$NAME" "$IMG"
    mount_image rw
    python3 "$HERE/fill.py" "$MNT" "$SCALE"
    umount_image
    mount_image ro
    python3 "$HERE/manifest.py" "$MNT" "$WORK/$NAME.json"
    umount_image
    SOURCE=kernel
fi

if ! "$REPAIR" -n "$IMG" >"$WORK/repair.log" 2>&1; then
    cat "$WORK/repair.log" >&2
    echo "make-images.sh: xfs_repair -n ($VER) found problems in $NAME" >&2
    exit 1
fi

mv "$IMG" "$OUTDIR/$NAME.img"
mv "$WORK/$NAME.json" "$OUTDIR/$NAME.json"
cat >"$WORK/meta.json" <<META
{"name": "$NAME", "xfsprogs": "$VER", "mkfs_options": "$OPTS", "size": "$SIZE", "ftype": $FTYPE,
 "manifest_source": "$SOURCE", "fill": "$SCALE", "built": "$(date -u +%FT%TZ)", "seconds": $(( $(date +%s) - start ))}
META
mv "$WORK/meta.json" "$OUTDIR/$NAME.meta.json"
echo "make-images.sh: $NAME ready in $OUTDIR ($(( $(date +%s) - start )) s, $(du -h "$OUTDIR/$NAME.img" | cut -f1) used)"
