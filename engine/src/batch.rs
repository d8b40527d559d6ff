//! Write batches: puts, deletes and conditional writes applied atomically.

use crate::error::{Error, Result};
use crate::expiry::{Deadline, Millis};
use crate::limits::{MAX_BATCH_BYTES, MAX_KEY_LEN, MAX_VALUE_LEN};
use kivi_log::NO_DEADLINE;

/// One operation. A written value carries its `deadline` (`NO_DEADLINE`:
/// none). An expired value counts as absent to every condition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum BatchOp {
    Put {
        key: Vec<u8>,
        value: Vec<u8>,
        deadline: Millis,
    },
    Delete {
        key: Vec<u8>,
    },
    /// Put only if the key is absent.
    InsertIfAbsent {
        key: Vec<u8>,
        value: Vec<u8>,
        deadline: Millis,
    },
    /// Put only if the key is present.
    UpdateIfPresent {
        key: Vec<u8>,
        value: Vec<u8>,
        deadline: Millis,
    },
    /// Put only if the current value equals `expected` (and, if
    /// `expected_deadline` is set, its deadline equals that one).
    CompareAndSwap {
        key: Vec<u8>,
        expected: Vec<u8>,
        expected_deadline: Option<Millis>,
        value: Vec<u8>,
        deadline: Millis,
    },
    /// Delete only if the current value equals `expected` (and, if
    /// `expected_deadline` is set, its deadline equals that one).
    CompareAndDelete {
        key: Vec<u8>,
        expected: Vec<u8>,
        expected_deadline: Option<Millis>,
    },
    /// Delete if the key still holds a value with this deadline, and it has
    /// passed; otherwise do nothing (never a failed condition). The
    /// background's reclaiming of expired keys (reclaim.rs).
    Reclaim {
        key: Vec<u8>,
        deadline: Millis,
    },
    /// Delete every key (`Db::clear`); always alone in its batch.
    Clear,
}

impl BatchOp {
    pub(crate) fn key(&self) -> &[u8] {
        match self {
            BatchOp::Put { key, .. }
            | BatchOp::Delete { key }
            | BatchOp::InsertIfAbsent { key, .. }
            | BatchOp::UpdateIfPresent { key, .. }
            | BatchOp::CompareAndSwap { key, .. }
            | BatchOp::CompareAndDelete { key, .. }
            | BatchOp::Reclaim { key, .. } => key,
            BatchOp::Clear => &[],
        }
    }

    pub(crate) fn is_conditional(&self) -> bool {
        !matches!(
            self,
            BatchOp::Put { .. } | BatchOp::Delete { .. } | BatchOp::Clear
        )
    }
}

/// A group of writes applied all together or not at all.
///
/// Operations apply in the order they were added; a later write to a key
/// overrides an earlier one. Conditional operations see the effect of the
/// earlier operations of the same batch. If any condition does not hold, the
/// batch changes nothing and [`crate::WriteOutcome::ConditionFailed`] names
/// the first operation whose condition failed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriteBatch {
    pub(crate) ops: Vec<BatchOp>,
    pub(crate) bytes: usize,
    pub(crate) conditional: bool,
}

fn check_key(key: &[u8]) -> Result<()> {
    if key.len() > MAX_KEY_LEN {
        return Err(Error::KeyTooLarge {
            len: key.len(),
            max: MAX_KEY_LEN,
        });
    }
    Ok(())
}

fn check_value(value: &[u8]) -> Result<()> {
    if value.len() > MAX_VALUE_LEN {
        return Err(Error::ValueTooLarge {
            len: value.len(),
            max: MAX_VALUE_LEN,
        });
    }
    Ok(())
}

impl WriteBatch {
    /// An empty batch. Writing an empty batch commits nothing and returns
    /// [`WriteOutcome::Applied`](crate::WriteOutcome::Applied).
    pub fn new() -> Self {
        Self::default()
    }

    /// The number of operations added so far.
    pub fn len(&self) -> usize {
        self.ops.len()
    }

    /// Whether no operation has been added.
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }

    /// Bytes of keys and values in the batch (expected values of conditions
    /// included), which [`MAX_BATCH_BYTES`](crate::limits::MAX_BATCH_BYTES)
    /// bounds.
    pub fn size_bytes(&self) -> usize {
        self.bytes
    }

    /// Whether any operation has a condition (and so the batch may apply
    /// nothing).
    pub fn has_conditions(&self) -> bool {
        self.conditional
    }

    /// Appends `other`'s operations after this batch's, as one batch: the
    /// same effect as writing the two one after the other, if neither has
    /// conditions. (A server merges independent unconditional writes this
    /// way, so many share one batch in the commit.)
    pub fn append(&mut self, other: WriteBatch) -> Result<()> {
        if self.bytes + other.bytes > MAX_BATCH_BYTES {
            return Err(Error::BatchTooLarge {
                bytes: self.bytes + other.bytes,
                max: MAX_BATCH_BYTES,
            });
        }
        self.conditional |= other.conditional;
        self.bytes += other.bytes;
        self.ops.extend(other.ops);
        Ok(())
    }

    fn push(&mut self, op: BatchOp, bytes: usize) -> Result<()> {
        if self.bytes + bytes > MAX_BATCH_BYTES {
            return Err(Error::BatchTooLarge {
                bytes: self.bytes + bytes,
                max: MAX_BATCH_BYTES,
            });
        }
        self.conditional |= op.is_conditional();
        self.bytes += bytes;
        self.ops.push(op);
        Ok(())
    }

    /// Adds a write of `value` under `key`, replacing whatever the key
    /// holds; the value never expires unless [`with_deadline`] follows.
    ///
    /// Fails, adding nothing, with [`Error::KeyTooLarge`] over
    /// [`MAX_KEY_LEN`](crate::limits::MAX_KEY_LEN) bytes of key,
    /// [`Error::ValueTooLarge`] over
    /// [`MAX_VALUE_LEN`](crate::limits::MAX_VALUE_LEN) bytes of value, or
    /// [`Error::BatchTooLarge`] if the batch would pass
    /// [`MAX_BATCH_BYTES`](crate::limits::MAX_BATCH_BYTES). Returns the
    /// batch, so that calls chain.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = kivi::Db::open(dir.path(), kivi::Options::default())?;
    /// let mut batch = kivi::WriteBatch::new();
    /// batch.put(b"a".to_vec(), b"1".to_vec())?.put(b"b".to_vec(), b"2".to_vec())?;
    /// batch.delete(b"a".to_vec())?; // a later write to a key wins
    /// db.write(batch)?;
    /// assert_eq!(db.get(b"a")?, None);
    /// assert_eq!(db.get(b"b")?.as_deref(), Some(&b"2"[..]));
    /// # Ok::<(), kivi::Error>(())
    /// ```
    ///
    /// [`with_deadline`]: WriteBatch::with_deadline
    pub fn put(&mut self, key: impl Into<Vec<u8>>, value: impl Into<Vec<u8>>) -> Result<&mut Self> {
        let (key, value) = (key.into(), value.into());
        check_key(&key)?;
        check_value(&value)?;
        let n = key.len() + value.len();
        self.push(
            BatchOp::Put {
                key,
                value,
                deadline: NO_DEADLINE,
            },
            n,
        )?;
        Ok(self)
    }

    /// The batch of `Db::clear`: every key deleted.
    pub(crate) fn clear_all() -> WriteBatch {
        let mut b = WriteBatch::new();
        b.ops.push(BatchOp::Clear);
        b
    }

    /// Deletes `key` if it still holds a value with `deadline` and that has
    /// passed (see `BatchOp::Reclaim`).
    pub(crate) fn reclaim(&mut self, key: Vec<u8>, deadline: Millis) -> Result<&mut Self> {
        check_key(&key)?;
        let n = key.len();
        self.push(BatchOp::Reclaim { key, deadline }, n)?;
        Ok(self)
    }

    /// Gives the value the operation just added writes (a put, insert,
    /// update or swap) a deadline: the key is absent to every read after it.
    /// `None` writes a value that never expires (the default), so a
    /// deadline the key had before is dropped unless written again.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = kivi::Db::open(dir.path(), kivi::Options::default())?;
    /// let mut b = kivi::WriteBatch::new();
    /// let in_a_minute = db.clock().after(std::time::Duration::from_secs(60));
    /// b.put(b"session".to_vec(), b"...".to_vec())?.with_deadline(Some(in_a_minute))?;
    /// db.write(b)?;
    /// # Ok::<(), kivi::Error>(())
    /// ```
    pub fn with_deadline(&mut self, deadline: Option<Deadline>) -> Result<&mut Self> {
        let slot = match self.ops.last_mut() {
            Some(
                BatchOp::Put { deadline, .. }
                | BatchOp::InsertIfAbsent { deadline, .. }
                | BatchOp::UpdateIfPresent { deadline, .. }
                | BatchOp::CompareAndSwap { deadline, .. },
            ) => deadline,
            _ => {
                return Err(Error::InvalidBatch(
                    "a deadline goes on an operation that writes a value",
                ))
            }
        };
        *slot = Deadline::millis(deadline);
        Ok(self)
    }

    /// Adds to the compare-and-swap or compare-and-delete just added the
    /// condition that the current value's deadline is `deadline` (`None`:
    /// that it has none). Without it only the value's bytes are compared.
    pub fn if_deadline(&mut self, deadline: Option<Deadline>) -> Result<&mut Self> {
        match self.ops.last_mut() {
            Some(
                BatchOp::CompareAndSwap {
                    expected_deadline, ..
                }
                | BatchOp::CompareAndDelete {
                    expected_deadline, ..
                },
            ) => *expected_deadline = Some(Deadline::millis(deadline)),
            _ => {
                return Err(Error::InvalidBatch(
                    "a deadline condition goes on a compare-and-swap or compare-and-delete",
                ))
            }
        }
        Ok(self)
    }

    /// Adds a deletion of `key`; deleting an absent key is not an error and
    /// is not a condition. Fails, adding nothing, on a key over
    /// [`MAX_KEY_LEN`](crate::limits::MAX_KEY_LEN) bytes or a batch that
    /// would pass [`MAX_BATCH_BYTES`](crate::limits::MAX_BATCH_BYTES).
    pub fn delete(&mut self, key: impl Into<Vec<u8>>) -> Result<&mut Self> {
        let key = key.into();
        check_key(&key)?;
        let n = key.len();
        self.push(BatchOp::Delete { key }, n)?;
        Ok(self)
    }

    /// Adds a write of `value` under `key` on the condition that the key is
    /// absent (never written, deleted, or its value expired) when the
    /// operation applies. If it is present the whole batch applies nothing
    /// and [`Db::write`](crate::Db::write) returns
    /// [`WriteOutcome::ConditionFailed`](crate::WriteOutcome::ConditionFailed)
    /// naming this operation. The size limits are those of [`put`].
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = kivi::Db::open(dir.path(), kivi::Options::default())?;
    /// use kivi::{WriteBatch, WriteOutcome};
    /// db.put(b"lock", b"someone")?;
    /// let mut batch = WriteBatch::new();
    /// batch.put(b"log".to_vec(), b"took it".to_vec())?;
    /// batch.insert_if_absent(b"lock".to_vec(), b"me".to_vec())?; // operation 1
    /// assert_eq!(db.write(batch)?, WriteOutcome::ConditionFailed { op: 1 });
    /// assert_eq!(db.get(b"log")?, None); // nothing of the batch applied
    /// # Ok::<(), kivi::Error>(())
    /// ```
    ///
    /// [`put`]: WriteBatch::put
    pub fn insert_if_absent(
        &mut self,
        key: impl Into<Vec<u8>>,
        value: impl Into<Vec<u8>>,
    ) -> Result<&mut Self> {
        let (key, value) = (key.into(), value.into());
        check_key(&key)?;
        check_value(&value)?;
        let n = key.len() + value.len();
        let deadline = NO_DEADLINE;
        self.push(
            BatchOp::InsertIfAbsent {
                key,
                value,
                deadline,
            },
            n,
        )?;
        Ok(self)
    }

    /// Adds a write of `value` under `key` on the condition that the key is
    /// present (holds a value that has not expired) when the operation
    /// applies; otherwise the batch applies nothing, as for
    /// [`insert_if_absent`]. The size limits are those of [`put`].
    ///
    /// [`insert_if_absent`]: WriteBatch::insert_if_absent
    /// [`put`]: WriteBatch::put
    pub fn update_if_present(
        &mut self,
        key: impl Into<Vec<u8>>,
        value: impl Into<Vec<u8>>,
    ) -> Result<&mut Self> {
        let (key, value) = (key.into(), value.into());
        check_key(&key)?;
        check_value(&value)?;
        let n = key.len() + value.len();
        let deadline = NO_DEADLINE;
        self.push(
            BatchOp::UpdateIfPresent {
                key,
                value,
                deadline,
            },
            n,
        )?;
        Ok(self)
    }

    /// Adds a write of `value` under `key` on the condition that the key's
    /// current value is byte for byte `expected` (an absent or expired key
    /// never matches); otherwise the batch applies nothing, as for
    /// [`insert_if_absent`]. [`if_deadline`] adds a condition on the
    /// current value's deadline. `expected` counts toward the batch's size
    /// and is bounded like a value.
    ///
    /// [`insert_if_absent`]: WriteBatch::insert_if_absent
    /// [`if_deadline`]: WriteBatch::if_deadline
    pub fn compare_and_swap(
        &mut self,
        key: impl Into<Vec<u8>>,
        expected: impl Into<Vec<u8>>,
        value: impl Into<Vec<u8>>,
    ) -> Result<&mut Self> {
        let (key, expected, value) = (key.into(), expected.into(), value.into());
        check_key(&key)?;
        check_value(&expected)?;
        check_value(&value)?;
        let n = key.len() + expected.len() + value.len();
        self.push(
            BatchOp::CompareAndSwap {
                key,
                expected,
                expected_deadline: None,
                value,
                deadline: NO_DEADLINE,
            },
            n,
        )?;
        Ok(self)
    }

    /// Adds a deletion of `key` on the condition that its current value is
    /// byte for byte `expected`; otherwise the batch applies nothing, as for
    /// [`insert_if_absent`]. [`if_deadline`] adds a condition on the
    /// current value's deadline.
    ///
    /// [`insert_if_absent`]: WriteBatch::insert_if_absent
    /// [`if_deadline`]: WriteBatch::if_deadline
    pub fn compare_and_delete(
        &mut self,
        key: impl Into<Vec<u8>>,
        expected: impl Into<Vec<u8>>,
    ) -> Result<&mut Self> {
        let (key, expected) = (key.into(), expected.into());
        check_key(&key)?;
        check_value(&expected)?;
        let n = key.len() + expected.len();
        let expected_deadline = None;
        self.push(
            BatchOp::CompareAndDelete {
                key,
                expected,
                expected_deadline,
            },
            n,
        )?;
        Ok(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits_are_enforced_with_clear_errors() {
        let mut b = WriteBatch::new();
        let err = b
            .put(vec![0u8; MAX_KEY_LEN + 1], b"v".to_vec())
            .unwrap_err();
        assert!(
            matches!(err, Error::KeyTooLarge { len, max } if len == MAX_KEY_LEN + 1 && max == MAX_KEY_LEN)
        );
        let err = b
            .put(b"k".to_vec(), vec![0u8; MAX_VALUE_LEN + 1])
            .unwrap_err();
        assert!(
            err.to_string().contains("over the limit of 16777216 bytes"),
            "{err}"
        );
        b.put(vec![0u8; MAX_KEY_LEN], vec![0u8; MAX_VALUE_LEN])
            .unwrap();
        assert!(!b.is_empty() && b.len() == 1);
        for _ in 0..2 {
            b.put(b"k".to_vec(), vec![0u8; MAX_VALUE_LEN]).unwrap();
        }
        assert!(matches!(
            b.put(b"k".to_vec(), vec![0u8; MAX_VALUE_LEN]),
            Err(Error::BatchTooLarge { .. })
        ));
    }

    #[test]
    fn append_keeps_order_conditions_and_the_byte_limit() {
        let mut a = WriteBatch::new();
        a.put(b"k".to_vec(), b"1".to_vec()).unwrap();
        let mut b = WriteBatch::new();
        b.delete(b"k".to_vec()).unwrap();
        b.put(b"j".to_vec(), b"2".to_vec()).unwrap();
        a.append(b).unwrap();
        assert_eq!(a.len(), 3);
        assert_eq!(a.size_bytes(), 2 + 1 + 2);
        assert_eq!(a.ops[1], BatchOp::Delete { key: b"k".to_vec() });
        assert!(!a.has_conditions());
        let mut c = WriteBatch::new();
        c.compare_and_delete(b"j".to_vec(), b"2".to_vec()).unwrap();
        a.append(c).unwrap();
        assert!(a.has_conditions());
        let mut big = WriteBatch::new();
        for _ in 0..3 {
            big.put(b"k".to_vec(), vec![0u8; MAX_VALUE_LEN]).unwrap();
        }
        let mut big2 = WriteBatch::new();
        big2.put(b"k".to_vec(), vec![0u8; MAX_VALUE_LEN]).unwrap();
        assert!(matches!(big.append(big2), Err(Error::BatchTooLarge { .. })));
        assert_eq!(big.len(), 3, "a refused append changes nothing");
    }
}
