#!/bin/sh
# weft guest dhcpcd hook: dhcpcd applies IPv6 leases and router advertisements itself; this
# reports each DHCPv6 lease on the console (crates/guest/src/lease6.rs parses the line).
case "$reason" in
  BOUND6|RENEW6|REBIND6|REBOOT6)
    a=$(ip -6 -o addr show dev "$interface" scope global | awk '{print $4}' | head -n 1)
    [ -n "$a" ] || a="${new_dhcp6_ia_na1_ia_addr1:-}/128"
    r=$(ip -6 route show default dev "$interface" | awk '{print $3; exit}')
    d=$(echo ${new_dhcp6_name_servers:--} | tr ' ' ',')
    echo "WEFT-LEASE6 $interface $a router=${r:--} dns=$d" > /dev/console
    ;;
esac
exit 0
