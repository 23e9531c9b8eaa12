//! The weft image (Containerfile, scripts/build-image.sh): built offline with podman from
//! scratch and run. `weft --version` works in it (the binary and its shared libraries are all
//! there), and the DaemonSet's init command, exec form, installs the three plugins into a
//! mounted bin dir. Podman is confined to a temp dir (its own storage, run dir and
//! containers.conf, as in podman_runtime.rs), so nothing is left behind. The image carries the
//! debug binary the tests build (a release build here takes too long for a test); the script
//! builds a release binary by default.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use common::*;

/// Podman with its storage, run dir and configuration under `work`; drop removes its
/// containers, images and mounts.
struct Podman {
    work: PathBuf,
}

impl Podman {
    fn new(work: &Path) -> Self {
        for dir in ["storage", "run", "tmp"] {
            std::fs::create_dir_all(work.join(dir)).unwrap();
        }
        std::fs::write(
            work.join("containers.conf"),
            format!(
                // The sandbox's rlimits cannot be raised here (as in podman_runtime.rs).
                "[containers]\ndefault_ulimits = [\"nofile=4096:4096\", \"nproc=4096:4096\"]\n\
                 [engine]\ncgroup_manager = \"cgroupfs\"\nevents_logger = \"file\"\n\
                 events_logfile_path = \"{w}/events.log\"\ntmp_dir = \"{w}/tmp\"\n",
                w = work.display()
            ),
        )
        .unwrap();
        Self { work: work.into() }
    }

    /// podman's global options confining it to `work`.
    fn global(&self) -> Vec<String> {
        vec![
            "--root".into(),
            self.work.join("storage").display().to_string(),
            "--runroot".into(),
            self.work.join("run").display().to_string(),
            "--storage-driver".into(),
            "vfs".into(),
            "--runtime".into(),
            "runc".into(),
        ]
    }

    fn command(&self, program: &str) -> Command {
        let mut command = Command::new("timeout");
        command
            .arg("300")
            .arg(program)
            .env("CONTAINERS_CONF", self.work.join("containers.conf"))
            .env("TMPDIR", self.work.join("tmp"))
            .stdin(Stdio::null());
        command
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command("podman")
            .args(self.global())
            .args(args)
            .output()
            .expect("run podman")
    }
}

impl Drop for Podman {
    fn drop(&mut self) {
        let _ = self.run(&["rm", "-af", "-t0"]);
        let _ = self.run(&["rmi", "-af"]);
        let prefix = self.work.display().to_string();
        let mounts = std::fs::read_to_string("/proc/mounts").unwrap_or_default();
        let mut ours: Vec<&str> = mounts
            .lines()
            .filter_map(|line| line.split(' ').nth(1))
            .filter(|target| target.starts_with(&prefix))
            .collect();
        ours.sort_unstable_by(|a, b| b.cmp(a));
        for target in ours {
            let _ = Command::new("umount").args(["-l", target]).status();
        }
    }
}

fn prerequisites_or_skip(test: &str) -> bool {
    if !root_or_skip(test) {
        return false;
    }
    for tool in ["podman", "runc"] {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if !found {
            return weft_testing::skip(
                test,
                &format!("`{tool}` is not installed (scripts/install-deps.sh installs it)"),
            );
        }
    }
    true
}

#[test]
#[ignore = "needs root: scripts/test.sh runs it as root"]
fn the_image_builds_offline_runs_weft_and_installs_the_plugins() {
    if !prerequisites_or_skip("the_image_builds_offline_runs_weft_and_installs_the_plugins") {
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let podman = Podman::new(work.path());
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let weft = weft_bin();
    let built = podman
        .command("sh")
        .arg(repo.join("scripts/build-image.sh"))
        .args([
            "--binary",
            weft.to_str().unwrap(),
            "--tag",
            "localhost/weft-test:latest",
            "--",
        ])
        .args(podman.global())
        .output()
        .unwrap();
    assert!(built.status.success(), "build-image.sh: {}", text(&built));

    // Nothing but the binary and its libraries: no shell.
    let no_shell = podman.run(&[
        "run",
        "--rm",
        "--network=none",
        "--entrypoint",
        "/bin/sh",
        "localhost/weft-test:latest",
        "-c",
        "true",
    ]);
    assert!(
        !no_shell.status.success(),
        "the image has a shell: {}",
        text(&no_shell)
    );

    let version = podman.run(&[
        "run",
        "--rm",
        "--network=none",
        "localhost/weft-test:latest",
        "--version",
    ]);
    assert!(version.status.success(), "weft --version: {}", text(&version));
    assert_eq!(
        String::from_utf8_lossy(&version.stdout).trim(),
        format!("weft {}", env!("CARGO_PKG_VERSION"))
    );

    // The DaemonSet's init command, exec form, into mounted host dirs.
    let host = tempfile::tempdir().unwrap();
    let (bin, net_d, config) = (
        host.path().join("bin"),
        host.path().join("net.d"),
        host.path().join("config"),
    );
    for dir in [&bin, &net_d, &config] {
        std::fs::create_dir_all(dir).unwrap();
    }
    std::fs::write(config.join("00-weft.conflist"), br#"{"cniVersion":"1.0.0"}"#).unwrap();
    let mount = |dir: &Path, at: &str| format!("{}:{at}", dir.display());
    let install = podman.run(&[
        "run",
        "--rm",
        "--network=none",
        "-v",
        &mount(&bin, "/host/opt/cni/bin"),
        "-v",
        &mount(&net_d, "/host/etc/cni/net.d"),
        "-v",
        &mount(&config, "/etc/weft/cni:ro"),
        "localhost/weft-test:latest",
        "install-cni",
        "--bin-dir",
        "/host/opt/cni/bin",
        "--conflist",
        "/etc/weft/cni/00-weft.conflist",
        "--conf-dir",
        "/host/etc/cni/net.d",
    ]);
    assert!(install.status.success(), "install-cni: {}", text(&install));
    let mut installed: Vec<String> = std::fs::read_dir(&bin)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    installed.sort();
    assert_eq!(installed, ["passthru", "weft-cni", "weft-ipam"]);
    let full = std::fs::read(&weft).unwrap();
    assert!(
        std::fs::read(bin.join("passthru")).unwrap() == full,
        "passthru is the weft binary"
    );
    for name in ["weft-cni", "weft-ipam"] {
        let client = std::fs::read(bin.join(name)).unwrap();
        assert!(
            client.starts_with(b"\x7fELF") && client.len() < full.len() / 4,
            "{name} is a static client"
        );
    }
    assert_eq!(
        std::fs::read(net_d.join("00-weft.conflist")).unwrap(),
        br#"{"cniVersion":"1.0.0"}"#
    );
}
