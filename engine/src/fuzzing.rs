//! The engine's private decoders, for the fuzz targets (`fuzz-targets/`),
//! which feed them bytes kivi did not write. Not part of the API: compiled
//! only with the `fuzzing` feature.
#![doc(hidden)]

use crate::{checkpoint_format, identity, Result};
use kivi_log::CheckpointRecord;

/// Reads an identity file: the store id and the format it names.
pub fn decode_identity(bytes: &[u8]) -> Result<([u8; 16], u32)> {
    identity::decode(bytes, "fuzz")
}

/// The identity file this build writes for `store_id`.
pub fn encode_identity(store_id: [u8; 16]) -> Vec<u8> {
    identity::encode(store_id)
}

/// Page segments before the returned id hold nothing checkpoint `rec`
/// references.
pub fn unreferenced_below(rec: &CheckpointRecord) -> u32 {
    checkpoint_format::unreferenced_below(rec)
}
