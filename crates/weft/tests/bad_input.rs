//! `weft up` with bad input stops before creating anything, with a message naming the object
//! and the field: an invalid manifest, a VM naming a NAD that does not exist, a VM that fails
//! admission, QEMU missing.

mod common;

use std::path::Path;

use common::*;

fn weft_netns() -> Vec<String> {
    let out = std::process::Command::new("ip")
        .args(["netns", "list"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.starts_with("weft-"))
        .map(String::from)
        .collect()
}

fn up_with(state: &Path, manifest: &str, path: Option<&str>) -> (bool, String) {
    let file = state.join("input.yaml");
    std::fs::write(&file, manifest).unwrap();
    let mut command = std::process::Command::new(weft_bin());
    command
        .arg("--state-dir")
        .arg(state.join("cluster"))
        .args(["up", "--no-wait", "-f"])
        .arg(&file);
    if let Some(path) = path {
        command.env("PATH", path);
    }
    let out = command.output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn example(name: &str) -> String {
    std::fs::read_to_string(format!("{}/../../examples/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn exclusive_bad_input_stops_weft_up_before_anything_is_created() {
    if !root_or_skip("exclusive_bad_input_stops_weft_up_before_anything_is_created") {
        return;
    }
    let before = weft_netns();
    let dir = tempfile::tempdir().unwrap();
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "missing name",
            "apiVersion: v1\nkind: Pod\nmetadata: {}\n".into(),
            "document 1: field metadata.name is required",
        ),
        (
            "not YAML",
            "apiVersion: v1\nkind: [unclosed\n".into(),
            "invalid YAML",
        ),
        (
            "unknown NAD",
            example("vm.yaml"),
            "VirtualMachine default/vm1: spec.template.spec.networks[1].multus.networkName: NetworkAttachmentDefinition default/data does not exist",
        ),
        (
            "admission",
            example("nad-data.yaml")
                + "---\n"
                + &example("vm.yaml").replace("masquerade: {}", "masquerade: {}\n              bridge: {}"),
            "VirtualMachine default/vm1: spec.template.spec.domain.devices.interfaces[0]: logical default interface must have exactly one binding method or binding plugin",
        ),
        (
            "bad NAD config",
            example("nad-data.yaml").replace("\"cniVersion\": \"1.0.0\",", "\"cniVersion\": \"1.0.0\",,")
                + "---\n"
                + &example("vm.yaml"),
            "NetworkAttachmentDefinition default/data: spec.config is not valid JSON",
        ),
    ];
    for (what, manifest, want) in cases {
        let (ok, stderr) = up_with(dir.path(), &manifest, None);
        assert!(!ok, "{what}: weft up must fail");
        assert!(
            stderr.contains(want),
            "{what}: the error must say {want:?}, got:\n{stderr}"
        );
        assert_eq!(weft_netns(), before, "{what}: nothing created");
        assert!(
            !dir.path().join("cluster").join("cluster.json").exists(),
            "{what}: no cluster recorded"
        );
    }
    // QEMU missing: a PATH with everything weft needs but qemu-system-x86_64.
    let bin = dir.path().join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    for tool in ["nft", "busybox", "ip"] {
        if let Some(found) = ["/usr/sbin", "/usr/bin", "/sbin", "/bin"]
            .iter()
            .map(|d| Path::new(d).join(tool))
            .find(|p| p.exists())
        {
            let _ = std::os::unix::fs::symlink(found, bin.join(tool));
        }
    }
    let manifests = example("nad-data.yaml") + "---\n" + &example("vm.yaml");
    let (ok, stderr) = up_with(dir.path(), &manifests, Some(bin.to_str().unwrap()));
    assert!(!ok);
    assert!(stderr.contains("qemu-system-x86_64 is missing"), "{stderr}");
    assert_eq!(weft_netns(), before, "missing QEMU: nothing created");
}
