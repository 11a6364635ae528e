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
# Native AOT (the xfswin binary for Linux, scripts/publish-cli.sh) compiles and links with clang against zlib.
command -v clang >/dev/null || need+=(clang)
[ -e /usr/include/zlib.h ] || need+=(zlib1g-dev)
# mkfs's refusal tests make NTFS and FAT volumes to refuse.
command -v mkntfs >/dev/null || need+=(ntfs-3g)
command -v mkfs.fat >/dev/null || need+=(dosfstools)
# The MSI (scripts/build-msi.sh) is built with wixl and checked with msiinfo and msiextract.
command -v wixl >/dev/null || need+=(wixl)
command -v msiextract >/dev/null || need+=(msitools)
# The management UI's browser tests drive Debian's chromium (Playwright never downloads a browser).
[ -x /usr/bin/chromium ] || need+=(chromium)
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "XfsWin needs these packages: ${need[*]}. Run this script as root (or: sudo apt-get install ${need[*]})." >&2
    exit 1
  fi
  echo "Installing: ${need[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
fi

# arm64, the FUSE host's other architecture: its structure layouts are checked with the aarch64 cross
# compiler, and its build is run by qemu-user against libfuse3 for arm64 (Debian multiarch).
arm=()
command -v aarch64-linux-gnu-gcc >/dev/null || arm+=(gcc-aarch64-linux-gnu)
command -v qemu-aarch64 >/dev/null || arm+=(qemu-user)
[ -e /usr/lib/aarch64-linux-gnu/libfuse3.so.3 ] || arm+=(libfuse3-3:arm64 libc6:arm64 libstdc++6:arm64 libgcc-s1:arm64 zlib1g:arm64)
if [ ${#arm[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "The arm64 tests need: ${arm[*]} (with 'dpkg --add-architecture arm64'). Run this script as root." >&2
    exit 1
  fi
  echo "Installing for the arm64 tests: ${arm[*]}"
  dpkg --print-foreign-architectures | grep -qx arm64 || dpkg --add-architecture arm64
  # Only the arm64 tests need these: if the package source cannot serve them, those tests fail and
  # say what is missing; everything else still runs.
  if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${arm[@]}" >/dev/null; }; then
    echo "install-deps: could not install ${arm[*]}; the arm64 tests (NativeLayoutTests.Arm64*, Arm64Tests) will fail." >&2
  fi
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
