//! Everything in RAM: fast, and gone when the last handle is dropped. Every
//! write counts as durable at once. For tests and for stores that are scratch.

use crate::{segment_file_name, IoError, SegmentId, SegmentReader, SegmentWriter, Storage};
use parking_lot::RwLock;
use std::collections::{BTreeMap, HashMap};
use std::io;
use std::sync::Arc;

type Bytes = Arc<RwLock<Vec<u8>>>;

/// Storage in memory: every write is "durable" at once and gone with the
/// process. For tests and for stores that need no persistence. Clones share
/// the same contents.
#[derive(Debug, Default, Clone)]
pub struct MemoryStorage {
    inner: Arc<RwLock<MemState>>,
}

#[derive(Debug, Default)]
struct MemState {
    segments: BTreeMap<SegmentId, Bytes>,
    meta: HashMap<String, Vec<u8>>,
}

impl MemoryStorage {
    /// Empty storage: no segments, no meta blobs.
    pub fn new() -> Self {
        Self::default()
    }
}

fn not_found(op: &'static str, id: SegmentId) -> IoError {
    IoError::new(
        op,
        segment_file_name(id),
        io::Error::from(io::ErrorKind::NotFound),
    )
}

impl Storage for MemoryStorage {
    fn list_segments(&self) -> Result<Vec<SegmentId>, IoError> {
        Ok(self.inner.read().segments.keys().copied().collect())
    }

    fn create_segment(&self, id: SegmentId) -> Result<Box<dyn SegmentWriter>, IoError> {
        let mut st = self.inner.write();
        if st.segments.contains_key(&id) {
            return Err(IoError::new(
                "create segment",
                segment_file_name(id),
                io::Error::from(io::ErrorKind::AlreadyExists),
            ));
        }
        let bytes: Bytes = Arc::default();
        st.segments.insert(id, bytes.clone());
        Ok(Box::new(MemWriter { bytes, len: 0 }))
    }

    fn open_segment(&self, id: SegmentId) -> Result<Arc<dyn SegmentReader>, IoError> {
        let st = self.inner.read();
        let bytes = st
            .segments
            .get(&id)
            .ok_or_else(|| not_found("open segment", id))?;
        Ok(Arc::new(MemReader {
            bytes: bytes.clone(),
            name: segment_file_name(id),
        }))
    }

    fn delete_segment(&self, id: SegmentId) -> Result<(), IoError> {
        self.inner
            .write()
            .segments
            .remove(&id)
            .map(|_| ())
            .ok_or_else(|| not_found("delete segment", id))
    }

    fn read_meta(&self, name: &str) -> Result<Option<Vec<u8>>, IoError> {
        Ok(self.inner.read().meta.get(name).cloned())
    }

    fn write_meta(&self, name: &str, bytes: &[u8]) -> Result<(), IoError> {
        self.inner
            .write()
            .meta
            .insert(name.to_string(), bytes.to_vec());
        Ok(())
    }

    fn segment_name(&self, id: SegmentId) -> String {
        segment_file_name(id)
    }
}

struct MemWriter {
    bytes: Bytes,
    len: u64,
}

impl SegmentWriter for MemWriter {
    fn append(&mut self, bytes: &[u8]) -> Result<(), IoError> {
        self.bytes.write().extend_from_slice(bytes);
        self.len += bytes.len() as u64;
        Ok(())
    }

    fn sync(&mut self) -> Result<(), IoError> {
        Ok(())
    }

    fn len(&self) -> u64 {
        self.len
    }
}

struct MemReader {
    bytes: Bytes,
    name: String,
}

impl SegmentReader for MemReader {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), IoError> {
        let data = self.bytes.read();
        let end = offset
            .checked_add(buf.len() as u64)
            .filter(|&e| e <= data.len() as u64);
        match end {
            Some(end) => {
                buf.copy_from_slice(&data[offset as usize..end as usize]);
                Ok(())
            }
            None => Err(IoError::new(
                "read",
                &self.name,
                io::Error::from(io::ErrorKind::UnexpectedEof),
            )),
        }
    }

    fn size(&self) -> Result<u64, IoError> {
        Ok(self.bytes.read().len() as u64)
    }
}
