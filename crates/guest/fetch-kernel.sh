#!/usr/bin/env bash
# fetch-kernel.sh DIR - put a guest kernel for weft's local guests into DIR (default
# /var/cache/weft/kernel), without installing any kernel package:
#   DIR/vmlinuz-<release>, DIR/config-<release>   from the linux-image .deb that linux-image-amd64
#                                                 depends on (apt-get download + dpkg-deb)
#   DIR/lib/modules/<release>/kernel/...           the virtio and failover modules the guest loads
#                                                 (and virtio_console, for qemu-guest-agent)
#   DIR/vmlinux-<release>                          the uncompressed PVH-bootable kernel, derived
#                                                 like scripts/extract-vmlinux (XZ stream | xz -dc)
# Idempotent: does nothing when all of it is already there. Needs apt-get, dpkg-deb, xz, grep.
set -euo pipefail
DIR=${1:-/var/cache/weft/kernel}

have_kernel() {
  ls "$DIR"/vmlinuz-* "$DIR"/lib/modules/*/kernel/drivers/virtio/virtio_pci.ko* \
     "$DIR"/lib/modules/*/kernel/drivers/net/virtio_net.ko* >/dev/null 2>&1
}

if ! have_kernel; then
  echo "fetch-kernel: downloading the linux-image .deb (not installing it) into $DIR" >&2
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  chown _apt "$tmp" 2>/dev/null || true
  pkg=$(apt-cache depends linux-image-amd64 | awk '/Depends: linux-image-[0-9]/{print $2; exit}')
  [ -n "$pkg" ] || { echo "fetch-kernel: linux-image-amd64 has no linux-image-<version> dependency" >&2; exit 1; }
  ( cd "$tmp" && apt-get download -q "$pkg" >/dev/null )
  staging="$DIR.partial"
  rm -rf "$staging"; mkdir -p "$staging"
  dpkg-deb --fsys-tarfile "$tmp"/"$pkg"_*.deb | tar -x -C "$staging" --wildcards \
    './boot/vmlinuz-*' './boot/config-*' \
    './lib/modules/*/kernel/drivers/net/virtio_net.ko*' './lib/modules/*/kernel/drivers/net/net_failover.ko*' \
    './lib/modules/*/kernel/net/core/failover.ko*' './lib/modules/*/kernel/drivers/virtio/*' \
    './lib/modules/*/kernel/drivers/char/virtio_console.ko*'
  mv "$staging"/boot/* "$staging"/; rmdir "$staging/boot"
  mkdir -p "$(dirname "$DIR")"
  rm -rf "$DIR"; mv "$staging" "$DIR"
fi

# A cache from before the guest agent lacks virtio_console: add it from the same release's .deb
# (only that file; the kernel other guests boot stays as it is).
release=$(ls "$DIR"/vmlinuz-* | head -1); release=${release##*/vmlinuz-}
if ! ls "$DIR"/lib/modules/"$release"/kernel/drivers/char/virtio_console.ko* >/dev/null 2>&1; then
  echo "fetch-kernel: adding virtio_console.ko of $release to $DIR" >&2
  ktmp=$(mktemp -d)
  trap 'rm -rf "${tmp:-}" "$ktmp"' EXIT
  chown _apt "$ktmp" 2>/dev/null || true
  ( cd "$ktmp" && apt-get download -q "linux-image-$release" >/dev/null )
  dpkg-deb --fsys-tarfile "$ktmp"/linux-image-"$release"_*.deb | tar -x -C "$ktmp" --wildcards \
    './lib/modules/*/kernel/drivers/char/virtio_console.ko*'
  mkdir -p "$DIR/lib/modules/$release/kernel/drivers/char"
  for f in "$ktmp"/lib/modules/"$release"/kernel/drivers/char/virtio_console.ko*; do
    cp "$f" "$DIR/lib/modules/$release/kernel/drivers/char/.${f##*/}.tmp"
    mv "$DIR/lib/modules/$release/kernel/drivers/char/.${f##*/}.tmp" "$DIR/lib/modules/$release/kernel/drivers/char/${f##*/}"
  done
fi

vmlinuz=$(ls "$DIR"/vmlinuz-* | head -1)
vmlinux=${vmlinuz/vmlinuz-/vmlinux-}
if [ ! -s "$vmlinux" ]; then
  # the bzImage carries the kernel as one XZ stream; its offset is the first XZ magic
  off=$(grep -m1 -abo $'\xfd7zXZ\x00' "$vmlinuz" | head -1 | cut -d: -f1)
  [ -n "$off" ] || { echo "fetch-kernel: no XZ stream in $vmlinuz" >&2; exit 1; }
  # xz complains about the trailing bzImage data after the stream: the output is complete anyway
  tail -c +$((off + 1)) "$vmlinuz" | xz -dc > "$vmlinux.tmp" 2>/dev/null || true
  [ "$(head -c 4 "$vmlinux.tmp" | tail -c 3)" = ELF ] || {
    rm -f "$vmlinux.tmp"; echo "fetch-kernel: XZ decompression of $vmlinuz gave no ELF kernel" >&2; exit 1; }
  mv "$vmlinux.tmp" "$vmlinux"
fi
echo "$vmlinux"
