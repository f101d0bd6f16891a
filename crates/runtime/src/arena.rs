//! The arena: the address space far memory lives in, the userfaultfd that
//! watches it, and what is known per page (its state word and policy word,
//! its checksum on the backend).

use crate::checksum::Sums;
use crate::table::PageTable;
use farmem_sys::mem::Mapping;
use farmem_sys::uffd::Uffd;
use farmem_sys::PAGE_SIZE;

pub(crate) struct Arena {
    uffd: Uffd,
    /// The reservation itself; far page i is at `base + i * PAGE_SIZE`.
    mapping: Mapping,
    base: usize,
    npages: usize,
    /// Per page: its state word and the replacement policy's word.
    table: PageTable,
    /// Per page: the CRC32C of its contents on the backend, written at
    /// write-back and checked at every fetch (when `cfg.checksum`).
    sums: Sums,
    /// Zeroes to install pages never written, a batch at a time.
    zero: Mapping,
}

impl Arena {
    pub(crate) fn new(
        uffd: Uffd,
        mapping: Mapping,
        table: PageTable,
        sums: Sums,
        zero: Mapping,
    ) -> Arena {
        Arena {
            base: mapping.as_ptr() as usize,
            npages: mapping.len() / PAGE_SIZE,
            uffd,
            mapping,
            table,
            sums,
            zero,
        }
    }

    pub(crate) fn uffd(&self) -> &Uffd {
        &self.uffd
    }

    pub(crate) fn base(&self) -> usize {
        self.base
    }

    pub(crate) fn npages(&self) -> usize {
        self.npages
    }

    /// Bytes of address space.
    pub(crate) fn len(&self) -> usize {
        self.mapping.len()
    }

    /// Whether `addr` is in the arena.
    pub(crate) fn contains(&self, addr: usize) -> bool {
        self.mapping.contains(addr)
    }

    pub(crate) fn table(&self) -> &PageTable {
        &self.table
    }

    pub(crate) fn sums(&self) -> &Sums {
        &self.sums
    }

    /// `MAX_BATCH` pages of zeroes.
    pub(crate) fn zero(&self) -> *const u8 {
        self.zero.as_ptr().cast_const()
    }
}
