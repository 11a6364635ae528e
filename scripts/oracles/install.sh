#!/usr/bin/env bash
# Installs the real oracles XfsWin's tests compare against. Idempotent; run as root.
#  * Debian packages: xfsprogs (6.1 on bookworm), fuse3, libfuse3-dev, acl, attr, python3, util-linux...
#  * xfsprogs 6.13 from Debian trixie, unpacked into a private root under the cache dir and run
#    through trixie's own dynamic loader, so the system's libraries are never touched.
#    Wrappers: $XFSWIN_CACHE/xfsprogs-6.13/bin/{mkfs.xfs,xfs_db,xfs_repair,xfs_io,xfs_logprint,...}
# Environment: XFSWIN_CACHE (default /var/cache/xfswin).
set -euo pipefail

CACHE="${XFSWIN_CACHE:-/var/cache/xfswin}"
TRIXIE_DIR="$CACHE/xfsprogs-6.13"
DEB_PACKAGES=(xfsprogs fuse3 libfuse3-dev acl attr python3 util-linux coreutils e2fsprogs file)

if [[ $(id -u) -ne 0 ]]; then
    echo "install.sh: must run as root (apt-get, loop devices and mounts need it)" >&2
    exit 1
fi

missing=()
for p in "${DEB_PACKAGES[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
        missing+=("$p")
    fi
done
if ((${#missing[@]})); then
    echo "install.sh: installing ${missing[*]}"
    apt-get update -q
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${missing[@]}"
fi

# ---- xfsprogs 6.13 (Debian trixie) in a private root ----
TOOLS=(mkfs.xfs xfs_db xfs_repair xfs_io xfs_logprint xfs_mdrestore xfs_metadump xfs_copy xfs_estimate xfs_growfs xfs_spaceman xfs_quota)
LIBS=(xfsprogs libc6 libblkid1 libdevmapper1.02.1 libedit2 libicu76 libinih1 liburcu8t64 libuuid1
      libbsd0 libmd0 libtinfo6 libselinux1 libudev1 libpcre2-8-0 libstdc++6 libgcc-s1)

if [[ -x "$TRIXIE_DIR/bin/mkfs.xfs" ]] && "$TRIXIE_DIR/bin/mkfs.xfs" -V 2>/dev/null | grep -q 'version 6\.13'; then
    echo "install.sh: xfsprogs 6.13 already in $TRIXIE_DIR"
    exit 0
fi

mkdir -p "$CACHE"
work=$(mktemp -d "$CACHE/.trixie.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/sources" "$work/lists/partial" "$work/cache/archives/partial" "$work/debs" "$work/root"
cat >"$work/sources/trixie.sources" <<'SRC'
Types: deb
URIs: http://deb.debian.org/debian
Suites: trixie
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
APT_OPTS=(-o "Dir::Etc::SourceList=/dev/null" -o "Dir::Etc::SourceParts=$work/sources"
          -o "Dir::State::Lists=$work/lists" -o "Dir::Cache=$work/cache"
          -o "Dir::State::status=/dev/null" -o "APT::Architecture=amd64"
          -o "APT::Sandbox::User=root")
echo "install.sh: fetching xfsprogs 6.13 from Debian trixie into $TRIXIE_DIR"
apt-get "${APT_OPTS[@]}" -q update >"$work/update.log" 2>&1 || { cat "$work/update.log" >&2; echo "install.sh: could not read trixie package lists" >&2; exit 1; }
(cd "$work/debs" && apt-get "${APT_OPTS[@]}" -q download "${LIBS[@]}") >"$work/download.log" 2>&1 \
    || { cat "$work/download.log" >&2; echo "install.sh: apt-get download from trixie failed" >&2; exit 1; }
for deb in "$work"/debs/*.deb; do dpkg -x "$deb" "$work/root"; done

stage="$TRIXIE_DIR.new"
rm -rf "$stage"
mkdir -p "$stage/bin"
mv "$work/root" "$stage/root"
for t in "${TOOLS[@]}"; do
    [[ -x "$stage/root/usr/sbin/$t" ]] || continue
    # The real path is resolved at run time so the cache directory may move.
    cat >"$stage/bin/$t" <<WRAP
#!/bin/sh
# xfsprogs 6.13 (Debian trixie) from a private root, run by trixie's own loader.
here=\$(dirname "\$(readlink -f "\$0")")
R="\$here/../root"
exec "\$R/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2" --library-path "\$R/lib/x86_64-linux-gnu:\$R/usr/lib/x86_64-linux-gnu" "\$R/usr/sbin/$t" "\$@"
WRAP
    chmod +x "$stage/bin/$t"
done
"$stage/bin/mkfs.xfs" -V | grep -q 'version 6\.13' || { echo "install.sh: unpacked mkfs.xfs does not run" >&2; exit 1; }
rm -rf "$TRIXIE_DIR"
mv "$stage" "$TRIXIE_DIR"
echo "install.sh: $("$TRIXIE_DIR/bin/mkfs.xfs" -V) ready in $TRIXIE_DIR/bin"
