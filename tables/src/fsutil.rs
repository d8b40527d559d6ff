//! Crash-safe file replacement: write under a temporary name in the same
//! directory, fsync, rename over the final name, fsync the directory. A
//! crash leaves either the old file or the new one, never a torn one.

use crate::error::{Error, Result};
use std::fs::File;
use std::path::{Path, PathBuf};

/// A temporary name beside `path`, unique to this process and call.
pub fn temp_path(path: &Path) -> PathBuf {
    let mut name = path
        .file_name()
        .map(|n| n.to_os_string())
        .unwrap_or_default();
    name.push(format!(
        ".tmp-{}-{:08x}",
        std::process::id(),
        rand::random::<u32>()
    ));
    path.with_file_name(name)
}

/// The directory holding `path` ("." for a bare file name).
pub fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

pub fn sync_file(f: &File, path: &Path) -> Result<()> {
    f.sync_all().map_err(|e| Error::io(path, "fsync", e))
}

pub fn sync_dir(dir: &Path) -> Result<()> {
    let d = File::open(dir).map_err(|e| Error::io(dir, "open directory", e))?;
    d.sync_all()
        .map_err(|e| Error::io(dir, "fsync directory", e))
}

/// Renames the (already fsync'd) `tmp` over `path`.
pub fn rename(tmp: &Path, path: &Path) -> Result<()> {
    std::fs::rename(tmp, path).map_err(|e| Error::io(path, "rename into place", e))
}

/// Removes `tmp` on drop unless disarmed: failed writes leave no litter.
pub struct TempGuard(pub Option<PathBuf>);

impl TempGuard {
    pub fn new(path: PathBuf) -> Self {
        TempGuard(Some(path))
    }

    pub fn path(&self) -> &Path {
        self.0.as_deref().expect("armed guard")
    }

    pub fn disarm(&mut self) {
        self.0 = None;
    }
}

impl Drop for TempGuard {
    fn drop(&mut self) {
        if let Some(p) = self.0.take() {
            let _ = std::fs::remove_file(p);
        }
    }
}
