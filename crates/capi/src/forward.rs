//! Symbol forwarding: each wrapper calls the next definition of its own
//! symbol (normally the C library's), found once per call site through the
//! one resolver, [`farmem_sys::dl::Next`].

/// The next definition of the C function named `$name` (a `&CStr`), as
/// function type `$ty`, resolved once per call site.
macro_rules! real {
    ($name:expr, $ty:ty) => {{
        static NEXT: farmem_sys::dl::Next = farmem_sys::dl::Next::new($name);
        let f = NEXT.or_die();
        // The expansion may sit inside an unsafe block of its caller.
        #[allow(unused_unsafe)]
        // SAFETY: `f` is the address of the C library's function of this name,
        // whose prototype is `$ty`.
        let g = unsafe { std::mem::transmute::<usize, $ty>(f) };
        g
    }};
}
pub(crate) use real;

/// The C name of Rust identifier `$name`, as a `&'static CStr`.
macro_rules! c_name {
    ($name:ident) => {{
        const NAME: &std::ffi::CStr = match std::ffi::CStr::from_bytes_with_nul(
            concat!(stringify!($name), "\0").as_bytes(),
        ) {
            Ok(c) => c,
            Err(_) => panic!("bad symbol name"),
        };
        NAME
    }};
}
pub(crate) use c_name;
