#!/usr/bin/env bash
# Builds the release artefacts into target/dist/ (or DIST_DIR):
#
#   azure-scheduled-events-exporter-<version>-<arch>-linux-gnu.tar.gz   binary, LICENSE, README.md (its links
#                                                                        absolute: scripts/archive-readme.sh), systemd
#                                                                        unit, example environment file
#   azure-scheduled-events-exporter_<version>-1_<debian arch>.deb       /usr/bin, the unit, /etc/default
#   SHA256SUMS                                                          of both
#   azure-scheduled-events-exporter-<version>-<arch>-linux-gnu.cdx.json  the SBOM of their binary
#                                                                        (CycloneDX, scripts/sbom.py)
#
#   scripts/dist.sh                                          x86_64 (the artefacts the test suite checks)
#   TARGET=aarch64-unknown-linux-gnu scripts/dist.sh         arm64, on a machine with that Rust target
#                                                            (`rustup target add aarch64-unknown-linux-gnu`)
#   DIST_DIR=DIR scripts/dist.sh                             into DIR, emptied first, rather than target/dist
#
# The binary is linked against glibc 2.28 (RHEL 8, Ubuntu 20.04, Debian 10 and newer), whatever the glibc
# of the machine that builds it: cargo-zigbuild links with Zig's copy of the glibc 2.28 symbol versions, so
# no older distribution, container or cross toolchain is needed. Zig also links for aarch64 without a cross
# gcc, so the arm64 build needs only Rust's aarch64 standard library. Both tools come from PyPI
# (cargo-zigbuild, ziglang) into target/ci-tools when not already on PATH.
#
# The VM packages are built without the cargo feature `kubernetes` (the Kubernetes node output and its
# client, about 4.5 MB of the binary): a plain VM never uses it, and the agent built so refuses the
# --kubernetes.* flags (exit 64). The container image (Dockerfile) is built with every default feature.
#
# The .deb's Maintainer field is the first of Cargo.toml's [workspace.package] authors, or DEB_MAINTAINER;
# DIST_RELEASE=1 (the release workflow) refuses to build without one.
# One release build (the `release` profile, in target/<target>/release); nothing else is rebuilt.
set -euo pipefail
cd "$(dirname "$0")/.."

name=azure-scheduled-events-exporter
target=${TARGET:-x86_64-unknown-linux-gnu}
glibc=${GLIBC_VERSION:-2.28}
case "$target" in
    x86_64-unknown-linux-gnu) arch=x86_64 deb_arch=amd64 ;;
    aarch64-unknown-linux-gnu) arch=aarch64 deb_arch=arm64 ;;
    *)
        echo "dist.sh: unsupported TARGET $target (x86_64-unknown-linux-gnu or aarch64-unknown-linux-gnu)" >&2
        exit 64
        ;;
esac
# The release's version: Cargo.toml's [workspace.package] version, which every crate of the workspace takes.
version=$(awk -F'"' '/^\[/ { section = $0 } section == "[workspace.package]" && /^version *=/ { print $2; exit }' Cargo.toml)
[ -n "$version" ] || { echo "dist.sh: no version in Cargo.toml" >&2; exit 1; }
dist="${DIST_DIR:-target/dist}"
stem="$name-$version-$arch-linux-gnu"
# Reproducible archives: every file dated at the commit being built.
export SOURCE_DATE_EPOCH="${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct 2>/dev/null || date +%s)}"

# cargo-zigbuild and Zig, pinned, from PyPI.
tools=target/ci-tools
if ! command -v cargo-zigbuild >/dev/null 2>&1; then
    if [ ! -x "$tools/bin/cargo-zigbuild" ]; then
        [ -x "$tools/bin/pip" ] || python3 -m venv "$tools"
        "$tools/bin/pip" install -q --disable-pip-version-check cargo-zigbuild==0.24.0 ziglang==0.17.0
    fi
    export PATH="$PWD/$tools/bin:$PATH"
fi

echo "== cargo zigbuild --release --no-default-features --target $target.$glibc"
cargo zigbuild --release --locked --no-default-features --bin "$name" --target "$target.$glibc"
binary="target/$target/release/$name"

rm -rf "$dist"
mkdir -p "$dist"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT

# Files owned by root, sorted, dated at the commit: the same tree gives the same archive.
pack() {
    tar --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$SOURCE_DATE_EPOCH" "$@"
}

echo "== $stem.tar.gz"
mkdir -p "$stage/tar/$stem"
install -m 0755 "$binary" "$stage/tar/$stem/$name"
install -m 0644 LICENSE "$stage/tar/$stem/"
# The README with its links to docs/ and the rest made absolute, at this release's tag: the archive holds
# none of those files.
bash scripts/archive-readme.sh >"$stage/README.md"
install -m 0644 "$stage/README.md" "$stage/tar/$stem/README.md"
install -m 0644 "deploy/systemd/$name.service" "$stage/tar/$stem/$name.service"
install -m 0644 "deploy/systemd/$name.default" "$stage/tar/$stem/$name.env"
pack -C "$stage/tar" -czf "$dist/$stem.tar.gz" "$stem"

# The .deb from a staged tree with dpkg-deb, which every Debian machine has: the package is the handful
# of files below and four maintainer scripts, no build tool needed.
deb_version="$version-1"
deb="${name}_${deb_version}_${deb_arch}.deb"
echo "== $deb"
root="$stage/deb"
install -D -m 0755 "$binary" "$root/usr/bin/$name"
# The packaged binary lives in /usr/bin; the unit in the repository points at /usr/local/bin for
# installs by hand.
sed "s|^ExecStart=/usr/local/bin/$name|ExecStart=/usr/bin/$name|" "deploy/systemd/$name.service" \
    >"$stage/$name.service"
grep -qx "ExecStart=/usr/bin/$name" "$stage/$name.service" || {
    echo "dist.sh: the unit's ExecStart is not /usr/local/bin/$name" >&2
    exit 1
}
install -D -m 0644 "$stage/$name.service" "$root/lib/systemd/system/$name.service"
install -D -m 0644 "deploy/systemd/$name.default" "$root/etc/default/$name"
install -D -m 0644 deploy/debian/copyright "$root/usr/share/doc/$name/copyright"
install -D -m 0644 "$stage/README.md" "$root/usr/share/doc/$name/README.md"
install -d -m 0755 "$root/DEBIAN"
for script in postinst prerm postrm; do
    install -m 0755 "deploy/debian/$script" "$root/DEBIAN/$script"
done
echo "/etc/default/$name" >"$root/DEBIAN/conffiles"
installed_size=$(du -s -k --exclude=DEBIAN "$root" | cut -f1)
# The Maintainer: DEB_MAINTAINER, else the first of Cargo.toml's [workspace.package] authors ("Name <mail>"),
# the project's metadata. A release (DIST_RELEASE=1, as the release workflow sets it) refuses to ship
# without one: a .deb's Maintainer is whom users write to.
authors=$(awk '/^\[/ { section = $0 } section == "[workspace.package]" && /^authors *=/ { print; exit }' Cargo.toml |
    sed -n 's/^authors *= *\[ *"\([^"]*\)".*/\1/p')
maintainer=${DEB_MAINTAINER:-$authors}
if [ -z "$maintainer" ] || [[ "$maintainer" != *"<"*"@"*">"* ]] || [[ "$maintainer" == *".invalid>"* ]]; then
    if [ "${DIST_RELEASE:-0}" = 1 ]; then
        echo "dist.sh: no maintainer (\"Name <mail>\") in Cargo.toml's [workspace.package] authors or DEB_MAINTAINER: a release does not ship a .deb without one" >&2
        exit 1
    fi
    maintainer="azure-scheduled-events-exporter maintainers <maintainers@example.invalid>"
    echo "dist.sh: no maintainer in Cargo.toml's authors; the .deb says $maintainer (a release refuses this)" >&2
fi
sed -e "s|@VERSION@|$deb_version|" -e "s|@MAINTAINER@|$maintainer|" -e "s|@ARCH@|$deb_arch|" -e "s|@INSTALLED_SIZE@|$installed_size|" \
    deploy/debian/control >"$root/DEBIAN/control"
find "$root" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
dpkg-deb --root-owner-group -Zxz --build "$root" "$dist/$deb" >/dev/null

(cd "$dist" && sha256sum -- *.tar.gz *.deb >SHA256SUMS)
python3 scripts/sbom.py --target "$target" --no-default-features --output "$dist/$stem.cdx.json"
echo "== $dist"
(cd "$dist" && ls -l -- * && cat SHA256SUMS)
[ "${DIST_WINDOWS:-1}" = 0 ] || bash scripts/dist-windows.sh # the Windows zip and its .sha256 (DIST_WINDOWS=0 skips it)
