//! The crate map of `weft` has no import circles (issue 12, item 1): read every module's
//! `crate::…` and `super::…` paths from the sources and look for a cycle, at the top level
//! (`agent`, `cli`, `controller`, `local`, …) and between single modules (files). A module and
//! its own submodules are one unit (a submodule naturally uses its parent's items), so only
//! references between modules where neither contains the other count. Test code (`tests.rs`,
//! whatever follows `#[cfg(test)]`) may import anything and is left out.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Module = Vec<String>;

fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("read src") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `src/agent/local/kubelet.rs` → `[agent, local, kubelet]`; `mod.rs`/`lib.rs`/`main.rs` name
/// their directory.
fn module_of(src: &Path, file: &Path) -> Module {
    let rel = file.strip_prefix(src).expect("under src").with_extension("");
    let mut parts: Module = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    if matches!(parts.last().map(String::as_str), Some("mod" | "lib" | "main")) {
        parts.pop();
    }
    parts
}

/// The code of a file without comments and without its test module.
fn code(text: &str) -> String {
    let text = text.split("#[cfg(test)]").next().unwrap_or_default();
    text.lines()
        .map(|line| match line.find("//") {
            Some(i) => &line[..i],
            None => line,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The paths after every `prefix` (`crate::`, `super::`) in `code`, as segments; a `use` list
/// (`a::{b, c::d}`) gives one path per entry.
fn paths_after(code: &str, prefix: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find(prefix) {
        let before = rest[..i].chars().next_back();
        rest = &rest[i + prefix.len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let path: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
            .collect();
        let segments = split(&path);
        if segments.is_empty() {
            continue;
        }
        match rest[path.len()..].strip_prefix('{') {
            // One level of a `use` list (nested lists name their head only).
            Some(list) => {
                let list = list.split('}').next().unwrap_or_default();
                for entry in list.split(',') {
                    let entry: String = entry
                        .trim()
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                        .collect();
                    let mut full = segments.clone();
                    full.extend(split(&entry).into_iter().filter(|s| s != "self"));
                    out.push(full);
                }
            }
            None => out.push(segments),
        }
    }
    out
}

fn split(path: &str) -> Vec<String> {
    path.split("::")
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

fn is_within(inner: &[String], outer: &[String]) -> bool {
    inner.len() >= outer.len() && inner[..outer.len()] == *outer
}

/// Module → the modules it imports from, each cut to `depth` segments.
fn graph(depth: usize) -> BTreeMap<Module, BTreeSet<Module>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    sources(&src, &mut files);
    let modules: BTreeSet<Module> = files.iter().map(|f| module_of(&src, f)).collect();
    let mut graph: BTreeMap<Module, BTreeSet<Module>> = BTreeMap::new();
    for file in &files {
        if file.file_name().is_some_and(|n| n == "tests.rs") {
            continue;
        }
        let module = module_of(&src, file);
        let text = code(&std::fs::read_to_string(file).expect("read source"));
        // `super::` from `a/b.rs` (module a::b) names a's items; from `a/mod.rs` (module a), the
        // crate's.
        let parent: Module = module[..module.len().saturating_sub(1)].to_vec();
        let mut targets = paths_after(&text, "crate::");
        targets.extend(paths_after(&text, "super::").into_iter().map(|p| {
            let mut full = parent.clone();
            full.extend(p);
            full
        }));
        let from: Module = module.iter().take(depth).cloned().collect();
        for target in targets {
            // The longest module the path names (the rest are items).
            let Some(found) = (1..=target.len())
                .rev()
                .map(|n| target[..n].to_vec())
                .find(|m| modules.contains(m))
            else {
                continue;
            };
            let to: Module = found.into_iter().take(depth).collect();
            if is_within(&to, &from) || is_within(&from, &to) {
                continue;
            }
            graph.entry(from.clone()).or_default().insert(to);
        }
    }
    graph
}

/// One cycle of `graph`, if any (depth-first search, grey/black marking).
fn find_cycle(graph: &BTreeMap<Module, BTreeSet<Module>>) -> Option<Vec<Module>> {
    fn visit(
        node: &Module,
        graph: &BTreeMap<Module, BTreeSet<Module>>,
        done: &mut BTreeSet<Module>,
        stack: &mut Vec<Module>,
    ) -> Option<Vec<Module>> {
        if let Some(at) = stack.iter().position(|m| m == node) {
            let mut cycle = stack[at..].to_vec();
            cycle.push(node.clone());
            return Some(cycle);
        }
        if done.contains(node) {
            return None;
        }
        stack.push(node.clone());
        for next in graph.get(node).into_iter().flatten() {
            if let Some(cycle) = visit(next, graph, done, stack) {
                return Some(cycle);
            }
        }
        stack.pop();
        done.insert(node.clone());
        None
    }
    let mut done = BTreeSet::new();
    graph
        .keys()
        .find_map(|node| visit(node, graph, &mut done, &mut Vec::new()))
}

fn show(cycle: &[Module]) -> String {
    cycle
        .iter()
        .map(|m| m.join("::"))
        .collect::<Vec<_>>()
        .join(" -> ")
}

#[test]
fn the_top_level_modules_import_each_other_in_no_circle() {
    let graph = graph(1);
    // The reader sees the crate: the CLI sits on top and reaches the roles, not the reverse.
    assert!(
        graph
            .get(&vec!["cli".to_string()])
            .is_some_and(|to| to.contains(&vec!["local".to_string()])),
        "the reader found no edge cli -> local: {graph:?}"
    );
    if let Some(cycle) = find_cycle(&graph) {
        panic!("import circle between top-level modules: {}", show(&cycle));
    }
}

#[test]
fn no_two_modules_import_each_other_in_a_circle() {
    let graph = graph(usize::MAX);
    assert!(
        graph
            .get(["agent", "local", "kubelet"].map(String::from).as_slice())
            .is_some_and(|to| to.contains(&["agent", "local", "launcher"].map(String::from).to_vec())),
        "the reader found no edge agent::local::kubelet -> agent::local::launcher: {graph:?}"
    );
    if let Some(cycle) = find_cycle(&graph) {
        panic!("import circle between modules: {}", show(&cycle));
    }
}

#[test]
fn the_reader_finds_a_circle_it_is_shown() {
    // The check itself: a circle made of two modules is found.
    let (a, b) = (vec!["a".to_string()], vec!["b".to_string()]);
    let graph = BTreeMap::from([
        (a.clone(), BTreeSet::from([b.clone()])),
        (b.clone(), BTreeSet::from([a.clone()])),
    ]);
    assert_eq!(
        find_cycle(&graph).map(|c| show(&c)),
        Some("a -> b -> a".to_string())
    );
    // And the paths of a `use` list are read up to the list.
    assert_eq!(
        paths_after(
            "use crate::agent::local::{self, nic::DomainNic, pods};",
            "crate::"
        ),
        [
            vec!["agent", "local"],
            vec!["agent", "local", "nic", "DomainNic"],
            vec!["agent", "local", "pods"]
        ]
        .map(|p| p.into_iter().map(String::from).collect::<Vec<_>>())
        .to_vec()
    );
    assert!(paths_after("let x = notcrate::a;", "crate::").is_empty());
}
