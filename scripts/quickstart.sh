#!/usr/bin/env bash
# The main job on one machine: install what is missing, build, bring up the local cluster with
# the example VM (two NICs), and show its status. Run as root on Debian 12.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/install-deps.sh
cargo build --release --bin weft
weft=target/release/weft
if [ -f /var/lib/weft/cluster.json ]; then "$weft" down; fi
"$weft" up "$@"
"$weft" get vmi
"$weft" get vmi vm1 -o yaml
