//! The tables' private decoders, for the fuzz targets (`fuzz-targets/`),
//! which feed them bytes kivi did not write. Not part of the API: compiled
//! only with the `fuzzing` feature.
#![doc(hidden)]

pub use crate::block::decompress_into;
pub use crate::snappy_prefix::{SnappyError, SnappyPrefix};

/// A sidecar's bytes parsed, then written again from what they said.
pub fn sidecar_again(bytes: &[u8]) -> Result<Vec<u8>, String> {
    crate::sidecar::Sidecar::parse(bytes).map(|s| s.to_bytes())
}
