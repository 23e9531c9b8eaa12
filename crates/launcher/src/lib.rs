//! Launcher wiring: bridge and masquerade binding plans, nftables rule sets, and the executor
