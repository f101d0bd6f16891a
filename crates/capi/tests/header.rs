//! include/farmem.h must agree with the Rust side: every constant and the
//! layout of struct fm_stats, checked by a compiled C program.

use farmem::*;
use std::mem::{offset_of, size_of};
use std::process::Command;

#[test]
fn header_matches_rust() {
    let repo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let dir = std::env::temp_dir().join(format!("farmem-hdr-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let fields = [
        "faults",
        "wp_faults",
        "bytes_fetched",
        "bytes_written_back",
        "evictions",
        "prefetched",
        "prefetch_used",
        "prefetch_wasted",
        "zero_filled_pages",
        "io_pins",
        "resident_bytes",
        "budget_bytes",
        "fault_p50_ns",
        "fault_p90_ns",
        "fault_p99_ns",
        "fault_max_ns",
    ];
    let consts = [
        "FM_OK",
        "FM_ECONFIG",
        "FM_EBACKEND",
        "FM_ENOSYS",
        "FM_EALREADY",
        "FM_ENOMEM",
        "FM_EINVAL",
        "FM_EBUDGET",
        "FM_EFORK",
        "FM_ADV_NORMAL",
        "FM_ADV_SEQUENTIAL",
        "FM_ADV_RANDOM",
        "FM_ADV_WILLNEED",
        "FM_ADV_DONTNEED",
        "FM_ADV_PIN",
        "FM_ADV_UNPIN",
        "FM_ADV_READ_MOSTLY",
    ];
    let mut c = String::from(
        "#include <farmem.h>\n#include <stddef.h>\n#include <stdio.h>\nint main(void) {\n",
    );
    c += "  printf(\"%zu\\n\", sizeof(struct fm_stats));\n";
    for f in fields {
        c += &format!("  printf(\"%zu\\n\", offsetof(struct fm_stats, {f}));\n");
    }
    for k in consts {
        c += &format!("  printf(\"%d\\n\", {k});\n");
    }
    c += "  return 0;\n}\n";
    let src = dir.join("hdr.c");
    std::fs::write(&src, c).unwrap();
    let exe = dir.join("hdr");
    let ok = Command::new("gcc")
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic", "-I"])
        .arg(repo.join("include"))
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .status()
        .unwrap()
        .success();
    assert!(ok, "farmem.h does not compile cleanly");
    let out = String::from_utf8(Command::new(&exe).output().unwrap().stdout).unwrap();
    let got: Vec<i64> = out.lines().map(|l| l.parse().unwrap()).collect();
    let mut want = vec![size_of::<FmStats>() as i64];
    let offs = [
        offset_of!(FmStats, faults),
        offset_of!(FmStats, wp_faults),
        offset_of!(FmStats, bytes_fetched),
        offset_of!(FmStats, bytes_written_back),
        offset_of!(FmStats, evictions),
        offset_of!(FmStats, prefetched),
        offset_of!(FmStats, prefetch_used),
        offset_of!(FmStats, prefetch_wasted),
        offset_of!(FmStats, zero_filled_pages),
        offset_of!(FmStats, io_pins),
        offset_of!(FmStats, resident_bytes),
        offset_of!(FmStats, budget_bytes),
        offset_of!(FmStats, fault_p50_ns),
        offset_of!(FmStats, fault_p90_ns),
        offset_of!(FmStats, fault_p99_ns),
        offset_of!(FmStats, fault_max_ns),
    ];
    want.extend(offs.iter().map(|&o| o as i64));
    want.extend(
        [
            FM_OK,
            FM_ECONFIG,
            FM_EBACKEND,
            FM_ENOSYS,
            FM_EALREADY,
            FM_ENOMEM,
            FM_EINVAL,
            FM_EBUDGET,
            FM_EFORK,
            FM_ADV_NORMAL,
            FM_ADV_SEQUENTIAL,
            FM_ADV_RANDOM,
            FM_ADV_WILLNEED,
            FM_ADV_DONTNEED,
            FM_ADV_PIN,
            FM_ADV_UNPIN,
            FM_ADV_READ_MOSTLY,
        ]
        .iter()
        .map(|&v| v as i64),
    );
    assert_eq!(got, want);
    // The C++ compiler accepts the header too (extern "C" guard).
    let cpp = dir.join("hdr.cc");
    std::fs::write(
        &cpp,
        "#include <farmem.h>\nint main() { return fm_is_far(nullptr); }\n",
    )
    .unwrap();
    let ok = Command::new("g++")
        .args(["-Wall", "-Wextra", "-Werror", "-fsyntax-only", "-I"])
        .arg(repo.join("include"))
        .arg(&cpp)
        .status()
        .unwrap()
        .success();
    assert!(ok, "farmem.h does not compile as C++");
    std::fs::remove_dir_all(&dir).ok();
}
