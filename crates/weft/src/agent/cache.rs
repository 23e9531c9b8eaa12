//! The per-container cache of what the meta-plugin attached (written before the first delegate
//! runs, updated after each), so that DEL undoes exactly that — even after an agent restart.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use weft_cni::CniResult;

/// Version of the cache format.
pub const CACHE_VERSION: u32 = 1;

/// One attached (or about to be attached) delegate.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CachedDelegate {
    /// Display name (`ns/nad`, or the cluster network's CNI name).
    pub name: String,
    /// The exact config the delegate got (lossless).
    pub config: String,
    /// Pod interface name.
    pub ifname: String,
    /// Whether this is the cluster network.
    pub master: bool,
    /// CNI_ARGS pairs.
    pub args: Vec<(String, String)>,
    /// Capability arguments.
    pub capability_args: Map<String, Value>,
    /// The ADD result once it succeeded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<CniResult>,
}

/// The cache of one container.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerCache {
    /// Format version.
    pub version: u32,
    /// Container id.
    pub container_id: String,
    /// Netns path at ADD.
    pub netns: String,
    /// Pod namespace/name/uid.
    pub pod: (String, String, String),
    /// Delegates in attach order.
    pub delegates: Vec<CachedDelegate>,
}

/// What reading a cache found.
#[derive(Debug)]
pub enum CacheRead {
    /// No cache for this container.
    Missing,
    /// A readable cache.
    Found(ContainerCache),
    /// A cache file that does not parse (e.g. torn by a crash): the reason.
    Corrupt(String),
}

fn path(dir: &Path, container_id: &str) -> PathBuf {
    dir.join(format!("{container_id}.json"))
}

/// Read the cache of a container.
pub fn read(dir: &Path, container_id: &str) -> CacheRead {
    match std::fs::read(path(dir, container_id)) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => CacheRead::Missing,
        Err(e) => CacheRead::Corrupt(e.to_string()),
        Ok(bytes) => match serde_json::from_slice::<ContainerCache>(&bytes) {
            Ok(cache) if cache.version == CACHE_VERSION => CacheRead::Found(cache),
            Ok(cache) => CacheRead::Corrupt(format!("unknown cache version {}", cache.version)),
            Err(e) => CacheRead::Corrupt(e.to_string()),
        },
    }
}

/// Write a container's cache atomically (temp file + rename, mode 0600).
pub fn write(dir: &Path, cache: &ContainerCache) -> std::io::Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::create_dir_all(dir)?;
    let target = path(dir, &cache.container_id);
    let tmp = target.with_extension("tmp");
    {
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(true)
            .write(true)
            .mode(0o600)
            .open(&tmp)?;
        std::io::Write::write_all(
            &mut file,
            &serde_json::to_vec(cache).map_err(std::io::Error::other)?,
        )?;
        file.sync_all()?;
    }
    std::fs::rename(tmp, target)
}

/// Remove a container's cache (absent is fine).
pub fn remove(dir: &Path, container_id: &str) -> std::io::Result<()> {
    match std::fs::remove_file(path(dir, container_id)) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_corruption_are_told_apart() {
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(read(dir.path(), "c1"), CacheRead::Missing));
        let cache = ContainerCache {
            version: CACHE_VERSION,
            container_id: "c1".into(),
            netns: "/run/netns/x".into(),
            pod: ("default".into(), "p".into(), "u".into()),
            delegates: vec![],
        };
        write(dir.path(), &cache).unwrap();
        assert!(matches!(read(dir.path(), "c1"), CacheRead::Found(c) if c == cache));
        std::fs::write(dir.path().join("c1.json"), b"{\"version\":1,\"contain").unwrap();
        assert!(matches!(read(dir.path(), "c1"), CacheRead::Corrupt(_)));
        remove(dir.path(), "c1").unwrap();
        remove(dir.path(), "c1").unwrap();
    }
}
