//! A store in a directory of the local file system.
//!
//! Layout: one file per segment (`0000000007.seg`), one file per meta blob, and
//! `LOCK`, which an exclusive (writer) or shared (reader) advisory lock is held
//! on for as long as the store is open, so two processes never write one store.

use crate::{
    parse_segment_file_name, segment_file_name, IoError, SegmentId, SegmentReader, SegmentWriter,
    StepHook, Storage,
};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

const LOCK_FILE: &str = "LOCK";
/// Readers beside a running writer hold a shared lock on this file while
/// they read; the writer, seeing one, leaves a deleted segment's blocks to
/// be freed when the last reader closes it rather than truncating it away
/// under them (`delete_segment`).
const READERS_FILE: &str = "READERS";

/// A store's files in a local directory: one file per segment, meta blobs
/// replaced atomically (written aside, fsynced, renamed), and a `LOCK` file
/// that keeps a second writer out. Creating or deleting a file fsyncs the
/// directory.
#[derive(Debug)]
pub struct LocalDir {
    dir: PathBuf,
    read_only: bool,
    /// Held for the life of the store; the lock is released when it is dropped.
    _lock: Option<File>,
    /// The writer's handle on `READERS` (to see readers beside it); a
    /// reader's, holding its shared lock.
    readers_file: Option<File>,
    /// One open file per segment read, so a read is one `pread`, never an open.
    /// Bounded by the number of segments in the store.
    readers: Mutex<HashMap<SegmentId, Arc<LocalReader>>>,
}

impl LocalDir {
    /// Opens `dir` for reading and writing, creating it if it does not exist,
    /// and takes the store's exclusive lock.
    pub fn open(dir: impl AsRef<Path>) -> Result<Self, IoError> {
        let dir = dir.as_ref().to_path_buf();
        let shown = dir.display().to_string();
        match fs::metadata(&dir) {
            Ok(m) if !m.is_dir() => {
                return Err(IoError::new(
                    "open store directory",
                    shown,
                    io::Error::new(
                        io::ErrorKind::NotADirectory,
                        "exists but is not a directory",
                    ),
                ))
            }
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                fs::create_dir_all(&dir)
                    .map_err(|e| IoError::new("create directory", &shown, e))?;
                if let Some(parent) = dir.parent() {
                    if !parent.as_os_str().is_empty() {
                        sync_dir(parent)?;
                    }
                }
            }
            Err(e) => return Err(IoError::new("open store directory", shown, e)),
        }
        let lock_path = dir.join(LOCK_FILE);
        let lock = open_or_create(&lock_path, "open lock file")?;
        lock.try_lock().map_err(|e| lock_error(&lock_path, e))?;
        let readers_file = open_or_create(&dir.join(READERS_FILE), "open readers file")?;
        Ok(LocalDir {
            dir,
            read_only: false,
            _lock: Some(lock),
            readers_file: Some(readers_file),
            readers: Mutex::new(HashMap::new()),
        })
    }

    /// Opens an existing directory for reading only: nothing is created or
    /// written, and writing calls fail. Takes a shared lock when the lock file
    /// exists, so it cannot open a store a writer holds.
    pub fn open_read_only(dir: impl AsRef<Path>) -> Result<Self, IoError> {
        let dir = dir.as_ref().to_path_buf();
        let shown = dir.display().to_string();
        let meta =
            fs::metadata(&dir).map_err(|e| IoError::new("open store directory", &shown, e))?;
        if !meta.is_dir() {
            return Err(IoError::new(
                "open store directory",
                shown,
                io::Error::new(
                    io::ErrorKind::NotADirectory,
                    "exists but is not a directory",
                ),
            ));
        }
        let lock_path = dir.join(LOCK_FILE);
        let lock = match File::open(&lock_path) {
            // A writer holds the lock: read beside it, without a lock. What
            // a reader sees of files the writer only appends to and renames
            // into place is a state a crash could leave, which an open
            // recovers from; a file the writer deletes meanwhile shows as
            // missing (see `Db::open`'s callers that retry: `kivi check`
            // and `kivi stats`).
            Ok(f) => match f.try_lock_shared() {
                Ok(()) => Some(f),
                Err(fs::TryLockError::WouldBlock) => None,
                Err(e) => return Err(lock_error(&lock_path, e)),
            },
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => {
                return Err(IoError::new(
                    "open lock file",
                    lock_path.display().to_string(),
                    e,
                ))
            }
        };
        let beside_writer = lock.is_none() && lock_path.exists();
        // Announced before any segment is opened, so that the writer sees
        // this reader before it could truncate one of them.
        let readers_file = if beside_writer {
            let f = File::open(dir.join(READERS_FILE)).ok();
            if let Some(f) = &f {
                f.lock_shared().map_err(|e| {
                    IoError::new("lock", dir.join(READERS_FILE).display().to_string(), e)
                })?;
            }
            f
        } else {
            None
        };
        let store = LocalDir {
            dir,
            read_only: true,
            _lock: lock,
            readers_file,
            readers: Mutex::new(HashMap::new()),
        };
        if beside_writer {
            // Every segment opened now and kept open (in `readers`), so that
            // the writer deleting one later does not take it from this
            // reader; the writer's newer segments are opened when needed.
            // One deleted between the listing and its open fails this open
            // (NotFound): the caller may try again.
            for id in store.list_segments()? {
                store.open_segment(id)?;
            }
        }
        Ok(store)
    }

    /// The directory the store is in.
    pub fn path(&self) -> &Path {
        &self.dir
    }

    /// Whether a reader (`open_read_only` beside this writer) is reading now.
    fn readers_beside(&self) -> bool {
        let Some(f) = &self.readers_file else {
            return false;
        };
        match f.try_lock() {
            Ok(()) => {
                let _ = f.unlock();
                false
            }
            Err(_) => true,
        }
    }

    /// Whether a writer (a process that opened `dir` for writing) holds
    /// the store's lock now.
    pub fn writer_holds_lock(dir: impl AsRef<Path>) -> bool {
        match File::open(dir.as_ref().join(LOCK_FILE)) {
            Ok(f) => matches!(f.try_lock_shared(), Err(fs::TryLockError::WouldBlock)),
            Err(_) => false,
        }
    }

    /// Names in the directory that are neither segments, meta blobs named in
    /// `known_meta`, nor the lock file: a sign the directory is not (only) a store.
    pub fn foreign_entries(&self, known_meta: &[&str]) -> Result<Vec<String>, IoError> {
        let mut out = Vec::new();
        for entry in self.entries()? {
            let name = entry;
            if name == LOCK_FILE
                || name == READERS_FILE
                || parse_segment_file_name(&name).is_some()
                || known_meta
                    .iter()
                    .any(|m| *m == name || format!("{m}.tmp") == name)
            {
                continue;
            }
            out.push(name);
        }
        Ok(out)
    }

    fn entries(&self) -> Result<Vec<String>, IoError> {
        let shown = self.dir.display().to_string();
        let mut names = Vec::new();
        for entry in
            fs::read_dir(&self.dir).map_err(|e| IoError::new("list directory", &shown, e))?
        {
            let entry = entry.map_err(|e| IoError::new("list directory", &shown, e))?;
            names.push(entry.file_name().to_string_lossy().into_owned());
        }
        Ok(names)
    }

    fn check_writable(&self, op: &'static str, target: &str) -> Result<(), IoError> {
        if self.read_only {
            return Err(IoError::new(
                op,
                target,
                io::Error::new(io::ErrorKind::ReadOnlyFilesystem, "store opened read-only"),
            ));
        }
        Ok(())
    }

    fn shown(&self, name: &str) -> String {
        self.dir.join(name).display().to_string()
    }

    /// Creates segment `id`; its appends are written back in steps of
    /// `writeback` bytes if given (see `LocalWriter::writeback`).
    fn create(
        &self,
        id: SegmentId,
        writeback: Option<(u64, StepHook)>,
    ) -> Result<Box<dyn SegmentWriter>, IoError> {
        let name = segment_file_name(id);
        let shown = self.shown(&name);
        self.check_writable("create segment", &shown)?;
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(self.dir.join(&name))
            .map_err(|e| IoError::new("create segment", &shown, e))?;
        sync_dir(&self.dir)?;
        Ok(Box::new(LocalWriter {
            file,
            name: shown,
            len: 0,
            sized: 0,
            writeback,
            written_back: 0,
            failed: None,
        }))
    }
}

/// `path` opened for reading and writing, made empty if absent (never
/// truncated): the files that carry locks.
fn open_or_create(path: &Path, op: &'static str) -> Result<File, IoError> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(|e| IoError::new(op, path.display().to_string(), e))
}

fn lock_error(path: &Path, e: fs::TryLockError) -> IoError {
    let source = match e {
        fs::TryLockError::WouldBlock => io::Error::new(
            io::ErrorKind::WouldBlock,
            "the store is in use by another process (its lock is held)",
        ),
        fs::TryLockError::Error(e) => e,
    };
    IoError::new("lock store", path.display().to_string(), source)
}

/// A deleted segment's blocks are given back this many bytes at a time.
const RELEASE_STEP: u64 = 1 << 20;

/// Frees the blocks of `file`, already unlinked, from its end in steps of
/// `RELEASE_STEP`. On a file system mounted with online discard, freeing a
/// file's blocks sends the device a discard of all of them at once (ext4
/// without a journal waits for it inside the call), and a 64 MiB discard
/// held the device for about 10 ms, in front of every commit's sync. The
/// deletion is durable already: a crash here leaves no file, and whatever a
/// failed step leaves is freed when `file` is closed.
fn release_in_steps(file: File) {
    let step = RELEASE_STEP;
    let Ok(mut len) = file.metadata().map(|m| m.len()) else {
        return;
    };
    while len > step {
        len = (len - 1) / step * step;
        if file.set_len(len).is_err() {
            return;
        }
    }
}

/// fsync of a directory, so that creations, renames and deletions in it are durable.
fn sync_dir(dir: &Path) -> Result<(), IoError> {
    let f = File::open(dir)
        .map_err(|e| IoError::new("open directory", dir.display().to_string(), e))?;
    f.sync_all()
        .map_err(|e| IoError::new("fsync directory", dir.display().to_string(), e))
}

impl Storage for LocalDir {
    fn list_segments(&self) -> Result<Vec<SegmentId>, IoError> {
        let mut ids: Vec<SegmentId> = self
            .entries()?
            .iter()
            .filter_map(|n| parse_segment_file_name(n))
            .collect();
        ids.sort_unstable();
        Ok(ids)
    }

    fn create_segment(&self, id: SegmentId) -> Result<Box<dyn SegmentWriter>, IoError> {
        self.create(id, None)
    }

    fn create_bulk_segment(
        &self,
        id: SegmentId,
        after_step: StepHook,
    ) -> Result<Box<dyn SegmentWriter>, IoError> {
        self.create(id, Some((WRITEBACK_STEP, after_step)))
    }

    fn open_segment(&self, id: SegmentId) -> Result<Arc<dyn SegmentReader>, IoError> {
        let mut readers = self.readers.lock();
        if let Some(r) = readers.get(&id) {
            return Ok(r.clone());
        }
        let shown = self.shown(&segment_file_name(id));
        let file = File::open(self.dir.join(segment_file_name(id)))
            .map_err(|e| IoError::new("open segment", &shown, e))?;
        let reader = Arc::new(LocalReader { file, name: shown });
        readers.insert(id, reader.clone());
        Ok(reader)
    }

    fn delete_segment(&self, id: SegmentId) -> Result<(), IoError> {
        let name = segment_file_name(id);
        let shown = self.shown(&name);
        self.check_writable("delete segment", &shown)?;
        self.readers.lock().remove(&id);
        let path = self.dir.join(&name);
        // Opened before the unlink, to give the blocks back in steps after it.
        let file = OpenOptions::new()
            .write(true)
            .open(&path)
            .map_err(|e| IoError::new("delete segment", &shown, e))?;
        fs::remove_file(&path).map_err(|e| IoError::new("delete segment", &shown, e))?;
        sync_dir(&self.dir)?;
        // Unlinked first: a reader that comes later cannot open it. One
        // that had it open announced itself before opening it.
        if !self.readers_beside() {
            release_in_steps(file);
        }
        Ok(())
    }

    fn read_meta(&self, name: &str) -> Result<Option<Vec<u8>>, IoError> {
        match fs::read(self.dir.join(name)) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(IoError::new("read", self.shown(name), e)),
        }
    }

    fn write_meta(&self, name: &str, bytes: &[u8]) -> Result<(), IoError> {
        let shown = self.shown(name);
        self.check_writable("write", &shown)?;
        let tmp = self.dir.join(format!("{name}.tmp"));
        let tmp_shown = tmp.display().to_string();
        let mut f = File::create(&tmp).map_err(|e| IoError::new("create", &tmp_shown, e))?;
        f.write_all(bytes)
            .map_err(|e| IoError::new("write", &tmp_shown, e))?;
        f.sync_all()
            .map_err(|e| IoError::new("fsync", &tmp_shown, e))?;
        drop(f);
        fs::rename(&tmp, self.dir.join(name))
            .map_err(|e| IoError::new("rename into", &shown, e))?;
        sync_dir(&self.dir)
    }

    fn segment_name(&self, id: SegmentId) -> String {
        self.shown(&segment_file_name(id))
    }

    fn meta_name(&self, name: &str) -> String {
        self.shown(name)
    }
}

/// The file is made this much longer than its data at a time, by writing
/// zeros (not by `set_len`, which leaves a hole): most appends then land on
/// blocks the file system has already allocated, and fdatasync has only
/// data to write, no block allocation or size change in the inode. On ext4,
/// an 85 KB append (one 1,000-pair batch) + fdatasync measured 120-124 us
/// over written zeros against 221-223 us into a hole and 222-225 us past
/// the end; a 100-byte one, 85-93 us against 82-91 us and 120-136 us (a
/// hole only costs when a write needs new blocks, so a 4 KiB block of small
/// commits paid for it once); `bench/fdatasync_tail.py` measures it. The
/// zeros are written back by the fdatasync of the commit whose append
/// crosses into a new step (about 2 ms of device time for 4 MiB).
/// A crash can leave zeros after the data; readers stop at the first invalid
/// record, as at any torn tail, and a clean close trims them.
const SIZE_STEP: u64 = 4 << 20;

/// Zeros for extending a file (see `SIZE_STEP`).
static ZEROS: [u8; 1 << 20] = [0; 1 << 20];

/// A bulk segment's appends are written back to the device in steps of this
/// many bytes, each waited for before the next is started (see
/// `LocalWriter::writeback`).
const WRITEBACK_STEP: u64 = 32 << 10;

struct LocalWriter {
    file: File,
    name: String,
    len: u64,
    /// The file's size: `len` plus the tail of zeros written ahead.
    sized: u64,
    /// For a bulk segment: appended bytes are written back (not synced) in
    /// steps of this many, each waited for, as they accumulate. Otherwise
    /// the page cache holds a checkpoint's pages until its final fdatasync
    /// sends them all at once, and a commit's fdatasync that arrives then
    /// queues behind tens of megabytes.
    /// The caller's hook, called after each step.
    writeback: Option<(u64, StepHook)>,
    /// Bytes before this offset have been written back.
    written_back: u64,

    /// Set when a write-back failed. The failure is reported once (the
    /// kernel's per-file error state is advanced by the call that sees it,
    /// so a later fdatasync may not see it again): from then on every call
    /// fails with it.
    failed: Option<io::ErrorKind>,
}

impl LocalWriter {
    fn check_failed(&self, op: &'static str) -> Result<(), IoError> {
        match self.failed {
            Some(kind) => Err(IoError::new(
                op,
                &self.name,
                io::Error::new(kind, "an earlier write-back of this segment failed"),
            )),
            None => Ok(()),
        }
    }

    /// Writes back every whole step of appended bytes up to `end`.
    fn write_back(&mut self, end: u64) -> Result<(), IoError> {
        let Some((step, after_step)) = &self.writeback else {
            return Ok(());
        };
        let step = *step;
        while end - self.written_back >= step {
            if let Err(e) = write_back_range(&self.file, self.written_back, step) {
                self.failed = Some(e.kind());
                return Err(IoError::new("write back", &self.name, e));
            }
            self.written_back += step;
            after_step();
        }
        Ok(())
    }
}

/// Starts writing `len` bytes at `offset` of `file` to the device and waits
/// until they are written (and any earlier write-back of the range), without
/// making anything durable: no file metadata, no cache flush.
#[cfg(target_os = "linux")]
fn write_back_range(file: &File, offset: u64, len: u64) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let flags = libc::SYNC_FILE_RANGE_WAIT_BEFORE
        | libc::SYNC_FILE_RANGE_WRITE
        | libc::SYNC_FILE_RANGE_WAIT_AFTER;
    let (Ok(offset), Ok(len)) = (
        libc::off64_t::try_from(offset),
        libc::off64_t::try_from(len),
    ) else {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    };
    // SAFETY: sync_file_range takes only integers and touches no memory of
    // ours. The descriptor is `file`'s, open for as long as the borrow
    // lasts, so the call cannot act on a closed or reused descriptor.
    let r = unsafe { libc::sync_file_range(file.as_raw_fd(), offset, len, flags) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Elsewhere the data waits for the final sync.
#[cfg(not(target_os = "linux"))]
fn write_back_range(_file: &File, _offset: u64, _len: u64) -> io::Result<()> {
    Ok(())
}

impl SegmentWriter for LocalWriter {
    fn append(&mut self, bytes: &[u8]) -> Result<(), IoError> {
        self.check_failed("append to")?;
        let end = self.len + bytes.len() as u64;
        // The first append (a segment's header) grows the file by itself, so
        // a file never holds a sparse tail before its first bytes are synced
        // (the log syncs a new segment's header before anything else). A
        // bulk segment, synced once per checkpoint, has no use for a tail.
        if end > self.sized && self.len > 0 && self.writeback.is_none() {
            let sized = end.next_multiple_of(SIZE_STEP);
            let mut at = end;
            while at < sized {
                let n = (sized - at).min(ZEROS.len() as u64);
                self.file
                    .write_all_at(&ZEROS[..n as usize], at)
                    .map_err(|e| IoError::new("extend", &self.name, e))?;
                at += n;
            }
            self.sized = sized;
        }
        self.file
            .write_all_at(bytes, self.len)
            .map_err(|e| IoError::new("append to", &self.name, e))?;
        self.sized = self.sized.max(end);
        self.write_back(end)?;
        self.len = end;
        Ok(())
    }

    fn sync(&mut self) -> Result<(), IoError> {
        self.check_failed("fdatasync")?;
        self.file
            .sync_data()
            .map_err(|e| IoError::new("fdatasync", &self.name, e))
    }

    fn len(&self) -> u64 {
        self.len
    }
}

impl Drop for LocalWriter {
    fn drop(&mut self) {
        // Trim the tail of zeros. If this fails, or never runs (a crash), the
        // zeros stay and read as the end of the data.
        if self.sized > self.len && self.file.set_len(self.len).is_ok() {
            let _ = self.file.sync_data();
        }
    }
}

#[derive(Debug)]
struct LocalReader {
    file: File,
    name: String,
}

impl SegmentReader for LocalReader {
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> Result<(), IoError> {
        self.file
            .read_exact_at(buf, offset)
            .map_err(|e| IoError::new("read", &self.name, e))
    }

    fn size(&self) -> Result<u64, IoError> {
        Ok(self
            .file
            .metadata()
            .map_err(|e| IoError::new("stat", &self.name, e))?
            .len())
    }

    fn reads_at_random(&self) {
        // The kernel reads ahead of reads that look sequential (up to 128
        // KiB and more): pages of one leaf after another written together
        // look so, and a short scan or a lookup then paid for pages nobody
        // read, in a container's page cache too. kivi asks for what it
        // will read itself (`will_need`).
        // SAFETY: as in `will_need`: integers only, the descriptor is open.
        unsafe {
            libc::posix_fadvise(
                std::os::fd::AsRawFd::as_raw_fd(&self.file),
                0,
                0,
                libc::POSIX_FADV_RANDOM,
            );
        }
    }

    fn will_need(&self, offset: u64, len: u64) {
        // Starts reading the range into the page cache and returns without
        // waiting for it: the device serves many such reads at once, where
        // positioned reads one after another wait for each in turn.
        let (Ok(offset), Ok(len)) = (libc::off_t::try_from(offset), libc::off_t::try_from(len))
        else {
            return;
        };
        // SAFETY: posix_fadvise reads no memory of ours; the descriptor is
        // open for as long as `self.file` lives, which outlasts the call.
        unsafe {
            libc::posix_fadvise(
                std::os::fd::AsRawFd::as_raw_fd(&self.file),
                offset,
                len,
                libc::POSIX_FADV_WILLNEED,
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn segments_round_trip_and_are_listed_in_order() {
        let tmp = tempfile::tempdir().unwrap();
        let s = LocalDir::open(tmp.path()).unwrap();
        let mut w = s.create_segment(7).unwrap();
        w.append(b"hello ").unwrap();
        w.append(b"world").unwrap();
        w.sync().unwrap();
        assert_eq!(w.len(), 11);
        s.create_segment(3).unwrap();
        assert_eq!(s.list_segments().unwrap(), vec![3, 7]);
        let r = s.open_segment(7).unwrap();
        let mut buf = [0u8; 5];
        r.read_at(6, &mut buf).unwrap();
        assert_eq!(&buf, b"world");
        // While the writer is open the file has a tail of zeros, written
        // (blocks allocated, not a hole: see SIZE_STEP)...
        assert_eq!(r.size().unwrap(), SIZE_STEP);
        let blocks = std::fs::metadata(tmp.path().join(segment_file_name(7)))
            .unwrap()
            .blocks();
        assert!(
            blocks * 512 >= SIZE_STEP,
            "the tail is a hole: {blocks} blocks"
        );
        r.read_at(8, &mut buf).unwrap();
        assert_eq!(&buf, b"rld\0\0");
        // ...which closing the writer trims.
        drop(w);
        assert_eq!(r.size().unwrap(), 11);
        assert_eq!(
            r.read_at(8, &mut buf).unwrap_err().kind(),
            io::ErrorKind::UnexpectedEof
        );
        assert_eq!(
            s.create_segment(7).err().map(|e| e.kind()),
            Some(io::ErrorKind::AlreadyExists),
            "a segment id is never reused"
        );
        s.delete_segment(3).unwrap();
        assert_eq!(s.list_segments().unwrap(), vec![7]);
    }

    #[test]
    fn the_first_append_is_not_followed_by_a_sparse_tail() {
        // A new segment's header is synced before anything else is written,
        // so a crash can never leave zeros after a header that is not durable.
        let tmp = tempfile::tempdir().unwrap();
        let s = LocalDir::open(tmp.path()).unwrap();
        let mut w = s.create_segment(1).unwrap();
        w.append(&[1; 100]).unwrap();
        let r = s.open_segment(1).unwrap();
        assert_eq!(r.size().unwrap(), 100);
        w.append(&[2; SIZE_STEP as usize]).unwrap();
        assert_eq!(w.len(), SIZE_STEP + 100);
        assert_eq!(r.size().unwrap(), 2 * SIZE_STEP);
        let mut buf = [0u8; 2];
        r.read_at(99, &mut buf).unwrap();
        assert_eq!(buf, [1, 2]);
    }

    #[test]
    fn bulk_segments_read_back_what_was_appended() {
        // Appends of a bulk segment are written back in steps as they come;
        // whatever the steps, the bytes read back are the ones appended.
        let tmp = tempfile::tempdir().unwrap();
        let s = LocalDir::open(tmp.path()).unwrap();
        let mut w = s.create_bulk_segment(1, Arc::new(|| {})).unwrap();
        w.append(b"header").unwrap();
        w.sync().unwrap();
        let data: Vec<u8> = (0..(3 * WRITEBACK_STEP + 100))
            .map(|i| (i % 251) as u8)
            .collect();
        for chunk in data.chunks(WRITEBACK_STEP as usize / 3 + 7) {
            w.append(chunk).unwrap();
        }
        w.sync().unwrap();
        assert_eq!(w.len(), 6 + data.len() as u64);
        let r = s.open_segment(1).unwrap();
        let mut back = vec![0u8; data.len()];
        r.read_at(6, &mut back).unwrap();
        assert!(back == data);
        // No sparse tail, even while the writer is open.
        assert_eq!(r.size().unwrap(), 6 + data.len() as u64);
    }

    #[test]
    fn a_failed_write_back_fails_every_later_call() {
        // The kernel reports a write-back error once; the writer must go on
        // reporting it, or a later fdatasync could succeed over lost bytes.
        let tmp = tempfile::tempdir().unwrap();
        let s = LocalDir::open(tmp.path()).unwrap();
        drop(s.create_bulk_segment(1, Arc::new(|| {})).unwrap());
        let file = OpenOptions::new()
            .write(true)
            .open(tmp.path().join(segment_file_name(1)))
            .unwrap();
        let mut w = LocalWriter {
            file,
            name: "test".into(),
            len: 0,
            sized: 0,
            writeback: Some((WRITEBACK_STEP, Arc::new(|| {}))),
            written_back: 0,
            failed: Some(io::ErrorKind::Other),
        };
        for e in [w.append(b"x").unwrap_err(), w.sync().unwrap_err()] {
            assert_eq!(e.kind(), io::ErrorKind::Other, "{e}");
            assert!(e.to_string().contains("an earlier write-back"), "{e}");
        }
        assert_eq!(w.len(), 0);
    }

    #[test]
    fn a_deleted_segment_is_gone_even_while_a_reader_holds_it() {
        let tmp = tempfile::tempdir().unwrap();
        let s = LocalDir::open(tmp.path()).unwrap();
        let mut w = s.create_bulk_segment(4, Arc::new(|| {})).unwrap();
        w.append(b"header").unwrap();
        w.append(&vec![7u8; (3 * RELEASE_STEP + 5) as usize])
            .unwrap();
        w.sync().unwrap();
        drop(w);
        let r = s.open_segment(4).unwrap();
        s.delete_segment(4).unwrap();
        assert!(s.list_segments().unwrap().is_empty());
        assert!(!tmp.path().join(segment_file_name(4)).exists());
        drop(r);
        assert_eq!(
            s.delete_segment(4).unwrap_err().kind(),
            io::ErrorKind::NotFound,
            "deleting twice fails"
        );
    }

    #[test]
    fn meta_is_replaced_whole() {
        let tmp = tempfile::tempdir().unwrap();
        let s = LocalDir::open(tmp.path()).unwrap();
        assert_eq!(s.read_meta("KIVI").unwrap(), None);
        s.write_meta("KIVI", b"one").unwrap();
        s.write_meta("KIVI", b"two").unwrap();
        assert_eq!(s.read_meta("KIVI").unwrap().as_deref(), Some(&b"two"[..]));
        assert!(s.foreign_entries(&["KIVI"]).unwrap().is_empty());
        fs::write(tmp.path().join("notes.txt"), b"x").unwrap();
        assert_eq!(
            s.foreign_entries(&["KIVI"]).unwrap(),
            vec!["notes.txt".to_string()]
        );
    }

    #[test]
    fn second_writer_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let _first = LocalDir::open(tmp.path()).unwrap();
        let err = LocalDir::open(tmp.path()).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::WouldBlock);
        assert!(
            err.to_string().contains("in use by another process"),
            "{err}"
        );
        // A reader opens beside the writer, and knows it is there.
        assert!(LocalDir::writer_holds_lock(tmp.path()));
        let reader = LocalDir::open_read_only(tmp.path()).unwrap();
        drop(_first);
        assert!(!LocalDir::writer_holds_lock(tmp.path()));
        drop(reader);
    }

    #[test]
    fn a_file_is_not_a_store_directory() {
        let tmp = tempfile::tempdir().unwrap();
        let file = tmp.path().join("plain");
        fs::write(&file, b"x").unwrap();
        let err = LocalDir::open(&file).unwrap_err();
        assert!(err.to_string().contains("not a directory"), "{err}");
    }

    #[test]
    fn read_only_refuses_writes() {
        let tmp = tempfile::tempdir().unwrap();
        drop(LocalDir::open(tmp.path()).unwrap());
        let s = LocalDir::open_read_only(tmp.path()).unwrap();
        assert_eq!(
            s.create_segment(1).err().map(|e| e.kind()),
            Some(io::ErrorKind::ReadOnlyFilesystem)
        );
        assert_eq!(
            s.write_meta("KIVI", b"x").unwrap_err().kind(),
            io::ErrorKind::ReadOnlyFilesystem
        );
    }
}
