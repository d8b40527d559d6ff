//! The tables' private decoders, for the fuzz targets (`fuzz-targets/`),
//! which feed them bytes kivi did not write. Not part of the API: compiled
//! only with the `fuzzing` feature.
#![doc(hidden)]

use crate::snappy_prefix::SnappyPrefix;

pub use crate::block::decompress_into;
pub use crate::snappy_prefix::SnappyError;

/// A sidecar's bytes parsed, then written again from what they said.
pub fn sidecar_again(bytes: &[u8]) -> Result<Vec<u8>, String> {
    crate::sidecar::Sidecar::parse(bytes).map(|s| s.to_bytes())
}

/// A snappy block as the prefix decoder of lookups decodes it, asked for
/// `step` more bytes at a time until the whole block is out.
pub fn snappy_in_steps(input: &[u8], max_len: usize, step: usize) -> Result<Vec<u8>, SnappyError> {
    let mut out = Vec::new();
    let mut d = SnappyPrefix::new(input, max_len, &mut out)?;
    let mut want = 0;
    loop {
        want += step.max(1);
        d.fill_to(want, &mut out)?;
        // Fewer bytes than asked: that is all of them.
        if d.decoded() < want {
            out.truncate(d.decoded());
            return Ok(out);
        }
    }
}
