#!/bin/sh
# weft guest udhcpc script: apply the lease, then report it on the console. udhcpc's stdout may
# be discarded, so reports go to /dev/console directly.
csv() { echo $* | tr ' ' ','; }
case "$1" in
  deconfig)
    ip addr flush dev "$interface"
    ip link set "$interface" up
    ;;
  bound|renew)
    ip addr flush dev "$interface"
    ip addr add "$ip/$mask" dev "$interface"
    [ -n "$mtu" ] && ip link set dev "$interface" mtu "$mtu"
    # per-NIC metrics (eth0 100, eth1 101, ...): with several routers the default route is
    # deterministic (the lowest NIC wins), not whichever lease came last
    metric=$((100 + ${interface#eth}))
    # RFC 3442: a client that receives classless static routes ignores the router option.
    if [ -n "$router" ] && [ -z "$staticroutes" ]; then
      ip route replace default via "${router%% *}" dev "$interface" metric "$metric"
    fi
    set -- $staticroutes          # option 121: "net/len gw net/len gw ..."
    while [ $# -ge 2 ]; do
      if [ "$2" = 0.0.0.0 ]; then  # no gateway: on-link
        ip route replace "$1" dev "$interface" metric "$metric"
      else
        ip route replace "$1" via "$2" dev "$interface" metric "$metric"
      fi
      shift 2
    done
    for d in $dns; do echo "nameserver $d" >> /etc/resolv.conf; done
    echo "WEFT-LEASE $interface $ip/$mask router=$(csv ${router:--}) dns=$(csv ${dns:--}) mtu=${mtu:--} search=$(csv ${search:--}) domain=${domain:--} hostname=${hostname:--} staticroutes=$(csv ${staticroutes:--}) lease=${lease:--} server=${serverid:--}" > /dev/console
    ;;
  leasefail|nak)
    echo "WEFT-LEASEFAIL $interface $1" > /dev/console
    ;;
esac
exit 0
