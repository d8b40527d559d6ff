//! A cache prefetch hint, so a loop over independent random lookups (an
//! index build's inserts, a batch of gets) can have many cache misses in
//! flight instead of one: the hint for item i + k is issued while item i is
//! worked on, and the same results come out in the same order.

/// Asks the CPU to bring the cache line holding `p` closer. A hint only:
/// it reads nothing the program sees and never faults, whatever `p` is.
#[inline(always)]
pub fn prefetch<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: PREFETCHT0 has no architectural effect (it cannot fault, even
    // on an unmapped or null address, and changes no memory or register);
    // SSE, which it needs, is part of every x86_64 CPU.
    unsafe {
        core::arch::x86_64::_mm_prefetch::<{ core::arch::x86_64::_MM_HINT_T0 }>(p.cast::<i8>());
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}
