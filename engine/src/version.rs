use kivi_tree::Node;
use std::sync::Arc;

/// One committed state of the store. Immutable: readers hold one for as
/// long as they like, and the writer publishes a new one after each commit.
#[derive(Debug, Clone, Default)]
pub(crate) struct Version {
    pub root: Option<Arc<Node>>,
    /// Sequence number of the last commit included.
    pub seq: u64,
    pub pairs: u64,
    /// Commit-log bytes written up to this version since the store was opened
    /// (plus those replayed at open): the redo a checkpoint of it retires.
    pub log_bytes: u64,
}
