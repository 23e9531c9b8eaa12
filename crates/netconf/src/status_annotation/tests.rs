use super::*;
use proptest::prelude::*;

#[test]
fn html_characters_are_escaped_like_go() {
    let s = NetworkStatus {
        name: "a<b>&c".into(),
        ..Default::default()
    };
    assert_eq!(
        format_network_status_annotation(&[s]),
        "[{\n    \"name\": \"a\\u003cb\\u003e\\u0026c\",\n    \"dns\": {}\n}]"
    );
    assert_eq!(format_network_status_annotation(&[]), "[]");
}

#[test]
fn tolerant_reader_skips_bad_entries() {
    let (ok, errors) =
        read_network_status_annotation(r#"[{"name":"a"},{"name":5},{"name":"c","interface":"eth0"}]"#);
    assert_eq!(ok.len(), 2);
    assert_eq!(errors.len(), 1);
    assert!(parse_network_status_annotation(r#"[{"name":5}]"#).is_err());
    assert!(parse_network_status_annotation("{}").is_err());
    assert!(parse_network_status_annotation("").unwrap().is_empty());
}

#[test]
fn zero_interfaces_give_no_entry_and_mapped_addresses_print_as_ipv4() {
    let r: CniResult =
        serde_json::from_str(r#"{"cniVersion":"1.0.0","ips":[{"address":"10.0.0.1/24"}]}"#).unwrap();
    assert!(network_statuses(&r, "n", true, None).is_empty());
    let r: CniResult = serde_json::from_str(
        r#"{"cniVersion":"1.0.0","interfaces":[{"name":"eth0","sandbox":"/x"}],"ips":[{"address":"::ffff:10.0.0.1/120"}]}"#,
    )
    .unwrap();
    assert_eq!(network_statuses(&r, "n", true, None)[0].ips, vec!["10.0.0.1"]);
}

proptest! {
    #[test]
    fn format_then_parse_round_trips(names in proptest::collection::vec("[ -~]{0,12}", 0..4), mtu in 0u32..9000) {
        let statuses: Vec<NetworkStatus> = names.iter().map(|n| NetworkStatus {
            name: n.clone(), interface: "net1".into(), ips: vec!["10.0.0.1".into()], mtu, ..Default::default()
        }).collect();
        let text = format_network_status_annotation(&statuses);
        prop_assert_eq!(parse_network_status_annotation(&text).unwrap(), statuses);
    }

    #[test]
    fn reader_never_panics(value in ".{0,80}") {
        let _ = read_network_status_annotation(&value);
    }
}
