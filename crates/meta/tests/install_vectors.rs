//! Multus vectors `vectors/multus/17-thick-config-override.json`, `18-thick-generated-config.json`,
//! `19-thin-generated-config.json` (thick overlay, generated configurations) and
//! `21-dynamic-controller-status-update.json` (hot-plug status).

use serde_json::{Map, Value};
use weft_cni::CniResult;
use weft_meta::install::{
    PrimaryReference, ThinOptions, find_primary_config, generate_thick_config, generate_thin_config,
    generate_weft_conflist, overlay_daemon_config,
};
use weft_meta::{status_after_add, status_after_remove};
use weft_netconf::{DelegateConfig, NetworkSelectionElement, NetworkStatus};

fn vector(name: &str) -> Value {
    let path = format!("{}/../../vectors/multus/{name}.json", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

fn object(v: &Value) -> &Map<String, Value> {
    v.as_object().unwrap()
}

#[test]
fn v17_daemon_config_overlays_every_key() {
    let v = vector("17-thick-config-override");
    let shim = object(&v["input"]["shimStdin"]);
    let daemon = object(&v["input"]["daemonConfig"]);
    let expected = object(&v["expected"]["cases"][0]["effectiveConfig"]);
    assert_eq!(&overlay_daemon_config(shim, daemon, false), expected);
    let mut without = expected.clone();
    without.remove("readinessindicatorfile");
    assert_eq!(overlay_daemon_config(shim, daemon, true), without);
}

#[test]
fn v18_thick_generated_config() {
    let v = vector("18-thick-generated-config");
    let daemon = object(&v["input"]["daemonConfigFile"]);
    let cases = v["input"]["primaryCapabilitiesCases"].as_array().unwrap();
    let expected = v["expected"]["cases"].as_array().unwrap();
    for (caps, want) in cases.iter().zip(expected) {
        let primary = match caps {
            Value::Null => None,
            Value::Object(list) => {
                let mut conf = list.clone();
                conf.insert("name".into(), "primary".into());
                for p in conf["plugins"].as_array_mut().unwrap() {
                    p["type"] = "x".into();
                }
                Some(DelegateConfig::parse(Value::Object(conf).to_string()).unwrap())
            }
            _ => unreachable!(),
        };
        let got = generate_thick_config(daemon, "multus-shim", None, primary.as_ref(), false);
        assert_eq!(&got, object(&want["00-multus.conf"]));
    }
}

#[test]
fn v19_thin_generated_config_is_byte_exact() {
    let v = vector("19-thin-generated-config");
    let primary = DelegateConfig::parse(v["input"]["autoconfigDir/10-testcni.conf"].to_string()).unwrap();
    let options = ThinOptions {
        kubeconfig: v["input"]["multusKubeConfigFileHost"].as_str().unwrap().into(),
        ..Default::default()
    };
    assert_eq!(
        generate_thin_config(&primary, "multus", &options),
        v["expected"]["content"].as_str().unwrap()
    );
}

#[test]
fn weft_conflist_keeps_the_primary_by_path_and_its_version() {
    let files = vec![
        ("00-multus.conf".to_string(), b"{}".to_vec()),
        ("00-weft.conflist".to_string(), b"{}".to_vec()),
        (
            "10-calico.conflist".to_string(),
            br#"{"name":"k8s-pod-network","cniVersion":"1.0.0","plugins":[{"type":"calico","kubernetes":{"kubeconfig":"/k"}},{"type":"portmap","capabilities":{"portMappings":true}}]}"#.to_vec(),
        ),
        ("20-other.conf".to_string(), b"{}".to_vec()),
    ];
    let (file, bytes) = find_primary_config(&files).unwrap();
    assert_eq!(file, "10-calico.conflist");
    let primary = DelegateConfig::parse(String::from_utf8(bytes.clone()).unwrap()).unwrap();
    let daemon: Map<String, Value> =
        serde_json::from_str(r#"{"cniVersion":"0.4.0","namespaceIsolation":true,"socketDir":"/run/weft"}"#)
            .unwrap();
    let text = generate_weft_conflist(
        &daemon,
        "/etc/cni/net.d/10-calico.conflist",
        &primary,
        PrimaryReference::Path,
    );
    let got: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(got["cniVersion"], "1.0.0");
    assert_eq!(got["name"], "multus-cni-network");
    let plugin = &got["plugins"][0];
    assert_eq!(plugin["type"], "weft-cni");
    assert_eq!(plugin["clusterNetwork"], "/etc/cni/net.d/10-calico.conflist");
    assert_eq!(plugin["capabilities"]["portMappings"], true);
    assert_eq!(plugin["namespaceIsolation"], true);
    assert!(plugin.get("socketDir").is_none());

    let text = generate_weft_conflist(&daemon, "/x", &primary, PrimaryReference::Embedded);
    let got: Value = serde_json::from_str(&text).unwrap();
    let plugin = &got["plugins"][0];
    assert!(plugin.get("clusterNetwork").is_none());
    assert_eq!(
        plugin["delegates"][0]["plugins"][0]["kubernetes"]["kubeconfig"],
        "/k"
    );
    // The generated file is itself a valid meta-plugin configuration with the primary as master.
    let config = weft_meta::MetaConfig::from_map(plugin.as_object().unwrap().clone()).unwrap();
    assert_eq!(config.delegates[0].text(), primary.text());
}

#[test]
fn v21_hotplug_status_update() {
    let v = vector("21-dynamic-controller-status-update");
    let add = &v["input"]["add"];
    let current: Vec<NetworkStatus> = serde_json::from_value(add["initialStatus"].clone()).unwrap();
    let element: NetworkSelectionElement = serde_json::from_value(add["element"].clone()).unwrap();
    let result: CniResult = serde_json::from_value(add["delegateResponse"]["Result"].clone()).unwrap();
    let got = status_after_add(&current, &element, &result);
    let want: Vec<NetworkStatus> = serde_json::from_value(v["expected"]["add"].clone()).unwrap();
    assert_eq!(got, want);

    let remove = &v["input"]["remove"];
    let current: Vec<NetworkStatus> = serde_json::from_value(remove["initialStatus"].clone()).unwrap();
    let element: NetworkSelectionElement = serde_json::from_value(remove["element"].clone()).unwrap();
    let want: Vec<NetworkStatus> = serde_json::from_value(v["expected"]["remove"].clone()).unwrap();
    assert_eq!(status_after_remove(&current, &element), want);
}
