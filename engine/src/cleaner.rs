//! The cleaner: copies the live records out of old page segments (as part
//! of a checkpoint) so that the segments can be deleted, keeping the files
//! within `Options::space_amplification_max` of the live bytes.
//! What to clean is decided by `plan`, without I/O.

pub(crate) mod plan;
