//! DHCPv4/DHCPv6 server for guests: pure reply logic and the socket loop
