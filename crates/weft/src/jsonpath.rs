//! kubectl's JSONPath templates (`-o jsonpath=...`): literal text with `{...}` actions, as
//! `k8s.io/client-go/util/jsonpath` reads them. The subset kubectl users write:
//! * paths: `.a.b`, `$`/`@`, `[0]`, `[-1]`, `[*]`, `.*`, `[1:3]`, `['a.b']`, escaped dots
//!   (`.metadata.annotations.k8s\.v1\.cni\.cncf\.io/networks`), recursive `..name`, filters
//!   `[?(@.a=="x")]` (`==`, `!=`, `<`, `<=`, `>`, `>=`, or a bare path for existence);
//! * `{range PATH}...{end}` (nestable), string literals `{"\n"}`, `{"\t"}`.
//!
//! The results of one action are joined by a space; strings print raw, everything else as
//! compact JSON. A path that names nothing prints nothing (kubectl's default
//! `--allow-missing-template-keys=true`). RFC 9535 JSONPath crates (jsonpath-rust) do not read
//! this template language (its `{}` actions, `range`/`end`, literals), hence this module.

use serde_json::Value;

/// A template that does not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JsonPathError {
    /// The template is malformed.
    #[error("error parsing jsonpath {template:?}: {message}")]
    Parse {
        /// The template as given.
        template: String,
        /// What is wrong.
        message: String,
    },
}

#[derive(Debug, Clone, PartialEq)]
enum Node {
    Text(String),
    Path(Vec<Segment>),
    Range(Vec<Segment>, Vec<Node>),
}

#[derive(Debug, Clone, PartialEq)]
enum Segment {
    /// `.name` or `['name']`.
    Field(String),
    /// `.*` or `[*]`.
    Wildcard,
    /// `..name` (or `..*`): the name at any depth.
    Recursive(Option<String>),
    /// `[n]`, negative from the end.
    Index(i64),
    /// `[start:end]`.
    Slice(Option<i64>, Option<i64>),
    /// `[?(@.path OP literal)]`, or `[?(@.path)]` (op `None`).
    Filter(Vec<Segment>, Option<(String, Value)>),
}

/// A parsed template.
#[derive(Debug, Clone, PartialEq)]
pub struct Template(Vec<Node>);

impl Template {
    /// Parse a template; `{...}` around the whole text is optional as in kubectl
    /// (`-o jsonpath=.metadata.name` works like `{.metadata.name}`).
    pub fn parse(template: &str) -> Result<Self, JsonPathError> {
        let error = |message: String| JsonPathError::Parse {
            template: template.into(),
            message,
        };
        let source = if template.contains('{') {
            template.to_string()
        } else {
            format!("{{{template}}}")
        };
        let mut stack: Vec<(Vec<Segment>, Vec<Node>)> = Vec::new();
        let mut nodes = Vec::new();
        let mut rest = source.as_str();
        while !rest.is_empty() {
            let Some(open) = rest.find('{') else {
                nodes.push(Node::Text(rest.into()));
                break;
            };
            if open > 0 {
                nodes.push(Node::Text(rest[..open].into()));
            }
            let close = action_end(&rest[open + 1..]).ok_or_else(|| error("unclosed action".into()))?;
            let action = rest[open + 1..open + 1 + close].trim();
            rest = &rest[open + 1 + close + 1..];
            if action == "end" {
                let (path, outer) = stack
                    .pop()
                    .ok_or_else(|| error("not in range, nothing to end".into()))?;
                let body = std::mem::replace(&mut nodes, outer);
                nodes.push(Node::Range(path, body));
            } else if let Some(path) = action.strip_prefix("range ") {
                let path = parse_path(path.trim()).map_err(error)?;
                stack.push((path, std::mem::take(&mut nodes)));
            } else if action.starts_with('"') {
                nodes.push(Node::Text(parse_string(action).map_err(error)?));
            } else {
                nodes.push(Node::Path(parse_path(action).map_err(error)?));
            }
        }
        if !stack.is_empty() {
            return Err(error("range without end".into()));
        }
        Ok(Self(nodes))
    }

    /// The template applied to `data`.
    pub fn render(&self, data: &Value) -> String {
        let mut out = String::new();
        render_nodes(&self.0, data, &mut out);
        out
    }
}

/// Index of the `}` closing an action (quotes may contain braces).
fn action_end(text: &str) -> Option<usize> {
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for (i, c) in text.char_indices() {
        match quote {
            Some(_) if escaped => escaped = false,
            Some(_) if c == '\\' => escaped = true,
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if c == '"' || c == '\'' => quote = Some(c),
            None if c == '}' => return Some(i),
            None => {}
        }
    }
    None
}

/// `"..."` with Go's common escapes.
fn parse_string(action: &str) -> Result<String, String> {
    let inner = action
        .strip_prefix('"')
        .and_then(|s| s.strip_suffix('"'))
        .ok_or_else(|| format!("unterminated string {action}"))?;
    let mut out = String::new();
    let mut chars = inner.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some('r') => out.push('\r'),
            Some(other) => out.push(other),
            None => return Err("trailing backslash in string".into()),
        }
    }
    Ok(out)
}

/// A path: optional `$`/`@`, then `.field`, `..field`, `[...]` segments.
fn parse_path(text: &str) -> Result<Vec<Segment>, String> {
    let chars: Vec<char> = text.chars().collect();
    let mut at = 0;
    if matches!(chars.first(), Some('$' | '@')) {
        at = 1;
    }
    let mut segments = Vec::new();
    while at < chars.len() {
        match chars[at] {
            '.' if chars.get(at + 1) == Some(&'.') => {
                at += 2;
                let name = field_name(&chars, &mut at);
                segments.push(Segment::Recursive((name != "*").then_some(name)));
            }
            '.' => {
                at += 1;
                let name = field_name(&chars, &mut at);
                match name.as_str() {
                    "" => {}
                    "*" => segments.push(Segment::Wildcard),
                    _ => segments.push(Segment::Field(name)),
                }
            }
            '[' => {
                let close = bracket_end(&chars, at).ok_or_else(|| format!("unclosed [ in {text}"))?;
                let inner: String = chars[at + 1..close].iter().collect();
                segments.push(parse_bracket(inner.trim())?);
                at = close + 1;
            }
            c => return Err(format!("unrecognized character {c:?} in {text:?}")),
        }
    }
    Ok(segments)
}

/// A field name after `.`: up to the next unescaped `.` or `[`; `\x` is `x`.
fn field_name(chars: &[char], at: &mut usize) -> String {
    let mut name = String::new();
    while let Some(&c) = chars.get(*at) {
        match c {
            '\\' if *at + 1 < chars.len() => {
                name.push(chars[*at + 1]);
                *at += 2;
            }
            '.' | '[' => break,
            c if c.is_whitespace() => break,
            _ => {
                name.push(c);
                *at += 1;
            }
        }
    }
    name
}

/// The `]` matching the `[` at `open` (quotes and nested brackets of filters skipped).
fn bracket_end(chars: &[char], open: usize) -> Option<usize> {
    let mut depth = 0;
    let mut quote: Option<char> = None;
    for (i, &c) in chars.iter().enumerate().skip(open) {
        match quote {
            Some(q) if c == q => quote = None,
            Some(_) => {}
            None if c == '"' || c == '\'' => quote = Some(c),
            None if c == '[' => depth += 1,
            None if c == ']' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            None => {}
        }
    }
    None
}

fn parse_bracket(inner: &str) -> Result<Segment, String> {
    if inner == "*" {
        return Ok(Segment::Wildcard);
    }
    if let Some(filter) = inner.strip_prefix('?') {
        return parse_filter(filter.trim());
    }
    if let Some(quoted) = inner
        .strip_prefix('\'')
        .and_then(|s| s.strip_suffix('\''))
        .or_else(|| inner.strip_prefix('"').and_then(|s| s.strip_suffix('"')))
    {
        return Ok(Segment::Field(quoted.into()));
    }
    let number = |s: &str| -> Result<Option<i64>, String> {
        let s = s.trim();
        if s.is_empty() {
            Ok(None)
        } else {
            s.parse()
                .map(Some)
                .map_err(|_| format!("invalid array index {s:?}"))
        }
    };
    match inner.split_once(':') {
        Some((start, end)) => {
            // A step (`[a:b:c]`) is rare in kubectl use; refused rather than misread.
            if end.contains(':') {
                return Err(format!("array slice steps are not supported: [{inner}]"));
            }
            Ok(Segment::Slice(number(start)?, number(end)?))
        }
        None => number(inner)?
            .map(Segment::Index)
            .ok_or_else(|| "empty [] in path".to_string()),
    }
}

/// `(@.path OP literal)` or `(@.path)`.
fn parse_filter(text: &str) -> Result<Segment, String> {
    let body = text
        .strip_prefix('(')
        .and_then(|s| s.strip_suffix(')'))
        .ok_or_else(|| format!("a filter is ?(...), not ?{text}"))?
        .trim();
    for op in ["==", "!=", "<=", ">=", "<", ">"] {
        if let Some((left, right)) = body.split_once(op) {
            let path = parse_path(left.trim())?;
            let right = right.trim();
            let literal = if let Some(s) = right
                .strip_prefix('"')
                .and_then(|s| s.strip_suffix('"'))
                .or_else(|| right.strip_prefix('\'').and_then(|s| s.strip_suffix('\'')))
            {
                Value::String(s.into())
            } else {
                serde_json::from_str(right).map_err(|_| format!("invalid filter literal {right:?}"))?
            };
            return Ok(Segment::Filter(path, Some((op.into(), literal))));
        }
    }
    Ok(Segment::Filter(parse_path(body)?, None))
}

fn render_nodes(nodes: &[Node], data: &Value, out: &mut String) {
    for node in nodes {
        match node {
            Node::Text(text) => out.push_str(text),
            Node::Path(path) => {
                let values = evaluate(path, data);
                let texts: Vec<String> = values.iter().map(|v| print(v)).collect();
                out.push_str(&texts.join(" "));
            }
            Node::Range(path, body) => {
                for value in evaluate(path, data) {
                    render_nodes(body, value, out);
                }
            }
        }
    }
}

fn print(value: &Value) -> String {
    match value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// Every value `path` names in `data`, in document order.
fn evaluate<'a>(path: &[Segment], data: &'a Value) -> Vec<&'a Value> {
    let mut current = vec![data];
    for segment in path {
        let mut next = Vec::new();
        for value in current {
            step(segment, value, &mut next);
        }
        current = next;
    }
    current
}

fn step<'a>(segment: &Segment, value: &'a Value, out: &mut Vec<&'a Value>) {
    match segment {
        Segment::Field(name) => {
            if let Some(v) = value.get(name.as_str()) {
                out.push(v);
            }
        }
        Segment::Wildcard => match value {
            Value::Array(items) => out.extend(items),
            Value::Object(map) => out.extend(map.values()),
            _ => {}
        },
        Segment::Recursive(name) => recurse(name.as_deref(), value, out),
        Segment::Index(index) => {
            if let Value::Array(items) = value {
                let len = items.len() as i64;
                let at = if *index < 0 { len + index } else { *index };
                if (0..len).contains(&at) {
                    out.push(&items[at as usize]);
                }
            }
        }
        Segment::Slice(start, end) => {
            if let Value::Array(items) = value {
                let len = items.len() as i64;
                let clamp = |i: i64| (if i < 0 { len + i } else { i }).clamp(0, len) as usize;
                let (from, to) = (clamp(start.unwrap_or(0)), clamp(end.unwrap_or(len)));
                if from < to {
                    out.extend(&items[from..to]);
                }
            }
        }
        Segment::Filter(path, test) => {
            let candidates: Vec<&Value> = match value {
                Value::Array(items) => items.iter().collect(),
                other => vec![other],
            };
            for candidate in candidates {
                let found = evaluate(path, candidate);
                let keep = match test {
                    // A `null` is as good as absent (an omitted optional field).
                    None => found.iter().any(|v| !v.is_null()),
                    Some((op, literal)) => found.iter().any(|v| compare(v, op, literal)),
                };
                if keep {
                    out.push(candidate);
                }
            }
        }
    }
}

fn recurse<'a>(name: Option<&str>, value: &'a Value, out: &mut Vec<&'a Value>) {
    let children: Vec<&Value> = match value {
        Value::Object(map) => {
            match name {
                Some(name) => out.extend(map.get(name)),
                None => out.extend(map.values()),
            }
            map.values().collect()
        }
        Value::Array(items) => {
            if name.is_none() {
                out.extend(items);
            }
            items.iter().collect()
        }
        _ => Vec::new(),
    };
    for child in children {
        recurse(name, child, out);
    }
}

fn compare(left: &Value, op: &str, right: &Value) -> bool {
    let ordering = match (left, right) {
        (Value::Number(a), Value::Number(b)) => a.as_f64().partial_cmp(&b.as_f64()),
        (Value::String(a), Value::String(b)) => Some(a.cmp(b)),
        _ => None,
    };
    match op {
        "==" => left == right,
        "!=" => left != right,
        "<" => ordering.is_some_and(|o| o.is_lt()),
        "<=" => ordering.is_some_and(|o| o.is_le()),
        ">" => ordering.is_some_and(|o| o.is_gt()),
        ">=" => ordering.is_some_and(|o| o.is_ge()),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn vmi(name: &str, ip: &str) -> Value {
        json!({
            "kind": "VirtualMachineInstance",
            "metadata": {"name": name, "annotations": {"k8s.v1.cni.cncf.io/networks": "[]"},
                         "labels": {"kubevirt.io/domain": name}},
            "status": {"phase": "Running", "interfaces": [
                {"name": "default", "ipAddress": ip, "ipAddresses": [ip, "fd00::5"]},
                {"name": "data", "ipAddress": "10.1.0.7"}
            ]}
        })
    }

    fn list() -> Value {
        json!({"kind": "List", "items": [vmi("vm1", "10.0.0.5"), vmi("vm2", "10.0.0.6")]})
    }

    fn render(template: &str, data: &Value) -> String {
        Template::parse(template).unwrap().render(data)
    }

    #[test]
    fn the_forms_kubectl_users_write() {
        let one = vmi("vm1", "10.0.0.5");
        assert_eq!(render("{.metadata.name}", &one), "vm1");
        assert_eq!(render(".metadata.name", &one), "vm1", "braces are optional");
        assert_eq!(render("{.status.interfaces[0].ipAddress}", &one), "10.0.0.5");
        assert_eq!(render("{.status.interfaces[-1].name}", &one), "data");
        assert_eq!(render("{.status.interfaces[*].name}", &one), "default data");
        assert_eq!(render("{.items[*].metadata.name}", &list()), "vm1 vm2");
        assert_eq!(
            render(r#"{range .items[*]}{.metadata.name}{"\n"}{end}"#, &list()),
            "vm1\nvm2\n"
        );
        assert_eq!(
            render(
                r#"{range .items[*]}{.metadata.name}{"\t"}{range .status.interfaces[*]}{.name}={.ipAddress} {end}{"\n"}{end}"#,
                &list()
            ),
            "vm1\tdefault=10.0.0.5 data=10.1.0.7 \nvm2\tdefault=10.0.0.6 data=10.1.0.7 \n"
        );
        assert_eq!(render("name: {.metadata.name}!", &one), "name: vm1!");
    }

    #[test]
    fn keys_with_dots_filters_slices_and_recursion() {
        let one = vmi("vm1", "10.0.0.5");
        assert_eq!(
            render(r"{.metadata.annotations.k8s\.v1\.cni\.cncf\.io/networks}", &one),
            "[]"
        );
        assert_eq!(render("{.metadata.labels['kubevirt.io/domain']}", &one), "vm1");
        assert_eq!(
            render(r#"{.status.interfaces[?(@.name=="data")].ipAddress}"#, &one),
            "10.1.0.7"
        );
        assert_eq!(
            render(r#"{.items[?(@.metadata.name!='vm1')].metadata.name}"#, &list()),
            "vm2"
        );
        assert_eq!(
            render("{.status.interfaces[?(@.ipAddresses)].name}", &one),
            "default"
        );
        assert_eq!(render("{.status.interfaces[0:1].name}", &one), "default");
        assert_eq!(render("{.status.interfaces[1:].name}", &one), "data");
        assert_eq!(render("{..ipAddress}", &one), "10.0.0.5 10.1.0.7");
        assert_eq!(
            render("{.status.interfaces[0].ipAddresses}", &one),
            r#"["10.0.0.5","fd00::5"]"#
        );
        assert_eq!(render("{.status.interfaces[0].ipAddresses[1]}", &one), "fd00::5");
    }

    #[test]
    fn missing_keys_print_nothing_and_bad_templates_are_refused() {
        let one = vmi("vm1", "10.0.0.5");
        assert_eq!(render("{.spec.nothing}", &one), "");
        assert_eq!(render("{.status.interfaces[7].name}", &one), "");
        for bad in [
            "{.metadata.name",
            "{range .items[*]}{.a}",
            "{end}",
            "{.a[x]}",
            "{.a[}",
            "{.a b}",
        ] {
            assert!(Template::parse(bad).is_err(), "{bad:?}");
        }
    }
}
