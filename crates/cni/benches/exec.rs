//! Cost of running a plugin through `ProcessExec` (threads for the pipes, timeout watch, env
//! cleaning) against a bare `std::process::Command::output()` of the same binary, measured
//! interleaved in the same run. Run: `cargo bench -p weft-cni --bench exec`.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use weft_cni::runtime::exec::{PluginExec, ProcessExec};

const ROUNDS: usize = 300;

fn bare(binary: &Path, env: &[(String, String)], stdin: &[u8]) -> Vec<u8> {
    let mut child = Command::new(binary)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let _ = child.stdin.take().unwrap().write_all(stdin);
    child.wait_with_output().expect("wait").stdout
}

fn median(mut samples: Vec<Duration>) -> Duration {
    samples.sort();
    samples[samples.len() / 2]
}

fn main() {
    let binary = Path::new("/usr/lib/cni/bridge");
    if !binary.exists() {
        eprintln!("skipping: {} not installed", binary.display());
        return;
    }
    let env = vec![("CNI_COMMAND".to_string(), "VERSION".to_string())];
    let stdin = br#"{"cniVersion":"1.0.0"}"#;
    let exec = ProcessExec::default();
    let (mut ours, mut baseline) = (Vec::new(), Vec::new());
    for _ in 0..ROUNDS {
        let t = Instant::now();
        let out = bare(binary, &env, stdin);
        baseline.push(t.elapsed());
        assert!(!out.is_empty());
        let t = Instant::now();
        let out = exec.exec(binary, &env, stdin).expect("VERSION");
        ours.push(t.elapsed());
        assert!(!out.is_empty());
    }
    let (ours, baseline) = (median(ours), median(baseline));
    println!("bridge VERSION, median of {ROUNDS} interleaved runs");
    println!("  std Command::output : {baseline:?}");
    println!("  ProcessExec::exec   : {ours:?}");
    println!(
        "  ratio               : {:.3}",
        ours.as_secs_f64() / baseline.as_secs_f64()
    );
}
