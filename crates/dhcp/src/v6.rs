//! DHCPv6 for the masquerade binding (not implemented yet).
