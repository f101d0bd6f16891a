//! The userfaultfd ABI defined in Rust must match the kernel's C header.
//! A tiny C program prints the header's values; we compare (the
//! userfaultfd-rs practice of cross-checking constants).

#[path = "../../../tests/support/skip.rs"]
mod skip;

use farmem_sys::uffd::*;
use std::process::Command;

#[test]
fn uffd_constants_match_c_header() {
    let dir = std::env::temp_dir().join(format!("farmem-abi-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("consts.c");
    std::fs::write(
        &src,
        r#"#include <sys/ioctl.h>
#include <linux/userfaultfd.h>
#include <stdio.h>
int main(void) {
  printf("%llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %llu %zu %zu %zu\n",
    (unsigned long long)UFFD_API, (unsigned long long)UFFDIO_API,
    (unsigned long long)UFFDIO_REGISTER, (unsigned long long)UFFDIO_UNREGISTER,
    (unsigned long long)UFFDIO_COPY, (unsigned long long)UFFDIO_WRITEPROTECT,
    (unsigned long long)UFFD_FEATURE_SIGBUS, (unsigned long long)UFFD_FEATURE_PAGEFAULT_FLAG_WP,
    (unsigned long long)UFFDIO_REGISTER_MODE_WP, (unsigned long long)UFFDIO_COPY_MODE_WP,
    (unsigned long long)UFFDIO_WRITEPROTECT_MODE_DONTWAKE,
    sizeof(struct uffdio_copy), sizeof(struct uffdio_register), sizeof(struct uffdio_writeprotect));
  return 0;
}
"#,
    )
    .unwrap();
    let exe = dir.join("consts");
    let st = Command::new("cc")
        .args(["-Wall", "-Wextra", "-Werror", "-o"])
        .arg(&exe)
        .arg(&src)
        .status()
        .expect("a C compiler (cc) is needed for this test");
    assert!(st.success());
    let out = Command::new(&exe).output().unwrap();
    let vals: Vec<u64> = String::from_utf8(out.stdout)
        .unwrap()
        .split_whitespace()
        .map(|v| v.parse().unwrap())
        .collect();
    let ours = [
        UFFD_API,
        UFFDIO_API,
        UFFDIO_REGISTER,
        UFFDIO_UNREGISTER,
        UFFDIO_COPY,
        UFFDIO_WRITEPROTECT,
        UFFD_FEATURE_SIGBUS,
        UFFD_FEATURE_PAGEFAULT_FLAG_WP,
        UFFDIO_REGISTER_MODE_WP,
        UFFDIO_COPY_MODE_WP,
        UFFDIO_WRITEPROTECT_MODE_DONTWAKE,
        std::mem::size_of::<UffdioCopy>() as u64,
        std::mem::size_of::<UffdioRegister>() as u64,
        std::mem::size_of::<UffdioWriteprotect>() as u64,
    ];
    assert_eq!(vals, ours);
    std::fs::remove_dir_all(&dir).ok();
}

/// The 6.7/6.8 interfaces Debian 12's headers lack (`UFFD_FEATURE_WP_ASYNC`,
/// `UFFDIO_MOVE`, `PAGEMAP_SCAN`), checked against the running kernel by
/// using them: pages written after being installed write-protected are
/// found by the scan, re-protected by it, and moved with their content.
///
/// It also pins down the fact that keeps farmem's runtime on synchronous
/// write protection (see the runtime's `dirty` module): `UFFDIO_MOVE` does
/// not carry the uffd-wp bit, so a page written between a dirty-bit harvest
/// and the move that takes it out of the writers' reach cannot be told from
/// a clean one afterwards. If a kernel ever carries the bit, this test says
/// so, and asynchronous dirty tracking becomes possible.
#[test]
fn wp_async_move_and_pagemap_scan_on_this_kernel() {
    use farmem_sys::mem::Mapping;
    use farmem_sys::pagemap::*;
    use farmem_sys::{usize_from, PAGE_SIZE};
    let Ok(uffd) = Uffd::new(
        UFFD_FEATURE_SIGBUS
            | UFFD_FEATURE_PAGEFAULT_FLAG_WP
            | UFFD_FEATURE_WP_ASYNC
            | UFFD_FEATURE_MOVE,
    ) else {
        skip::skip(
            "wp_async_move_and_pagemap_scan_on_this_kernel",
            "this kernel lacks WP_ASYNC or MOVE (Linux < 6.8)",
        );
        return;
    };
    let n = 8;
    let len = n * PAGE_SIZE;
    let arena = Mapping::anonymous(len, true).unwrap();
    let staging = Mapping::anonymous(len, true).unwrap();
    let a = arena.as_ptr() as usize;
    let st = staging.as_ptr() as usize;
    for m in [a, st] {
        uffd.register(
            m,
            len,
            UFFDIO_REGISTER_MODE_MISSING | UFFDIO_REGISTER_MODE_WP,
        )
        .unwrap();
    }
    let src = vec![7u8; len];
    // SAFETY: src is readable for len bytes; the arena range is registered.
    unsafe { uffd.copy(a, src.as_ptr(), len, true) }.unwrap();
    // Writes to pages 1 and 3 are resolved by the kernel (no fault arrives).
    for p in [1, 3] {
        // SAFETY: the page is installed and inside the arena.
        unsafe { std::ptr::write_volatile((a + p * PAGE_SIZE) as *mut u8, 9) };
    }
    let pm = Pagemap::open().unwrap();
    let mut out = [PageRegion::default(); 8];
    let present_written = PAGE_IS_WRITTEN | PAGE_IS_PRESENT;
    let k = pm
        .scan(
            a,
            len,
            present_written,
            present_written,
            PM_SCAN_WP_MATCHING | PM_SCAN_CHECK_WPASYNC,
            &mut out,
        )
        .unwrap();
    let pages = |out: &[PageRegion], base: usize| -> Vec<usize> {
        out.iter()
            .flat_map(|r| (usize_from(r.start)..usize_from(r.end)).step_by(PAGE_SIZE))
            .map(|x| (x - base) / PAGE_SIZE)
            .collect()
    };
    assert_eq!(
        pages(&out[..k], a),
        [1, 3],
        "written pages found by the scan"
    );
    // The scan write-protected them again: nothing written now.
    let k = pm
        .scan(a, len, present_written, present_written, 0, &mut out)
        .unwrap();
    assert_eq!(k, 0);
    // SAFETY: both ranges are private anonymous memory no reference points into.
    let moved = unsafe { uffd.move_pages(st, a, len) }.unwrap();
    assert_eq!(moved.bytes, len);
    // SAFETY: staging now holds the moved pages.
    let b = unsafe { std::slice::from_raw_parts(st as *const u8, len) };
    assert_eq!((b[0], b[PAGE_SIZE], b[3 * PAGE_SIZE]), (7, 9, 9));
    // No page of the staging area was written since the move, yet the scan
    // reports every one as written: the uffd-wp bit did not travel.
    let k = pm
        .scan(st, len, present_written, present_written, 0, &mut out)
        .unwrap();
    assert_eq!(
        pages(&out[..k], st).len(),
        n,
        "UFFDIO_MOVE now carries the uffd-wp bit: asynchronous dirty tracking \
         (WP_ASYNC + PAGEMAP_SCAN + MOVE) can be made race-free; see the runtime's dirty.rs"
    );
}

/// A program may split the registered range into several VMAs (numpy
/// advises its large arrays `MADV_HUGEPAGE`); one `UFFDIO_COPY` across the
/// split fails with ENOENT in the kernel, so `Uffd::copy` must go on page by
/// page and install the whole range.
#[test]
fn copy_across_a_vma_split() {
    use farmem_sys::mem::{madvise, Mapping};
    use farmem_sys::PAGE_SIZE;
    let uffd = Uffd::new(UFFD_FEATURE_SIGBUS | UFFD_FEATURE_PAGEFAULT_FLAG_WP).unwrap();
    let len = 4 * PAGE_SIZE;
    let m = Mapping::anonymous(len, true).unwrap();
    let a = m.as_ptr() as usize;
    uffd.register(
        a,
        len,
        UFFDIO_REGISTER_MODE_MISSING | UFFDIO_REGISTER_MODE_WP,
    )
    .unwrap();
    // Different flags on the second half: the kernel splits the VMA.
    // SAFETY: the range is ours and holds no data yet.
    unsafe {
        madvise(
            m.as_ptr().add(2 * PAGE_SIZE),
            2 * PAGE_SIZE,
            libc::MADV_NOHUGEPAGE,
        )
    }
    .unwrap();
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let split = maps
        .lines()
        .any(|l| l.starts_with(&format!("{:x}-{:x}", a, a + 2 * PAGE_SIZE)));
    assert!(
        split,
        "the madvise did not split the VMA; the test proves nothing"
    );
    let src: Vec<u8> = (0..len)
        .map(|i| u8::try_from(i / PAGE_SIZE).unwrap() + 1)
        .collect();
    // SAFETY: src is readable for len bytes; the range is registered.
    let r = unsafe { uffd.copy(a, src.as_ptr(), len, false) }.unwrap();
    assert_eq!(r, CopyOutcome::Done);
    // SAFETY: all four pages are installed now.
    let got = unsafe { std::slice::from_raw_parts(a as *const u8, len) };
    assert_eq!(got, &src[..]);
}

/// `Uffd::move_pages` returns what really moved, even where the kernel
/// reports less: Linux 6.18's batched `UFFDIO_MOVE` answers `EEXIST` for
/// some moves that moved every page, when the first source page's entry
/// changes under it (here: another thread write-protects it on and off; in
/// the runtime, the program touching a page being evicted). The runtime
/// read such pages at their old, empty addresses and died of a SIGBUS (NPB
/// SP class B at half its footprint, about one run in two). Each call's
/// count is checked against the pages found at the destination.
#[test]
fn move_reports_every_page_it_moved() {
    use farmem_sys::mem::{resident, Mapping};
    use farmem_sys::PAGE_SIZE;
    use std::sync::atomic::{AtomicBool, Ordering};
    let Ok(uffd) =
        Uffd::new(UFFD_FEATURE_SIGBUS | UFFD_FEATURE_PAGEFAULT_FLAG_WP | UFFD_FEATURE_MOVE)
    else {
        skip::skip(
            "move_reports_every_page_it_moved",
            "this kernel lacks UFFDIO_MOVE (Linux < 6.8)",
        );
        return;
    };
    let n = 64;
    let len = n * PAGE_SIZE;
    let maps = [
        Mapping::anonymous(len, true).unwrap(),
        Mapping::anonymous(len, true).unwrap(),
    ];
    let base = [maps[0].as_ptr() as usize, maps[1].as_ptr() as usize];
    for &b in &base {
        uffd.register(
            b,
            len,
            UFFDIO_REGISTER_MODE_MISSING | UFFDIO_REGISTER_MODE_WP,
        )
        .unwrap();
    }
    let pattern: Vec<u8> = (0..len)
        .map(|i| u8::try_from(i / PAGE_SIZE).unwrap() + 1)
        .collect();
    // SAFETY: pattern is readable for len bytes; the range is registered and empty.
    unsafe { uffd.copy(base[0], pattern.as_ptr(), len, false) }.unwrap();
    let at_dst = |dst: usize| {
        let mut v = vec![0u8; n];
        resident(dst, len, &mut v).unwrap();
        v.iter().filter(|&&b| b & 1 == 1).count() * PAGE_SIZE
    };
    let stop = AtomicBool::new(false);
    let (mut calls, mut short, mut misreported) = (0, 0, 0);
    let mut src = 0;
    std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                for protect in [true, false] {
                    for &b in &base {
                        let _ = uffd.write_protect(b, PAGE_SIZE, protect);
                    }
                }
            }
        });
        let t0 = std::time::Instant::now();
        while calls < 3000 && t0.elapsed() < std::time::Duration::from_secs(3) {
            let (from, to) = (base[src], base[1 - src]);
            // SAFETY: both ranges are this test's private anonymous mappings,
            // no reference points into them, and the destination is empty.
            let got = unsafe { uffd.move_pages(to, from, len) }.map_or(0, |m| {
                misreported += usize::from(m.misreported);
                m.bytes
            });
            calls += 1;
            let there = at_dst(to);
            if there != got {
                stop.store(true, Ordering::Relaxed);
                panic!("call {calls}: move_pages said {got} bytes, {there} bytes moved");
            }
            // The rest (a move the kernel cut short) follows, so that the
            // next round starts with every page on one side.
            let mut done = got;
            while done < len {
                short += usize::from(done == got);
                // SAFETY: as above, for the pages still at the source.
                if let Ok(m) = unsafe { uffd.move_pages(to + done, from + done, len - done) } {
                    done += m.bytes;
                }
            }
            src = 1 - src;
        }
        stop.store(true, Ordering::Relaxed);
    });
    eprintln!("{calls} moves, {short} cut short, {misreported} misreported by the kernel");
    // SAFETY: every page is at base[src] now.
    let got = unsafe { std::slice::from_raw_parts(base[src] as *const u8, len) };
    assert!(got == &pattern[..], "page contents changed in the moves");
}
