use kivi_storage::{Corruption, IoError};
use std::io;

/// Everything that can go wrong, each with enough context to act on.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The storage failed (EIO, ENOSPC, permissions, ...). Nothing stored
    /// before is lost; a write that fails this way was not applied, though
    /// after a crash it may still appear whole (never in part).
    #[error(transparent)]
    Io(#[from] IoError),
    /// Stored bytes failed validation. Never returned as data.
    #[error(transparent)]
    Corrupt(#[from] Corruption),
    #[error("key of {len} bytes is over the limit of {max} bytes")]
    KeyTooLarge { len: usize, max: usize },
    #[error("value of {len} bytes is over the limit of {max} bytes")]
    ValueTooLarge { len: usize, max: usize },
    #[error("batch of {bytes} bytes is over the limit of {max} bytes")]
    BatchTooLarge { bytes: usize, max: usize },
    #[error("{path} is not a kivi store: {reason}")]
    NotAStore { path: String, reason: String },
    #[error("the store is open read-only")]
    ReadOnly,
    #[error("the store is closed")]
    Closed,
    #[error("invalid option: {0}")]
    InvalidOption(String),
    /// A batch modifier met an operation it does not apply to (a deadline
    /// on a delete, say).
    #[error("invalid batch: {0}")]
    InvalidBatch(&'static str),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl From<kivi_storage::Error> for Error {
    fn from(e: kivi_storage::Error) -> Self {
        match e {
            kivi_storage::Error::Io(e) => Error::Io(e),
            kivi_storage::Error::Corrupt(c) => Error::Corrupt(c),
        }
    }
}

impl Error {
    /// True when the media is full.
    pub fn is_full(&self) -> bool {
        matches!(self, Error::Io(e) if e.is_full())
    }

    /// True when stored bytes failed validation.
    pub fn is_corruption(&self) -> bool {
        matches!(self, Error::Corrupt(_))
    }

    /// A copy of this error (an I/O error keeps its kind and message), for
    /// reporting one failure to each of several callers, as to every writer
    /// of a group that failed together.
    pub fn duplicate(&self) -> Error {
        match self {
            Error::Io(e) => Error::Io(IoError::new(
                e.op,
                e.target.clone(),
                io::Error::new(e.kind(), e.source.to_string()),
            )),
            Error::Corrupt(c) => Error::Corrupt(c.clone()),
            Error::KeyTooLarge { len, max } => Error::KeyTooLarge {
                len: *len,
                max: *max,
            },
            Error::ValueTooLarge { len, max } => Error::ValueTooLarge {
                len: *len,
                max: *max,
            },
            Error::BatchTooLarge { bytes, max } => Error::BatchTooLarge {
                bytes: *bytes,
                max: *max,
            },
            Error::NotAStore { path, reason } => Error::NotAStore {
                path: path.clone(),
                reason: reason.clone(),
            },
            Error::ReadOnly => Error::ReadOnly,
            Error::Closed => Error::Closed,
            Error::InvalidOption(s) => Error::InvalidOption(s.clone()),
            Error::InvalidBatch(s) => Error::InvalidBatch(s),
        }
    }
}
