"""The exceptions kivi raises. Every one is a ``kivi.Error``."""

__all__ = [
    "Error",
    "ClosedError",
    "CorruptionError",
    "InvalidArgumentError",
    "NotAStoreError",
    "ReadOnlyError",
    "StorageError",
    "DiskFullError",
    "LockedError",
    "ConditionFailed",
]


class Error(Exception):
    """Base class of every error kivi raises."""


class ClosedError(Error):
    """The Db (or Table) was closed; so are its snapshots and iterators."""


class CorruptionError(Error):
    """Stored bytes failed validation (the message names the file and offset).
    Damaged data is never returned."""


class InvalidArgumentError(Error, ValueError):
    """A key, value or batch over the limits (``MAX_KEY_LEN``,
    ``MAX_VALUE_LEN``), or an invalid option."""


class NotAStoreError(Error):
    """The path is not a kivi store (a file, or a directory of other files)."""


class ReadOnlyError(Error):
    """A write to a store opened with ``read_only=True``."""


class StorageError(Error, OSError):
    """The storage failed (EIO, permissions, ...): ``errno`` and
    ``filename`` say which. A write that failed so was not applied."""


class DiskFullError(StorageError):
    """The media is full (ENOSPC). Nothing stored before is lost."""


class LockedError(StorageError):
    """The store is open in another process (its lock is held)."""


class ConditionFailed(Error):
    """A batch's condition did not hold, so nothing of it was applied;
    ``op`` is the index of the first operation whose condition failed."""

    op: int = -1
