use proptest::prelude::*;
use serde_json::Value;

use super::*;

fn get(doc: &str, key: &str) -> Result<Option<String>, JsonError> {
    top_level_string(doc.as_bytes(), key)
}

/// What the agent reads: the member's value when it is a string.
fn serde_view(doc: &[u8], key: &str) -> Option<Option<String>> {
    match serde_json::from_slice::<Value>(doc).ok()? {
        Value::Object(map) => Some(map.get(key).and_then(Value::as_str).map(str::to_string)),
        _ => None,
    }
}

#[test]
fn reads_a_top_level_string_and_nothing_nested() {
    let doc = r#"{"cniVersion":"1.0.0","daemonSocketDir":"/run/weft","x":{"daemonSocketDir":"/no"}}"#;
    assert_eq!(get(doc, "daemonSocketDir").unwrap().as_deref(), Some("/run/weft"));
    assert_eq!(get(doc, "cniVersion").unwrap().as_deref(), Some("1.0.0"));
    let nested = r#"{"x":{"daemonSocketDir":"/no"},"l":[{"daemonSocketDir":"/no"}]}"#;
    assert_eq!(get(nested, "daemonSocketDir").unwrap(), None);
}

#[test]
fn a_non_string_value_is_no_value() {
    for value in [
        "1",
        "-0.5e+3",
        "true",
        "false",
        "null",
        "[\"/a\"]",
        "{\"a\":\"/a\"}",
    ] {
        let doc = format!(r#"{{"daemonSocketDir": {value}}}"#);
        assert_eq!(get(&doc, "daemonSocketDir").unwrap(), None, "{doc}");
    }
}

#[test]
fn escapes_are_decoded_in_names_and_values() {
    let doc = r#"{"daemonSocket\u0044ir":"\/run\\we\u0066t\ud83d\ude00\n"}"#;
    assert_eq!(
        get(doc, "daemonSocketDir").unwrap().as_deref(),
        Some("/run\\weft\u{1F600}\n")
    );
}

#[test]
fn the_last_duplicate_member_counts_as_in_serde_json() {
    let doc = r#"{"k":"first","k":"second"}"#;
    assert_eq!(get(doc, "k").unwrap().as_deref(), Some("second"));
    assert_eq!(serde_view(doc.as_bytes(), "k"), Some(Some("second".into())));
    let doc = r#"{"k":"first","k":2}"#;
    assert_eq!(get(doc, "k").unwrap(), None);
    assert_eq!(serde_view(doc.as_bytes(), "k"), Some(None));
}

#[test]
fn what_is_not_a_json_object_is_refused() {
    for doc in [
        "",
        "[]",
        "\"s\"",
        "{",
        "{\"a\":}",
        "{\"a\":1,}",
        "{\"a\" 1}",
        "{a:1}",
        "{\"a\":01}",
        "{\"a\":1.}",
        "{\"a\":.5}",
        "{\"a\":1e}",
        "{\"a\":tru}",
        "{\"a\":1e400}",
        "{\"a\":-1.5E+309}",
        "{\"a\":\"\u{1}\"}",
        "{\"a\":\"\\x\"}",
        "{\"a\":\"\\ud800\"}",
        "{\"a\":\"\\udc00\"}",
        "{\"a\":\"\\ud800\\u0041\"}",
        "{\"a\":\"unterminated}",
        "{} {}",
        "{}x",
    ] {
        assert!(get(doc, "a").is_err(), "{doc:?} accepted");
        assert!(
            serde_view(doc.as_bytes(), "a").is_none(),
            "{doc:?}: serde_json accepts it"
        );
    }
    assert!(top_level_string(b"{\"a\":\"\xff\"}", "a").is_err());
}

#[test]
fn nesting_is_bounded_where_serde_json_bounds_it() {
    for inner in ["1", "[]", "{}", "\"daemonSocketDir\""] {
        for levels in MAX_DEPTH - 3..MAX_DEPTH + 2 {
            let doc = format!("{{\"a\":{}{inner}{}}}", "[".repeat(levels), "]".repeat(levels));
            let ours = get(&doc, "a").is_ok();
            let serde = serde_view(doc.as_bytes(), "a").is_some();
            assert_eq!(ours, serde, "{levels} arrays around {inner}");
        }
    }
    let at_limit = format!(
        "{{\"a\":{}1{}}}",
        "[".repeat(MAX_DEPTH - 1),
        "]".repeat(MAX_DEPTH - 1)
    );
    assert!(get(&at_limit, "a").is_ok());
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        any::<String>().prop_map(Value::String),
        "[/a-z\\\\\"\u{0}-\u{1f}\u{7f}-\u{10ffff}]{0,12}".prop_map(Value::String),
    ];
    leaf.prop_recursive(4, 48, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((key(), inner), 0..6)
                .prop_map(|members| Value::Object(members.into_iter().collect())),
        ]
    })
}

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("daemonSocketDir".to_string()),
        Just("cniVersion".to_string()),
        "[a-zA-Z\"\\\\\u{0}-\u{1f}é😀]{0,8}",
    ]
}

fn document() -> impl Strategy<Value = Value> {
    prop::collection::vec((key(), json_value()), 0..8)
        .prop_map(|members| Value::Object(members.into_iter().collect()))
}

/// serde_json writes `/` unescaped and non-ASCII as is; these spell the same document with
/// every character of every string escaped, as another writer might.
fn escape_everything(doc: &Value) -> String {
    fn string(s: &str) -> String {
        let mut out = String::from("\"");
        for unit in s.encode_utf16() {
            out += &format!("\\u{unit:04x}");
        }
        out + "\""
    }
    match doc {
        Value::String(s) => string(s),
        Value::Array(items) => format!(
            "[ {} ]",
            items
                .iter()
                .map(escape_everything)
                .collect::<Vec<_>>()
                .join(" ,\n")
        ),
        Value::Object(map) => format!(
            "{{\t{}\r}}",
            map.iter()
                .map(|(k, v)| format!("{} : {}", string(k), escape_everything(v)))
                .collect::<Vec<_>>()
                .join(",")
        ),
        other => other.to_string(),
    }
}

proptest! {
    #[test]
    fn agrees_with_serde_json_on_documents_it_writes(doc in document(), pretty in any::<bool>()) {
        let text = if pretty { serde_json::to_vec_pretty(&doc).unwrap() } else { serde_json::to_vec(&doc).unwrap() };
        for key in ["daemonSocketDir", "cniVersion", ""] {
            let expected = doc.get(key).and_then(Value::as_str).map(str::to_string);
            prop_assert_eq!(top_level_string(&text, key).unwrap(), expected);
        }
        let escaped = escape_everything(&doc);
        let expected = doc.get("daemonSocketDir").and_then(Value::as_str).map(str::to_string);
        prop_assert_eq!(top_level_string(escaped.as_bytes(), "daemonSocketDir").unwrap(), expected);
    }

    /// On any bytes: what this module reads, serde_json reads the same.
    #[test]
    fn never_reads_what_serde_json_would_not(
        doc in document(),
        cuts in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..4),
    ) {
        let mut bytes = serde_json::to_vec(&doc).unwrap();
        for (at, byte) in cuts {
            let at = at.index(bytes.len() + 1);
            match byte % 3 {
                0 => bytes.truncate(at),
                1 => bytes.insert(at, b"{}[],:\"\\u0aZ \x01"[usize::from(byte) % 15]),
                _ => if at < bytes.len() { bytes.remove(at); },
            }
        }
        if let Ok(value) = top_level_string(&bytes, "daemonSocketDir") {
            prop_assert_eq!(serde_view(&bytes, "daemonSocketDir"), Some(value), "{}", String::from_utf8_lossy(&bytes));
        }
    }
}
