//! The userfaultfd ABI defined in Rust must match the kernel's C header.
//! A tiny C program prints the header's values; we compare (the
//! userfaultfd-rs practice of cross-checking constants).

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
