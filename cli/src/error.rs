//! What a command can end in, and the exit status each maps to.

use std::io;

/// Exit status of a command that failed (status 1 is only for a missing key).
pub const EXIT_ERROR: u8 = 2;
/// Exit status of `get` when the key is absent, so scripts can tell
/// "not there" from "something went wrong".
pub const EXIT_NOT_FOUND: u8 = 1;

#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// The store refused or failed; its message already says where and why.
    #[error(transparent)]
    Store(#[from] kivi::Error),
    /// A file or stream of the user's (not the store's) could not be used.
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: io::Error,
    },
    /// Bad input: invalid hex, a load line without a TAB, a bad directory.
    #[error("{0}")]
    Input(String),
    /// The benchmark read back something other than what it wrote.
    #[cfg(feature = "bench")]
    #[error("bench: {0}")]
    Bench(String),
    /// A write (`put`, `del`, `load`) is durable, but closing the store
    /// after it failed (its final checkpoint, say on a full disk): the
    /// message must not read as if the write had failed.
    #[error(
        "{done} durable, but closing the store failed: {source} (the next open replays the log)"
    )]
    ClosedAfterWrite { done: String, source: kivi::Error },
    /// `get` of a key that is not stored.
    #[error("key not found: {0}")]
    NotFound(String),
    /// `check` found problems; each was already printed on its own line.
    #[error("{dir}: {} found", plural(*count, "problem", "problems"))]
    Unhealthy { dir: String, count: u64 },
    /// Standard output was closed by its reader (`kivi scan | head`):
    /// nobody wants the rest, so stop quietly.
    #[error("standard output closed")]
    BrokenPipe,
}

pub type Result<T, E = CliError> = std::result::Result<T, E>;

impl CliError {
    pub fn io(what: impl Into<String>, source: io::Error) -> Self {
        CliError::Io {
            what: what.into(),
            source,
        }
    }

    /// The process exit status for this outcome.
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::NotFound(_) => EXIT_NOT_FOUND,
            CliError::BrokenPipe => 0,
            _ => EXIT_ERROR,
        }
    }
}

/// "1 problem", "2 problems".
pub fn plural(n: impl Into<u64>, one: &str, many: &str) -> String {
    let n = n.into();
    format!("{n} {}", if n == 1 { one } else { many })
}

/// Maps a failed write to standard output: a closed pipe is not an error.
pub fn stdout_error(e: io::Error) -> CliError {
    if e.kind() == io::ErrorKind::BrokenPipe {
        CliError::BrokenPipe
    } else {
        CliError::io("write to standard output", e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_close_after_a_durable_write_says_the_write_is_durable() {
        // `kivi put` on a nearly full disk: the put is synced, then the final
        // checkpoint runs out of space. The message must not read as if the
        // value had not been stored (tests/faults/full_disk.sh met it).
        let source = kivi::Error::Io(kivi::storage::IoError::new(
            "append to",
            "store/0000000551.seg",
            io::Error::from_raw_os_error(28),
        ));
        let e = CliError::ClosedAfterWrite {
            done: "the put of k is".into(),
            source,
        };
        let shown = e.to_string();
        assert!(
            shown.starts_with("the put of k is durable, but closing the store failed: append to"),
            "{shown}"
        );
        assert!(shown.contains("No space left on device"), "{shown}");
        assert_eq!(e.exit_code(), EXIT_ERROR);
    }
}
