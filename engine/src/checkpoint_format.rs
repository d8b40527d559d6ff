//! What a checkpoint record means for the page segments: facts of the
//! on-disk format (ARCHITECTURE.md, "Checkpoint record") that recovery,
//! opening a store and the checkpointer all read the same way. Nothing
//! here holds state or writes; it sits below all three so that recovery
//! does not depend on the checkpointer's running machinery.

use kivi_log::CheckpointRecord;

/// Page segments before the returned id hold nothing checkpoint `rec`
/// references: its tree's oldest segment, or for an empty tree the segment
/// its page stream ends in (which recovery expects to find).
pub(crate) fn unreferenced_below(rec: &CheckpointRecord) -> u32 {
    match rec.root {
        Some(_) => rec.root_oldest,
        None => rec.page_end.segment,
    }
}
