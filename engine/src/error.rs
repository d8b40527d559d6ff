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
    /// A key longer than [`MAX_KEY_LEN`](crate::limits::MAX_KEY_LEN); nothing
    /// was written.
    #[error("key of {len} bytes is over the limit of {max} bytes")]
    KeyTooLarge {
        /// The key's length in bytes.
        len: usize,
        /// The limit in bytes.
        max: usize,
    },
    /// A value (or a compared value) longer than
    /// [`MAX_VALUE_LEN`](crate::limits::MAX_VALUE_LEN); nothing was written.
    #[error("value of {len} bytes is over the limit of {max} bytes")]
    ValueTooLarge {
        /// The value's length in bytes.
        len: usize,
        /// The limit in bytes.
        max: usize,
    },
    /// A batch whose keys and values would pass
    /// [`MAX_BATCH_BYTES`](crate::limits::MAX_BATCH_BYTES); the operation
    /// was not added.
    #[error("batch of {bytes} bytes is over the limit of {max} bytes")]
    BatchTooLarge {
        /// The batch's bytes with the refused operation.
        bytes: usize,
        /// The limit in bytes.
        max: usize,
    },
    /// The place opened holds no kivi store this build can open: files that
    /// are not one, a store of a format it does not read, or nothing where
    /// the store was not to be created. Nothing there was changed.
    #[error("{path} is not a kivi store: {reason}")]
    NotAStore {
        /// The directory (or storage) opened.
        path: String,
        /// What was found there instead.
        reason: String,
    },
    /// A write to a store opened read-only ([`Options::read_only`]).
    ///
    /// [`Options::read_only`]: crate::Options::read_only
    #[error("the store is open read-only")]
    ReadOnly,
    /// [`Db::promote`](crate::Db::promote) of a store opened for writing,
    /// which is the writer already.
    #[error("the store is open for writing already: only a follower takes over")]
    NotAFollower,
    /// An operation on a store that [`Db::close`](crate::Db::close) closed,
    /// through another clone of the handle.
    #[error("the store is closed")]
    Closed,
    /// An [`Options`](crate::Options) field out of its range; the message
    /// names it. The store was not opened.
    #[error("invalid option: {0}")]
    InvalidOption(String),
    /// A batch modifier met an operation it does not apply to (a deadline
    /// on a delete, say).
    #[error("invalid batch: {0}")]
    InvalidBatch(&'static str),
}

/// `std::result::Result` with kivi's [`Error`].
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
            Error::NotAFollower => Error::NotAFollower,
            Error::Closed => Error::Closed,
            Error::InvalidOption(s) => Error::InvalidOption(s.clone()),
            Error::InvalidBatch(s) => Error::InvalidBatch(s),
        }
    }
}
