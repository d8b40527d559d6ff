//! Fuzz targets: one function per decoder of bytes kivi did not just write
//! (requests from clients, files and objects read back from storage that
//! may be damaged or forged). Each must return normally on any input: a
//! panic, an abort or a hang is a bug. Where a decoder accepts its input,
//! the target also checks a property that costs little (encoding the
//! value again and decoding it gives the same value; a parse takes no more
//! bytes than it was given), and those checks panic when they fail.
//!
//! `fuzz/` runs them under libFuzzer (`fuzz/run.sh`), from the corpora in
//! `fuzz/corpus/<target>/` that `examples/corpus.rs` writes from bytes kivi
//! really writes and clients really send; `tests/replay.rs` replays those
//! corpora and the crash inputs kept in `fuzz/regressions/<target>/` on
//! every `cargo test`.
//!
//! Checksummed formats have a target that feeds raw bytes (which a
//! mutation almost always makes fail the checksum) and a way for the
//! fuzzer past the checksum: the target frames what it is given with a
//! correct one itself, so the decoders behind the checksum see mutated
//! bodies.

mod engine;
mod input;
mod kvlds;
mod log;
mod object;
mod resp;
mod table;
mod tree;

pub use engine::{engine_identity, store_recovery};
pub use kvlds::{kvlds_packet, kvlds_request};
pub use log::{log_record, log_record_body, log_segment};
pub use object::{object_lease, object_log_entry};
pub use resp::resp_request;
pub use table::{table_block, table_headers, table_open};
pub use tree::{tree_delta, tree_page};

/// How the targets read their inputs, for the corpus writer
/// (examples/corpus.rs).
pub mod layout {
    pub use crate::log::segment_id;
    pub use crate::object::{format, lease};
    pub use crate::tree::at_prefix;
}

/// A fuzz target: takes any bytes, returns normally.
pub type Target = fn(&[u8]);

/// Every target by name: the names of `fuzz/fuzz_targets/*.rs` and of the
/// corpus folders.
pub const TARGETS: &[(&str, Target)] = &[
    ("resp_request", resp_request),
    ("kvlds_packet", kvlds_packet),
    ("kvlds_request", kvlds_request),
    ("log_record", log_record),
    ("log_record_body", log_record_body),
    ("log_segment", log_segment),
    ("tree_page", tree_page),
    ("tree_delta", tree_delta),
    ("engine_identity", engine_identity),
    ("store_recovery", store_recovery),
    ("table_open", table_open),
    ("table_block", table_block),
    ("table_headers", table_headers),
    ("object_log_entry", object_log_entry),
    ("object_lease", object_lease),
];
