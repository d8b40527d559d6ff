//! Every way reading or writing a sealed table can fail. Damaged or hostile
//! files always end here (never in a panic), naming the file and the offset.

use std::io;
use std::path::PathBuf;

/// What reading, writing or verifying a sealed table can fail with.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The operating system refused an operation on a file.
    #[error("{}: {op}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What was being done (`"open"`, `"write"`, `"rename"`, ...).
        op: &'static str,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },
    /// A file's bytes break the format: a bad header field, an offset or
    /// length out of bounds, a block that does not decode, ...
    #[error("{}: corrupt at offset {offset}: {what}", path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// Byte offset of the bad field or entry in the file.
        offset: u64,
        /// What is wrong.
        what: String,
    },
    /// The index was built from another log (sparkey's "file identifier
    /// mismatch"), or one of the two identifiers is damaged.
    #[error("{}: file identifier mismatch: the log ({}) has {log:08x}, the index {index:08x}", path.display(), log_path.display())]
    IdentifierMismatch {
        /// The index file.
        path: PathBuf,
        /// The log file.
        log_path: PathBuf,
        /// The log's `file_identifier`.
        log: u32,
        /// The one the index names.
        index: u32,
    },
    /// A key, value or block larger than kivi accepts (see `limits`).
    #[error("{what} of {len} bytes is over the limit of {max}")]
    TooLarge {
        /// What is too large (`"key"`, `"value"`, `"block"`).
        what: &'static str,
        /// Its length in bytes.
        len: u64,
        /// The limit in bytes.
        max: u64,
    },
    /// A caller passed something unusable (a bad block size, ...).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
}

/// `std::result::Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>, op: &'static str, source: io::Error) -> Self {
        Error::Io {
            path: path.into(),
            op,
            source,
        }
    }

    pub(crate) fn corrupt(path: impl Into<PathBuf>, offset: u64, what: impl Into<String>) -> Self {
        Error::Corrupt {
            path: path.into(),
            offset,
            what: what.into(),
        }
    }
}
