//! Explicit limits on what kivi's sealed tables accept, and why.

/// Largest key kivi writes or reads (64 MiB). Keys are compared and hashed
/// whole, and the index build reads them back from the log for every equal
/// stored hash; beyond this a "key" is a misuse or a corrupt length.
pub const MAX_KEY_LEN: u64 = 64 << 20;

/// Largest value (4 GiB - 1). A value of a compressed log is assembled in
/// memory when read; a larger length in a file is far more likely damage.
pub const MAX_VALUE_LEN: u64 = u32::MAX as u64;

/// Largest compression block (1 GiB, the sparkey CLI's upper bound): a
/// block is decompressed whole into memory.
pub const MAX_BLOCK_SIZE: u64 = 1 << 30;

/// Smallest compression block the writer accepts (sparkey's library minimum).
pub const MIN_BLOCK_SIZE: u32 = 10;

/// Default block size of compressed logs ("use 4k blocks everywhere").
pub const DEFAULT_BLOCK_SIZE: u32 = 4096;

/// Default memory budget of an index build.
pub const DEFAULT_MEMORY_LIMIT: u64 = 256 << 20;
