use super::*;
use proptest::prelude::*;

fn net(s: &str) -> IpNet {
    s.parse().unwrap()
}
fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

#[test]
fn ipv4_skips_network_broadcast_and_gateway() {
    let r = AddressRange::new(net("10.0.0.0/29"), None, None, &[], Some(ip("10.0.0.1"))).unwrap();
    let all: Vec<IpAddr> = r.offsets_from(0).map(|o| r.address_at(o)).collect();
    let want: Vec<IpAddr> = (2..=6).map(|i| ip(&format!("10.0.0.{i}"))).collect();
    assert_eq!(all, want);
    assert_eq!(r.usable_count(), 5);
    assert!(!r.contains(ip("10.0.0.0")) && !r.contains(ip("10.0.0.7")) && !r.contains(ip("10.0.0.1")));
}

#[test]
fn ipv4_point_to_point_prefixes_use_every_address() {
    let r = AddressRange::new(net("10.0.0.0/31"), None, None, &[], None).unwrap();
    assert_eq!(r.usable_count(), 2);
    let r = AddressRange::new(net("10.0.0.9/32"), None, None, &[], None).unwrap();
    assert_eq!(
        r.offsets_from(0).map(|o| r.address_at(o)).collect::<Vec<_>>(),
        vec![ip("10.0.0.9")]
    );
}

#[test]
fn ipv6_keeps_last_address_and_has_no_cap() {
    let r = AddressRange::new(net("fd00::/64"), None, None, &[], None).unwrap();
    assert_eq!(r.usable_count(), (1u128 << 64) - 1);
    assert!(r.contains(ip("fd00::ffff:ffff:ffff:ffff")));
    assert!(!r.contains(ip("fd00::")));
    let whole = AddressRange::new(net("::/0"), None, None, &[], None).unwrap();
    assert_eq!(whole.usable_count(), u128::MAX);
    let start = whole.start_offset(u128::MAX - 1);
    let got: Vec<u128> = whole.offsets_from(start).take(3).collect();
    assert_eq!(got, vec![u128::MAX, 1, 2]);
}

#[test]
fn start_end_and_exclusions() {
    let r = AddressRange::new(
        net("192.168.1.0/24"),
        Some(ip("192.168.1.10")),
        Some(ip("192.168.1.20")),
        &[net("192.168.1.12/31"), net("192.168.1.15/32"), net("10.0.0.0/8")],
        None,
    )
    .unwrap();
    let got: Vec<String> = r.offsets_from(0).map(|o| r.address_at(o).to_string()).collect();
    let want: Vec<String> = [10, 11, 14, 16, 17, 18, 19, 20]
        .iter()
        .map(|i| format!("192.168.1.{i}"))
        .collect();
    assert_eq!(got, want);
}

#[test]
fn bad_bounds_name_the_field() {
    let e = AddressRange::new(net("10.0.0.0/24"), Some(ip("10.0.1.1")), None, &[], None).unwrap_err();
    assert_eq!(e.field, "range_start");
    let e = AddressRange::new(net("10.0.0.0/24"), None, Some(ip("fd00::1")), &[], None).unwrap_err();
    assert_eq!(e.field, "range_end");
    let e = AddressRange::new(net("10.0.0.0/30"), None, None, &[net("10.0.0.0/30")], None).unwrap_err();
    assert_eq!(e.field, "exclude");
    let e = AddressRange::new(net("10.0.0.0/24"), None, None, &[net("fd00::/64")], None).unwrap_err();
    assert_eq!(e.field, "exclude[0]");
}

#[test]
fn pick_free_wraps_and_detects_exhaustion() {
    let r = AddressRange::new(net("10.0.0.0/29"), None, None, &[], None).unwrap();
    let mut taken: HashSet<IpAddr> = ["10.0.0.5", "10.0.0.6"].iter().map(|s| ip(s)).collect();
    assert_eq!(r.pick_free(&taken, 5), Some(ip("10.0.0.1")));
    for i in 1..=4 {
        taken.insert(ip(&format!("10.0.0.{i}")));
    }
    assert_eq!(r.pick_free(&taken, 3), None);
}

fn brute_force(
    subnet: IpNet,
    first: u128,
    last: u128,
    exclude: &[IpNet],
    gw: Option<IpAddr>,
    r: &AddressRange,
) -> Vec<u128> {
    (first..=last)
        .filter(|o| {
            let a = r.address_at(*o);
            !exclude.iter().any(|n| n.contains(&a)) && Some(a) != gw && subnet.contains(&a)
        })
        .collect()
}

fn small_v4() -> impl Strategy<Value = (IpNet, Vec<IpNet>, Option<IpAddr>, u128)> {
    (
        22u8..=30,
        any::<u32>(),
        prop::collection::vec((any::<u8>(), 28u8..=32), 0..5),
        any::<u8>(),
        any::<bool>(),
        any::<u128>(),
    )
        .prop_map(|(prefix, base, excl, gw, has_gw, start)| {
            let subnet = IpNet::new(IpAddr::V4(Ipv4Addr::from(base)), prefix)
                .unwrap()
                .trunc();
            let b = u32::from(match subnet.network() {
                IpAddr::V4(v) => v,
                _ => unreachable!(),
            });
            let size = 1u32 << (32 - prefix);
            let exclude = excl
                .into_iter()
                .map(|(o, p)| {
                    IpNet::new(IpAddr::V4(Ipv4Addr::from(b + (o as u32 % size))), p)
                        .unwrap()
                        .trunc()
                })
                .collect();
            let gw = has_gw.then(|| IpAddr::V4(Ipv4Addr::from(b + (gw as u32 % size))));
            (subnet, exclude, gw, start)
        })
}

proptest! {
    #[test]
    fn iteration_visits_exactly_the_usable_addresses_once((subnet, exclude, gw, start) in small_v4()) {
        let Ok(r) = AddressRange::new(subnet, None, None, &exclude, gw) else { return Ok(()) };
        let (first, last) = r.bounds();
        let want = brute_force(subnet, first, last, &exclude, gw, &r);
        let mut got: Vec<u128> = r.offsets_from(r.start_offset(start)).collect();
        prop_assert_eq!(got.len() as u128, r.usable_count());
        got.sort_unstable();
        prop_assert_eq!(&got, &want);
        for off in got {
            let a = r.address_at(off);
            prop_assert!(r.contains(a));
            prop_assert!(a != subnet.network() && a != subnet.broadcast());
        }
    }

    #[test]
    fn pick_free_never_returns_a_taken_or_unusable_address(
        (subnet, exclude, gw, start) in small_v4(),
        taken_offsets in prop::collection::vec(any::<u16>(), 0..200),
    ) {
        let Ok(r) = AddressRange::new(subnet, None, None, &exclude, gw) else { return Ok(()) };
        let taken: HashSet<IpAddr> = taken_offsets.iter().map(|o| r.address_at(*o as u128 % (1u128 << (32 - subnet.prefix_len())))).collect();
        let free_exists = r.offsets_from(0).any(|o| !taken.contains(&r.address_at(o)));
        match r.pick_free(&taken, r.start_offset(start)) {
            Some(a) => { prop_assert!(r.contains(a)); prop_assert!(!taken.contains(&a)); }
            None => prop_assert!(!free_exists),
        }
    }

    #[test]
    fn choose_free_picks_a_free_usable_address_or_reports_exhaustion(
        (subnet, exclude, gw, random) in small_v4(),
        taken_offsets in prop::collection::vec(any::<u16>(), 0..1200),
    ) {
        let Ok(r) = AddressRange::new(subnet, None, None, &exclude, gw) else { return Ok(()) };
        let size = 1u128 << (32 - subnet.prefix_len());
        let taken: HashSet<IpAddr> = taken_offsets.iter().map(|o| r.address_at(*o as u128 % size)).collect();
        let free_exists = r.offsets_from(0).any(|o| !taken.contains(&r.address_at(o)));
        match r.choose_free(&taken, random) {
            Some(a) => { prop_assert!(r.contains(a)); prop_assert!(!taken.contains(&a)); }
            None => prop_assert!(!free_exists),
        }
    }

    #[test]
    fn large_ipv6_ranges_hand_out_only_members(
        prefix in 0u8..=120, base in any::<u128>(), start in any::<u128>(),
        excl_prefix in 64u8..=128,
    ) {
        let subnet = IpNet::new(IpAddr::V6(Ipv6Addr::from(base)), prefix).unwrap().trunc();
        let excluded = IpNet::new(IpAddr::V6(Ipv6Addr::from(base)), excl_prefix.max(prefix)).unwrap().trunc();
        let Ok(r) = AddressRange::new(subnet, None, None, &[excluded], None) else { return Ok(()) };
        for off in r.offsets_from(r.start_offset(start)).take(64) {
            let a = r.address_at(off);
            prop_assert!(subnet.contains(&a));
            prop_assert!(!excluded.contains(&a));
            prop_assert!(a != subnet.network());
            prop_assert!(r.contains(a));
        }
    }
}
