//! The executor's contract against a scripted in-memory backend: order, rollback in reverse with
//! sysctls restored, teardown attempting everything and tolerating missing objects.

use std::collections::BTreeMap;

use weft_launcher::exec::{BackendError, NetnsBackend, apply, op_label, teardown};
use weft_launcher::plan::Op;
use weft_launcher::{
    Binding, MacAddr, NatOptions, PodLink, PodRoute, TapOwner, TapSettings, VmNetworkCidrs, WiringPlan,
    WiringRequest, plan_wiring,
};

#[derive(Default)]
struct Scripted {
    log: Vec<String>,
    fail_on: Option<String>,
    missing: Vec<String>,
    sysctls: BTreeMap<String, String>,
}

impl NetnsBackend for Scripted {
    fn run(&mut self, op: &Op) -> Result<(), BackendError> {
        let label = op_label(op);
        self.log.push(label.clone());
        if self.fail_on.as_deref() == Some(label.as_str()) {
            return Err(BackendError::other(format!("{label}: injected failure")));
        }
        if self.missing.contains(&label) {
            return Err(BackendError {
                not_found: true,
                message: format!("{label}: gone"),
            });
        }
        if let Op::Sysctl { key, value } = op {
            self.sysctls.insert(key.clone(), value.clone());
        }
        Ok(())
    }

    fn read_sysctl(&mut self, key: &str) -> Result<String, BackendError> {
        Ok(self.sysctls.get(key).cloned().unwrap_or_else(|| "0".to_string()))
    }

    fn discover(&mut self, _name: &str) -> Result<Option<PodLink>, BackendError> {
        Ok(None)
    }
}

fn plan(binding: Binding) -> WiringPlan {
    plan_wiring(&WiringRequest {
        binding,
        pod_iface: "eth0".to_string(),
        primary: true,
        interface_index: 0,
        pod_link: PodLink {
            name: "eth0".to_string(),
            index: 2,
            mac: "0a:58:0a:f4:00:05".parse::<MacAddr>().unwrap(),
            mtu: 1450,
            addresses: vec!["10.244.0.5/24".parse().unwrap()],
            routes: vec![PodRoute {
                destination: "0.0.0.0/0".parse().unwrap(),
                gateway: Some("10.244.0.1".parse().unwrap()),
            }],
        },
        guest_mac: None,
        vm_cidrs: VmNetworkCidrs::default(),
        tap: TapSettings {
            owner: TapOwner { uid: 107, gid: 107 },
            queues: 1,
        },
    })
    .unwrap()
}

#[test]
fn applies_in_order() {
    let plan = plan(Binding::Bridge);
    let mut backend = Scripted::default();
    apply(&mut backend, &plan).unwrap();
    let expected: Vec<String> = plan.steps.iter().map(|s| op_label(&s.op)).collect();
    assert_eq!(backend.log, expected);
    assert_eq!(
        backend.log,
        [
            "create bridge k6t-eth0",
            "add addresses to k6t-eth0",
            "set k6t-eth0 up",
            "set eth0 down",
            "rename eth0 to eth0-nic",
            "copy mac of k6t-eth0 to eth0-nic",
            "enslave eth0-nic to k6t-eth0",
            "flush addresses of eth0-nic",
            "set eth0-nic up",
            "set learning off on eth0-nic",
            "create tap tap0",
            "enslave tap0 to k6t-eth0",
            "set tap0 up",
            "sysctl net/ipv4/conf/all/arp_ignore=1",
        ]
    );
}

#[test]
fn failure_rolls_back_in_reverse_and_restores_sysctls() {
    let plan = plan(Binding::Masquerade(NatOptions::default()));
    let mut backend = Scripted {
        fail_on: Some("install nat tables".to_string()),
        ..Scripted::default()
    };
    let err = apply(&mut backend, &plan).unwrap_err();
    assert_eq!(err.step, plan.steps.len() - 1);
    assert!(
        err.to_string().contains("install nat tables: injected failure"),
        "{err}"
    );
    let rollback: Vec<&str> = backend.log[plan.steps.len()..]
        .iter()
        .map(String::as_str)
        .collect();
    assert_eq!(
        rollback,
        [
            "sysctl net/ipv4/ip_forward=0",
            "delete link tap0",
            "sysctl net/ipv4/conf/k6t-eth0/route_localnet=0",
            "delete link k6t-eth0",
        ]
    );
    assert_eq!(backend.sysctls["net/ipv4/ip_forward"], "0");
}

#[test]
fn teardown_reverses_the_plan_and_restores_the_pod_link_last() {
    let plan = plan(Binding::Bridge);
    let mut backend = Scripted::default();
    teardown(&mut backend, &plan).unwrap();
    assert_eq!(
        backend.log,
        [
            "delete link tap0",
            "set eth0-nic down",
            "add addresses to eth0-nic",
            "release eth0-nic from its bridge",
            "set eth0-nic mac 0a:58:0a:f4:00:05",
            "rename eth0-nic to eth0",
            "set eth0 up",
            "add routes via eth0",
            "delete link k6t-eth0",
        ]
    );
}

#[test]
fn teardown_keeps_going_and_collects_every_error() {
    let plan = plan(Binding::Bridge);
    let mut backend = Scripted {
        fail_on: Some("rename eth0-nic to eth0".to_string()),
        missing: vec!["delete link tap0".to_string()],
        ..Scripted::default()
    };
    let err = teardown(&mut backend, &plan).unwrap_err();
    assert_eq!(err.failures.len(), 1, "a missing tap is not an error: {err}");
    assert_eq!(
        backend.log.last().unwrap(),
        "delete link k6t-eth0",
        "continued after the failure"
    );
    assert!(err.to_string().contains("rename eth0-nic to eth0"), "{err}");
}
