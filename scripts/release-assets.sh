#!/usr/bin/env bash
# Gathers the files of a GitHub release into OUT, from the target/dist folders that scripts/dist.sh left
# (one per architecture: the release workflow builds each on its own machine and downloads them side by
# side; .ci/run passes its one target/dist):
#
#   scripts/release-assets.sh OUT DIST...
#
# Each DIST's checksum files (SHA256SUMS, *.sha256) are checked first, so what is published is what the
# dist scripts built. Then every other file (tarballs, .debs, the Windows zip, their SBOMs) is copied into
# OUT, and OUT/SHA256SUMS lists them all: `sha256sum --check --ignore-missing SHA256SUMS` beside any of
# them verifies a download. Two builds that made a file of the same name are refused.
set -euo pipefail

if [ "$#" -lt 2 ]; then
    echo "usage: scripts/release-assets.sh OUT DIST..." >&2
    exit 64
fi
out=$1
shift
rm -rf "$out"
mkdir -p "$out"
for dist in "$@"; do
    [ -f "$dist/SHA256SUMS" ] || { echo "release-assets.sh: $dist has no SHA256SUMS: not a scripts/dist.sh folder" >&2; exit 1; }
    (
        cd "$dist"
        shopt -s nullglob
        sha256sum --check --strict --quiet SHA256SUMS ./*.sha256
    ) || { echo "release-assets.sh: a checksum in $dist does not match" >&2; exit 1; }
    for file in "$dist"/*; do
        base=${file##*/}
        case "$base" in
            SHA256SUMS | *.sha256) continue ;;
        esac
        [ -f "$file" ] || { echo "release-assets.sh: $file is not a file" >&2; exit 1; }
        [ ! -e "$out/$base" ] || { echo "release-assets.sh: two builds made $base" >&2; exit 1; }
        cp -p -- "$file" "$out/$base"
    done
done
(
    cd "$out"
    shopt -s nullglob
    files=(*)
    [ "${#files[@]}" -gt 0 ] || { echo "release-assets.sh: nothing to publish" >&2; exit 1; }
    sha256sum -- "${files[@]}" >SHA256SUMS.tmp
    mv SHA256SUMS.tmp SHA256SUMS
)
echo "== $out"
(cd "$out" && cat SHA256SUMS)
