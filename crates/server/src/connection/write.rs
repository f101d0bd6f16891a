//! The Write path: a Write's page list is checked and its new pages
//! reserved (`crate::capacity`) before any page data is taken; then the
//! data goes from the socket straight into the session's store.

use super::input::Input;
use super::{error_reply, reserve, ConnError, Link};
use crate::session::{self, Token};
use crate::store::{Access, Store};
use crate::Shared;
use farmem_sys::net::{RawBuf, Wait, MAX_IOV};
use farmem_wire::{
    self as wire, seal::TAG_LEN, ErrorCode, Frame, Header, Op, HEADER_LEN, MAX_FRAME_PAGES,
    PAGE_SIZE,
};
use std::io;
use std::sync::Arc;

/// Serve a Write whose header is at the front of `input`: validate it and
/// reserve capacity from its page list, then receive the page data straight
/// into the store. Returns whether the connection stays open.
pub(super) fn serve_write(
    sh: &Shared,
    session: &Option<(Token, Arc<Store>)>,
    h: &Header,
    input: &mut Input,
    out: &mut Vec<u8>,
    link: &Link,
) -> Result<bool, ConnError> {
    let Link { fd, wait, .. } = *link;
    let n = h.count as usize;
    // The header and page list, then a sealed frame's tag (covering both),
    // checked before any page data is taken.
    let head = HEADER_LEN + n * 8;
    let tag_len = if link.seal.is_some() { TAG_LEN } else { 0 };
    input.fill(fd, head + tag_len, wait)?;
    if let Some(seal) = link.seal {
        let (covered, tag) = input.peek(head + TAG_LEN).split_at(head);
        if !seal.open(covered, tag) {
            return Err(ConnError::Forged(Op::Write));
        }
    }
    let mut list = [0u64; MAX_FRAME_PAGES as usize];
    for (d, p) in list
        .iter_mut()
        .zip(wire::pages(&input.peek(head)[HEADER_LEN..]))
    {
        *d = p;
    }
    input.consume(head + tag_len);
    let pages = &list[..n];
    // A refused Write's data is still on the wire: read past it, then reply.
    let mut refuse = |code: ErrorCode, msg: &str| {
        input.skip(fd, n * PAGE_SIZE, wait)?;
        error_reply(out, h.tag, code, msg);
        Ok(code.keeps_connection())
    };
    let s = match session::checked(session, pages.iter().copied(), "Write") {
        Ok(s) => s,
        Err((code, msg)) => return refuse(code, &msg),
    };
    let mut unique = list;
    let unique = sorted_unique(&mut unique[..n]);
    // Held from the count to the bit set: no Free may slip in between
    // (store.rs, hazard 2).
    let access = s.access();
    let new = access.count_absent(unique);
    // Reserved for the whole batch first: all or nothing.
    let reservation = match reserve(sh, s, new) {
        Ok(r) => r,
        Err(refused) => {
            drop(access);
            return refuse(refused.code(), &refused.to_string());
        }
    };
    if let Err(e) = receive_pages(&access, pages, input, fd, wait) {
        // Cut off mid-frame: pages new to the batch stay absent (and their
        // memory goes back, as does the reservation); pages it was
        // overwriting hold a mix of old and new bytes, as a client whose
        // write failed must expect.
        access.discard_absent(unique);
        drop(reservation);
        return Err(e.into());
    }
    // Fewer than reserved only when another connection of the session wrote
    // one of these pages meanwhile (hazard 1); the surplus goes back.
    let added = access.mark_present(unique);
    debug_assert!(added <= new, "only Free clears a bit, and it waits for us");
    reservation.keep(added);
    drop(access);
    out.extend_from_slice(&Frame::WriteOk { count: h.count }.encode(h.tag));
    Ok(true)
}

/// Sort `pages` and drop repeats; returns the distinct pages, in order.
fn sorted_unique(pages: &mut [u64]) -> &[u64] {
    pages.sort_unstable();
    let mut k = 0;
    for i in 0..pages.len() {
        if i == 0 || pages[i] != pages[k - 1] {
            pages[k] = pages[i];
            k += 1;
        }
    }
    &pages[..k]
}

/// Receive a Write's page data (page `pages[i]` gets the i-th 4 KiB) into
/// the store: what `input` already holds is copied, the rest comes from the
/// socket straight into place.
fn receive_pages(
    access: &Access<'_>,
    pages: &[u64],
    input: &mut Input,
    fd: std::os::fd::RawFd,
    wait: Wait,
) -> io::Result<()> {
    let buffered = input.take(pages.len() * PAGE_SIZE);
    for (i, chunk) in buffered.chunks(PAGE_SIZE).enumerate() {
        // SAFETY: the destination is the start of one page inside the
        // session's mapping (the page number was range-checked) and the
        // chunk is at most a page; the source is this connection's own
        // buffer, which cannot overlap the mapping.
        unsafe {
            std::ptr::copy_nonoverlapping(chunk.as_ptr(), access.page(pages[i]).ptr, chunk.len())
        };
    }
    let done = buffered.len();
    let mut parts = [RawBuf::EMPTY; MAX_IOV];
    let mut k = 0;
    for (i, &p) in pages.iter().enumerate().skip(done / PAGE_SIZE) {
        let mut b = access.page(p);
        if i == done / PAGE_SIZE {
            // The rest of a page begun from the buffer.
            let o = done % PAGE_SIZE;
            b.ptr = b.ptr.wrapping_add(o);
            b.len -= o;
        }
        parts[k] = b;
        k += 1;
        if k == MAX_IOV {
            // SAFETY: the ranges lie in the session's mapping, kept by the
            // `Arc`, safe from Free under `access`, and never referenced by
            // Rust code.
            unsafe { farmem_sys::net::recv_exact_vectored_raw(fd, &parts[..k], wait)? };
            k = 0;
        }
    }
    // SAFETY: as above.
    unsafe { farmem_sys::net::recv_exact_vectored_raw(fd, &parts[..k], wait) }
}
