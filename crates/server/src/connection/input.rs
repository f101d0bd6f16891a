//! A connection's input buffer: requests are read through it in few
//! system calls, while a Write's page data mostly bypasses it.

use farmem_sys::net::Wait;
use farmem_wire::{seal, HEADER_LEN, MAX_FRAME_PAGES};
use std::io;

/// Requests arrive through a buffer: one `recv` usually brings a whole
/// request (header and payload), saving a system call per request. It is
/// small, so that little of a Write's page data lands here (to be copied)
/// rather than straight in the store.
pub(crate) struct Input {
    buf: Box<[u8]>,
    start: usize,
    end: usize,
}

impl Input {
    pub(crate) fn new() -> Input {
        Input {
            buf: vec![0u8; INPUT_BUFFER].into_boxed_slice(),
            start: 0,
            end: 0,
        }
    }

    /// Make `n` bytes available (n <= the buffer size). Ok(false): the peer
    /// closed cleanly between frames.
    pub(crate) fn fill(
        &mut self,
        fd: std::os::fd::RawFd,
        n: usize,
        wait: Wait,
    ) -> io::Result<bool> {
        if self.start + n > self.buf.len() {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
        }
        // Ask for no more than the largest request but a Write's data, so
        // that a Write's pages mostly stay in the socket for `receive_pages`
        // (limit > end: the loop runs while end < start + n <= buf.len()).
        let limit = (self.start + n.max(SMALL_REQUEST)).min(self.buf.len());
        while self.end - self.start < n {
            let r = farmem_sys::net::recv_some(fd, &mut self.buf[self.end..limit], wait)?;
            if r == 0 {
                if self.end == self.start {
                    return Ok(false);
                }
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "truncated frame",
                ));
            }
            self.end += r;
        }
        Ok(true)
    }

    pub(crate) fn peek(&self, n: usize) -> &[u8] {
        &self.buf[self.start..self.start + n]
    }

    pub(crate) fn consume(&mut self, n: usize) {
        self.start += n;
        if self.start == self.end {
            self.start = 0;
            self.end = 0;
        }
    }

    /// Up to `max` bytes already buffered, consumed.
    pub(crate) fn take(&mut self, max: usize) -> &[u8] {
        let n = max.min(self.end - self.start);
        let from = self.start;
        self.consume(n);
        &self.buf[from..from + n]
    }

    /// Read and drop the next `n` bytes of the stream (a refused frame's payload).
    pub(crate) fn skip(&mut self, fd: std::os::fd::RawFd, n: usize, wait: Wait) -> io::Result<()> {
        let mut left = n - self.take(n).len();
        while left > 0 {
            let k = left.min(self.buf.len());
            let r = farmem_sys::net::recv_some(fd, &mut self.buf[..k], wait)?;
            if r == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "truncated frame",
                ));
            }
            left -= r;
        }
        Ok(())
    }
}

/// The largest request but a Write's page data: a header, `MAX_FRAME_PAGES`
/// page numbers and a sealed frame's tag.
const SMALL_REQUEST: usize = HEADER_LEN + MAX_FRAME_PAGES as usize * 8 + seal::TAG_LEN;
/// Room for a small request, with space to spare for a following one.
const INPUT_BUFFER: usize = 8192;
const _: () = assert!(2 * SMALL_REQUEST <= INPUT_BUFFER);
