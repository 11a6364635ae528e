#!/usr/bin/env bash
# A second real kernel for the log tests: Debian's user-mode Linux (linux.uml, built with XFS quota support,
# which the machine's own kernel lacks). It runs as an ordinary process; its root file system is the host's /
# (hostfs), so the guest runs the host's own tools and scripts, and disk images are attached as ubd block
# devices (/dev/ubda, /dev/ubdb, ...). Nothing is installed system-wide.
# Two kernels: 6.1 (the default; bookworm's user-mode-linux, from the machine's own apt sources) and 5.10
# (bullseye's, fetched with a private bullseye source list and apt state under the cache, for what 6.1 no
# longer does: 5.10 still switches quota accounting off on a mounted volume and logs quotaoff items).
#
# usage: uml.sh install [KERNEL]                 fetch and unpack user-mode-linux KERNEL (6.1 or 5.10) into the cache
#        uml.sh run [--kernel KERNEL] IMAGE... -- COMMAND [ARG...]
#                                                boot with the images attached, run COMMAND as root in the
#                                                guest, power off; exits with COMMAND's exit code and prints
#                                                its output (stdout and stderr together)
set -euo pipefail
CACHE="${XFSWIN_CACHE:-/var/cache/xfswin}"

uml_dir() {
    case $1 in
        6.1) echo "$CACHE/uml" ;;
        5.10) echo "$CACHE/uml-5.10" ;;
        *) echo "uml.sh: unknown kernel $1 (6.1 or 5.10)" >&2; exit 2 ;;
    esac
}

# apt-get download of user-mode-linux into the current directory: 6.1 from the machine's sources (bookworm),
# 5.10 from bullseye through a private source list and apt state in $1 (the machine's sources are left alone).
download_uml() {
    local kernel=$1 state=$2
    local apt=(apt-get -q -o APT::Sandbox::User=root)
    if [[ $kernel == 5.10 ]]; then
        mkdir -p "$state/lists/partial" "$state/cache/archives/partial"
        echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bullseye main" >"$state/sources.list"
        apt+=(-o "Dir::Etc::SourceList=$state/sources.list" -o Dir::Etc::SourceParts=/dev/null
              -o "Dir::State::Lists=$state/lists" -o "Dir::Cache=$state/cache" -o Debug::NoLocking=1)
        "${apt[@]}" update >"$state/update.log" 2>&1 || { cat "$state/update.log" >&2; return 1; }
        "${apt[@]}" download user-mode-linux
        return
    fi
    # Without apt's sandbox user: it cannot write into a directory only root may enter.
    if ! "${apt[@]}" download user-mode-linux; then
        apt-get update -q >"$state/update.log" 2>&1 || true
        "${apt[@]}" download user-mode-linux
    fi
}

install_uml() {
    local kernel=${1:-6.1}
    local umldir; umldir=$(uml_dir "$kernel")
    [[ -x $umldir/root/usr/bin/linux.uml ]] && return 0
    [[ $(id -u) -eq 0 ]] || { echo "uml.sh: must run as root to install user-mode-linux" >&2; exit 1; }
    mkdir -p "$CACHE"
    local work; work=$(mktemp -d "$CACHE/.uml.XXXXXX")
    if ! (cd "$work" && download_uml "$kernel" "$work") >"$work/download.log" 2>&1; then
        cat "$work/download.log" >&2; rm -rf "$work"; echo "uml.sh: apt-get download user-mode-linux ($kernel) failed" >&2; exit 1
    fi
    dpkg -x "$work"/user-mode-linux_*.deb "$work/root"
    # (Read whole first: grep -q stopping early would kill zcat with SIGPIPE, a failure under pipefail.)
    local config; config=$(zcat "$work/root/usr/share/doc/user-mode-linux/config.gz")
    if ! grep -qx 'CONFIG_XFS_QUOTA=y' <<<"$config"; then
        rm -rf "$work"; echo "uml.sh: this user-mode-linux has no XFS quota support" >&2; exit 1
    fi
    if ! grep -q "^# Linux/um $kernel\\." <<<"$config"; then
        rm -rf "$work"; echo "uml.sh: the user-mode-linux fetched is not Linux $kernel" >&2; exit 1
    fi
    rm -rf "$umldir.new"; mkdir -p "$umldir.new"
    mv "$work/root" "$umldir.new/root"
    rm -rf "$work" "$umldir"
    mv "$umldir.new" "$umldir"
}

run_uml() {
    local kernel=6.1
    if [[ ${1:-} == --kernel ]]; then kernel=$2; shift 2; fi
    local images=()
    while [[ $# -gt 0 && $1 != -- ]]; do images+=("$(readlink -f "$1")"); shift; done
    [[ $# -gt 1 ]] || { echo "uml.sh run: no command after --" >&2; exit 2; }
    shift
    install_uml "$kernel"
    local linux; linux=$(uml_dir "$kernel")/root/usr/bin/linux.uml
    local work; work=$(mktemp -d /tmp/xfswin-uml.XXXXXX)
    trap 'rm -rf "$work"' RETURN
    printf '%q ' "$@" >"$work/command"
    # PID 1 of the guest: proc and sysfs (devtmpfs comes by itself), the command, its exit code, power off.
    cat >"$work/init" <<INIT
#!/bin/bash
mount -t proc proc /proc; mount -t sysfs sysfs /sys
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root
cd /
bash -c "\$(cat $work/command)" >$work/output 2>&1 </dev/null
echo \$? >$work/rc
sync
echo o >/proc/sysrq-trigger
sleep 60
INIT
    chmod +x "$work/init"
    local args=(mem=1G root=/dev/root rootfstype=hostfs rootflags=/ rw "init=$work/init" quiet
                con=null con0=null,fd:2 "uml_dir=$work" umid=xfswin)
    local i=0
    for img in "${images[@]}"; do args+=("ubd$i=$img"); i=$((i + 1)); done
    local status=0
    timeout 900 "$linux" "${args[@]}" >"$work/console" 2>&1 </dev/null || status=$?
    [[ -f $work/output ]] && cat "$work/output"
    if [[ ! -f $work/rc ]]; then
        echo "uml.sh: the guest did not finish its command (linux.uml exit $status); console:" >&2
        tail -40 "$work/console" >&2
        return 125
    fi
    return "$(cat "$work/rc")"
}

case ${1:-} in
    install) shift; install_uml "${1:-6.1}" ;;
    run) shift; run_uml "$@" ;;
    *) echo "usage: uml.sh install [6.1|5.10] | uml.sh run [--kernel 6.1|5.10] IMAGE... -- COMMAND [ARG...]" >&2; exit 2 ;;
esac
