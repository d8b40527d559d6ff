use kivi_tree::Node;
use parking_lot::Mutex;
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};
use std::sync::Arc;

/// One committed state of the store. Immutable: readers hold one for as
/// long as they like, and the writer publishes a new one after each commit.
#[derive(Debug, Clone, Default)]
pub(crate) struct Version {
    /// Shared by the versions published between two checkpoints. The cleaner
    /// deletes a segment only once every version that could still read it
    /// is gone: it holds the epoch weakly and waits until it dies. Declared
    /// first so that it is dropped first: freeing a large superseded tree
    /// takes a while, and nothing can read through a version being dropped.
    pub epoch: Arc<Epoch>,
    pub root: Option<Arc<Node>>,
    /// Sequence number of the last commit included.
    pub seq: u64,
    pub pairs: u64,
    /// Commit-log bytes written up to this version since the store was opened
    /// (plus those replayed at open): the redo a checkpoint of it retires.
    pub log_bytes: u64,
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
}
