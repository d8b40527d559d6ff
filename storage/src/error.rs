use std::fmt;
use std::io;

/// An I/O call that failed, with what was being done and to which file.
#[derive(Debug, thiserror::Error)]
#[error("{op} {target}: {source}")]
pub struct IoError {
    /// What was being done (`"append to"`, `"fdatasync"`, `"open"`, ...).
    pub op: &'static str,
    /// The file or directory it was done to.
    pub target: String,
    /// The operating system's error.
    #[source]
    pub source: io::Error,
}

impl IoError {
    /// An error of `op` on `target`, caused by `source`.
    pub fn new(op: &'static str, target: impl Into<String>, source: io::Error) -> Self {
        IoError {
            op,
            target: target.into(),
            source,
        }
    }

    /// The kind of the operating system's error (`NotFound`,
    /// `StorageFull`, ...).
    pub fn kind(&self) -> io::ErrorKind {
        self.source.kind()
    }

    /// True when the media is full (ENOSPC or a quota).
    pub fn is_full(&self) -> bool {
        matches!(
            self.kind(),
            io::ErrorKind::StorageFull | io::ErrorKind::QuotaExceeded
        )
    }
}

/// Bytes that failed validation where valid data was promised: a checksum that
/// does not match, a length that runs past its container, a structure that
/// breaks an invariant. Always names where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Corruption {
    /// The segment (or meta blob) holding the bad bytes.
    pub file: String,
    /// Byte offset of the bad record or field inside `file`.
    pub offset: u64,
    /// What is wrong.
    pub what: String,
}

impl fmt::Display for Corruption {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "corruption in {} at offset {}: {}",
            self.file, self.offset, self.what
        )
    }
}

impl std::error::Error for Corruption {}

impl Corruption {
    /// Bad bytes in `file` at `offset`; `what` says what is wrong.
    pub fn new(file: impl Into<String>, offset: u64, what: impl Into<String>) -> Self {
        Corruption {
            file: file.into(),
            offset,
            what: what.into(),
        }
    }
}

/// What reading or writing durable bytes can end in: the media failed, or the
/// bytes it returned are not what was written.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The media (or the operating system) failed.
    #[error(transparent)]
    Io(#[from] IoError),
    /// Bytes read back failed validation.
    #[error(transparent)]
    Corrupt(#[from] Corruption),
}
