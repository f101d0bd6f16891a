//! Nothing the SIGSYS path runs allocates. The raw-call net
//! (`dispatch`) makes a program's own `syscall` instruction raise SIGSYS
//! and runs the call through `calls::syscall`, which pins the call's far
//! buffers (`calls::pinned`). That handler can interrupt the program
//! anywhere, inside `malloc` too, so pinning must not allocate, whatever
//! the number of far buffers (`writev` with many far iovecs here, past
//! the pins kept inline), and the message of a call that cannot be served
//! is formatted without allocating either.
//!
//! This binary's global allocator counts the allocations made on a thread
//! while it is armed (as crates/runtime/tests/handler_alloc.rs does for
//! the SIGBUS handler).

use farmem_runtime::Config;
#[path = "../../../tests/support/count_alloc.rs"]
mod count_alloc;
use count_alloc::allocations_during;

const PAGE: usize = farmem_sys::PAGE_SIZE;

#[test]
fn pinning_many_far_buffers_and_the_fatal_message_allocate_nothing() {
    let seen = allocations_during(|| drop(std::hint::black_box(vec![1u8; 64])));
    assert_eq!(seen, 1, "the counter counts");
    let cfg = Config::from_str_config("local=4M arena=4G timeout_ms=20000").unwrap();
    let rt = farmem_runtime::init(cfg).expect("init");
    let n: usize = 24;
    let iovcnt: i32 = 24;
    let buf = rt.alloc(n * 2 * PAGE).unwrap();
    // SAFETY: the allocation is n * 2 pages long; far memory is writable.
    unsafe { std::ptr::write_bytes(buf, 0x5a, n * 2 * PAGE) };
    // Every other page: 24 separate far buffers.
    let iov: Vec<libc::iovec> = (0..n)
        .map(|i| libc::iovec {
            // SAFETY: inside the allocation.
            iov_base: unsafe { buf.add(i * 2 * PAGE) }.cast(),
            iov_len: PAGE,
        })
        .collect();
    let fd = std::fs::OpenOptions::new()
        .write(true)
        .open("/dev/null")
        .unwrap();
    use std::os::fd::AsRawFd;
    let raw = fd.as_raw_fd();
    let args = [
        usize::try_from(raw).unwrap(),
        iov.as_ptr() as usize,
        n,
        0,
        0,
        0,
    ];
    let writev = || {
        // SAFETY: the iovecs point into the live far allocation.
        unsafe {
            farmem::calls::pinned(libc::SYS_writev, args, || {
                libc::writev(raw, iov.as_ptr(), iovcnt)
            })
        }
    };
    // Once unmeasured: whatever a thread sets up once is set up.
    assert_eq!(writev(), (n * PAGE) as isize);
    let mut ret = 0;
    let allocs = allocations_during(|| ret = writev());
    assert_eq!(ret, (n * PAGE) as isize);
    assert_eq!(
        allocs, 0,
        "pinning {n} far buffers allocated {allocs} times"
    );
    // The message a call that cannot be served stops the program with.
    let mut msg = farmem_sys::msg::MsgBuf::new();
    let allocs = allocations_during(|| {
        farmem::calls::fatal_message(&mut msg, libc::SYS_writev, buf as usize, |m| {
            use std::fmt::Write;
            let _ = write!(
                m,
                "hands the kernel {} of far memory",
                farmem_sys::units::Size(3 << 20)
            );
        })
    });
    assert_eq!(allocs, 0, "formatting the message allocated {allocs} times");
    let text = String::from_utf8_lossy(msg.as_bytes()).into_owned();
    assert!(
        text.starts_with("farmem: system call writev (20) on far memory at 0x")
            && text.contains("hands the kernel 3M of far memory. The program is stopped"),
        "{text}"
    );
    rt.free(buf).unwrap();
}
