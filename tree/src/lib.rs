//! The tree layer: a copy-on-write B+tree whose pages are records in the log.
//!
//! - `leaf`, `node`: nodes as they live in memory (immutable bases with small
//!   overlays, so a change never copies a whole page);
//! - `page`: the page format on disk and its validating decoder;
//! - `pager`: finding nodes by page reference through a byte-bounded cache;
//! - `apply`: applying a sorted batch copy-on-write;
//! - `read`: point lookups and ordered cursors;
//! - `checkpoint`: writing a version's new nodes to the log, then releasing them;
//! - `link`: linking the nodes the cache holds into a tree read back from pages;
//! - `check`: reading every reachable page and checking every invariant;
//! - `written`: which checkpoint generations are durable, and where each
//!   node was written by which.

// Every public item says what it does: this crate is published (crates.io),
// and its API documentation is what its users read.
#![warn(missing_docs)]

mod apply;
mod check;
mod checkpoint;
#[cfg(feature = "fuzzing")]
pub mod fuzzing;
mod leaf;
mod leaf_view;
mod link;
mod node;
mod page;
mod pager;
mod read;
mod written;

pub use apply::{apply, Applied, TreeConfig};
pub use check::{check_tree, CheckReport};
pub use checkpoint::{release_written, root_children, write_tree, PageSink, TreeWrite, WriteStats};
pub use leaf::{compare_keys, head as key_head, prefetch_line, ValueRef, INLINE_VALUE_MAX};
pub use link::link_cached;
pub use node::{DiskRef, Node};
pub use page::MAX_LEVEL;
pub use pager::{Pager, PagerStats};
pub use read::{expired_each, get_each, get_into, keys_in_leaf_of, Cursor};
pub use written::Durable;
