//! Thick-mode configuration on the node: the daemon config overlaid on every request, the
//! readiness indicator, and the auto-generated `00-weft.conflist` that makes the runtime call
//! weft first (from the primary network's config, keeping every field of it).

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::Context;
use serde_json::{Map, Value};
use weft_meta::install::{PrimaryReference, WEFT_CONFLIST_NAME, find_primary_config, generate_weft_conflist};
use weft_netconf::DelegateConfig;

/// How long ADD/STATUS/GC wait for the readiness indicator file (Multus: 45 s, 1 s polls).
pub const READINESS_WAIT: Duration = Duration::from_secs(45);

/// The daemon config (`--config`): every key is overlaid on each request's config.
pub fn load_daemon_config(path: Option<&Path>) -> anyhow::Result<Map<String, Value>> {
    let Some(path) = path else { return Ok(Map::new()) };
    let bytes = std::fs::read(path).with_context(|| format!("read {}", path.display()))?;
    match serde_json::from_slice(&bytes).with_context(|| format!("{}: not valid JSON", path.display()))? {
        Value::Object(map) => Ok(map),
        _ => anyhow::bail!("{}: the daemon config must be a JSON object", path.display()),
    }
}

/// Wait until `path` exists (polling every 200 ms, up to `timeout`; each look on the blocking
/// pool).
pub async fn wait_for_readiness(path: &str, timeout: Duration) -> Result<(), String> {
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        let file = path.to_string();
        if crate::sys::blocking(move || Path::new(&file).exists())
            .await
            .map_err(|e| format!("{e:#}"))?
        {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(format!(
                "have you checked that your default network is ready? still waiting for readinessindicatorfile @ {path}"
            ));
        }
        tokio::time::sleep(Duration::from_millis(200).min(deadline - tokio::time::Instant::now())).await;
    }
}

/// The regular files of `dir`, `(file name, contents)`, sorted by name; unreadable entries skipped.
pub fn read_dir_files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(dir)
        .map(|entries| {
            entries
                .flatten()
                .filter(|e| e.path().is_file())
                .filter_map(|e| Some((e.file_name().into_string().ok()?, std::fs::read(e.path()).ok()?)))
                .collect()
        })
        .unwrap_or_default();
    files.sort();
    files
}

/// The `00-weft.conflist` for the primary config found in `autoconfig_dir` (`None` while there
/// is none), with the daemon config's generator keys.
pub fn generated_conflist(
    autoconfig_dir: &Path,
    daemon: &Map<String, Value>,
) -> anyhow::Result<Option<String>> {
    let files = read_dir_files(autoconfig_dir);
    let Some((file, bytes)) = find_primary_config(&files) else {
        return Ok(None);
    };
    let path = autoconfig_dir.join(file);
    let primary = DelegateConfig::parse(String::from_utf8_lossy(bytes).into_owned())
        .with_context(|| format!("primary network config {}", path.display()))?;
    Ok(Some(generate_weft_conflist(
        daemon,
        &path.display().to_string(),
        &primary,
        PrimaryReference::Path,
    )))
}

/// Write the generated conflist into `conf_dir` when it changed (atomically). Returns the path
/// written, if any.
pub fn write_generated(
    conf_dir: &Path,
    autoconfig_dir: &Path,
    daemon: &Map<String, Value>,
) -> anyhow::Result<Option<PathBuf>> {
    let Some(text) = generated_conflist(autoconfig_dir, daemon)? else {
        return Ok(None);
    };
    let target = conf_dir.join(WEFT_CONFLIST_NAME);
    if std::fs::read_to_string(&target).is_ok_and(|current| current == text) {
        return Ok(None);
    }
    std::fs::create_dir_all(conf_dir)?;
    let tmp = conf_dir.join(format!(".{WEFT_CONFLIST_NAME}.tmp"));
    std::fs::write(&tmp, &text)?;
    std::fs::rename(&tmp, &target)?;
    Ok(Some(target))
}

/// Keep `00-weft.conflist` in step with the primary config (1 s polls, each on the blocking
/// pool) until `stop`.
pub async fn keep_generated(
    conf_dir: PathBuf,
    autoconfig_dir: PathBuf,
    daemon: Map<String, Value>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) {
    let inputs = std::sync::Arc::new((conf_dir, autoconfig_dir, daemon));
    loop {
        let step = inputs.clone();
        let written = crate::sys::blocking(move || {
            let (conf_dir, autoconfig_dir, daemon) = &*step;
            write_generated(conf_dir, autoconfig_dir, daemon)
        })
        .await
        .and_then(|written| written);
        match written {
            Ok(Some(path)) => tracing::info!(path = %path.display(), "wrote the meta-plugin conflist"),
            Ok(None) => {}
            Err(e) => tracing::warn!("cannot generate the meta-plugin conflist: {e:#}"),
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_secs(1)) => {}
            _ = stop.changed() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_primary_config_is_wrapped_and_kept_whole() {
        let dir = tempfile::tempdir().unwrap();
        let primary = r#"{"cniVersion":"1.0.0","name":"k8s-pod-network","plugins":[{"type":"calico","kubernetes":{"kubeconfig":"/etc/cni/net.d/calico-kubeconfig"},"capabilities":{"portMappings":true}}]}"#;
        std::fs::write(dir.path().join("10-calico.conflist"), primary).unwrap();
        std::fs::write(
            dir.path().join("99-other.conf"),
            r#"{"cniVersion":"1.0.0","name":"x","type":"ptp"}"#,
        )
        .unwrap();
        let mut daemon = Map::new();
        daemon.insert("daemonSocketDir".into(), Value::from("/run/weft"));
        let written = write_generated(dir.path(), dir.path(), &daemon)
            .unwrap()
            .expect("written");
        let conflist: Value = serde_json::from_slice(&std::fs::read(&written).unwrap()).unwrap();
        let plugin = &conflist["plugins"][0];
        assert_eq!(plugin["type"], "weft-cni");
        assert_eq!(
            plugin["clusterNetwork"],
            dir.path().join("10-calico.conflist").display().to_string()
        );
        assert_eq!(plugin["capabilities"]["portMappings"], true);
        assert_eq!(plugin["daemonSocketDir"], "/run/weft");
        assert!(
            write_generated(dir.path(), dir.path(), &daemon)
                .unwrap()
                .is_none(),
            "unchanged: not rewritten"
        );
    }

    #[tokio::test]
    async fn readiness_waits_for_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("ready");
        let path = file.display().to_string();
        assert!(
            wait_for_readiness(&path, Duration::from_millis(300))
                .await
                .is_err()
        );
        let writer = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            std::fs::write(file, "").unwrap();
        });
        wait_for_readiness(&path, Duration::from_secs(5)).await.unwrap();
        writer.await.unwrap();
    }
}
