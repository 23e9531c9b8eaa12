//! DHCPv6 requests from the guest, exactly as the server handles them: decode, decide the
//! reply with a fixed lease, encode it. No packet panics.
#![no_main]

use std::net::Ipv6Addr;
use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use weft_dhcp::V6Config;
use weft_dhcp::v6;

static CONFIG: LazyLock<V6Config> = LazyLock::new(|| {
    let mut config = V6Config::new("fd10:0:2::2".parse().expect("literal"));
    config.dns_servers = vec![Ipv6Addr::new(0xfd00, 0, 0, 0, 0, 0, 0, 10)];
    config
});

fuzz_target!(|data: &[u8]| {
    let Ok(request) = v6::decode(data) else { return };
    if let Some(reply) = v6::reply(&request, &CONFIG) {
        v6::encode(&reply).expect("a reply to a decoded request encodes");
    }
});
