//! No crate of the workspace has a circle of imports between its modules,
//! so that each crate reads, and changes, from the bottom up.
//!
//! A module here is a top-level module of a crate: a file `src/X.rs` or a
//! folder `src/X/`, every file below the folder counting as `X` (a
//! submodule's arrows are its top-level parent's). The crate root
//! (`lib.rs`, `main.rs`) is no module: it declares the modules and
//! re-exports their items, and a path through a re-export counts as one
//! to the module the item comes from. Module `A` names `B` when a file of
//! `A` has a path from the crate root to `B` in code (`use crate::B::..`,
//! `crate::B::f()`, `super::B` climbing to the root, macros' `$crate::B`);
//! test code (items under `#[cfg(test)]`, test modules' files) and
//! comments do not count (see `tests/support/crate_modules.rs` for what
//! the scan reads).
//!
//! This test lives in farmem-sys, the bottom crate, and reads every
//! crate's source by path: it links none of them.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

#[path = "../../../tests/support/crate_modules.rs"]
mod crate_modules;
use crate_modules::{circle, crate_graph, Graph};

/// Arrows that close a circle today, each to be removed by moving what
/// the lower module takes from the higher one down into it: (crate,
/// module, the module it names). The test ignores these arrows and fails
/// when one is gone, so that the list only shrinks.
const ALLOWED: &[(&str, &str, &str)] = &[];

/// Every crate of the workspace: its package name and its `src`.
fn crates() -> Vec<(String, PathBuf)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut out = Vec::new();
    for e in std::fs::read_dir(&root).unwrap() {
        let dir = e.unwrap().path();
        let Ok(manifest) = std::fs::read_to_string(dir.join("Cargo.toml")) else {
            continue;
        };
        if !dir.join("src").is_dir() {
            continue;
        }
        let name = manifest
            .lines()
            .find_map(|l| l.strip_prefix("name = \""))
            .and_then(|l| l.strip_suffix('"'))
            .unwrap_or_else(|| panic!("{} names no package", dir.display()))
            .to_string();
        out.push((name, dir.join("src")));
    }
    out.sort();
    out
}

/// `g` less the allowed arrows of `krate`; the allowed arrows `g` lacks
/// are added to `stale`.
fn less_allowed(krate: &str, mut g: Graph, stale: &mut Vec<String>) -> Graph {
    for (c, from, to) in ALLOWED.iter().filter(|a| a.0 == krate) {
        let removed = g.get_mut(*from).is_some_and(|n| n.remove(*to));
        if !removed {
            stale.push(format!("{c}: {from} -> {to}"));
        }
    }
    g
}

#[test]
fn no_crate_has_a_circle_of_modules() {
    let crates = crates();
    assert!(
        crates.iter().any(|c| c.0 == "farmem-sys") && crates.len() > 5,
        "{crates:?}"
    );
    let mut circles = Vec::new();
    let mut stale = Vec::new();
    for (name, src) in &crates {
        let g = less_allowed(name, crate_graph(src), &mut stale);
        if let Some(c) = circle(&g) {
            circles.push(format!("{name}: {}", c.join(" -> ")));
        }
    }
    assert!(
        circles.is_empty(),
        "circles of modules (move what the lower module takes from the higher one down into it):\n{}",
        circles.join("\n")
    );
    assert!(
        stale.is_empty(),
        "ALLOWED lists arrows that are gone; remove them from the list:\n{}",
        stale.join("\n")
    );
}

#[test]
fn allowed_arrows_name_real_crates() {
    let names: BTreeSet<String> = crates().into_iter().map(|c| c.0).collect();
    for (c, _, _) in ALLOWED {
        assert!(names.contains(*c), "ALLOWED names {c}, which is no crate");
    }
}

/// The scanner on a crate written for the purpose: a circle through a
/// group across lines, a `super::` from a folder's file, and a name the
/// root re-exports; comments, strings and test code name nothing.
#[test]
fn the_scan_finds_a_circle_however_it_is_written() {
    let dir = std::env::temp_dir().join(format!("farmem-circles-{}", std::process::id()));
    let src = dir.join("src");
    std::fs::create_dir_all(src.join("b")).unwrap();
    let write = |f: &str, s: &str| std::fs::write(src.join(f), s).unwrap();
    write("lib.rs", "mod a;\nmod b;\nmod c;\npub use c::Thing;\n");
    write(
        "a.rs",
        "use crate::{\n    b::{x, y},\n};\n// crate::c\nconst S: &str = \"crate::c\";\n",
    );
    write("b/mod.rs", "mod inner;\n#[cfg(test)]\nmod tests;\n");
    write("b/inner.rs", "use super::super::c::z;\n");
    write("b/tests.rs", "use crate::a::x;\n");
    write(
        "c.rs",
        "pub struct Thing;\nfn f() -> crate::Thing { Thing }\n#[cfg(test)]\nmod tests {\n    use super::*;\n    use crate::a::x;\n}\n",
    );
    let g = crate_graph(&src);
    assert_eq!(
        g["a"].iter().collect::<Vec<_>>(),
        ["b"],
        "the comment and the string name nothing: {g:?}"
    );
    assert_eq!(g["b"].iter().collect::<Vec<_>>(), ["c"], "{g:?}");
    assert!(g["c"].is_empty(), "test code names nothing: {g:?}");
    assert_eq!(circle(&g), None);

    write("c.rs", "fn f() { crate::Thing; }\nuse super::a;\n");
    write("lib.rs", "mod a;\nmod b;\nmod c;\npub use a::Thing;\n");
    let g = crate_graph(&src);
    let c = circle(&g).expect("a -> b -> c -> a");
    assert_eq!(c.first(), c.last());
    assert_eq!(c.len(), 4, "{c:?}");
    std::fs::remove_dir_all(&dir).unwrap();
}
