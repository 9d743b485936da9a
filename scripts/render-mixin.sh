#!/usr/bin/env bash
# Renders the monitoring mixin (mixin/) into alerts/ and dashboards/ with the default config, or
# into the directory given as the first argument. Needs jsonnet (Debian package jsonnet).
# Deterministic: the same mixin gives the same bytes, which tests/mixin.rs checks.
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
out="${1:-$repo}"
mkdir -p "$out/alerts" "$out/dashboards"
jsonnet -J "$repo/mixin" -S -m "$out" "$repo/mixin/render.jsonnet" >/dev/null
