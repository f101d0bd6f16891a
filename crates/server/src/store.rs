//! A session's pages: a map from page number to a slot in 1 MiB chunks.

use farmem_wire::PAGE_SIZE;
use std::collections::HashMap;

const CHUNK_PAGES: usize = 256;

#[derive(Default)]
pub(crate) struct Store {
    map: HashMap<u64, u32>,
    chunks: Vec<Box<[u8]>>,
    free: Vec<u32>,
}

impl Store {
    pub(crate) fn len(&self) -> usize {
        self.map.len()
    }

    fn slot(&self, slot: u32) -> &[u8] {
        let (c, o) = (slot as usize / CHUNK_PAGES, slot as usize % CHUNK_PAGES);
        &self.chunks[c][o * PAGE_SIZE..(o + 1) * PAGE_SIZE]
    }

    pub(crate) fn get(&self, page: u64) -> Option<&[u8]> {
        self.map.get(&page).map(|&s| self.slot(s))
    }

    pub(crate) fn count_new(&self, pages: impl Iterator<Item = u64>) -> u64 {
        let mut seen = Vec::new();
        let mut n = 0;
        for p in pages {
            if !self.map.contains_key(&p) && !seen.contains(&p) {
                seen.push(p);
                n += 1;
            }
        }
        n
    }

    pub(crate) fn put(&mut self, page: u64, data: &[u8]) {
        let slot = match self.map.get(&page) {
            Some(&s) => s,
            None => {
                let s = match self.free.pop() {
                    Some(s) => s,
                    None => {
                        let s = (self.chunks.len() * CHUNK_PAGES) as u32;
                        self.chunks
                            .push(vec![0u8; CHUNK_PAGES * PAGE_SIZE].into_boxed_slice());
                        self.free.extend((s + 1..s + CHUNK_PAGES as u32).rev());
                        s
                    }
                };
                self.map.insert(page, s);
                s
            }
        };
        let (c, o) = (slot as usize / CHUNK_PAGES, slot as usize % CHUNK_PAGES);
        self.chunks[c][o * PAGE_SIZE..(o + 1) * PAGE_SIZE].copy_from_slice(data);
    }

    /// Remove pages `[start, start+n)`; returns how many were stored.
    pub(crate) fn remove_range(&mut self, start: u64, n: u64) -> u64 {
        let end = start.saturating_add(n);
        let mut removed = 0;
        if n < self.map.len() as u64 {
            for p in start..end {
                if let Some(s) = self.map.remove(&p) {
                    self.free.push(s);
                    removed += 1;
                }
            }
        } else {
            let free = &mut self.free;
            self.map.retain(|&p, s| {
                let keep = p < start || p >= end;
                if !keep {
                    free.push(*s);
                    removed += 1;
                }
                keep
            });
        }
        removed
    }
}
