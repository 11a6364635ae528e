#!/usr/bin/env bash
# Installs what XfsWin's build, tests and sample need on a fresh Debian/Ubuntu machine (run as root).
# Idempotent: installs only what is missing.
set -euo pipefail

need=()
command -v mkfs.xfs >/dev/null || need+=(xfsprogs)
command -v fusermount3 >/dev/null || need+=(fuse3)
[ -e /usr/include/fuse3/fuse_lowlevel.h ] || need+=(libfuse3-dev)
command -v getfattr >/dev/null || need+=(attr)
command -v getfacl >/dev/null || need+=(acl)
command -v python3 >/dev/null || need+=(python3)
command -v gcc >/dev/null || need+=(gcc)
command -v sfdisk >/dev/null || need+=(fdisk)
command -v sgdisk >/dev/null || need+=(gdisk)
command -v zstd >/dev/null || need+=(zstd)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "XfsWin needs these packages: ${need[*]}. Run this script as root (or: sudo apt-get install ${need[*]})." >&2
    exit 1
  fi
  echo "Installing: ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

if ! command -v dotnet >/dev/null; then
  echo "The .NET 10 SDK is required (https://dot.net); install it and run this again." >&2
  exit 1
fi

# Loop devices and the kernel's XFS driver are the tests' oracle.
modprobe xfs 2>/dev/null || true
modprobe loop 2>/dev/null || true
modprobe fuse 2>/dev/null || true
grep -qw xfs /proc/filesystems || { echo "The kernel has no XFS driver: the tests compare against it." >&2; exit 1; }

# The newer xfsprogs (6.13) the tests use for parent pointers and metadir, if its installer is present.
if [ -x scripts/oracles/install.sh ]; then
  scripts/oracles/install.sh
fi

# User-mode Linux (Linux 6.1 and 5.10 with XFS quota, which the machine's kernel may lack) for the log tests' quota
# scenarios; 5.10 (Debian bullseye's, fetched through a private source list) still logs quotaoff items.
if [ -f tests/XfsWin.Core.Tests/Journal/uml.sh ]; then
  if [ "$(id -u)" -eq 0 ]; then
    bash tests/XfsWin.Core.Tests/Journal/uml.sh install 6.1
    bash tests/XfsWin.Core.Tests/Journal/uml.sh install 5.10
  else
    echo "Skipping user-mode Linux (the log tests fetch it when run as root)." >&2
  fi
fi
