//! Leak check: no test namespace may outlive the test process that created it. Every root test
//! names its namespaces after its process: `wt-host-<pid>-<n>` (weft-host's own tests) and
//! `wt-<tag><pid>-<n>` (weft-testing's `Netns`, used by every other crate). Namespaces of
//! processes still running (a parallel run) are not leaks. Nor may a process outlive its test:
//! one whose arguments or working directory lie in a test's temporary directory (tempfile's
//! `<tmp>/.tmpXXXXXX`: agents' state dirs, QEMU's disks, passt's and containerd's sockets, etcd's
//! data) after that directory is gone was left running by its test.
//!
//! `scripts/test.sh` runs this binary alone, after every other test has finished (nextest runs
//! test binaries in parallel, so no name order can make it last); in the main run it is
//! filtered out.

use std::path::{Path, PathBuf};

use weft_host::Netns;

/// The pid of the test process that named namespace `name`, when it is a test namespace.
fn creator_pid(name: &str) -> Option<u32> {
    let rest = name.strip_prefix("wt-")?;
    let (head, counter) = rest.rsplit_once('-')?;
    counter.parse::<u32>().ok()?;
    // `host-<pid>` or `<tag><pid>`: the pid is the run of digits at the end of `head`.
    let digits = head.len() - head.trim_end_matches(|c: char| c.is_ascii_digit()).len();
    if digits == 0 {
        return None;
    }
    head[head.len() - digits..].parse().ok()
}

#[test]
fn no_test_namespace_outlives_its_test_process() {
    let leaked: Vec<String> = Netns::list_named()
        .unwrap()
        .into_iter()
        .filter(|name| {
            creator_pid(name).is_some_and(|pid| !std::path::Path::new(&format!("/proc/{pid}")).exists())
        })
        .collect();
    assert!(leaked.is_empty(), "leaked test namespaces: {leaked:?}");
}

/// Every test temporary directory (`<tmp>/.tmpXXXXXX`) named in `arg`, wherever it appears
/// (`--state-dir=…`, QEMU's `file=…,if=virtio`).
fn test_dirs_in(arg: &str, tmp: &Path) -> Vec<PathBuf> {
    let prefix = format!("{}/.tmp", tmp.display());
    let mut found = Vec::new();
    let mut rest = arg;
    while let Some(at) = rest.find(&prefix) {
        let name: String = rest[at + tmp.as_os_str().len() + 1..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
            .collect();
        found.push(tmp.join(&name));
        rest = &rest[at + prefix.len()..];
    }
    found
}

/// This process and its ancestors (the test runner): never leaks.
fn ours() -> Vec<u32> {
    let mut pids = vec![std::process::id()];
    while let Some(parent) = std::fs::read_to_string(format!("/proc/{}/stat", pids[pids.len() - 1]))
        .ok()
        .and_then(|stat| {
            stat.rsplit_once(')')?
                .1
                .split_whitespace()
                .nth(1)?
                .parse::<u32>()
                .ok()
        })
        .filter(|&ppid| ppid > 1)
    {
        pids.push(parent);
    }
    pids
}

#[test]
fn no_process_outlives_its_test_directory() {
    let tmp = std::env::temp_dir();
    let ours = ours();
    let mut leaked = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
            continue;
        };
        if ours.contains(&pid) {
            continue;
        }
        // Gone meanwhile, or a kernel thread: nothing to read.
        let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let args: Vec<String> = cmdline
            .split(|&b| b == 0)
            .filter(|a| !a.is_empty())
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect();
        let cwd = std::fs::read_link(entry.path().join("cwd"))
            .map(|p| p.display().to_string())
            .unwrap_or_default();
        let gone = args
            .iter()
            .chain(std::iter::once(&cwd))
            .flat_map(|a| test_dirs_in(a, &tmp))
            .find(|dir| !dir.exists());
        if let Some(dir) = gone {
            leaked.push(format!("pid {pid} ({}): {}", dir.display(), args.join(" ")));
        }
    }
    assert!(
        leaked.is_empty(),
        "processes left running after their test's directory was removed:\n{}",
        leaked.join("\n")
    );
}

#[test]
fn test_directories_are_read_from_arguments() {
    let tmp = Path::new("/tmp");
    assert_eq!(
        test_dirs_in("--state-dir=/tmp/.tmpAb1_x/node", tmp),
        [PathBuf::from("/tmp/.tmpAb1_x")]
    );
    assert_eq!(
        test_dirs_in("file=/tmp/.tmpQ/disk.qcow2,if=virtio,file=/tmp/.tmpR", tmp),
        [PathBuf::from("/tmp/.tmpQ"), PathBuf::from("/tmp/.tmpR")]
    );
    assert_eq!(
        test_dirs_in("/tmp/.tmpQ (deleted)", tmp),
        [PathBuf::from("/tmp/.tmpQ")]
    );
    assert!(test_dirs_in("/tmp/other/.tmpQ", tmp).is_empty());
    assert!(test_dirs_in("/var/lib/weft", tmp).is_empty());
}

#[test]
fn creator_pid_is_read_from_the_name() {
    assert_eq!(creator_pid("wt-host-1234-7"), Some(1234));
    assert_eq!(creator_pid("wt-ak-node1234-0"), Some(1234));
    assert_eq!(creator_pid("wt-pod99-12"), Some(99));
    assert_eq!(creator_pid("wt-host-x-7"), None);
    assert_eq!(creator_pid("weft-node1"), None);
    assert_eq!(creator_pid("wt-br0"), None);
}
