//! Every way reading or writing a sealed table can fail. Damaged or hostile
//! files always end here (never in a panic), naming the file and the offset.

use std::io;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The operating system refused an operation on a file.
    #[error("{}: {op}: {source}", path.display())]
    Io {
        path: PathBuf,
        op: &'static str,
        #[source]
        source: io::Error,
    },
    /// A file's bytes break the format: a bad header field, an offset or
    /// length out of bounds, a block that does not decode, ...
    #[error("{}: corrupt at offset {offset}: {what}", path.display())]
    Corrupt {
        path: PathBuf,
        offset: u64,
        what: String,
    },
    /// The index was built from another log (sparkey's "file identifier mismatch").
    #[error("{}: file identifier mismatch: the log has {log:08x}, the index {index:08x}", path.display())]
    IdentifierMismatch { path: PathBuf, log: u32, index: u32 },
    /// A key, value or block larger than kivi accepts (see `limits`).
    #[error("{what} of {len} bytes is over the limit of {max}")]
    TooLarge {
        what: &'static str,
        len: u64,
        max: u64,
    },
    /// A caller passed something unusable (a bad block size, ...).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
}

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
