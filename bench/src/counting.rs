//! An object store that counts the requests made through it: the
//! object-store suite puts one around each store's client, so kivi and
//! SlateDB are counted by the same code (kivi's own `Stats` give a second,
//! independent count of kivi's).
//!
//! A request is one call into the store: a put (a multipart upload counts
//! one per part and one for its completion), a get (ranged or not, heads
//! included), a delete, a listing (one per call, however many pages the
//! client fetched for it) or a copy.

use async_trait::async_trait;
use futures::stream::BoxStream;
use futures::StreamExt;
use object_store::path::Path;
use object_store::{
    CopyOptions, GetOptions, GetResult, ListResult, MultipartUpload, ObjectMeta, ObjectStore,
    PutMultipartOptions, PutOptions, PutPayload, PutResult, Result, UploadPart,
};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;

/// Requests and bytes counted so far (or between two snapshots).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    pub puts: u64,
    pub put_bytes: u64,
    pub gets: u64,
    pub get_bytes: u64,
    pub deletes: u64,
    pub lists: u64,
    pub copies: u64,
}

impl Counts {
    /// Every request, whatever its kind.
    pub fn requests(&self) -> u64 {
        self.puts + self.gets + self.deletes + self.lists + self.copies
    }

    /// What was counted since `before`.
    pub fn since(&self, before: &Counts) -> Counts {
        Counts {
            puts: self.puts - before.puts,
            put_bytes: self.put_bytes - before.put_bytes,
            gets: self.gets - before.gets,
            get_bytes: self.get_bytes - before.get_bytes,
            deletes: self.deletes - before.deletes,
            lists: self.lists - before.lists,
            copies: self.copies - before.copies,
        }
    }
}

#[derive(Debug, Default)]
struct Counters {
    puts: AtomicU64,
    put_bytes: AtomicU64,
    gets: AtomicU64,
    get_bytes: AtomicU64,
    deletes: AtomicU64,
    lists: AtomicU64,
    copies: AtomicU64,
}

impl Counters {
    fn put(&self, bytes: usize) {
        self.puts.fetch_add(1, Relaxed);
        self.put_bytes.fetch_add(bytes as u64, Relaxed);
    }
}

/// Counts the requests made to `inner`.
pub struct CountingStore {
    inner: Arc<dyn ObjectStore>,
    counters: Arc<Counters>,
}

impl CountingStore {
    pub fn new(inner: Arc<dyn ObjectStore>) -> Self {
        CountingStore {
            inner,
            counters: Arc::default(),
        }
    }

    pub fn counts(&self) -> Counts {
        let c = &self.counters;
        Counts {
            puts: c.puts.load(Relaxed),
            put_bytes: c.put_bytes.load(Relaxed),
            gets: c.gets.load(Relaxed),
            get_bytes: c.get_bytes.load(Relaxed),
            deletes: c.deletes.load(Relaxed),
            lists: c.lists.load(Relaxed),
            copies: c.copies.load(Relaxed),
        }
    }
}

impl fmt::Debug for CountingStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CountingStore({})", self.inner)
    }
}

impl fmt::Display for CountingStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CountingStore({})", self.inner)
    }
}

/// A multipart upload whose parts are counted as puts.
#[derive(Debug)]
struct CountingUpload {
    inner: Box<dyn MultipartUpload>,
    counters: Arc<Counters>,
}

#[async_trait]
impl MultipartUpload for CountingUpload {
    fn put_part(&mut self, data: PutPayload) -> UploadPart {
        self.counters.put(data.content_length());
        self.inner.put_part(data)
    }

    async fn complete(&mut self) -> Result<PutResult> {
        self.counters.put(0);
        self.inner.complete().await
    }

    async fn abort(&mut self) -> Result<()> {
        self.counters.deletes.fetch_add(1, Relaxed);
        self.inner.abort().await
    }
}

#[async_trait]
impl ObjectStore for CountingStore {
    async fn put_opts(
        &self,
        location: &Path,
        payload: PutPayload,
        opts: PutOptions,
    ) -> Result<PutResult> {
        self.counters.put(payload.content_length());
        self.inner.put_opts(location, payload, opts).await
    }

    async fn put_multipart_opts(
        &self,
        location: &Path,
        opts: PutMultipartOptions,
    ) -> Result<Box<dyn MultipartUpload>> {
        // Starting an upload is a request of its own (S3's
        // CreateMultipartUpload), its parts and completion more.
        self.counters.put(0);
        let inner = self.inner.put_multipart_opts(location, opts).await?;
        Ok(Box::new(CountingUpload {
            inner,
            counters: self.counters.clone(),
        }))
    }

    async fn get_opts(&self, location: &Path, options: GetOptions) -> Result<GetResult> {
        self.counters.gets.fetch_add(1, Relaxed);
        let head = options.head;
        let got = self.inner.get_opts(location, options).await?;
        if !head {
            // The bytes the server was asked for and answers with; the
            // caller reads them from the payload.
            let len = got.range.end - got.range.start;
            self.counters.get_bytes.fetch_add(len, Relaxed);
        }
        Ok(got)
    }

    fn delete_stream(
        &self,
        locations: BoxStream<'static, Result<Path>>,
    ) -> BoxStream<'static, Result<Path>> {
        let counters = self.counters.clone();
        let counted = locations
            .inspect(move |_| {
                counters.deletes.fetch_add(1, Relaxed);
            })
            .boxed();
        self.inner.delete_stream(counted)
    }

    fn list(&self, prefix: Option<&Path>) -> BoxStream<'static, Result<ObjectMeta>> {
        self.counters.lists.fetch_add(1, Relaxed);
        self.inner.list(prefix)
    }

    async fn list_with_delimiter(&self, prefix: Option<&Path>) -> Result<ListResult> {
        self.counters.lists.fetch_add(1, Relaxed);
        self.inner.list_with_delimiter(prefix).await
    }

    async fn copy_opts(&self, from: &Path, to: &Path, options: CopyOptions) -> Result<()> {
        self.counters.copies.fetch_add(1, Relaxed);
        self.inner.copy_opts(from, to, options).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object_store::memory::InMemory;
    use object_store::{ObjectStoreExt, PutMode};

    #[test]
    fn every_kind_of_request_is_counted_with_its_bytes() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let store = CountingStore::new(Arc::new(InMemory::new()));
        rt.block_on(async {
            let p = Path::from("a/b");
            let opts = PutOptions {
                mode: PutMode::Create,
                ..Default::default()
            };
            store
                .put_opts(&p, vec![7u8; 80].into(), opts)
                .await
                .unwrap();
            assert_eq!(
                store.get(&p).await.unwrap().bytes().await.unwrap().len(),
                80
            );
            store.get_range(&p, 10..20).await.unwrap();
            let listed: Vec<_> = store.list(Some(&Path::from("a"))).collect().await;
            assert_eq!(listed.len(), 1);
            store.delete(&p).await.unwrap();
        });
        let c = store.counts();
        assert_eq!(
            c,
            Counts {
                puts: 1,
                put_bytes: 80,
                gets: 2,
                get_bytes: 90,
                deletes: 1,
                lists: 1,
                copies: 0,
            }
        );
        assert_eq!(c.requests(), 5);
        assert_eq!(c.since(&c), Counts::default());
    }
}
