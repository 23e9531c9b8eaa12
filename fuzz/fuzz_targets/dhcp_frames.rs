//! Raw Ethernet frames from a guest's tap, as the guest NIC's server reads them from its packet
//! socket: the origin filter (`weft_dhcp::guard::admit_v4` / `admit_v6`, hand-written header
//! parsing), then decode → reply → encode for what it admits. No frame panics; whatever is
//! admitted came from the guest's MAC on the guest's tap.
#![no_main]

use std::net::Ipv4Addr;
use std::sync::LazyLock;

use libfuzzer_sys::fuzz_target;
use weft_dhcp::guard::{self, Frame};
use weft_dhcp::{ServerConfig, v4};

const TAP: i32 = 7;
const GUEST: [u8; 6] = [0x02, 0, 0, 0, 0, 1];

static CONFIG: LazyLock<ServerConfig> = LazyLock::new(|| {
    let mut config = ServerConfig::new(
        "10.0.2.2/24".parse().expect("literal"),
        Ipv4Addr::new(10, 0, 2, 1),
    );
    config.router = Some(Ipv4Addr::new(10, 0, 2, 1));
    config.validate().expect("the fixed config is valid");
    config
});

fuzz_target!(|data: &[u8]| {
    // The first byte picks the receive metadata; the rest is the frame.
    let Some((&meta, bytes)) = data.split_first() else { return };
    let frame = Frame {
        ifindex: if meta & 1 == 0 { TAP } else { TAP + 1 },
        outgoing: meta & 2 != 0,
        bytes,
    };
    if let Ok(message) = guard::admit_v4(&frame, TAP, GUEST) {
        assert_eq!(guard::ethernet_source(bytes), Some(GUEST));
        assert!(!frame.outgoing && frame.ifindex == TAP);
        if let Ok(request) = v4::decode(message) {
            if let Some(reply) = v4::reply(&request, &CONFIG) {
                v4::encode(&reply).expect("a reply to a decoded request encodes");
            }
        }
    }
    if guard::admit_v6(&frame, TAP, GUEST).is_ok() {
        assert_eq!(guard::ethernet_source(bytes), Some(GUEST));
    }
});
