//! `weft vm render` end to end.

use serde_json::json;
use weft_vm::render::{RenderError, render};

const VMI_YAML: &str = r#"
apiVersion: kubevirt.io/v1
kind: VirtualMachineInstance
metadata:
  name: vm1
  namespace: ns1
spec:
  domain:
    devices:
      interfaces:
        - name: default
          masquerade: {}
        - name: red
          bridge: {}
          macAddress: "de:ad:00:00:be:af"
        - name: blue
          bridge: {}
  networks:
    - name: default
      pod: {}
    - name: red
      multus:
        networkName: other/red-nad
    - name: blue
      multus:
        networkName: blue-nad
status:
  interfaces:
    - name: default
      infoSource: domain, guest-agent
    - name: red
      infoSource: domain, multus-status
"#;

#[test]
fn vmi_alone() {
    let out = render(VMI_YAML).unwrap();
    assert_eq!(out["validation"], json!([]));
    assert_eq!(out["defaulted"]["networks"].as_array().unwrap().len(), 3);
    let annotations = &out["launcherPodAnnotations"];
    assert_eq!(
        annotations["k8s.v1.cni.cncf.io/networks"],
        r#"[{"name":"red-nad","namespace":"other","mac":"de:ad:00:00:be:af","interface":"podb1f51a511f1"},{"name":"blue-nad","namespace":"ns1","interface":"pod16477688c0e"}]"#
    );
    assert_eq!(annotations["istio.io/reroute-virtual-interfaces"], "k6t-eth0");
    assert_eq!(
        out["podInterfaceNames"],
        json!({"blue": "pod16477688c0e", "default": "eth0", "red": "podb1f51a511f1"})
    );
    assert!(out.get("status").is_none());
    assert!(out.get("runningPodAnnotations").is_none());
}

#[test]
fn with_an_ordinal_pod_and_kubevirt_config() {
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "virt-launcher-vm1", "namespace": "ns1", "annotations": {
            "k8s.v1.cni.cncf.io/networks": r#"[{"name":"red-nad","namespace":"other","mac":"de:ad:00:00:be:af","interface":"net1"}]"#,
            "k8s.v1.cni.cncf.io/network-status": r#"[{"name":"k8s-pod-network","interface":"eth0","ips":["10.0.0.5"],"default":true,"dns":{}},{"name":"other/red-nad","interface":"net1","mac":"de:ad:00:00:be:af","dns":{}}]"#
        }}
    });
    let kubevirt = json!({"apiVersion": "kubevirt.io/v1", "kind": "KubeVirt", "metadata": {"name": "kubevirt"},
        "spec": {"configuration": {"network": {"permitBridgeInterfaceOnPodNetwork": false}}}});
    let doc = format!(
        "{VMI_YAML}\n---\n{}\n---\n{}\n",
        serde_json::to_string(&pod).unwrap(),
        serde_json::to_string(&kubevirt).unwrap()
    );
    let out = render(&doc).unwrap();
    assert_eq!(
        out["podInterfaceNames"],
        json!({"blue": "net2", "default": "eth0", "red": "net1"})
    );
    // blue was hot-plugged: the running pod gets it, with the pod's ordinal scheme.
    assert_eq!(
        out["runningPodAnnotations"]["k8s.v1.cni.cncf.io/networks"],
        r#"[{"name":"red-nad","namespace":"other","mac":"de:ad:00:00:be:af","interface":"net1"},{"name":"blue-nad","namespace":"ns1","interface":"net2"}]"#
    );
    assert_eq!(
        out["status"]["interfaces"],
        json!([
            {"name": "default", "podInterfaceName": "eth0", "infoSource": "domain, guest-agent"},
            {"name": "red", "podInterfaceName": "net1", "infoSource": "domain, multus-status"}
        ])
    );

    // Same input as a JSON list: same output.
    let vmi: serde_json::Value = vmi_as_json(VMI_YAML);
    let list = serde_json::to_string(&json!([vmi, pod, kubevirt])).unwrap();
    assert_eq!(render(&list).unwrap(), out);
}

fn vmi_as_json(yaml: &str) -> serde_json::Value {
    // Render itself reads YAML; use it to get the VMI back as JSON.
    let out = render(yaml).unwrap();
    let mut vmi = json!({"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
        "metadata": {"name": "vm1", "namespace": "ns1"}});
    vmi["spec"] = json!({"domain": {"devices": {"interfaces": out["defaulted"]["interfaces"]}}, "networks": out["defaulted"]["networks"]});
    vmi["status"] = json!({"interfaces": [
        {"name": "default", "infoSource": "domain, guest-agent"},
        {"name": "red", "infoSource": "domain, multus-status"}]});
    vmi
}

#[test]
fn defaulting_and_validation_with_bridge_forbidden() {
    let doc = r#"{"apiVersion":"kubevirt.io/v1","kind":"VirtualMachineInstance","metadata":{"name":"a"},"spec":{}}"#;
    let out = render(doc).unwrap();
    assert_eq!(
        out["defaulted"]["interfaces"],
        json!([{"name": "default", "bridge": {}}])
    );
    assert_eq!(
        out["defaulted"]["networks"],
        json!([{"name": "default", "pod": {}}])
    );

    let doc = format!(
        "[{doc},{{\"apiVersion\":\"kubevirt.io/v1\",\"kind\":\"KubeVirt\",\"spec\":{{\"configuration\":{{\"network\":{{\"permitBridgeInterfaceOnPodNetwork\":false}}}}}}}}]"
    );
    let out = render(&doc).unwrap();
    assert_eq!(
        out["validation"][0]["message"],
        "bridge interface is not enabled in kubevirt-config"
    );
    assert_eq!(out["validation"][0]["type"], "FieldValueInvalid");
}

#[test]
fn validation_causes_are_rooted_at_spec() {
    let doc = r#"
kind: VirtualMachineInstance
apiVersion: kubevirt.io/v1
metadata: {name: a}
spec:
  domain: {devices: {interfaces: [{name: default, masquerade: {}, model: bogus}]}}
  networks: [{name: default, pod: {}}]
"#;
    let out = render(doc).unwrap();
    assert_eq!(
        out["validation"],
        json!([{"type": "FieldValueNotSupported", "message": "interface spec.domain.devices.interfaces[0].name uses model bogus that is not supported.", "field": "spec.domain.devices.interfaces[0].model"}])
    );
}

#[test]
fn a_virtual_machine_renders_its_template() {
    let doc = r#"
kind: VirtualMachine
apiVersion: kubevirt.io/v1
metadata: {name: a, namespace: n}
spec:
  runStrategy: Always
  template:
    spec:
      domain: {devices: {interfaces: [{name: default, masquerade: {}}, {name: s, bridge: {}}]}}
      networks: [{name: default, pod: {}}, {name: s, multus: {networkName: nad}}]
"#;
    let out = render(doc).unwrap();
    assert_eq!(
        out["launcherPodAnnotations"]["k8s.v1.cni.cncf.io/networks"],
        r#"[{"name":"nad","namespace":"n","interface":"pod043a2e6a1e2"}]"#
            .replace("pod043a2e6a1e2", &weft_vm::hashed_pod_interface_name("s"))
    );
}

#[test]
fn bad_inputs_are_named() {
    assert!(matches!(
        render("kind: Pod\nmetadata: {name: p}\n"),
        Err(RenderError::NoVmi)
    ));
    assert!(matches!(
        render("kind: Service\n"),
        Err(RenderError::UnsupportedKind { .. })
    ));
    assert!(matches!(
        render("- 1\n"),
        Err(RenderError::NotAnObject { index: 0 })
    ));
    let err = render("kind: VirtualMachineInstance\nspec: {networks: 3}\n").unwrap_err();
    assert!(err.to_string().contains("VirtualMachineInstance"), "{err}");
    assert!(err.to_string().contains("spec.networks"), "{err}");
    assert!(matches!(render("{]"), Err(RenderError::Parse(_))));
    let unknown_plugin = r#"{"kind":"VirtualMachineInstance","spec":{"domain":{"devices":{"interfaces":[{"name":"default","binding":{"name":"nope"}}]}},"networks":[{"name":"default","pod":{}}]}}"#;
    let out = render(unknown_plugin).unwrap();
    assert_eq!(out["launcherPodAnnotations"], serde_json::Value::Null);
    assert_eq!(
        out["errors"][0],
        "unable to find the network binding plugin 'nope' in Kubevirt configuration"
    );
}
