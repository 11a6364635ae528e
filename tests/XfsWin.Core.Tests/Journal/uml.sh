#!/usr/bin/env bash
# A second real kernel for the log tests: Debian's user-mode Linux (linux.uml, Linux 6.1 built with
# XFS quota support, which the machine's own kernel lacks). It runs as an ordinary process; its root
# file system is the host's / (hostfs), so the guest runs the host's own tools and scripts, and disk
# images are attached as ubd block devices (/dev/ubda, /dev/ubdb, ...). Nothing is installed system-wide.
#
# usage: uml.sh install                          fetch and unpack user-mode-linux into $XFSWIN_CACHE/uml
#        uml.sh run IMAGE... -- COMMAND [ARG...]  boot with the images attached, run COMMAND as root in the
#                                                guest, power off; exits with COMMAND's exit code and prints
#                                                its output (stdout and stderr together)
set -euo pipefail
CACHE="${XFSWIN_CACHE:-/var/cache/xfswin}"
UMLDIR="$CACHE/uml"
LINUX="$UMLDIR/root/usr/bin/linux.uml"

install_uml() {
    [[ -x $LINUX ]] && return 0
    [[ $(id -u) -eq 0 ]] || { echo "uml.sh: must run as root to install user-mode-linux" >&2; exit 1; }
    mkdir -p "$CACHE"
    local work; work=$(mktemp -d "$CACHE/.uml.XXXXXX")
    # Without apt's sandbox user: it cannot write into a directory only root may enter.
    if ! (cd "$work" && apt-get -q -o APT::Sandbox::User=root download user-mode-linux) >"$work/download.log" 2>&1; then
        apt-get update -q >"$work/update.log" 2>&1 || true
        (cd "$work" && apt-get -q -o APT::Sandbox::User=root download user-mode-linux) >"$work/download.log" 2>&1 \
            || { cat "$work/download.log" >&2; rm -rf "$work"; echo "uml.sh: apt-get download user-mode-linux failed" >&2; exit 1; }
    fi
    dpkg -x "$work"/user-mode-linux_*.deb "$work/root"
    if ! zcat "$work/root/usr/share/doc/user-mode-linux/config.gz" | grep -qx 'CONFIG_XFS_QUOTA=y'; then
        rm -rf "$work"; echo "uml.sh: this user-mode-linux has no XFS quota support" >&2; exit 1
    fi
    rm -rf "$UMLDIR.new"; mkdir -p "$UMLDIR.new"
    mv "$work/root" "$UMLDIR.new/root"
    rm -rf "$work" "$UMLDIR"
    mv "$UMLDIR.new" "$UMLDIR"
}

run_uml() {
    local images=()
    while [[ $# -gt 0 && $1 != -- ]]; do images+=("$(readlink -f "$1")"); shift; done
    [[ $# -gt 1 ]] || { echo "uml.sh run: no command after --" >&2; exit 2; }
    shift
    install_uml
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
    timeout 900 "$LINUX" "${args[@]}" >"$work/console" 2>&1 </dev/null || status=$?
    [[ -f $work/output ]] && cat "$work/output"
    if [[ ! -f $work/rc ]]; then
        echo "uml.sh: the guest did not finish its command (linux.uml exit $status); console:" >&2
        tail -40 "$work/console" >&2
        return 125
    fi
    return "$(cat "$work/rc")"
}

case ${1:-} in
    install) install_uml ;;
    run) shift; run_uml "$@" ;;
    *) echo "usage: uml.sh install | uml.sh run IMAGE... -- COMMAND [ARG...]" >&2; exit 2 ;;
esac
