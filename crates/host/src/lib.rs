//! The Linux edge: network namespaces, netlink links/addresses/routes, TAP, sysctl
