//! Crash-safe file replacement: write under a temporary name in the same
//! directory, fsync, rename over the final name, fsync the directory. A
//! crash leaves either the old file or the new one, never a torn one.
//!
//! `write` does all of it for bytes in memory; `TempGuard` plus `replace`
//! for a file written piece by piece (an index build); the table writer,
//! which renames three files and then fsyncs their directory once, uses the
//! steps one by one.

use crate::error::{Error, Result};
use std::fs::File;
use std::io::{BufWriter, Write};
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

    /// A guard of a fresh temporary name beside `path` (see `temp_path`).
    pub fn beside(path: &Path) -> Self {
        TempGuard::new(temp_path(path))
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

/// Finishes a replacement: fsyncs `file` (written at the guard's
/// temporary name), renames it over `path` and fsyncs the directory.
pub fn replace(file: File, mut tmp: TempGuard, path: &Path) -> Result<()> {
    sync_file(&file, tmp.path())?;
    drop(file);
    rename(tmp.path(), path)?;
    tmp.disarm();
    sync_dir(parent_dir(path))
}

/// Writes `data` to a new file at `path` the crash-safe way.
pub fn write(path: &Path, data: &[u8]) -> Result<()> {
    let tmp = TempGuard::beside(path);
    let f = File::create(tmp.path()).map_err(|e| Error::io(tmp.path(), "create", e))?;
    let mut w = BufWriter::new(f);
    w.write_all(data)
        .map_err(|e| Error::io(tmp.path(), "write", e))?;
    let f = w
        .into_inner()
        .map_err(|e| Error::io(tmp.path(), "write", e.into_error()))?;
    replace(f, tmp, path)
}
