#!/usr/bin/env bash
# Builds the Windows artefact into target/dist/ (or DIST_DIR), beside the Linux ones (scripts/dist.sh runs
# it last):
#
#   azure-scheduled-events-exporter-<version>-x86_64-windows.zip          the .exe, LICENSE, README.md and
#                                                                          install-service.ps1 (the service,
#                                                                          the firewall rule; docs/install.md)
#   azure-scheduled-events-exporter-<version>-x86_64-windows.zip.sha256   its checksum (`sha256sum --check`)
#   azure-scheduled-events-exporter-<version>-x86_64-windows.cdx.json     the SBOM of its .exe (CycloneDX,
#                                                                          scripts/sbom.py)
#
# One release build for x86_64-pc-windows-gnu (in target/x86_64-pc-windows-gnu/release), linked by Debian's
# mingw-w64 (package gcc-mingw-w64-x86-64, the target's default linker x86_64-w64-mingw32-gcc). The target's
# standard library comes from `rustup target add x86_64-pc-windows-gnu`, run here when it is missing.
set -euo pipefail
cd "$(dirname "$0")/.."

name=azure-scheduled-events-exporter
target=x86_64-pc-windows-gnu
version=$(awk -F'"' '/^\[/ { section = $0 } section == "[workspace.package]" && /^version *=/ { print $2; exit }' Cargo.toml)
[ -n "$version" ] || { echo "dist-windows.sh: no version in Cargo.toml" >&2; exit 1; }
dist="${DIST_DIR:-target/dist}"
stem="$name-$version-x86_64-windows"
export SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}"

command -v x86_64-w64-mingw32-gcc >/dev/null 2>&1 || {
    echo "dist-windows.sh: x86_64-w64-mingw32-gcc is missing: apt-get install gcc-mingw-w64-x86-64" >&2
    exit 1
}
command -v zip >/dev/null 2>&1 || { echo "dist-windows.sh: zip is missing: apt-get install zip" >&2; exit 1; }
if command -v rustup >/dev/null 2>&1 && ! rustup target list --installed | grep -qx "$target"; then
    rustup target add "$target"
fi

echo "== cargo build --release --target $target"
cargo build --release --locked --bin "$name" --target "$target"
binary="target/$target/release/$name.exe"

mkdir -p "$dist"
dist=$(cd "$dist" && pwd)   # zip runs from the staging directory
rm -f "$dist/$name"-*-windows.zip "$dist/$name"-*-windows.zip.sha256
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/$stem"
install -m 0755 "$binary" "$stage/$stem/$name.exe"
install -m 0644 LICENSE deploy/windows/install-service.ps1 "$stage/$stem/"
# The README with its links made absolute, at this release's tag (scripts/archive-readme.sh).
bash scripts/archive-readme.sh >"$stage/$stem/README.md"
chmod 0644 "$stage/$stem/README.md"
# Reproducible: files dated at the commit, in a fixed order, without extra attributes.
find "$stage/$stem" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
echo "== $stem.zip"
(cd "$stage" && find "$stem" -type f | LC_ALL=C sort | TZ=UTC zip -X -q -D "$dist/$stem.zip" -@)
(cd "$dist" && sha256sum -- "$stem.zip" >"$stem.zip.sha256")
python3 scripts/sbom.py --target "$target" --output "$dist/$stem.cdx.json"
(cd "$dist" && ls -l -- "$stem.zip" && cat "$stem.zip.sha256")
