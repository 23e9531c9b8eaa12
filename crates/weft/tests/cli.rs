//! The inspection commands that need no cluster: `weft net parse`, `weft vm render`.

mod common;

use common::*;

#[test]
fn net_parse_prints_npwg_elements_or_the_multus_error() {
    let dir = tempfile::tempdir().unwrap();
    let ok = weft(
        dir.path(),
        &["net", "parse", "--namespace", "ns1", " net-a , other/net-b@data0"],
    );
    assert!(ok.status.success(), "{}", text(&ok));
    let elements: serde_json::Value = serde_json::from_slice(&ok.stdout).unwrap();
    assert_eq!(
        elements,
        serde_json::json!([{"name": "net-a", "namespace": "ns1"}, {"name": "net-b", "namespace": "other", "interface": "data0"}])
    );
    let json = weft(
        dir.path(),
        &[
            "net",
            "parse",
            r#"[{"name":"x","mac":"02:00:00:00:00:01","ips":["10.0.0.5/24"]}]"#,
        ],
    );
    let elements: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    assert_eq!(elements[0]["mac"], "02:00:00:00:00:01");
    let bad = weft(dir.path(), &["net", "parse", "default/net1@myIfc Name"]);
    assert_eq!(bad.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&bad.stderr)
            .contains("Failed to parse interface name: must be less than 15 chars"),
        "{}",
        text(&bad)
    );
}

#[test]
fn vm_render_shows_what_weft_decides_for_the_example() {
    let dir = tempfile::tempdir().unwrap();
    let file = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/vm.yaml");
    let out = weft(dir.path(), &["vm", "render", "-f", file]);
    assert!(out.status.success(), "{}", text(&out));
    let rendered: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(rendered["podInterfaceNames"]["data"], "pod3a6eb0790f3");
    assert_eq!(rendered["podInterfaceNames"]["default"], "eth0");
    let networks = rendered["launcherPodAnnotations"]["k8s.v1.cni.cncf.io/networks"]
        .as_str()
        .unwrap();
    assert_eq!(
        networks,
        r#"[{"name":"data","namespace":"default","mac":"02:00:00:0a:00:01","interface":"pod3a6eb0790f3"}]"#
    );
    assert_eq!(rendered["validation"], serde_json::json!([]));
}
