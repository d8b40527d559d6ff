//! Every limit kivi enforces, in one place. Exceeding one is a clear error,
//! never a crash and never a silent truncation.

/// Longest key (4 KiB).
pub const MAX_KEY_LEN: usize = kivi_log::MAX_KEY_LEN;
/// Longest value (16 MiB). Values over [`INLINE_VALUE_MAX`] are stored out of
/// line, so they never bloat tree pages.
pub const MAX_VALUE_LEN: usize = kivi_log::MAX_VALUE_LEN;
/// Values longer than this (1 KiB) live in their own records, not in pages.
pub const INLINE_VALUE_MAX: usize = kivi_tree::INLINE_VALUE_MAX;
/// Most bytes of keys and values in one write batch (64 MiB).
pub const MAX_BATCH_BYTES: usize = 64 << 20;
/// Most bytes of batches waiting to be committed; writers beyond it wait.
pub const MAX_QUEUED_BYTES: usize = 128 << 20;
/// Most batches waiting to be committed; writers beyond it wait.
pub const MAX_QUEUED_BATCHES: usize = 1 << 16;
/// Most bytes of batches one group commit takes (a larger batch goes alone).
pub const MAX_GROUP_BYTES: usize = 16 << 20;

/// Group commits in flight at once, at most, on storage that overlaps syncs
/// (see `commit`): with a round trip of 30 ms per sync, 16 in flight allow
/// about 530 group commits a second.
pub const MAX_GROUPS_IN_FLIGHT: usize = 16;
