#!/usr/bin/env bash
# Builds artifacts/XfsWin-<version>-x64.msi on Linux: self-contained win-x64 publishes of the service,
# the tray app and the CLI, packed by wixl (msitools) from installer/XfsWin.wxs. The version is the
# <Version> of Directory.Build.props.
#
#   bash scripts/build-msi.sh            -> artifacts/XfsWin-<version>-x64.msi
#   XFSWIN_MSI_OUT=DIR                   where the .msi goes (default artifacts)
#   XFSWIN_MSI_WORK=DIR                  publish output, build tree and generated .wxs (default $XFSWIN_MSI_OUT/msi-work);
#                                        kept between runs, so a second build only re-links what changed
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
out=$(realpath -m "${XFSWIN_MSI_OUT:-artifacts}")
work=$(realpath -m "${XFSWIN_MSI_WORK:-$out/msi-work}")

version=$(sed -n 's:.*<Version>\([^<]*\)</Version>.*:\1:p' Directory.Build.props | head -n 1)
if ! [[ $version =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]]; then
  echo "build-msi: Directory.Build.props has no <Version>MAJOR.MINOR.PATCH</Version> (found '$version')." >&2
  exit 1
fi
for tool in wixl wixl-heat; do
  command -v $tool >/dev/null || { echo "build-msi: $tool is missing: apt-get install wixl msitools (scripts/install-deps.sh does)." >&2; exit 1; }
done

mkdir -p "$out" "$work"
rm -rf "$work/publish" "$work/payload"

# Each program is published self-contained on its own; the build tree under $work/build keeps them
# out of the source tree's bin/ and obj/ (a win-x64 restore there would change later Linux builds).
publish() {
  echo "build-msi: publishing $1 (win-x64, self-contained)"
  dotnet publish "$1" -c Release -r win-x64 --self-contained true --nologo -v quiet --disable-build-servers \
    --artifacts-path "$work/build" -o "$work/publish/$2" -p:DebugType=none -p:GenerateDocumentationFile=false "${@:3}" >/dev/null
}
publish driver/XfsWin.Service service
publish driver/XfsWin.Tray tray
# The CLI is a short-lived process (xfswin check, ls, cat): compiled ahead (ReadyToRun), it starts without JIT-compiling
# the code it runs, which is most of a small volume's check time.
publish src/XfsWin.Cli cli -p:PublishReadyToRun=true

# The service and the tray share one folder and one runtime: every file both ship must be the same
# bytes (they use the same runtime pack and the same project builds). The CLI carries ASP.NET Core
# (the management UI), whose Microsoft.Extensions.* differ from the service's packages, so it has
# its own folder, cli\.
merge() {
  local from=$1 to=$2 f
  while IFS= read -r -d '' f; do
    f=${f#./}
    if [ -e "$to/$f" ]; then
      cmp -s "$from/$f" "$to/$f" || { echo "build-msi: $f differs between the programs sharing $to" >&2; exit 1; }
    else
      install -D -m 0644 "$from/$f" "$to/$f"
    fi
  done < <(cd "$from" && find . -type f -print0 | sort -z)
}
merge "$work/publish/service" "$work/payload/app"
merge "$work/publish/tray" "$work/payload/app"
merge "$work/publish/cli" "$work/payload/cli"
for exe in app/xfswin-service.exe app/xfswin-tray.exe cli/xfswin.exe; do
  [ -f "$work/payload/$exe" ] || { echo "build-msi: the publish made no $exe" >&2; exit 1; }
done

# Every other file becomes a component of its own (wixl-heat); the three programs are declared by
# hand in installer/XfsWin.wxs because the service, the launcher entry and the Run key refer to them.
# wixl-heat names directories, components and files by a hash of the path below its prefix, so the
# same file name in both folders would collide: each fragment's ids get the folder's name in front.
heat() {
  local folder=$1 dirref=$2 group=$3 var=$4; shift 4
  (cd "$work/payload" && find "$folder" -type f "$@" | sort) |
    wixl-heat -p "$folder/" --directory-ref "$dirref" --component-group "$group" --var "$var" --win64 |
    sed -E "s/Id=\"(dir|cmp|fil)/Id=\"${folder}_\1/g" > "$work/$folder-files.wxs"
}
heat app INSTALLDIR AppFiles var.PayloadApp ! -name xfswin-service.exe ! -name xfswin-tray.exe
heat cli CLIDIR CliFiles var.PayloadCli ! -name xfswin.exe

msi="$out/XfsWin-$version-x64.msi"
rm -f "$msi"
# wixl resolves File sources relative to the .wxs that names them (absolute paths are refused), so
# the product's .wxs is copied next to the generated ones and the payload.
cp installer/XfsWin.wxs "$work/XfsWin.wxs"
(cd "$work" && wixl -a x64 -o "$msi" -D Version="$version" -D Win64=yes -D PayloadApp=payload/app -D PayloadCli=payload/cli \
  XfsWin.wxs app-files.wxs cli-files.wxs)
echo "build-msi: $msi ($(du -h "$msi" | cut -f1), version $version)"
