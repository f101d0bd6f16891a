//! Nothing the SIGSYS path runs allocates. The raw-call net
//! (`dispatch`) makes a program's own `syscall` instruction raise SIGSYS
//! and runs the call through `calls::syscall`, which pins the call's far
//! buffers (`calls::pinned`). That handler can interrupt the program
//! anywhere, inside `malloc` too, so pinning must not allocate, whatever
//! the number of far buffers (`writev` with many far iovecs here, past
//! the pins kept inline), and the message of a call that cannot be served
//! is formatted without allocating either.
//!
//! The other paths the router takes from that handler are counted too:
//! `process_vm_readv` of far memory that is not resident (pieces on the
//! stack, the peer's pin service asked over a socket), AIO requests whose
//! pins outlive the call, and the `sigaction` wrapper, which POSIX lets a
//! signal handler call.
//!
//! This binary's global allocator counts the allocations made on a thread
//! while it is armed (as crates/runtime/tests/handler_alloc.rs does for
//! the SIGBUS handler).

use farmem_runtime::Config;
#[path = "../../../tests/support/count_alloc.rs"]
mod count_alloc;
use count_alloc::allocations_during;

const PAGE: usize = farmem_sys::PAGE_SIZE;

/// One runtime for the whole binary (tests run on several threads).
fn runtime() -> &'static farmem_runtime::Runtime {
    static RT: std::sync::OnceLock<&'static farmem_runtime::Runtime> = std::sync::OnceLock::new();
    RT.get_or_init(|| {
        let cfg = Config::from_str_config("local=4M arena=4G timeout_ms=20000").unwrap();
        farmem_runtime::init(cfg).expect("init")
    })
}

/// `syscall(2)` as the SIGSYS handler makes it.
fn raw(nr: libc::c_long, a: [usize; 6]) -> libc::c_long {
    let a = a.map(|x| x as libc::c_long);
    // SAFETY: each caller passes live arguments for `nr`.
    unsafe { farmem::router::syscall(nr, a[0], a[1], a[2], a[3], a[4], a[5]) }
}

#[test]
fn process_vm_readv_of_far_memory_that_is_not_resident_allocates_nothing() {
    let rt = runtime();
    let size = 8 << 20; // twice the budget: the first pages are evicted
    let far = rt.alloc(size).unwrap();
    for i in 0..size {
        // SAFETY: inside the allocation.
        unsafe { far.add(i).write(u8::try_from(i % 251).unwrap()) };
    }
    let want = 3 << 20; // past one chunk (a quarter of the budget)
    let mut local = vec![0u8; want];
    let l = libc::iovec {
        iov_base: local.as_mut_ptr().cast(),
        iov_len: want,
    };
    let r = libc::iovec {
        iov_base: far.cast(),
        iov_len: want,
    };
    let pid = usize::try_from(std::process::id()).unwrap();
    let args = [
        pid,
        &l as *const _ as usize,
        1,
        &r as *const _ as usize,
        1,
        0,
    ];
    let mut got = 0;
    let allocs = allocations_during(|| got = raw(libc::SYS_process_vm_readv, args));
    assert_eq!(
        got,
        want as libc::c_long,
        "{}",
        std::io::Error::last_os_error()
    );
    assert!(local
        .iter()
        .enumerate()
        .all(|(i, &b)| b == u8::try_from(i % 251).unwrap()));
    assert_eq!(allocs, 0, "process_vm_readv allocated {allocs} times");
    rt.free(far).unwrap();
}

#[test]
fn aio_requests_on_far_buffers_keep_their_pins_without_allocating() {
    let rt = runtime();
    let dir = std::env::temp_dir().join(format!("farmem-aio-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("data");
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    use std::os::fd::AsRawFd;
    let fd = f.as_raw_fd();
    let n = 8usize;
    let buf = rt.alloc(n * PAGE).unwrap();
    // SAFETY: inside the allocation.
    unsafe { std::ptr::write_bytes(buf, 0x33, n * PAGE) };
    let mut ctx: libc::c_ulong = 0;
    assert_eq!(
        // SAFETY: io_setup writes the context id.
        unsafe { libc::syscall(libc::SYS_io_setup, 64, &mut ctx) },
        0
    );
    // struct iocb (64 bytes): data, key+rw_flags, opcode, reqprio, fildes,
    // buf, nbytes, offset, reserved2, flags, resfd.
    #[repr(C)]
    struct Iocb {
        data: u64,
        key_flags: u64,
        opcode: u16,
        prio: i16,
        fd: u32,
        buf: u64,
        nbytes: u64,
        offset: i64,
        reserved: u64,
        flags: u32,
        resfd: u32,
    }
    let cbs: Vec<Iocb> = (0..n)
        .map(|i| Iocb {
            data: i as u64,
            key_flags: 0,
            opcode: 1, // IOCB_CMD_PWRITE
            prio: 0,
            fd: u32::try_from(fd).unwrap(),
            buf: buf as u64 + (i * PAGE) as u64,
            nbytes: PAGE as u64,
            offset: (i * PAGE) as i64,
            reserved: 0,
            flags: 0,
            resfd: 0,
        })
        .collect();
    let ptrs: Vec<usize> = cbs.iter().map(|c| c as *const Iocb as usize).collect();
    let mut events = [[0u64; 4]; 8];
    let ctx = usize::try_from(ctx).unwrap();
    let round = |events: &mut [[u64; 4]; 8]| {
        let s = raw(
            libc::SYS_io_submit,
            [ctx, n, ptrs.as_ptr() as usize, 0, 0, 0],
        );
        assert_eq!(s, n as libc::c_long, "{}", std::io::Error::last_os_error());
        let mut reaped = 0;
        while reaped < n {
            let g = raw(
                libc::SYS_io_getevents,
                [
                    ctx,
                    1,
                    n - reaped,
                    events[reaped..].as_mut_ptr() as usize,
                    0,
                    0,
                ],
            );
            assert!(g > 0, "{}", std::io::Error::last_os_error());
            reaped += usize::try_from(g).unwrap();
        }
    };
    round(&mut events); // unmeasured: the table of held pins is mapped once
    let allocs = allocations_during(|| round(&mut events));
    assert_eq!(allocs, 0, "AIO allocated {allocs} times");
    assert!(events.iter().all(|e| e[2] == PAGE as u64), "{events:?}");
    assert_eq!(std::fs::read(&path).unwrap(), vec![0x33; n * PAGE]);
    // SAFETY: the context made above.
    unsafe { libc::syscall(libc::SYS_io_destroy, ctx) };
    rt.free(buf).unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn sigaction_for_sigbus_keeps_the_programs_handler_without_allocating() {
    runtime();
    extern "C" fn handler(_: libc::c_int) {}
    // SAFETY: a zeroed sigaction is valid; the handler field is set.
    let mut a: libc::sigaction = unsafe { std::mem::zeroed() };
    a.sa_sigaction = handler as *const () as usize;
    // SAFETY: as above.
    let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
    let mut ret = -1;
    // SAFETY: live sigactions.
    let allocs = allocations_during(|| {
        // SAFETY: live sigactions.
        ret = unsafe { farmem::signals::sigaction(libc::SIGBUS, &a, &mut old) }
    });
    assert_eq!(ret, 0);
    assert_eq!(allocs, 0, "sigaction allocated {allocs} times");
    // SAFETY: as above.
    unsafe { farmem::signals::sigaction(libc::SIGBUS, std::ptr::null(), &mut old) };
    assert_eq!(old.sa_sigaction, handler as *const () as usize);
}

#[test]
fn pinning_many_far_buffers_and_the_fatal_message_allocate_nothing() {
    let seen = allocations_during(|| drop(std::hint::black_box(vec![1u8; 64])));
    assert_eq!(seen, 1, "the counter counts");
    let rt = runtime();
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
            farmem::pin::pinned(libc::SYS_writev, args, || {
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
        farmem::pin::fatal_message(&mut msg, libc::SYS_writev, buf as usize, |m| {
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
