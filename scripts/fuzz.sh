#!/usr/bin/env bash
# Runs every weft fuzz target for N seconds (default 30), one after another, from the committed
# seeds plus the local corpus (fuzz/corpus/<target>, gitignored). Installs cargo-fuzz when it is
# missing. Every target runs even when an earlier one crashed; exits non-zero when any did (the
# input is in fuzz/artifacts/<target>/). Inputs committed under fuzz/regressions/<target>/ are
# replayed before the target runs.
#
#   scripts/fuzz.sh [seconds]          every target
#   TARGETS="dhcp_v4 dhcp_v6" scripts/fuzz.sh 60
set -euo pipefail

seconds="${1:-30}"
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
    echo "installing cargo-fuzz" >&2
    cargo install --locked cargo-fuzz
fi

targets="${TARGETS:-$(cargo +nightly fuzz list --fuzz-dir fuzz)}"
cargo +nightly fuzz build --fuzz-dir fuzz

failed=()
for target in $targets; do
    corpus="fuzz/corpus/$target"
    mkdir -p "$corpus"
    # Replay the committed regression inputs of earlier findings first, when there are any.
    if [ -d "fuzz/regressions/$target" ] && [ -n "$(ls -A "fuzz/regressions/$target")" ]; then
        echo "=== $target: regressions" >&2
        if ! cargo +nightly fuzz run --fuzz-dir fuzz "$target" "fuzz/regressions/$target" -- -runs=0; then
            echo "fuzz target $target fails on a committed regression input (fuzz/regressions/$target/)" >&2
            failed+=("$target")
            continue
        fi
    fi
    echo "=== $target (${seconds}s)" >&2
    if ! cargo +nightly fuzz run --fuzz-dir fuzz "$target" "$corpus" "fuzz/seeds/$target" \
        -- -max_total_time="$seconds" -rss_limit_mb=2048 -print_final_stats=1; then
        echo "fuzz target $target crashed: see fuzz/artifacts/$target/" >&2
        failed+=("$target")
    fi
done
if [ "${#failed[@]}" -gt 0 ]; then
    echo "crashed: ${failed[*]}" >&2
    exit 1
fi
echo "all fuzz targets ran ${seconds}s without a crash" >&2
