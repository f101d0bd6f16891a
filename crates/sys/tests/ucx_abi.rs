//! The hand-written UCX declarations (`farmem_sys::ucx`) against the
//! installed headers: a C program compiled against `ucp.h` prints every
//! size, offset and constant the binding relies on, and each must match.

use farmem_sys::ucx::*;
use std::mem::{offset_of, size_of};
use std::process::Command;

const PROGRAM: &str = r#"
#include <ucp/api/ucp.h>
#include <stdio.h>
#include <stddef.h>
#define S(t) printf("size %s %zu\n", #t, sizeof(t))
#define O(t, f) printf("off %s.%s %zu\n", #t, #f, offsetof(t, f))
#define C(c) printf("const %s %lld\n", #c, (long long)(c))
int main(void) {
    S(ucp_params_t); O(ucp_params_t, features); O(ucp_params_t, name);
    S(ucp_context_attr_t); O(ucp_context_attr_t, request_size);
    S(ucp_worker_params_t); O(ucp_worker_params_t, thread_mode);
    S(ucp_ep_params_t); O(ucp_ep_params_t, address); O(ucp_ep_params_t, err_mode);
    O(ucp_ep_params_t, err_handler);
    S(ucp_mem_map_params_t); O(ucp_mem_map_params_t, length); O(ucp_mem_map_params_t, flags);
    S(ucp_mem_attr_t); O(ucp_mem_attr_t, address); O(ucp_mem_attr_t, length);
    S(ucp_request_param_t); O(ucp_request_param_t, request); O(ucp_request_param_t, memh);
    O(ucp_request_param_t, flags);
    S(ucs_status_t);
    C(UCP_PARAM_FIELD_FEATURES); C(UCP_PARAM_FIELD_NAME); C(UCP_FEATURE_RMA);
    C(UCP_FEATURE_WAKEUP); C(UCP_ATTR_FIELD_REQUEST_SIZE);
    C(UCP_WORKER_PARAM_FIELD_THREAD_MODE); C(UCS_THREAD_MODE_SERIALIZED);
    C(UCP_EP_PARAM_FIELD_REMOTE_ADDRESS); C(UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE);
    C(UCP_ERR_HANDLING_MODE_NONE); C(UCP_EP_CLOSE_FLAG_FORCE);
    C(UCP_MEM_MAP_PARAM_FIELD_ADDRESS); C(UCP_MEM_MAP_PARAM_FIELD_LENGTH);
    C(UCP_MEM_MAP_PARAM_FIELD_FLAGS); C(UCP_MEM_MAP_ALLOCATE);
    C(UCP_MEM_ATTR_FIELD_ADDRESS); C(UCP_MEM_ATTR_FIELD_LENGTH);
    C(UCP_OP_ATTR_FIELD_REQUEST); C(UCP_OP_ATTR_FIELD_FLAGS); C(UCP_OP_ATTR_FIELD_MEMH);
    C(UCS_OK); C(UCS_INPROGRESS); C(UCS_ERR_LAST); C(UCP_API_MAJOR); C(UCP_API_MINOR);
    return 0;
}
"#;

#[test]
fn declarations_match_the_installed_headers() {
    let dir = std::env::temp_dir().join(format!("farmem-ucx-abi-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let src = dir.join("abi.c");
    let bin = dir.join("abi");
    std::fs::write(&src, PROGRAM).unwrap();
    let cc = Command::new("gcc")
        .arg(&src)
        .arg("-o")
        .arg(&bin)
        .output()
        .expect("gcc runs");
    assert!(
        cc.status.success(),
        "the UCX headers are needed (scripts/setup.sh installs libucx-dev): {}",
        String::from_utf8_lossy(&cc.stderr)
    );
    let out = Command::new(&bin).output().expect("the ABI program runs");
    let _ = std::fs::remove_dir_all(&dir);
    let text = String::from_utf8(out.stdout).unwrap();
    let want: Vec<(String, i128)> = vec![
        ("size ucp_params_t".into(), size_of::<UcpParams>() as i128),
        (
            "off ucp_params_t.features".into(),
            offset_of!(UcpParams, features) as i128,
        ),
        (
            "off ucp_params_t.name".into(),
            offset_of!(UcpParams, name) as i128,
        ),
        (
            "size ucp_context_attr_t".into(),
            size_of::<UcpContextAttr>() as i128,
        ),
        (
            "off ucp_context_attr_t.request_size".into(),
            offset_of!(UcpContextAttr, request_size) as i128,
        ),
        (
            "size ucp_worker_params_t".into(),
            size_of::<UcpWorkerParams>() as i128,
        ),
        (
            "off ucp_worker_params_t.thread_mode".into(),
            offset_of!(UcpWorkerParams, thread_mode) as i128,
        ),
        (
            "size ucp_ep_params_t".into(),
            size_of::<UcpEpParams>() as i128,
        ),
        (
            "off ucp_ep_params_t.address".into(),
            offset_of!(UcpEpParams, address) as i128,
        ),
        (
            "off ucp_ep_params_t.err_mode".into(),
            offset_of!(UcpEpParams, err_mode) as i128,
        ),
        (
            "off ucp_ep_params_t.err_handler".into(),
            offset_of!(UcpEpParams, err_handler) as i128,
        ),
        (
            "size ucp_mem_map_params_t".into(),
            size_of::<UcpMemMapParams>() as i128,
        ),
        (
            "off ucp_mem_map_params_t.length".into(),
            offset_of!(UcpMemMapParams, length) as i128,
        ),
        (
            "off ucp_mem_map_params_t.flags".into(),
            offset_of!(UcpMemMapParams, flags) as i128,
        ),
        (
            "size ucp_mem_attr_t".into(),
            size_of::<UcpMemAttr>() as i128,
        ),
        (
            "off ucp_mem_attr_t.address".into(),
            offset_of!(UcpMemAttr, address) as i128,
        ),
        (
            "off ucp_mem_attr_t.length".into(),
            offset_of!(UcpMemAttr, length) as i128,
        ),
        (
            "size ucp_request_param_t".into(),
            size_of::<UcpRequestParam>() as i128,
        ),
        (
            "off ucp_request_param_t.request".into(),
            offset_of!(UcpRequestParam, request) as i128,
        ),
        (
            "off ucp_request_param_t.memh".into(),
            offset_of!(UcpRequestParam, memh) as i128,
        ),
        (
            "off ucp_request_param_t.flags".into(),
            offset_of!(UcpRequestParam, flags) as i128,
        ),
        ("size ucs_status_t".into(), size_of::<Status>() as i128),
        (
            "const UCP_PARAM_FIELD_FEATURES".into(),
            UCP_PARAM_FIELD_FEATURES.into(),
        ),
        (
            "const UCP_PARAM_FIELD_NAME".into(),
            UCP_PARAM_FIELD_NAME.into(),
        ),
        ("const UCP_FEATURE_RMA".into(), UCP_FEATURE_RMA.into()),
        ("const UCP_FEATURE_WAKEUP".into(), UCP_FEATURE_WAKEUP.into()),
        (
            "const UCP_ATTR_FIELD_REQUEST_SIZE".into(),
            UCP_ATTR_FIELD_REQUEST_SIZE.into(),
        ),
        (
            "const UCP_WORKER_PARAM_FIELD_THREAD_MODE".into(),
            UCP_WORKER_PARAM_FIELD_THREAD_MODE.into(),
        ),
        (
            "const UCS_THREAD_MODE_SERIALIZED".into(),
            UCS_THREAD_MODE_SERIALIZED.into(),
        ),
        (
            "const UCP_EP_PARAM_FIELD_REMOTE_ADDRESS".into(),
            UCP_EP_PARAM_FIELD_REMOTE_ADDRESS.into(),
        ),
        (
            "const UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE".into(),
            UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE.into(),
        ),
        (
            "const UCP_ERR_HANDLING_MODE_NONE".into(),
            UCP_ERR_HANDLING_MODE_NONE.into(),
        ),
        (
            "const UCP_EP_CLOSE_FLAG_FORCE".into(),
            UCP_EP_CLOSE_FLAG_FORCE.into(),
        ),
        (
            "const UCP_MEM_MAP_PARAM_FIELD_ADDRESS".into(),
            UCP_MEM_MAP_PARAM_FIELD_ADDRESS.into(),
        ),
        (
            "const UCP_MEM_MAP_PARAM_FIELD_LENGTH".into(),
            UCP_MEM_MAP_PARAM_FIELD_LENGTH.into(),
        ),
        (
            "const UCP_MEM_MAP_PARAM_FIELD_FLAGS".into(),
            UCP_MEM_MAP_PARAM_FIELD_FLAGS.into(),
        ),
        (
            "const UCP_MEM_MAP_ALLOCATE".into(),
            UCP_MEM_MAP_ALLOCATE.into(),
        ),
        (
            "const UCP_MEM_ATTR_FIELD_ADDRESS".into(),
            UCP_MEM_ATTR_FIELD_ADDRESS.into(),
        ),
        (
            "const UCP_MEM_ATTR_FIELD_LENGTH".into(),
            UCP_MEM_ATTR_FIELD_LENGTH.into(),
        ),
        (
            "const UCP_OP_ATTR_FIELD_REQUEST".into(),
            UCP_OP_ATTR_FIELD_REQUEST.into(),
        ),
        (
            "const UCP_OP_ATTR_FIELD_FLAGS".into(),
            UCP_OP_ATTR_FIELD_FLAGS.into(),
        ),
        (
            "const UCP_OP_ATTR_FIELD_MEMH".into(),
            UCP_OP_ATTR_FIELD_MEMH.into(),
        ),
        ("const UCS_OK".into(), UCS_OK.into()),
        ("const UCS_INPROGRESS".into(), UCS_INPROGRESS.into()),
        ("const UCS_ERR_LAST".into(), UCS_ERR_LAST as i128),
        ("const UCP_API_MAJOR".into(), UCP_API_MAJOR.into()),
        ("const UCP_API_MINOR".into(), UCP_API_MINOR.into()),
    ];
    for (key, value) in want {
        let line = text
            .lines()
            .find(|l| l.rsplit_once(' ').is_some_and(|(k, _)| k == key))
            .unwrap_or_else(|| panic!("{key} not printed by the ABI program"));
        let got: i128 = line.rsplit_once(' ').unwrap().1.parse().unwrap();
        assert_eq!(
            got, value,
            "{key}: the header says {got}, the binding {value}"
        );
    }
}

/// UCX loads, allocates registered memory, and a get and a put through an
/// endpoint to this process's own worker move the bytes (the smallest use
/// of every call the runtime and the server make).
#[test]
fn a_get_and_a_put_move_bytes() {
    let ctx = Context::new(c"farmem-test", false, &[]).expect("UCX loads");
    let worker = Worker::new(&ctx).unwrap();
    let mem = Memory::map(&ctx, 1 << 20, None).unwrap();
    assert!(mem.len() >= 1 << 20);
    // SAFETY: the memory is ours, 1 MiB long.
    unsafe { mem.addr().add(4096).write_bytes(0x5A, 4096) };
    let rkey_bytes = mem.pack_rkey().unwrap();
    let ep = Endpoint::connect(&worker, &worker.address().unwrap()).unwrap();
    let rkey = ep.unpack(&rkey_bytes).unwrap();
    let mut req = vec![0u8; ctx.request_size() + 64];
    // SAFETY: request_size bytes precede the pointer.
    let op = Op::new(unsafe { req.as_mut_ptr().add(ctx.request_size()) }, None);
    let wait = |s: Started| match s {
        Started::Done => {}
        Started::Pending => loop {
            worker.progress();
            // SAFETY: the operation is in flight.
            let st = unsafe { op.poll() };
            if st != UCS_INPROGRESS {
                assert_eq!(st, UCS_OK);
                break;
            }
        },
        Started::Failed(s) => panic!("{}", status_string(s)),
    };
    let mut buf = vec![0u8; 4096];
    let base = mem.addr() as u64;
    // SAFETY: buf is 4 KiB and outlives the wait.
    wait(unsafe { op.get(&ep, buf.as_mut_ptr(), 4096, base + 4096, &rkey) });
    assert!(buf.iter().all(|&b| b == 0x5A));
    buf.fill(0xC3);
    // SAFETY: as above.
    wait(unsafe { op.put(&ep, buf.as_ptr(), 4096, base + 8192, &rkey) });
    // SAFETY: no other operation is in flight on this request.
    wait(unsafe { op.flush(&ep) });
    // SAFETY: the put is complete at the target, which is our memory.
    let put = unsafe { std::slice::from_raw_parts(mem.addr().add(8192), 4096) };
    assert!(put.iter().all(|&b| b == 0xC3));
    drop(rkey);
    drop(ep);
}
