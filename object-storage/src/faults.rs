//! An object store that fails on purpose, for tests (feature `faults`):
//! around any other store, it answers each request as a plan decides, with
//! the failures a real object store produces. Ambiguous ones matter most: a
//! put that lands and still reports an error (a timeout after the write, a
//! 5xx after it landed) must be settled by reading the object back.

use async_trait::async_trait;
use futures::stream::BoxStream;
use futures::StreamExt;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    ObjectStoreExt, PutMultipartOptions, PutOptions, PutPayload, PutResult, Result,
};
use parking_lot::Mutex;
use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// What a request is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// A put (conditional or not).
    Put,
    /// A get, whole or ranged.
    Get,
    /// A delete.
    Delete,
}

/// How one request is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// As the store answers.
    None,
    /// Done, then reported failed (a timeout or 5xx after it landed).
    LandThenFail,
    /// Not done, reported failed (a 5xx, a reset connection).
    FailBefore,
    /// Not done, answered 409 (S3's ConditionalRequestConflict).
    Conflict,
    /// Done after this long.
    Slow(Duration),
}

type Plan = Box<dyn FnMut(Op, &str) -> Fault + Send>;

/// A store whose answers a plan decides, request by request.
pub struct FaultyStore {
    inner: Arc<dyn ObjectStore>,
    plan: Arc<Mutex<Plan>>,
    /// Puts of log entries under way now, and the most there were at once.
    puts_now: AtomicUsize,
    most_puts: AtomicUsize,
}

/// Counts a put under way until dropped.
struct PutUnderWay<'a>(&'a AtomicUsize);

impl Drop for PutUnderWay<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl FaultyStore {
    /// Wraps `inner`; `plan` is asked about every put and get, with its path.
    pub fn new(
        inner: Arc<dyn ObjectStore>,
        plan: impl FnMut(Op, &str) -> Fault + Send + 'static,
    ) -> Self {
        FaultyStore {
            inner,
            plan: Arc::new(Mutex::new(Box::new(plan))),
            puts_now: AtomicUsize::new(0),
            most_puts: AtomicUsize::new(0),
        }
    }

    /// The most puts of log entries (commits, mostly) under way at once.
    pub fn most_log_puts_at_once(&self) -> usize {
        self.most_puts.load(Ordering::SeqCst)
    }

    fn decide(&self, op: Op, path: &Path) -> Fault {
        (self.plan.lock())(op, path.as_ref())
    }
}

fn failure(what: &str) -> object_store::Error {
    object_store::Error::Generic {
        store: "FaultyStore",
        source: what.to_string().into(),
    }
}

impl fmt::Debug for FaultyStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FaultyStore({})", self.inner)
    }
}

impl fmt::Display for FaultyStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "FaultyStore({})", self.inner)
    }
}

#[async_trait]
impl ObjectStore for FaultyStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        let _under_way = location.as_ref().contains("log/").then(|| {
            let now = self.puts_now.fetch_add(1, Ordering::SeqCst) + 1;
            self.most_puts.fetch_max(now, Ordering::SeqCst);
            PutUnderWay(&self.puts_now)
        });
        match self.decide(Op::Put, location) {
            Fault::None => self.inner.put_opts(location, payload, opts).await,
            Fault::LandThenFail => {
                self.inner.put_opts(location, payload, opts).await?;
                Err(failure("timed out (the put landed)"))
            }
            Fault::FailBefore => Err(failure("503 Service Unavailable")),
            Fault::Conflict => Err(failure("409 ConditionalRequestConflict")),
            Fault::Slow(d) => {
                tokio::time::sleep(d).await;
                self.inner.put_opts(location, payload, opts).await
            }
        }
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        self.inner.put_multipart_opts(location, opts).await
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        match self.decide(Op::Get, location) {
            Fault::None | Fault::LandThenFail => self.inner.get_opts(location, options).await,
            Fault::FailBefore | Fault::Conflict => Err(failure("503 Service Unavailable")),
            Fault::Slow(d) => {
                tokio::time::sleep(d).await;
                self.inner.get_opts(location, options).await
            }
        }
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        let (inner, plan) = (self.inner.clone(), self.plan.clone());
        locations
            .then(move |location| {
                let (inner, plan) = (inner.clone(), plan.clone());
                async move {
                    let location = location?;
                    let fault = (plan.lock())(Op::Delete, location.as_ref());
                    match fault {
                        Fault::None | Fault::Slow(_) => {
                            inner.delete(&location).await?;
                            Ok(location)
                        }
                        Fault::LandThenFail => {
                            inner.delete(&location).await?;
                            Err(failure("timed out (the delete was done)"))
                        }
                        Fault::FailBefore | Fault::Conflict => {
                            Err(failure("503 Service Unavailable"))
                        }
                    }
                }
            })
            .boxed()
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        self.inner.copy_opts(from, to, options).await
    }
}
