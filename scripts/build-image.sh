#!/bin/sh
# Build the weft image offline with podman: FROM scratch, the root filesystem assembled here
# from the weft binary and exactly the shared libraries `ldd` says it loads (no base image is
# pulled, no shell goes in).
#
#   scripts/build-image.sh [--binary PATH] [--tag NAME] [-- PODMAN_GLOBAL_OPTIONS...]
#
# --binary  the weft binary to put in (default: target/release/weft, built first unless it is
#           newer than every source file, Cargo.toml and Cargo.lock)
# --tag     the image name (default: weft:latest, the name deploy/'s manifests use)
# After --, options for podman itself (e.g. --root DIR --runroot DIR --storage-driver vfs).
set -eu

repo=$(cd "$(dirname "$0")/.." && pwd)
binary=
tag=weft:latest
while [ $# -gt 0 ]; do
    case $1 in
        --binary) binary=$2; shift 2 ;;
        --tag) tag=$2; shift 2 ;;
        --) shift; break ;;
        *) echo "build-image.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done

if [ -z "$binary" ]; then
    binary=$repo/target/release/weft
    if [ ! -x "$binary" ] || [ -n "$(find "$repo/crates" "$repo/Cargo.toml" "$repo/Cargo.lock" \
            -type f -newer "$binary" -print -quit)" ]; then
        echo "build-image.sh: building $binary" >&2
        (cd "$repo" && cargo build --release --locked -p weft)
    fi
fi
[ -x "$binary" ] || { echo "build-image.sh: $binary is not an executable" >&2; exit 1; }

context=$(mktemp -d "${TMPDIR:-/tmp}/weft-image.XXXXXX")
trap 'rm -rf "$context"' EXIT
rootfs=$context/rootfs
mkdir -p "$rootfs/usr/local/bin" "$rootfs/tmp"
chmod 1777 "$rootfs/tmp"
cp "$binary" "$rootfs/usr/local/bin/weft"
chmod 0755 "$rootfs/usr/local/bin/weft"

# Every library the dynamic loader maps (and the loader itself), at the same path: the
# `=> /path` column, or the first column for the loader. A static binary has none.
libraries=$(ldd "$binary" 2>/dev/null | awk '
    $2 == "=>" && $3 ~ /^\// { print $3; next }
    $1 ~ /^\// { print $1 }') || true
for lib in $libraries; do
    mkdir -p "$rootfs$(dirname "$lib")"
    cp -L "$lib" "$rootfs$lib"
done
echo "build-image.sh: $tag from $binary and" $libraries >&2

podman "$@" build --network=none --pull=never -f "$repo/Containerfile" -t "$tag" "$context"
