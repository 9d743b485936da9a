#!/usr/bin/env bash
# Prints README.md as the release archives ship it (the tarball, the .deb's /usr/share/doc, the Windows
# zip): every relative link (docs/install.md, alerts/, CONTRIBUTING.md) made absolute, to the same file in
# the repository at the release's tag (Cargo.toml's repository and version), since the archives hold
# none of those files. Links to the web and to anchors of the README itself are left as they are.
#
#   scripts/archive-readme.sh > README.md.out
set -euo pipefail
cd "$(dirname "$0")/.."
field() {
    awk -F'"' -v key="$1" '/^\[/ { section = $0 } section == "[workspace.package]" && $0 ~ "^" key " *=" { print $2; exit }' Cargo.toml
}
repository=$(field repository)
version=$(field version)
[ -n "$repository" ] && [ -n "$version" ] || { echo "archive-readme.sh: no repository or version in Cargo.toml" >&2; exit 1; }
# ](path/) is a directory (tree), ](path) a file (blob); an optional #anchor follows either.
sed -E \
    -e "s#\]\((\./)?([A-Za-z0-9_.-][A-Za-z0-9_./-]*/)(\#[^)]*)?\)#](${repository}/tree/v${version}/\2\3)#g" \
    -e "s#\]\((\./)?([A-Za-z0-9_.-][A-Za-z0-9_./-]*[A-Za-z0-9_-])(\#[^)]*)?\)#](${repository}/blob/v${version}/\2\3)#g" \
    README.md
