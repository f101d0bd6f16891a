//! The arena: the address space far memory lives in, the userfaultfd that
//! watches it, and what is known per page (its state word and policy word,
//! its checksum on the backend). Pages enter it through `install`.

use crate::checksum::Sums;
use crate::table::PageTable;
use farmem_sys::mem::Mapping;
use farmem_sys::uffd::Uffd;

pub(crate) struct Arena {
    pub(crate) uffd: Uffd,
    /// The reservation itself; every far page is at `base + i * PAGE_SIZE`.
    pub(crate) mapping: Mapping,
    pub(crate) base: usize,
    pub(crate) npages: usize,
    /// Per page: its state word and the replacement policy's word.
    pub(crate) table: PageTable,
    /// Per page: the CRC32C of its contents on the backend, written at
    /// write-back and checked at every fetch (when `cfg.checksum`).
    pub(crate) sums: Sums,
    /// Zeroes to install pages never written, a batch at a time.
    pub(crate) zero: Mapping,
}
