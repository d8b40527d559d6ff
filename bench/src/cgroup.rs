//! Memory cgroups for `kivi bench --memory-limit`: each store runs in a
//! child process inside a cgroup of its own, so that everything the store
//! makes the kernel hold for it counts against one limit, the page cache
//! included, as in a container. Version 2 where the machine mounts it with
//! the memory controller, else version 1; either needs root.
//!
//! Written by hand rather than through a crate: what is needed is a
//! directory, three files written and three read (the `cgroups-rs` crate
//! wraps all of cgroups in several thousand lines).

use crate::BenchError;
use std::fs;
use std::path::PathBuf;

/// Which cgroup interface a cgroup belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Version {
    V1,
    V2,
}

/// One memory cgroup: its directory and its interface.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct MemoryCgroup {
    pub dir: PathBuf,
    pub version: Version,
}

fn err(what: String, e: std::io::Error) -> BenchError {
    BenchError(format!("{what}: {e}"))
}

/// Where the memory controller is mounted: a version 2 hierarchy that
/// offers it, else the version 1 `memory` hierarchy.
fn memory_mount() -> Option<(PathBuf, Version)> {
    let mounts = fs::read_to_string("/proc/mounts").ok()?;
    let mut v1 = None;
    for line in mounts.lines() {
        let fields: Vec<&str> = line.split_whitespace().collect();
        let [_, dir, fstype, options, ..] = fields[..] else {
            continue;
        };
        let dir = PathBuf::from(dir);
        match fstype {
            "cgroup2" => {
                let controllers =
                    fs::read_to_string(dir.join("cgroup.controllers")).unwrap_or_default();
                if controllers.split_whitespace().any(|c| c == "memory") {
                    return Some((dir, Version::V2));
                }
            }
            "cgroup" if options.split(',').any(|o| o == "memory") => {
                v1.get_or_insert((dir, Version::V1));
            }
            _ => {}
        }
    }
    v1
}

impl MemoryCgroup {
    /// Creates a cgroup called `name` at the top of the memory hierarchy
    /// (outside any cgroup this process is in, so no limit of ours applies
    /// on top), limited to `limit` bytes, swap excluded.
    pub fn create(name: &str, limit: u64) -> Result<MemoryCgroup, BenchError> {
        let (mount, version) = memory_mount().ok_or_else(|| {
            BenchError(
                "--memory-limit needs the cgroup memory controller, and this machine \
                 mounts none (no cgroup2 with \"memory\" in cgroup.controllers, no v1 \
                 \"memory\" hierarchy in /proc/mounts)"
                    .into(),
            )
        })?;
        if version == Version::V2 {
            // The controller must be enabled for the root's children; it
            // usually is, and writing it again is harmless.
            let _ = fs::write(mount.join("cgroup.subtree_control"), "+memory");
        }
        let dir = mount.join(name);
        match fs::create_dir(&dir) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
            Err(e) => {
                return Err(err(
                    format!(
                        "create the memory cgroup {} (--memory-limit needs root)",
                        dir.display()
                    ),
                    e,
                ))
            }
        }
        let cgroup = MemoryCgroup { dir, version };
        let (limit_file, swap_file) = match version {
            Version::V1 => ("memory.limit_in_bytes", "memory.memsw.limit_in_bytes"),
            Version::V2 => ("memory.max", "memory.swap.max"),
        };
        cgroup.write(limit_file, &limit.to_string())?;
        // No swap: v2 says so directly; v1 counts memory plus swap together,
        // so the same limit there leaves no room for swap. Machines without
        // swap accounting have neither file.
        let swap = match version {
            Version::V1 => limit.to_string(),
            Version::V2 => "0".to_string(),
        };
        let _ = fs::write(cgroup.dir.join(swap_file), swap);
        Ok(cgroup)
    }

    fn write(&self, file: &str, text: &str) -> Result<(), BenchError> {
        let path = self.dir.join(file);
        fs::write(&path, text).map_err(|e| err(format!("write {}", path.display()), e))
    }

    fn read_number(&self, file: &str) -> Option<u64> {
        fs::read_to_string(self.dir.join(file))
            .ok()?
            .trim()
            .parse()
            .ok()
    }

    /// Makes `cmd`'s process start inside this cgroup: it moves itself in
    /// between fork and exec, so everything it allocates from its first
    /// instruction counts here, and defaults it sizes from its cgroup's
    /// limit see this one.
    pub fn run_inside(&self, cmd: &mut std::process::Command) {
        use std::os::unix::process::CommandExt;
        let procs = std::ffi::CString::new(
            self.dir
                .join("cgroup.procs")
                .into_os_string()
                .into_encoded_bytes(),
        )
        .expect("cgroup paths hold no NUL");
        // SAFETY: the hook runs in the child between fork and exec, where
        // only async-signal-safe calls are allowed: it calls open, write and
        // close on a path made before the fork, and allocates nothing.
        // Writing "0" to cgroup.procs moves the writing process (v1 and v2).
        unsafe {
            cmd.pre_exec(move || {
                let fd = libc::open(procs.as_ptr(), libc::O_WRONLY | libc::O_CLOEXEC);
                if fd < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                let written = libc::write(fd, b"0".as_ptr().cast(), 1);
                let error = std::io::Error::last_os_error();
                libc::close(fd);
                if written != 1 {
                    return Err(error);
                }
                Ok(())
            });
        }
    }

    /// The most memory the cgroup has held (process memory and page cache)
    /// since it was made or since the last [`reset_peak`](Self::reset_peak).
    pub fn peak(&self) -> Option<u64> {
        match self.version {
            Version::V1 => self.read_number("memory.max_usage_in_bytes"),
            Version::V2 => self.read_number("memory.peak"),
        }
    }

    /// Starts a new peak. Version 2 kernels before 6.12 cannot: there the
    /// peak runs from the cgroup's creation.
    pub fn reset_peak(&self) {
        let file = match self.version {
            Version::V1 => "memory.max_usage_in_bytes",
            Version::V2 => "memory.peak",
        };
        let _ = fs::write(self.dir.join(file), "0");
    }

    /// How many processes the kernel killed here for want of memory.
    pub fn oom_kills(&self) -> u64 {
        let file = match self.version {
            Version::V1 => "memory.oom_control",
            Version::V2 => "memory.events",
        };
        fs::read_to_string(self.dir.join(file))
            .ok()
            .and_then(|text| {
                text.lines()
                    .find_map(|l| l.strip_prefix("oom_kill "))
                    .and_then(|v| v.trim().parse().ok())
            })
            .unwrap_or(0)
    }

    /// Removes the cgroup once its processes are gone (the kernel moves
    /// any page cache still charged to it to the parent).
    pub fn remove(&self) {
        for _ in 0..50 {
            if fs::remove_dir(&self.dir).is_ok() || !self.dir.exists() {
                return;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

/// Parses a size such as `2GiB`, `256MiB`, `512M`, `1g` or `1048576`
/// (bytes); the suffixes are powers of 1,024.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let digits = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (number, unit) = t.split_at(digits);
    let n: u64 = number
        .parse()
        .map_err(|_| format!("{s:?}: expected a size such as 2GiB, 256MiB or 1048576"))?;
    let shift = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return Err(format!("{s:?}: the unit must be KiB, MiB, GiB or TiB")),
    };
    n.checked_mul(1 << shift)
        .filter(|&b| b > 0)
        .ok_or_else(|| format!("{s:?}: out of range"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_in_powers_of_1024() {
        assert_eq!(parse_size("2GiB"), Ok(2 << 30));
        assert_eq!(parse_size("256MiB"), Ok(256 << 20));
        assert_eq!(parse_size("512m"), Ok(512 << 20));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert!(parse_size("2 parsecs").is_err());
        assert!(parse_size("0").is_err());
        assert!(parse_size("GiB").is_err());
        assert!(parse_size("99999999999TiB").is_err());
    }
}
