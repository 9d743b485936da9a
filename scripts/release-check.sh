#!/usr/bin/env bash
# Before a release publishes anything: every number and name it derives from Cargo.toml agrees.
#
#   scripts/release-check.sh                                       versions and names (.ci/run runs this)
#   scripts/release-check.sh --tag v0.2.0 --home https://github.com/OWNER/NAME
#                                                                   and the tag and repository being released
#                                                                   (.github/workflows/release.yml)
#
# Cargo.toml's version is the release's: Chart.yaml's version and appVersion and the Dockerfile's VERSION
# argument must be it, and the tag must be "v" and it. Cargo.toml's repository is the project's home,
# lowercase (registry names are): the repository being released must be it, and the chart's default image
# (values.yaml image.repository) must be ghcr.io/OWNER/NAME, where the release workflow pushes it. Prints
# version=VERSION, image=ghcr.io/OWNER/NAME and charts=oci://ghcr.io/OWNER/charts (where the chart goes),
# the names the release workflow publishes under, and appends them to $GITHUB_OUTPUT when that is set.
set -euo pipefail
cd "$(dirname "$0")/.."

tag="" home=""
while [ "$#" -gt 0 ]; do
    case "$1" in
        --tag) tag=${2:?--tag needs a value}; shift 2 ;;
        --home) home=${2:?--home needs a value}; shift 2 ;;
        *) echo "release-check.sh: unknown argument $1" >&2; exit 64 ;;
    esac
done

chart=deploy/helm/azure-scheduled-events-exporter
# The first `KEY = "..."` of Cargo.toml's [workspace.package] table, which every crate of the workspace takes.
package() {
    awk -F'"' -v key="$1" '/^\[/ { section = $0 } section == "[workspace.package]" && $0 ~ "^" key " *=" { print $2; exit }' Cargo.toml
}
# A top-level `KEY: value` of a YAML file, without quotes.
top() {
    awk -v key="$1" '$1 == key ":" { sub(/^[^:]*: */, ""); gsub(/"/, ""); print; exit }' "$2"
}

version=$(package version)
repository=$(package repository)
status=0
fail() {
    echo "release-check.sh: $*" >&2
    status=1
}

[ -n "$version" ] || fail "no version in Cargo.toml's [workspace.package]"
[ "$(top version "$chart/Chart.yaml")" = "$version" ] || fail "Chart.yaml's version is not Cargo.toml's $version"
[ "$(top appVersion "$chart/Chart.yaml")" = "$version" ] || fail "Chart.yaml's appVersion is not Cargo.toml's $version"
grep -qx "ARG VERSION=$version" Dockerfile || fail "the Dockerfile's ARG VERSION is not Cargo.toml's $version"

path=${repository#https://github.com/}
if [ "$path" = "$repository" ] || [[ ! $path =~ ^[a-z0-9][a-z0-9-]*/[a-z0-9._-]+$ ]]; then
    fail "Cargo.toml's repository is not https://github.com/OWNER/NAME in lowercase: $repository"
fi
image="ghcr.io/$path"
# values.yaml's image.repository: the `repository:` line of the top-level image: block.
default_image=$(awk '/^[^ #]/ { block = $1 } block == "image:" && $1 == "repository:" { print $2; exit }' "$chart/values.yaml")
[ "$default_image" = "$image" ] || fail "the chart's default image is $default_image, not $image (where releases push)"

if [ -n "$tag" ] && [ "$tag" != "v$version" ]; then
    fail "the tag $tag is not v$version (Cargo.toml): bump the version (docs/releasing.md) or tag v$version"
fi
if [ -n "$home" ] && [ "$home" != "$repository" ]; then
    fail "releasing from $home, but Cargo.toml's repository (the project's home) is $repository"
fi
[ "$status" -eq 0 ] || exit "$status"

outputs=$(printf 'version=%s\nimage=%s\ncharts=oci://ghcr.io/%s/charts\n' "$version" "$image" "${path%%/*}")
echo "$outputs"
if [ -n "${GITHUB_OUTPUT:-}" ]; then
    echo "$outputs" >>"$GITHUB_OUTPUT"
fi
