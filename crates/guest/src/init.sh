#!/bin/busybox sh
# weft guest /init: load virtio, start qemu-guest-agent, lease every NIC over DHCP, run the
# checks asked for on the kernel command line, then report the interfaces on the console (the
# guest's own checks; the host's status comes from qemu-guest-agent). Every report line starts with "WEFT-"
# and goes to the serial console (ttyS0), where the host parses it (crates/guest/src/report.rs).
/bin/busybox mount -t proc proc /proc
/bin/busybox mount -t sysfs sys /sys
/bin/busybox mount -t devtmpfs dev /dev 2>/dev/null
/bin/busybox --install -s /bin
export PATH=/bin
mkdir -p /tmp /etc /run
up() { cut -d' ' -f1 /proc/uptime; }
# weft.NAME=a,b,c on the kernel command line -> "a b c"
arg() { sed -n "s/.*weft\.$1=\([^ ]*\).*/\1/p" /proc/cmdline | tr ',' ' '; }
echo "WEFT-BOOT uptime=$(up) kernel=$(uname -r)"

# virtio needs virtio_break_device from virtio_ring: this order matters
for m in @MODULES@; do
  e=$(insmod /lib/modules/$m.ko 2>&1) || echo "WEFT-ERROR insmod $m: $e"
done
ip link set lo up

# qemu-guest-agent on its virtio-serial port (no udev here: the /dev/virtio-ports/<name> link
# udev would make is made from /sys/class/virtio-ports/*/name), in the background
agent() {
  n=0
  while [ $n -lt 200 ]; do
    for p in /sys/class/virtio-ports/*; do
      [ "$(cat "$p/name" 2>/dev/null)" = org.qemu.guest_agent.0 ] || continue
      mkdir -p /dev/virtio-ports
      ln -sf "../${p##*/}" /dev/virtio-ports/org.qemu.guest_agent.0
      /usr/sbin/qemu-ga -m virtio-serial -p /dev/virtio-ports/org.qemu.guest_agent.0 \
        -t /run/qemu-ga -l /run/qemu-ga.log >/dev/null 2>&1 &
      echo $! > /run/qemu-ga.pid
      return
    done
    sleep 0.05; n=$((n+1))
  done
  echo "WEFT-ERROR qemu-ga: no virtio-serial port org.qemu.guest_agent.0"
}
if [ -x /usr/sbin/qemu-ga ]; then mkdir -p /run/qemu-ga; agent & fi
n=0; while [ -z "$(ls /sys/class/net | grep '^eth')" ] && [ $n -lt 100 ]; do sleep 0.05; n=$((n+1)); done
sleep 0.2
NICS=$(ls /sys/class/net | grep '^eth' | sort | tr '\n' ' ')
h=$(arg hostname); [ -n "$h" ] && hostname "$h"

# one DHCP attempt on $1 in the background (about 10 s, then udhcpc gives up and exits)
dhcp() {
  ip link set "$1" up
  udhcpc -f -q -n -t 10 -T 1 -A 1 -i "$1" -p "/run/udhcpc.$1.pid" -s /bin/udhcpc.script \
    -O mtu -O staticroutes -O search -O hostname -O domain >/dev/null 2>&1 &
}
# weft.addr=MAC=CIDR,...: a static IPv4 address on the NIC with that MAC (an L2-only network
# leases nothing), and no DHCP attempt there
static=
for a in $(arg addr); do
  mac=${a%%=*}; cidr=${a#*=}
  for i in $NICS; do
    [ "$(cat /sys/class/net/$i/address)" = "$mac" ] || continue
    ip link set "$i" up
    if e=$(ip addr add "$cidr" dev "$i" 2>&1); then static="$static $i"; else echo "WEFT-ERROR addr $i $cidr: $e"; fi
  done
done
pids=
for i in $NICS; do
  case " $static " in *" $i "*) continue ;; esac
  dhcp "$i"; pids="$pids $!"
done
# only the DHCP clients: the agent starter is no reason to wait
[ -n "$pids" ] && wait $pids

# IPv6 (weft up --ipv6): follow router advertisements and lease over DHCPv6 with dhcpcd (all
# NICs, hot-plugged ones too; /bin/dhcpcd.script reports WEFT-LEASE6). One DUID-UUID for the
# guest: a link-layer DUID would name one NIC's MAC on every NIC.
for i in $NICS; do echo 1 > /proc/sys/net/ipv6/conf/$i/accept_ra; done 2>/dev/null
if [ -x /sbin/dhcpcd ]; then
  mkdir -p /var/lib/dhcpcd /run/dhcpcd
  u=$(tr -d '-' < /proc/sys/kernel/random/uuid | sed 's/../&:/g; s/:$//')
  # nodev: without its /dev plugin (udev) dhcpcd 9.4.1 dereferences a null device manager
  # and crashes on its first send unless told not to use one
  printf 'nodev\nipv6only\nnoipv4ll\nlogfile /run/dhcpcd.log\nduid 00:04:%s\n' "$u" > /etc/dhcpcd.conf
  /sbin/dhcpcd -6 -B -d -f /etc/dhcpcd.conf -c /bin/dhcpcd.script >/run/dhcpcd.out 2>&1 &
fi
# before an IPv6 check: wait (up to 20 s) for a route to it whose source address is global
# and out of duplicate address detection
v6ready() {
  n=0
  while [ $n -lt 200 ]; do
    s=$(ip -6 route get "$1" 2>/dev/null | sed -n 's/.* src \([^ ]*\).*/\1/p')
    case "$s" in
      ""|fe80:*) ;;
      *) ip -6 -o addr show | grep " $s/" | grep -qv tentative && return 0 ;;
    esac
    sleep 0.1; n=$((n+1))
  done
  return 1
}
v6targets=$(for t in $(arg ping); do case $t in *:*) echo "$t";; esac; done)
for t in $v6targets; do
  v6ready "$t" || tail -n 20 /run/dhcpcd.log 2>/dev/null | while read -r l; do echo "WEFT-ERROR dhcpcd: $l"; done
done
[ -n "$v6targets" ] && ip -6 route | while read -r route; do echo "WEFT-ROUTE6 $route"; done
ip route | while read -r route; do echo "WEFT-ROUTE $route"; done
echo "WEFT-READY uptime=$(up) nics=$(echo $NICS | tr ' ' ',')"

for t in $(arg ping); do
  r=fail
  for attempt in 1 2 3 4 5; do
    if ping -c 1 -W 2 "$t" >/dev/null 2>&1; then r=ok; break; fi
  done
  echo "WEFT-CHECK ping $t $r"
done
for u in $(arg wget); do
  # busybox 1.35 wget segfaults with its own timeout option: bound the time with timeout(1)
  if body=$(timeout 10 wget -q -O - "$u" 2>/dev/null); then
    echo "WEFT-CHECK wget $u ok $(echo "$body" | head -n 1 | head -c 120)"
  else
    echo "WEFT-CHECK wget $u fail"
  fi
done
for p in $(arg httpd); do
  if httpd -p "$p" -h /www; then echo "WEFT-CHECK httpd $p ok"; else echo "WEFT-CHECK httpd $p fail"; fi
done

# live-migration probes, each reporting to the serial log in the background:
# weft.uptime=SECS: the boot id and uptime every SECS (a reboot changes the id, resets uptime)
for p in $(arg uptime); do
  ( while true; do echo "WEFT-UPTIME $(up) $(cat /proc/sys/kernel/random/boot_id)"; sleep "$p"; done ) &
done
# weft.pingflood=IP: ping IP every 10 ms; every 100 replies, the longest run of lost replies
# since the last report
for t in $(arg pingflood); do
  ( while true; do ping -i 0.01 "$t" 2>&1; sleep 1; done | awk -v t="$t" '/seq=/ {
      s = $0; sub(/.*seq=/, "", s); sub(/ .*/, "", s); s += 0
      if (n && s > last + 1 && s - last - 1 > gap) gap = s - last - 1
      last = s; n++
      if (n % 100 == 0) { print "WEFT-PING " t " recv=" n " seq=" s " maxgap=" gap + 0; gap = 0; fflush() } }' ) &
done
# weft.streamfrom=PORT: receive one TCP stream of counting lines; report gaps and its end
for p in $(arg streamfrom); do
  # (nc's stdin never ends: at EOF it would half-close, and the sender would stop)
  ( while true; do sleep 3600; done | nc -l -p "$p" | awk 'NR == 1 { n = $1 } { if ($1 != n) bad++; n = $1 + 1; c++
      if (c % 20 == 0) { print "WEFT-STREAM recv=" c " next=" n " bad=" bad + 0; fflush() } }
      END { print "WEFT-STREAM end recv=" c + 0; fflush() }' ) &
done
# weft.streamto=IP:PORT: send counting lines every 50 ms to IP:PORT (retried until it connects)
for d in $(arg streamto); do
  ( while true; do
      i=0; while true; do echo "$i"; i=$((i+1)); sleep 0.05; done | nc "${d%:*}" "${d#*:}"
      echo "WEFT-STREAM closed $d"; sleep 1
    done ) &
done

# every NIC without an IPv4 address and without a running udhcpc gets another attempt: NICs
# plugged in later (hot-plug), and NICs whose DHCP server was not up yet at boot
interval=$(arg ga_interval); [ -n "$interval" ] || interval=2
while true; do
  for i in $(ls /sys/class/net | grep '^eth'); do
    [ -n "$(ip -o -4 addr show dev "$i")" ] && continue
    [ -f "/run/udhcpc.$i.pid" ] && kill -0 "$(cat "/run/udhcpc.$i.pid")" 2>/dev/null && continue
    dhcp "$i"
  done
  for i in $(ls /sys/class/net | grep -v '^lo$' | sort); do
    echo "WEFT-GA $i $(cat /sys/class/net/$i/address) $(ip -o addr show dev "$i" | awk '{print $4}' | tr '\n' ' ')"
  done
  sleep "$interval"
done
