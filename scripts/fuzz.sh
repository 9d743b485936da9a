#!/usr/bin/env bash
# Fuzzes the document parser and the event tracker (fuzz/fuzz_targets/document.rs) for a bounded
# time, with the corpus seeded from tests/fixtures/imds-documents/, and prints the executions and
# what was found. Needs cargo-fuzz (`cargo install cargo-fuzz`) and a nightly toolchain.
#
#   scripts/fuzz.sh [SECONDS]    (default 60)
#
# Exits non-zero when the target crashed or an invariant failed; the input is then in
# fuzz/artifacts/document/ (replay: cargo +nightly fuzz run document <file>).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-60}"
target=document

if ! cargo fuzz --version >/dev/null 2>&1; then
    echo "fuzz.sh: cargo-fuzz is not installed (cargo install cargo-fuzz)" >&2
    exit 2
fi
if ! rustup toolchain list | grep -q '^nightly'; then
    echo "fuzz.sh: no nightly toolchain (cargo fuzz needs one)" >&2
    exit 2
fi

corpus="fuzz/corpus/$target"
mkdir -p "$corpus"
cp tests/fixtures/imds-documents/*.json "$corpus/"
# Two documents in one input (the target splits at NUL): a change seen by the tracker.
for first in tests/fixtures/imds-documents/*.json; do
    for second in tests/fixtures/imds-documents/*.json; do
        [ "$first" = "$second" ] && continue
        name="pair-$(basename "$first" .json)-$(basename "$second" .json)"
        { cat "$first"; printf '\0'; cat "$second"; } >"$corpus/$name"
    done
done

log="$(mktemp)"
trap 'rm -f "$log"' EXIT
status=0
cargo +nightly fuzz run "$target" "$corpus" -- \
    -max_total_time="$seconds" -max_len=65536 -print_final_stats=1 2>&1 | tee "$log" >/dev/null ||
    status=$?

executions=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | awk '{print $2}' | tail -1)
rate=$(grep -o 'stat::average_exec_per_sec: *[0-9]*' "$log" | awk '{print $2}' | tail -1)
coverage=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | awk '{print $2}')
echo "fuzz target:   $target"
echo "time:          ${seconds}s"
echo "executions:    ${executions:-unknown} (${rate:-?}/s)"
echo "coverage:      ${coverage:-unknown} edges"
echo "corpus:        $(find "$corpus" -type f | wc -l) inputs"
if [ "$status" -ne 0 ]; then
    echo "findings:      the target failed (exit $status):"
    grep -E 'panicked|ERROR: libFuzzer|SUMMARY|Test unit written' "$log" | head -20
    exit "$status"
fi
echo "findings:      none"
