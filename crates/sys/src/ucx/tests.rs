use super::*;

const PRINTED: &str = "#
# UCP context
#
#     component 0  :  self
#     component 1  :  tcp
#
#            md 0  :  component 0  self 
#            md 1  :  component 1  tcp
#
#      resource 0  :  md 0  dev 0  flags -- self/memory
#      resource 1  :  md 1  dev 1  flags -- tcp/lo
#      resource 2  :  md 2  dev 2  flags a- ud_mlx5/mlx5_0:1
#      resource 3  :  md 2  dev 2  flags -- rc_mlx5/mlx5_0:1
#      resource 4  :  md 3  dev 3  flags -- posix/memory
#
";

#[test]
fn resources_parse_with_their_aux_flag() {
    let r = parse_resources(PRINTED);
    let names: Vec<_> = r
        .iter()
        .map(|r| (r.tl.as_str(), r.dev.as_str(), r.aux))
        .collect();
    assert_eq!(
        names,
        [
            ("self", "memory", false),
            ("tcp", "lo", false),
            ("ud_mlx5", "mlx5_0:1", true),
            ("rc_mlx5", "mlx5_0:1", false),
            ("posix", "memory", false),
        ]
    );
}

#[test]
fn only_verbs_rma_and_the_posix_test_path_are_allowed() {
    let r = parse_resources(PRINTED);
    assert_eq!(
        Transports::Verbs.unexpected(&r),
        ["self/memory", "tcp/lo", "posix/memory"]
    );
    assert_eq!(
        Transports::PosixTestPath.unexpected(&r),
        ["self/memory", "tcp/lo"]
    );
    for tl in ["tcp", "sysv", "cma", "self", "knem", "xpmem"] {
        assert!(!Transports::PosixTestPath.allows(tl, false), "{tl}");
        assert!(!Transports::PosixTestPath.allows(tl, true), "{tl}");
    }
    // ud carries RMA in software: only for connection set-up.
    assert!(!Transports::Verbs.allows("ud_verbs", false));
    assert!(Transports::Verbs.allows("ud_verbs", true));
    assert!(!Transports::Verbs.allows("posix", false));
}

/// The contexts farmem makes: posix only on this kind of host, shared
/// across threads, memory hooks and cma off without the environment.
#[test]
fn contexts_get_only_the_listed_transports() {
    // libc's `mmap` as it starts, before UCX could patch it.
    let entry = || {
        // SAFETY: lookup of a NUL-terminated name in the global scope.
        let f = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"mmap".as_ptr()) };
        // SAFETY: the first bytes of a function's code, readable.
        unsafe { std::ptr::read_volatile(f.cast::<[u8; 16]>()) }
    };
    let before = entry();
    if available().is_err() {
        return; // no UCX here: nothing to check
    }
    let ctx = Context::new(c"farmem-unit", false, &[]).unwrap();
    // A registration would install the memory hooks were they on.
    let mem = Memory::map(&ctx, 1 << 20, None).unwrap();
    drop(mem);
    let hooks_by_user = ["UCX_MEM_EVENTS", "UCX_MEM_MMAP_HOOK_MODE"]
        .iter()
        .any(|v| std::env::var_os(v).is_some());
    if !hooks_by_user {
        assert_eq!(before, entry(), "UCX patched mmap");
    }
    let r = ctx.resources().unwrap();
    assert!(!r.is_empty());
    assert_eq!(
        Transports::PosixTestPath.unexpected(&r),
        Vec::<String>::new()
    );
    assert_eq!(ctx.thread_mode().unwrap(), UCS_THREAD_MODE_MULTI);
    // A caller's TLS cannot widen the list.
    let wide = Context::new(c"farmem-unit", false, &[("TLS", "all")]).unwrap();
    assert_eq!(
        Transports::PosixTestPath.unexpected(&wide.resources().unwrap()),
        Vec::<String>::new()
    );
    // Without RDMA, the verbs list gives no context at all.
    if !r.iter().any(|r| Transports::Verbs.allows(&r.tl, r.aux)) {
        assert!(Context::with_transports(c"farmem-unit", false, Transports::Verbs, &[]).is_err());
    }
    // cma's module was never loaded (its probe sets PR_SET_PTRACER_ANY).
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    assert!(!maps.contains("libuct_cma"), "{maps}");
    // The hooks are off in libucm's options, not in the environment.
    // SAFETY: lookup of a NUL-terminated name in the global scope.
    let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"ucm_global_opts".as_ptr()) };
    assert!(!p.is_null());
    // SAFETY: libucm's options (layout checked below), loaded for good.
    let o = unsafe { p.cast::<UcmGlobalConfig>().read() };
    for (var, value) in [
        ("UCX_MEM_EVENTS", o.enable_events),
        ("UCX_MEM_MMAP_HOOK_MODE", o.mmap_hook_mode),
        ("UCX_MEM_MALLOC_HOOKS", o.enable_malloc_hooks),
    ] {
        if std::env::var_os(var).is_none() {
            assert_eq!(value, 0, "{var}");
        }
    }
}

#[test]
fn ucm_options_match_the_installed_header() {
    const PROGRAM: &str = r#"
#include <ucm/api/ucm.h>
#include <stdio.h>
#include <stddef.h>
#define O(f) printf("%zu ", offsetof(ucm_global_config_t, f))
int main(void) {
    printf("%zu ", sizeof(ucm_global_config_t));
    O(log_level); O(enable_events); O(mmap_hook_mode); O(enable_malloc_hooks);
    O(enable_malloc_reloc); O(cuda_hook_modes); O(enable_dynamic_mmap_thresh);
    O(alloc_alignment); O(dlopen_process_rpath); O(module_unload_prevent_mode);
    printf("%d %d %lld\n", (int)UCM_MMAP_HOOK_NONE, (int)UCS_THREAD_MODE_MULTI,
           (long long)UCP_PARAM_FIELD_MT_WORKERS_SHARED);
    return 0;
}
"#;
    let program = PROGRAM.replace(
        "#include <stdio.h>",
        "#include <ucp/api/ucp.h>\n#include <stdio.h>",
    );
    let dir = std::env::temp_dir().join(format!("farmem-ucm-abi-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (src, bin) = (dir.join("ucm.c"), dir.join("ucm"));
    std::fs::write(&src, program).unwrap();
    let Ok(cc) = std::process::Command::new("gcc")
        .arg(&src)
        .arg("-o")
        .arg(&bin)
        .output()
    else {
        return; // no compiler: tests/ucx_abi.rs says so
    };
    if !cc.status.success() {
        let _ = std::fs::remove_dir_all(&dir);
        assert!(
            String::from_utf8_lossy(&cc.stderr).contains("No such file"),
            "{}",
            String::from_utf8_lossy(&cc.stderr)
        );
        return; // no UCX headers: tests/ucx_abi.rs says so
    }
    let out = std::process::Command::new(&bin).output().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    use std::mem::{offset_of, size_of};
    type C = UcmGlobalConfig;
    let want = format!(
        "{} {} {} {} {} {} {} {} {} {} {} {} {} {}\n",
        size_of::<C>(),
        offset_of!(C, log_level),
        offset_of!(C, enable_events),
        offset_of!(C, mmap_hook_mode),
        offset_of!(C, enable_malloc_hooks),
        offset_of!(C, enable_malloc_reloc),
        offset_of!(C, cuda_hook_modes),
        offset_of!(C, enable_dynamic_mmap_thresh),
        offset_of!(C, alloc_alignment),
        offset_of!(C, dlopen_process_rpath),
        offset_of!(C, module_unload_prevent_mode),
        UCM_MMAP_HOOK_NONE,
        UCS_THREAD_MODE_MULTI,
        UCP_PARAM_FIELD_MT_WORKERS_SHARED,
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), want);
}
