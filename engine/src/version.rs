use crate::write_buffer::WriteBuffer;
use kivi_tree::Node;
use parking_lot::Mutex;
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::Arc;

/// One committed state of the store. Immutable: readers hold one for as
/// long as they like, and the writer publishes a new one after each commit.
///
/// The state is the tree (`root`, which holds the commits up to `seq`) with
/// the write buffer laid over it (the commits after, up to `visible_seq`).
/// `seq`, `pairs` and `log_bytes` describe the tree, which is what a
/// checkpoint writes; readers see `visible_seq`.
#[derive(Clone, Default)]
pub(crate) struct Version {
    /// Shared by the versions published between two checkpoints. The cleaner
    /// deletes a segment only once every version that could still read it
    /// is gone: it holds the epoch weakly and waits until it dies. Declared
    /// first so that it is dropped first: freeing a large superseded tree
    /// takes a while, and nothing can read through a version being dropped.
    pub epoch: Arc<Epoch>,
    pub root: Option<Arc<Node>>,
    /// Sequence number of the last commit the tree includes.
    pub seq: u64,
    /// Pairs in the tree.
    pub pairs: u64,
    /// Commit-log bytes written up to the tree's last commit since the store
    /// was opened (plus those replayed at open): the redo a checkpoint of
    /// it retires.
    pub log_bytes: u64,
    /// The commits after `seq`, up to `visible_seq`: exactly those (a
    /// buffer never changes; the next commit makes a new one sharing most
    /// of it).
    pub buffer: Arc<WriteBuffer>,
    /// Sequence number of the last commit this version includes.
    pub visible_seq: u64,
    /// Commit-log bytes up to `visible_seq`, counted as `log_bytes` is.
    pub visible_log_bytes: u64,
}

impl Version {
    /// A version of `root` alone, with an empty buffer.
    pub fn of_tree(root: Option<Arc<Node>>, seq: u64, pairs: u64, log_bytes: u64) -> Self {
        Version {
            epoch: Arc::default(),
            root,
            seq,
            pairs,
            log_bytes,
            buffer: Arc::default(),
            visible_seq: seq,
            visible_log_bytes: log_bytes,
        }
    }
}

impl std::fmt::Debug for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Version")
            .field("seq", &self.seq)
            .field("pairs", &self.pairs)
            .field("visible_seq", &self.visible_seq)
            .field("buffered_writes", &self.buffer.writes())
            .finish()
    }
}

/// See `Version::epoch`.
#[derive(Debug, Default)]
pub(crate) struct Epoch;

/// Versions waiting to be freed, at most.
const RECLAIM_QUEUE: usize = 8;

/// Drops superseded versions on a thread of its own. Replacing a version
/// frees every node the new one no longer shares (a thousand or so for a
/// batch of random updates); doing that on the committing thread would
/// delay the next commit.
pub(crate) struct Reclaimer {
    tx: Mutex<Option<SyncSender<Arc<Version>>>>,
}

impl Default for Reclaimer {
    fn default() -> Self {
        let (tx, rx) = sync_channel::<Arc<Version>>(RECLAIM_QUEUE);
        let spawned = std::thread::Builder::new()
            .name("kivi-reclaim".into())
            // Ends when the sender is dropped with the store.
            .spawn(move || rx.into_iter().for_each(drop));
        Reclaimer {
            tx: Mutex::new(spawned.ok().map(|_| tx)),
        }
    }
}

impl Reclaimer {
    /// Frees `version` elsewhere, or here when the queue is full (which also
    /// slows a writer that outruns the freeing).
    pub fn dispose(&self, version: Arc<Version>) {
        let rejected = match &*self.tx.lock() {
            Some(tx) => match tx.try_send(version) {
                Ok(()) => None,
                Err(TrySendError::Full(v) | TrySendError::Disconnected(v)) => Some(v),
            },
            None => Some(version),
        };
        drop(rejected);
    }

    /// A reader's end with `version`: freed elsewhere when the reader holds
    /// the last reference (a version superseded while a scan or snapshot
    /// kept it: freeing its old tree and write buffer is up to ~25,000
    /// leaves and ~160,000 buffered writes at 1M pairs, which a scan of the
    /// whole store would otherwise pay for), else just released. Another
    /// reader letting go at the same moment may still free it in place,
    /// which costs time, never correctness.
    pub fn release(&self, version: Arc<Version>) {
        if Arc::strong_count(&version) == 1 {
            self.dispose(version);
        }
    }
}
