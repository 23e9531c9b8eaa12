//! `weft vm render` on the example in `testdata/render/`, against its golden output.

#[test]
fn hotplug_example_matches_golden() {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/testdata/render");
    let input = std::fs::read_to_string(format!("{dir}/hotplug.yaml")).unwrap();
    let out = weft_vm::render(&input).unwrap();
    let golden_path = format!("{dir}/hotplug.expected.json");
    if std::env::var_os("WEFT_UPDATE_GOLDEN").is_some() {
        std::fs::write(&golden_path, serde_json::to_string_pretty(&out).unwrap() + "\n").unwrap();
    }
    let golden: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&golden_path).unwrap()).unwrap();
    assert_eq!(out, golden);
}
