//! Reading a target's own parameters (an address, a mode) off the front of
//! its input. Short input reads as zeros rather than failing, so that every
//! input reaches the decoder.

pub struct Input<'a>(pub &'a [u8]);

impl<'a> Input<'a> {
    fn take<const N: usize>(&mut self) -> [u8; N] {
        let mut out = [0u8; N];
        let n = N.min(self.0.len());
        out[..n].copy_from_slice(&self.0[..n]);
        self.0 = &self.0[n..];
        out
    }

    pub fn u8(&mut self) -> u8 {
        self.take::<1>()[0]
    }

    pub fn u16(&mut self) -> u16 {
        u16::from_le_bytes(self.take())
    }

    pub fn u32(&mut self) -> u32 {
        u32::from_le_bytes(self.take())
    }

    pub fn u64(&mut self) -> u64 {
        u64::from_le_bytes(self.take())
    }

    /// What is left: the bytes for the decoder.
    pub fn rest(self) -> &'a [u8] {
        self.0
    }
}
