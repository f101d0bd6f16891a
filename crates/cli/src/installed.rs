//! Where farmem's own files are, beside the binary: next to it in a build
//! tree (`target/release/`), or in `../lib/farmem/` from it where the
//! Debian package puts them (`/usr/bin/farmem`, `/usr/lib/farmem/`).

use std::path::{Path, PathBuf};

/// `name` next to `exe` if it is there, else in `../lib/farmem` from it if
/// it is there, else next to `exe` (which the caller's message names).
pub fn beside(exe: &Path, name: &str) -> PathBuf {
    let here = exe.with_file_name(name);
    if here.exists() {
        return here;
    }
    let installed = exe.parent().map(|bin| bin.join("../lib/farmem").join(name));
    match installed {
        Some(p) if p.exists() => p,
        _ => here,
    }
}
