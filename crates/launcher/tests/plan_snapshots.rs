//! The complete plans of the two bindings, as JSON snapshots (what an agent persists).

use weft_launcher::{
    Binding, MacAddr, NatOptions, PodLink, PodRoute, TapOwner, TapSettings, VmNetworkCidrs, WiringRequest,
    plan_wiring,
};

fn request(binding: Binding, pod_iface: &str, primary: bool, index: usize) -> WiringRequest {
    WiringRequest {
        binding,
        pod_iface: pod_iface.to_string(),
        primary,
        interface_index: index,
        pod_link: PodLink {
            name: pod_iface.to_string(),
            index: 3,
            mac: "0a:58:0a:f4:00:05".parse::<MacAddr>().unwrap(),
            mtu: 1450,
            addresses: vec![
                "10.244.0.5/24".parse().unwrap(),
                "fd00:10:244::5/64".parse().unwrap(),
            ],
            routes: vec![
                PodRoute {
                    destination: "0.0.0.0/0".parse().unwrap(),
                    gateway: Some("10.244.0.1".parse().unwrap()),
                },
                PodRoute {
                    destination: "10.96.0.0/12".parse().unwrap(),
                    gateway: Some("10.244.0.1".parse().unwrap()),
                },
            ],
        },
        guest_mac: None,
        vm_cidrs: VmNetworkCidrs::default(),
        tap: TapSettings {
            owner: TapOwner { uid: 107, gid: 107 },
            queues: 4,
        },
    }
}

#[test]
fn masquerade_plan() {
    let plan = plan_wiring(&request(
        Binding::Masquerade(NatOptions::default()),
        "eth0",
        true,
        0,
    ))
    .unwrap();
    insta::assert_json_snapshot!("masquerade_plan", plan);
}

#[test]
fn bridge_plan() {
    let plan = plan_wiring(&request(Binding::Bridge, "pod16477688c0e", false, 2)).unwrap();
    insta::assert_json_snapshot!("bridge_plan", plan);
}
