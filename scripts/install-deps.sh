#!/usr/bin/env bash
# Install what weft needs on a Debian 12 (bookworm) machine, as root. Idempotent.
#  - the reference CNI plugins (delegates), nftables, iproute2, busybox (guest userland and test
#    clients), dnsmasq (DHCP baseline in benchmarks), podman + runc (a real CNI runtime),
#    containerd (a real CRI runtime: tests/containerd_cri.rs),
#    libvirt-clients + libxml2-utils (virt-xml-validate), qemu-guest-agent (copied into the guest
#    image with its libraries, not run on the host),
#    passt (the passt binding; bookworm's 0.0~git20230309, bookworm-backports has none),
#  - QEMU from bookworm-backports (bookworm's 7.2 would remove the preinstalled qemu-utils 10),
#    enabled for these apt calls only (/etc/apt is not changed),
#  - the guest kernel (extracted from Debian's linux-image package, not installed).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
export DEBIAN_FRONTEND=noninteractive
pkgs=(containernetworking-plugins nftables iproute2 busybox-static dnsmasq-base cpio jq xz-utils
      podman runc libvirt-clients libxml2-utils iptables procps curl
      qemu-guest-agent passt containerd)
pkgs+=(dhcpcd-base)  # the guest's DHCPv6/router-advertisement client (weft up --ipv6)
missing=()
for p in "${pkgs[@]}"; do dpkg-query -W -f '${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p"); done
need_qemu=0
command -v qemu-system-x86_64 >/dev/null || need_qemu=1
if [ ${#missing[@]} -gt 0 ] || [ $need_qemu = 1 ]; then
  tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
  mkdir -p "$tmp/lists/partial" "$tmp/parts"
  cp /etc/apt/sources.list.d/*.sources "$tmp/parts/" 2>/dev/null || true
  cp /etc/apt/sources.list.d/*.list "$tmp/parts/" 2>/dev/null || true
  [ -s /etc/apt/sources.list ] && cp /etc/apt/sources.list "$tmp/parts/main.list"
  cat > "$tmp/parts/zz-backports.sources" <<SRC
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
  chown -R _apt "$tmp" 2>/dev/null || true
  apt=(-o Dir::Etc::sourcelist=/dev/null -o Dir::Etc::sourceparts="$tmp/parts" -o Dir::State::Lists="$tmp/lists"
       -o Dir::Cache::pkgcache= -o Dir::Cache::srcpkgcache= -o Dpkg::Use-Pty=0 -o APT::Install-Recommends=false -q)
  apt-get "${apt[@]}" update -qq
  [ ${#missing[@]} -gt 0 ] && apt-get "${apt[@]}" install -y "${missing[@]}" >/dev/null
  [ $need_qemu = 1 ] && apt-get "${apt[@]}" install -y -t bookworm-backports qemu-system-x86 >/dev/null
fi
"$here/crates/guest/fetch-kernel.sh" "${WEFT_KERNEL_DIR:-/var/cache/weft/kernel}"
echo "deps: ok (qemu: $(qemu-system-x86_64 --version | head -1))"
