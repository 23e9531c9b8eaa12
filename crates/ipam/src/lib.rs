//! Cluster IPAM: ranges, allocation over compare-and-swap reservations, IPAMClaims, GC
