//! How much memory this process may use, for defaults that scale with the
//! machine (`Options::cache_bytes`).
//!
//! The physical memory (`sysconf`), lowered to the cgroup's limit when the
//! process runs in a container that has one (cgroup v2 `memory.max`, or v1
//! `memory.limit_in_bytes`): sizing a cache from the host's memory inside a
//! 2 GiB container is how processes get killed for running out of memory.

use std::path::Path;

/// The memory available to this process, in bytes; `None` if unknown.
pub fn available() -> Option<u64> {
    let physical = physical();
    let limit = cgroup_limit();
    match (physical, limit) {
        (Some(p), Some(l)) => Some(p.min(l)),
        (p, l) => p.or(l),
    }
}

/// The memory limit of the container this process runs in (its cgroup's,
/// or a parent cgroup's), when that is below the machine's memory; `None`
/// outside one.
pub fn container_limit() -> Option<u64> {
    let limit = cgroup_limit()?;
    match physical() {
        Some(p) if limit >= p => None,
        _ => Some(limit),
    }
}

fn physical() -> Option<u64> {
    // SAFETY: `sysconf` only reads the system's configuration; any name is
    // a valid argument, and an unknown one returns -1, handled below.
    let (pages, page_size) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    (pages > 0 && page_size > 0).then(|| (pages as u64).saturating_mul(page_size as u64))
}

/// The memory limit of this process's cgroup or of any cgroup above it,
/// if there is one.
fn cgroup_limit() -> Option<u64> {
    let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    cgroup_limit_in(&own, Path::new("/sys/fs/cgroup"))
}

/// `cgroup_limit` for a `/proc/self/cgroup` text and a cgroup mount point.
fn cgroup_limit_in(own: &str, mount: &Path) -> Option<u64> {
    let v1_memory = mount.join("memory");
    for line in own.lines() {
        // "0::/path" (v2) or "N:memory:/path" (v1).
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        let path = path.trim_start_matches('/');
        let (root, file) = if controllers.is_empty() {
            (mount, "memory.max")
        } else if controllers.split(',').any(|c| c == "memory") {
            (v1_memory.as_path(), "memory.limit_in_bytes")
        } else {
            continue;
        };
        // A limit set on an ancestor binds too: take the least on the way
        // up from this cgroup to the root.
        let mut dir = root.join(path);
        let mut least: Option<u64> = None;
        loop {
            if let Some(l) = limit_file(&dir.join(file)) {
                least = Some(least.map_or(l, |m| m.min(l)));
            }
            if dir == root || !dir.pop() {
                break;
            }
        }
        if least.is_some() {
            return least;
        }
    }
    None
}

/// A limit file's value: a number of bytes, or none ("max", or v1's
/// near-2^63 "no limit", or unreadable).
fn limit_file(path: &Path) -> Option<u64> {
    parse_limit(&std::fs::read_to_string(path).ok()?)
}

fn parse_limit(text: &str) -> Option<u64> {
    let v: u64 = text.trim().parse().ok()?;
    (v > 0 && v < 1 << 60).then_some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_parse_as_the_kernel_writes_them() {
        assert_eq!(parse_limit("2147483648\n"), Some(2 << 30));
        assert_eq!(parse_limit("max\n"), None);
        assert_eq!(parse_limit("9223372036854771712\n"), None, "v1: no limit");
        assert_eq!(parse_limit("0"), None);
    }

    #[test]
    fn the_least_limit_on_the_way_up_binds() {
        let mount = tempfile::tempdir().expect("temp dir");
        let m = mount.path();
        let write = |rel: &str, text: &str| {
            let p = m.join(rel);
            std::fs::create_dir_all(p.parent().expect("parent")).expect("mkdir");
            std::fs::write(p, text).expect("write");
        };
        // v2: the leaf says "max", its parent 1 GiB, the root nothing.
        write("a/memory.max", "1073741824\n");
        write("a/b/memory.max", "max\n");
        assert_eq!(cgroup_limit_in("0::/a/b\n", m), Some(1 << 30));
        // v1 memory controller, the leaf's own limit the lower one.
        write("memory/x/memory.limit_in_bytes", "9223372036854771712\n");
        write("memory/x/y/memory.limit_in_bytes", "536870912\n");
        assert_eq!(cgroup_limit_in("4:memory:/x/y\n0::/\n", m), Some(512 << 20));
        // No limit anywhere.
        assert_eq!(cgroup_limit_in("0::/d/e\n", m), None);
        assert_eq!(cgroup_limit_in("3:cpu:/z\n", m), None);
    }

    #[test]
    fn this_machine_has_some_memory() {
        let m = available().expect("sysconf answers on Linux");
        assert!(m >= 64 << 20, "{m} bytes");
    }
}
