//! The register image of a C argument, as system calls take it.

/// The register image of a C argument: the 64-bit word the x86-64 ABI
/// passes it in (signed values sign-extended), as a system call's
/// `[usize; 6]` arguments hold it. The same bits `x as usize` gives, with
/// no cast that could hide a truncation; cannot panic. The way back, a C
/// `int` from its register, is [`farmem_sys::int_arg`].
pub trait Reg: Copy {
    fn reg(self) -> usize;
}

impl Reg for i64 {
    #[inline]
    fn reg(self) -> usize {
        usize::from_ne_bytes(self.to_ne_bytes())
    }
}

impl Reg for isize {
    #[inline]
    fn reg(self) -> usize {
        usize::from_ne_bytes(self.to_ne_bytes())
    }
}

impl Reg for i32 {
    #[inline]
    fn reg(self) -> usize {
        i64::from(self).reg()
    }
}

impl Reg for u32 {
    #[inline]
    fn reg(self) -> usize {
        self as usize
    }
}

impl Reg for u64 {
    #[inline]
    fn reg(self) -> usize {
        farmem_sys::usize_from(self)
    }
}

impl Reg for usize {
    #[inline]
    fn reg(self) -> usize {
        self
    }
}

impl<T> Reg for *const T {
    #[inline]
    fn reg(self) -> usize {
        self as usize
    }
}

impl<T> Reg for *mut T {
    #[inline]
    fn reg(self) -> usize {
        self as usize
    }
}
