//! A host binary in the guest image: the binary, the shared libraries it links (as the host's
//! dynamic loader resolves them, `ldd`) and the loader itself. qemu-guest-agent
//! ([`crate::agent`]) and dhcpcd ([`crate::dhcpcd`]) come in this way.
//!
//! Which files go in is decided purely from `ldd`'s output ([`parse_ldd`]) and which archive
//! entries they make by [`entries`]; [`binary_files`] only runs `ldd` and reads the files.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::initramfs::Entry;

/// Errors collecting a binary's files; each names the file or command.
#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    /// `ldd` could not be run or failed.
    #[error("ldd {binary}: {message}")]
    Ldd {
        /// The binary inspected.
        binary: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// A line of `ldd`'s output was not understood, or names a library that is not found.
    #[error("ldd {binary}: {line:?}: {message}")]
    LddLine {
        /// The binary inspected.
        binary: PathBuf,
        /// The offending line.
        line: String,
        /// Why it is rejected.
        message: &'static str,
    },
    /// A file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The underlying error.
        source: std::io::Error,
    },
}

/// A file to copy into the image: read from `source` (symlinks followed), stored as `path`
/// (absolute, as the guest's loader looks it up).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageFile {
    /// Path in the guest.
    pub path: PathBuf,
    /// Path on the host.
    pub source: PathBuf,
}

/// The files the binary's `ldd` output says it needs at run time: each `name => /path` and the
/// loader (`/lib64/ld-linux-x86-64.so.2`), in output order, without duplicates; the vDSO (no
/// file) is skipped. A library that is `not found` is an error, and so is a line of another
/// shape: the guest would not start the binary.
pub fn parse_ldd(binary: &Path, output: &str) -> Result<Vec<ImageFile>, BundleError> {
    let bad = |line: &str, message| BundleError::LddLine {
        binary: binary.to_path_buf(),
        line: line.to_string(),
        message,
    };
    let mut files: Vec<ImageFile> = Vec::new();
    for line in output.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let path = match line.split_once("=>") {
            Some((_, rest)) => {
                let rest = rest.trim();
                if rest.starts_with("not found") {
                    return Err(bad(line, "library not found"));
                }
                // `linux-vdso.so.1 =>  (0x…)` on some loaders: the vDSO has no file.
                match rest.split_whitespace().next() {
                    Some(path) if path.starts_with('/') => path,
                    _ if line.starts_with("linux-vdso") || line.starts_with("linux-gate") => continue,
                    _ => return Err(bad(line, "no library path")),
                }
            }
            None => match line.split_whitespace().next() {
                Some(path) if path.starts_with('/') => path,
                Some(name) if name.starts_with("linux-vdso") || name.starts_with("linux-gate") => {
                    continue;
                }
                Some("statically") => continue,
                _ => return Err(bad(line, "neither `name => path` nor a loader path")),
            },
        };
        let path = PathBuf::from(path);
        if !files.iter().any(|f| f.path == path) {
            files.push(ImageFile {
                source: path.clone(),
                path,
            });
        }
    }
    Ok(files)
}

/// The archive entries for `files` ((guest path, contents)): their parent directories that are
/// not in `existing` (parents first), then the files, mode 0755 (as Debian ships the loader and
/// libc: the kernel maps an ELF interpreter only if it is executable).
pub fn entries(existing: &[Entry], files: FileContents) -> Vec<Entry> {
    let mut dirs: Vec<String> = Vec::new();
    for (path, _) in &files {
        let mut parents: Vec<String> = path
            .ancestors()
            .skip(1)
            .filter_map(|p| p.to_str())
            .map(|p| p.trim_start_matches('/').to_string())
            .filter(|p| !p.is_empty())
            .collect();
        parents.reverse();
        for dir in parents {
            if !dirs.contains(&dir) && !existing.iter().any(|e| e.path == dir) {
                dirs.push(dir);
            }
        }
    }
    let mut entries: Vec<Entry> = dirs.iter().map(|d| Entry::dir(d)).collect();
    for (path, contents) in files {
        let name = path.to_string_lossy().trim_start_matches('/').to_string();
        // Two binaries share libc and the loader: each file goes in once.
        if existing.iter().chain(entries.iter()).any(|e| e.path == name) {
            continue;
        }
        entries.push(Entry::file(&name, 0o755, contents));
    }
    entries
}

/// Files read for the image: (path in the guest, contents).
pub type FileContents = Vec<(PathBuf, Vec<u8>)>;

/// The binary at `binary` (stored as `guest_path`) and what it needs, read from the host.
pub fn binary_files(binary: &Path, guest_path: &Path) -> Result<FileContents, BundleError> {
    let ldd_error = |message: String| BundleError::Ldd {
        binary: binary.to_path_buf(),
        message,
    };
    let output = Command::new("ldd")
        .arg(binary)
        .output()
        .map_err(|e| ldd_error(e.to_string()))?;
    if !output.status.success() {
        return Err(ldd_error(format!(
            "{}: {}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        )));
    }
    let mut wanted = vec![ImageFile {
        path: guest_path.into(),
        source: binary.into(),
    }];
    wanted.extend(parse_ldd(binary, &String::from_utf8_lossy(&output.stdout))?);
    wanted
        .into_iter()
        .map(|file| {
            let contents = std::fs::read(&file.source).map_err(|source| BundleError::Io {
                path: file.source.clone(),
                source,
            })?;
            Ok((file.path, contents))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `ldd /usr/sbin/qemu-ga` of Debian 12's qemu-guest-agent 1:7.2+dfsg-7+deb12u18.
    const LDD_QEMU_GA: &str = "\tlinux-vdso.so.1 (0x00007f35cc75f000)
\tlibudev.so.1 => /lib/x86_64-linux-gnu/libudev.so.1 (0x00007f35cc629000)
\tlibnuma.so.1 => /lib/x86_64-linux-gnu/libnuma.so.1 (0x00007f35cc61c000)
\tliburing.so.2 => /lib/x86_64-linux-gnu/liburing.so.2 (0x00007f35cc615000)
\tlibglib-2.0.so.0 => /lib/x86_64-linux-gnu/libglib-2.0.so.0 (0x00007f35cc4dd000)
\tlibgmodule-2.0.so.0 => /lib/x86_64-linux-gnu/libgmodule-2.0.so.0 (0x00007f35cc4d7000)
\tlibm.so.6 => /lib/x86_64-linux-gnu/libm.so.6 (0x00007f35cc3f5000)
\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f35cc213000)
\t/lib64/ld-linux-x86-64.so.2 (0x00007f35cc761000)
\tlibpcre2-8.so.0 => /lib/x86_64-linux-gnu/libpcre2-8.so.0 (0x00007f35cc179000)
";

    #[test]
    fn the_libraries_and_the_loader_of_qemu_ga() {
        let files = parse_ldd(Path::new("/usr/sbin/qemu-ga"), LDD_QEMU_GA).unwrap();
        let paths: Vec<&str> = files.iter().map(|f| f.path.to_str().unwrap()).collect();
        assert_eq!(
            paths,
            [
                "/lib/x86_64-linux-gnu/libudev.so.1",
                "/lib/x86_64-linux-gnu/libnuma.so.1",
                "/lib/x86_64-linux-gnu/liburing.so.2",
                "/lib/x86_64-linux-gnu/libglib-2.0.so.0",
                "/lib/x86_64-linux-gnu/libgmodule-2.0.so.0",
                "/lib/x86_64-linux-gnu/libm.so.6",
                "/lib/x86_64-linux-gnu/libc.so.6",
                "/lib64/ld-linux-x86-64.so.2",
                "/lib/x86_64-linux-gnu/libpcre2-8.so.0",
            ]
        );
        assert!(files.iter().all(|f| f.path == f.source));
    }

    #[test]
    fn a_missing_library_or_an_odd_line_is_an_error() {
        let missing = "\tlibfoo.so.1 => not found\n";
        let error = parse_ldd(Path::new("/x"), missing).unwrap_err();
        assert!(error.to_string().contains("libfoo.so.1"), "{error}");
        assert!(parse_ldd(Path::new("/x"), "garbage here\n").is_err());
        assert!(
            parse_ldd(Path::new("/x"), "\tstatically linked\n")
                .unwrap()
                .is_empty()
        );
        let twice = "\tlibc.so.6 => /lib/libc.so.6 (0x1)\n\tlibc.so.6 => /lib/libc.so.6 (0x1)\n";
        assert_eq!(parse_ldd(Path::new("/x"), twice).unwrap().len(), 1);
    }

    #[test]
    fn entries_create_missing_parents_first() {
        let existing = vec![Entry::dir("lib")];
        let entries = entries(
            &existing,
            vec![
                ("/usr/sbin/qemu-ga".into(), b"ga".to_vec()),
                ("/lib/x86_64-linux-gnu/libc.so.6".into(), b"c".to_vec()),
                ("/lib64/ld-linux-x86-64.so.2".into(), b"ld".to_vec()),
            ],
        );
        let paths: Vec<&str> = entries.iter().map(|e| e.path.as_str()).collect();
        assert_eq!(
            paths,
            [
                "usr",
                "usr/sbin",
                "lib/x86_64-linux-gnu",
                "lib64",
                "usr/sbin/qemu-ga",
                "lib/x86_64-linux-gnu/libc.so.6",
                "lib64/ld-linux-x86-64.so.2"
            ]
        );
        assert_eq!(entries[4].mode(), 0o100755);
        assert_eq!(entries[6].mode(), 0o100755);
    }
}
