//! Helpers shared by the hand-written FFI adapters ([`super::rocksdb`] and
//! [`super::leveldb`]): both C APIs report errors the same way (a `char**
//! errptr` that the call fills with a `malloc`'d, NUL-terminated message) and
//! return values the same way (a `malloc`'d buffer and its length).

use super::{err, Result};
use std::ffi::{c_char, c_void, CStr, CString};
use std::path::Path;
use std::ptr::NonNull;

/// Declares opaque C types (`typedef struct x x;` in the headers): never
/// built or read from Rust, only pointed to. Per the Rustonomicon's advice,
/// zero-sized, `!Send`, `!Sync` and `!Unpin`.
macro_rules! opaque_types {
    ($($name:ident),* $(,)?) => {$(
        #[allow(non_camel_case_types)]
        #[repr(C)]
        pub(super) struct $name {
            _data: [u8; 0],
            _marker: core::marker::PhantomData<(*mut u8, core::marker::PhantomPinned)>,
        }
    )*};
}
pub(super) use opaque_types;

/// An owned pointer to a C object, released by its library's destroy/close
/// function on drop.
pub(super) struct Handle<T> {
    ptr: NonNull<T>,
    destroy: unsafe extern "C" fn(*mut T),
}

impl<T> Handle<T> {
    /// Takes ownership of `ptr`, the result of a C constructor named `what`;
    /// an error if it is null.
    ///
    /// # Safety
    ///
    /// A non-null `ptr` must be a live object that `destroy` releases, owned
    /// by nobody else, and not released by any other means.
    pub(super) unsafe fn new(
        store: &str,
        what: &str,
        ptr: *mut T,
        destroy: unsafe extern "C" fn(*mut T),
    ) -> Result<Self> {
        match NonNull::new(ptr) {
            Some(ptr) => Ok(Handle { ptr, destroy }),
            None => Err(err(store, format!("{what} returned null"))),
        }
    }

    pub(super) fn as_ptr(&self) -> *mut T {
        self.ptr.as_ptr()
    }
}

impl<T> Drop for Handle<T> {
    fn drop(&mut self) {
        // SAFETY: `new`'s contract: we own the object and `destroy` is its
        // release function; drop runs once, and nothing borrowed from the
        // object outlives `self` (borrows are tied to `&self`).
        unsafe { (self.destroy)(self.ptr.as_ptr()) }
    }
}

/// The library's `free` (`rocksdb_free` / `leveldb_free`): what must release
/// the strings and buffers it hands out.
pub(super) type FreeFn = unsafe extern "C" fn(*mut c_void);

/// `dir` as the NUL-terminated string both `*_open` functions take.
pub(super) fn c_path(store: &str, dir: &Path) -> Result<CString> {
    use std::os::unix::ffi::OsStrExt;
    CString::new(dir.as_os_str().as_bytes())
        .map_err(|_| err(store, format!("{}: path holds a NUL byte", dir.display())))
}

/// An `errptr` out-parameter. It starts null, as both libraries require (they
/// `free` a non-null one before storing a new message), and frees whatever
/// message the library stored when it is dropped.
pub(super) struct ErrPtr {
    ptr: *mut c_char,
    free: FreeFn,
}

impl ErrPtr {
    pub(super) fn new(free: FreeFn) -> Self {
        ErrPtr {
            ptr: std::ptr::null_mut(),
            free,
        }
    }

    /// The `char**` to pass as the call's `errptr`.
    pub(super) fn as_out(&mut self) -> *mut *mut c_char {
        &mut self.ptr
    }

    /// `Ok` if the call stored no message, otherwise the message as a
    /// [`StoreError`] naming `store`. The message is freed here (or by Drop).
    pub(super) fn check(mut self, store: &str) -> Result<()> {
        if self.ptr.is_null() {
            return Ok(());
        }
        // SAFETY: a non-null errptr was set by the library to a string it
        // made with strdup(), so it is NUL-terminated and valid until freed;
        // the message is copied out before the free below.
        let msg = unsafe { CStr::from_ptr(self.ptr) }
            .to_string_lossy()
            .into_owned();
        self.release();
        Err(err(store, msg))
    }

    fn release(&mut self) {
        if !self.ptr.is_null() {
            // SAFETY: the pointer came from the library's malloc (strdup) and
            // `free` is that library's matching deallocator; it is nulled
            // right after, so it is freed once.
            unsafe { (self.free)(self.ptr.cast()) };
            self.ptr = std::ptr::null_mut();
        }
    }
}

impl Drop for ErrPtr {
    fn drop(&mut self) {
        self.release();
    }
}

/// A value buffer `malloc`'d by the library (`rocksdb_get` / `leveldb_get`),
/// freed with the library's `free` on drop.
pub(super) struct CBuf {
    ptr: *mut c_char,
    len: usize,
    free: FreeFn,
}

impl CBuf {
    /// # Safety
    ///
    /// `ptr` must be non-null, point to `len` readable bytes allocated by the
    /// library whose deallocator is `free`, and be owned by the caller (not
    /// freed or used elsewhere afterwards).
    pub(super) unsafe fn new(ptr: *mut c_char, len: usize, free: FreeFn) -> Self {
        debug_assert!(!ptr.is_null());
        CBuf { ptr, len, free }
    }

    pub(super) fn as_bytes(&self) -> &[u8] {
        // SAFETY: `new`'s contract: `ptr` points to `len` bytes we own until
        // drop; the slice borrows `self`, so it cannot outlive the buffer.
        unsafe { borrowed(self.ptr, self.len) }
    }
}

impl Drop for CBuf {
    fn drop(&mut self) {
        // SAFETY: `new`'s contract: we own the buffer and `free` is the
        // library's deallocator for it; drop runs once.
        unsafe { (self.free)(self.ptr.cast()) }
    }
}

/// The `len` bytes at `ptr` as a slice (empty if `len` is 0, whatever `ptr`
/// is: C may hand back a null or dangling pointer for an empty slice, which a
/// Rust slice may not hold).
///
/// # Safety
///
/// If `len > 0`, `ptr` must point to `len` readable bytes that stay valid and
/// unchanged for `'a`.
pub(super) unsafe fn borrowed<'a>(ptr: *const c_char, len: usize) -> &'a [u8] {
    if len == 0 {
        &[]
    } else {
        // SAFETY: the caller guarantees `ptr` points to `len` bytes valid for
        // 'a; `len > 0` here, so `ptr` is a real (non-null) allocation, and
        // u8 has alignment 1.
        unsafe { std::slice::from_raw_parts(ptr.cast::<u8>(), len) }
    }
}

/// A Rust slice as the `(const char*, size_t)` pair the C APIs take. The
/// libraries only read `len` bytes from the pointer (none if `len` is 0).
pub(super) fn c_slice(bytes: &[u8]) -> (*const c_char, usize) {
    (bytes.as_ptr().cast(), bytes.len())
}
