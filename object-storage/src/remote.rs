//! Requests to the object store, made from the engine's (blocking) threads,
//! counted, and retried where retrying is safe.
//!
//! The `object_store` client is async; kivi's storage interface is not. A
//! small tokio runtime of this backend's own runs every request, and the
//! calling thread waits on a channel for the answer, which works from any
//! thread, including another runtime's worker (`kivi serve`'s).

use bytes::Bytes;
use futures::StreamExt;
use kivi_storage::{IoError, RemoteRequests};
use object_store::path::Path;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload};
use std::future::Future;
use std::io;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

/// How many times a request that failed without an answer (a timeout, a 5xx,
/// a 409) is tried again by this backend, on top of the client's own retries.
const ATTEMPTS: u32 = 4;

/// Requests made and bytes moved, by kind, since the store was opened.
#[derive(Debug, Default)]
pub struct Counters {
    /// Create-if-absent puts (log entries, chunks, markers).
    pub puts: AtomicU64,
    /// Bytes sent by puts.
    pub put_bytes: AtomicU64,
    /// Gets, whole and ranged.
    pub gets: AtomicU64,
    /// Bytes received by gets.
    pub get_bytes: AtomicU64,
    /// Deletes.
    pub deletes: AtomicU64,
    /// List requests (one per page of a listing); only made when a store opens.
    pub lists: AtomicU64,
    /// Puts that found the name taken by someone else.
    pub conflicts: AtomicU64,
    /// Requests that failed and were tried again.
    pub retries: AtomicU64,
}

impl Counters {
    pub(crate) fn snapshot(&self) -> RemoteRequests {
        RemoteRequests {
            puts: self.puts.load(Relaxed),
            put_bytes: self.put_bytes.load(Relaxed),
            gets: self.gets.load(Relaxed),
            get_bytes: self.get_bytes.load(Relaxed),
            deletes: self.deletes.load(Relaxed),
            lists: self.lists.load(Relaxed),
            conflicts: self.conflicts.load(Relaxed),
            retries: self.retries.load(Relaxed),
            ..RemoteRequests::default()
        }
    }
}

/// What a create-if-absent put found.
#[derive(Debug)]
pub enum Created {
    /// The object now holds our bytes (created by this put or by an earlier
    /// attempt of it whose answer was lost).
    Ours,
    /// Someone else's object holds the name; here are its bytes.
    Theirs(Bytes),
}

pub(crate) struct Remote {
    store: Arc<dyn ObjectStore>,
    prefix: Path,
    /// Some until dropped (shut down without waiting, so that dropping a
    /// store inside another runtime does not panic).
    runtime: Option<tokio::runtime::Runtime>,
    pub counters: Counters,
    /// The store's URL or description, for messages.
    pub label: String,
    /// The wait before the first retry of a failed request (doubled for
    /// each further one).
    retry_delay: Duration,
}

impl std::fmt::Debug for Remote {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Remote({})", self.label)
    }
}

impl Drop for Remote {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

fn from_store(op: &'static str, target: String, e: object_store::Error) -> IoError {
    let kind = match e {
        object_store::Error::NotFound { .. } => io::ErrorKind::NotFound,
        object_store::Error::AlreadyExists { .. } | object_store::Error::Precondition { .. } => {
            io::ErrorKind::AlreadyExists
        }
        _ => io::ErrorKind::Other,
    };
    IoError::new(op, target, io::Error::new(kind, e))
}

fn is_taken(e: &object_store::Error) -> bool {
    matches!(
        e,
        object_store::Error::AlreadyExists { .. } | object_store::Error::Precondition { .. }
    )
}

impl Remote {
    pub fn new(
        store: Arc<dyn ObjectStore>,
        prefix: Path,
        label: String,
        retry_delay: Duration,
    ) -> Result<Remote, IoError> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("kivi-object-store")
            .enable_all()
            .build()
            .map_err(|e| IoError::new("start the object store client for", label.clone(), e))?;
        Ok(Remote {
            store,
            prefix,
            runtime: Some(runtime),
            counters: Counters::default(),
            label,
            retry_delay,
        })
    }

    /// Runs `fut` on this backend's runtime and waits for it.
    fn run<T: Send + 'static>(
        &self,
        fut: impl Future<Output = T> + Send + 'static,
    ) -> Result<T, io::Error> {
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let rt = self.runtime.as_ref().expect("runtime lives until drop");
        rt.spawn(async move {
            let _ = tx.send(fut.await);
        });
        rx.recv()
            .map_err(|_| io::Error::other("the object store request was dropped"))
    }

    fn path(&self, rel: &str) -> Path {
        let mut p = self.prefix.clone();
        for part in rel.split('/') {
            p = p.clone().join(part);
        }
        p
    }

    pub fn target(&self, rel: &str) -> String {
        format!("{}/{rel}", self.label.trim_end_matches('/'))
    }

    /// Runs one request (made afresh by `request` for each try) until it
    /// succeeds, finds nothing (NotFound is an answer, not a failure), or
    /// has failed `ATTEMPTS` times; counts every try in `tries`.
    fn retried<T, F>(
        &self,
        op: &'static str,
        rel: &str,
        tries: &AtomicU64,
        request: impl Fn(Arc<dyn ObjectStore>, Path) -> F,
    ) -> Result<object_store::Result<T>, IoError>
    where
        T: Send + 'static,
        F: Future<Output = object_store::Result<T>> + Send + 'static,
    {
        let mut last = None;
        for attempt in 0..ATTEMPTS {
            self.backoff(attempt);
            tries.fetch_add(1, Relaxed);
            let answer = self
                .run(request(self.store.clone(), self.path(rel)))
                .map_err(|e| IoError::new(op, self.target(rel), e))?;
            match answer {
                Err(e) if !matches!(e, object_store::Error::NotFound { .. }) => last = Some(e),
                answer => return Ok(answer),
            }
        }
        Ok(Err(last.expect("failed at least once")))
    }

    /// The whole object, or `None` if there is none of that name.
    pub fn get(&self, rel: &str) -> Result<Option<Bytes>, IoError> {
        let got = self.retried("get", rel, &self.counters.gets, |store, path| async move {
            store.get(&path).await?.bytes().await
        })?;
        match got {
            Ok(b) => {
                self.counters.get_bytes.fetch_add(b.len() as u64, Relaxed);
                Ok(Some(b))
            }
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(from_store("get", self.target(rel), e)),
        }
    }

    /// Several whole objects at once (`None` for a name with no object):
    /// how an opening store reads the log ahead of where it is.
    pub fn get_many(&self, rels: &[String]) -> Result<Vec<Option<Bytes>>, IoError> {
        self.counters.gets.fetch_add(rels.len() as u64, Relaxed);
        let store = self.store.clone();
        let paths: Vec<Path> = rels.iter().map(|r| self.path(r)).collect();
        let results = self
            .run(async move {
                let gets = paths.iter().map(|p| {
                    let store = store.clone();
                    async move {
                        match store.get(p).await {
                            Ok(r) => r.bytes().await.map(Some),
                            Err(object_store::Error::NotFound { .. }) => Ok(None),
                            Err(e) => Err(e),
                        }
                    }
                });
                futures::future::join_all(gets).await
            })
            .map_err(|e| IoError::new("get", self.target(&rels[0]), e))?;
        let mut out = Vec::with_capacity(rels.len());
        for (rel, got) in rels.iter().zip(results) {
            let got = match got {
                Ok(b) => b,
                // Tried again alone, with the usual retries.
                Err(_) => self.get(rel)?,
            };
            if let Some(b) = &got {
                self.counters.get_bytes.fetch_add(b.len() as u64, Relaxed);
            }
            out.push(got);
        }
        Ok(out)
    }

    /// Bytes `range` of an object that exists.
    pub fn get_range(&self, rel: &str, range: Range<u64>) -> Result<Bytes, IoError> {
        let got = self.retried("get", rel, &self.counters.gets, |store, path| {
            let range = range.clone();
            async move { store.get_range(&path, range).await }
        })?;
        let b = got.map_err(|e| from_store("get", self.target(rel), e))?;
        self.counters.get_bytes.fetch_add(b.len() as u64, Relaxed);
        Ok(b)
    }

    /// Creates `rel` holding `bytes` unless the name is taken. Every
    /// ambiguous answer (a timeout or 5xx after the put may have landed, a
    /// 409, "already exists" to a retry of our own put) is settled by
    /// reading the object back and comparing it with ours, byte for byte:
    /// every object this backend writes carries its writer's random id, so
    /// equal bytes mean it is ours.
    pub fn put_create(&self, rel: &str, bytes: Bytes) -> Result<Created, IoError> {
        let mut last: Option<object_store::Error> = None;
        for attempt in 0..ATTEMPTS {
            self.backoff(attempt);
            if attempt > 0 {
                // Did an earlier attempt land, or someone else's put?
                if let Some(found) = self.get(rel)? {
                    return Ok(self.settle(found, &bytes));
                }
            }
            self.counters.puts.fetch_add(1, Relaxed);
            self.counters
                .put_bytes
                .fetch_add(bytes.len() as u64, Relaxed);
            let (store, path, payload) = (self.store.clone(), self.path(rel), bytes.clone());
            let put = self
                .run(async move {
                    let opts = PutOptions {
                        mode: PutMode::Create,
                        ..Default::default()
                    };
                    store
                        .put_opts(&path, PutPayload::from_bytes(payload), opts)
                        .await
                })
                .map_err(|e| IoError::new("put", self.target(rel), e))?;
            match put {
                Ok(_) => return Ok(Created::Ours),
                Err(e) if is_taken(&e) => {
                    self.counters.conflicts.fetch_add(1, Relaxed);
                    match self.get(rel)? {
                        Some(found) => return Ok(self.settle(found, &bytes)),
                        // Taken, then deleted: try again.
                        None => last = Some(e),
                    }
                }
                Err(e) => last = Some(e),
            }
        }
        Err(from_store(
            "put",
            self.target(rel),
            last.expect("failed at least once"),
        ))
    }

    /// [`Remote::put_create`] of each of `puts` at once, one thread each;
    /// the answers in the same order.
    pub fn put_create_many(&self, puts: &[(String, Bytes)]) -> Vec<Result<Created, IoError>> {
        std::thread::scope(|s| {
            let handles: Vec<_> = puts
                .iter()
                .map(|(rel, bytes)| s.spawn(move || self.put_create(rel, bytes.clone())))
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("a put's thread does not panic"))
                .collect()
        })
    }

    fn settle(&self, found: Bytes, ours: &Bytes) -> Created {
        if found == *ours {
            Created::Ours
        } else {
            self.counters.conflicts.fetch_add(1, Relaxed);
            Created::Theirs(found)
        }
    }

    /// Puts `rel`, replacing whatever is there (the lease only: every other
    /// object is created once).
    pub fn put_overwrite(&self, rel: &str, bytes: Bytes) -> Result<(), IoError> {
        self.counters
            .put_bytes
            .fetch_add(bytes.len() as u64, Relaxed);
        let done = self.retried("put", rel, &self.counters.puts, |store, path| {
            let payload = PutPayload::from_bytes(bytes.clone());
            async move { store.put(&path, payload).await.map(|_| ()) }
        })?;
        done.map_err(|e| from_store("put", self.target(rel), e))
    }

    /// Deletes `rel`; deleting what is not there succeeds.
    pub fn delete(&self, rel: &str) -> Result<(), IoError> {
        let done = self.retried(
            "delete",
            rel,
            &self.counters.deletes,
            |store, path| async move { store.delete(&path).await },
        )?;
        match done {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(from_store("delete", self.target(rel), e)),
        }
    }

    /// Every object under `rel_prefix` (a folder), as (name relative to the
    /// store's prefix, size). Only opening a store lists.
    pub fn list(&self, rel_prefix: &str) -> Result<Vec<(String, u64)>, IoError> {
        self.counters.lists.fetch_add(1, Relaxed);
        let (store, path) = (self.store.clone(), self.path(rel_prefix));
        let base = self.prefix.clone();
        let listed = self
            .run(async move {
                let mut out = Vec::new();
                let mut stream = store.list(Some(&path));
                while let Some(meta) = stream.next().await {
                    let meta = meta?;
                    let rel = match meta.location.prefix_match(&base) {
                        Some(parts) => parts
                            .map(|p| p.as_ref().to_string())
                            .collect::<Vec<_>>()
                            .join("/"),
                        None => continue,
                    };
                    out.push((rel, meta.size));
                }
                Ok::<_, object_store::Error>(out)
            })
            .map_err(|e| IoError::new("list", self.target(rel_prefix), e))?;
        let mut out = listed.map_err(|e| from_store("list", self.target(rel_prefix), e))?;
        // A listing comes in pages of 1,000 names on S3.
        let pages = (out.len() as u64).div_ceil(1000).max(1);
        self.counters.lists.fetch_add(pages - 1, Relaxed);
        out.sort();
        Ok(out)
    }

    fn backoff(&self, attempt: u32) {
        if attempt > 0 {
            self.counters.retries.fetch_add(1, Relaxed);
            std::thread::sleep(self.retry_delay * (1 << attempt.min(6)) / 2);
        }
    }
}

/// A message as an I/O error of `op` on `target`.
pub(crate) fn other(op: &'static str, target: String, msg: String) -> IoError {
    IoError::new(op, target, io::Error::other(msg))
}
