#!/usr/bin/env bash
# The test suite: unit, property and vector tests, plus root tests in fresh network namespaces
# (real reference CNI plugins, nftables, DHCP clients, QEMU guests). Run as root for the full
# suite; root tests skip themselves with a message otherwise.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "$(id -u)" = 0 ]; then ./scripts/install-deps.sh; fi
cargo build --workspace --all-targets
# The leak check runs alone once every other test is done: nextest runs test binaries in
# parallel, so it cannot be ordered last inside one run.
cargo nextest run --workspace -E 'not binary(zz_leak_check)' "$@"
cargo nextest run --workspace -E 'binary(zz_leak_check)'
