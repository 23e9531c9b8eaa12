//! DHCPv4 requests from the guest, exactly as the server handles them: decode, decide the
//! reply with a fixed lease, encode it. No packet panics.
#![no_main]

use std::net::Ipv4Addr;
use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use weft_dhcp::{ClasslessRoute, ServerConfig, v4};

static CONFIG: LazyLock<ServerConfig> = LazyLock::new(|| {
    let mut config = ServerConfig::new(
        "10.0.2.2/24".parse().expect("literal"),
        Ipv4Addr::new(10, 0, 2, 1),
    );
    config.router = Some(Ipv4Addr::new(10, 0, 2, 1));
    config.routes = vec![ClasslessRoute {
        destination: Some("192.168.0.0/16".parse().expect("literal")),
        gateway: Some(Ipv4Addr::new(10, 0, 2, 1)),
    }];
    config.dns_servers = vec![Ipv4Addr::new(10, 96, 0, 10)];
    config.search_domains = vec!["default.svc.cluster.local".into(), "cluster.local".into()];
    config.hostname = "vm1".into();
    config.ntp_servers = vec![Ipv4Addr::new(10, 0, 2, 5)];
    config.private_options = vec![(240, "extra".into())];
    config.validate().expect("the fixed config is valid");
    config
});

fuzz_target!(|data: &[u8]| {
    let Ok(request) = v4::decode(data) else { return };
    if let Some(reply) = v4::reply(&request, &CONFIG) {
        v4::encode(&reply).expect("a reply to a decoded request encodes");
    }
});
