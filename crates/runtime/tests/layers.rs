//! The runtime's architecture, written down once and enforced:
//! - `Runtime` composes owners and holds at most 10 fields;
//! - each owner (`arena`, `budget`, `streams`, `observe`) keeps its fields
//!   private, so the rest of the crate reaches its state only through its
//!   methods, and names no module of the page path above it (`fault`,
//!   `eviction`, `install`, `prefetch`, `pins`, `regions`, `remap`, the
//!   backends): the owners are the bottom the page path is built on;
//! - the runtime holds only what runs in the program: no launcher, outside
//!   watcher or simulator (crates/launch and crates/sim hold those).

use std::path::Path;

#[path = "../../../tests/support/crate_modules.rs"]
mod crate_modules;
use crate_modules::crate_graph;

const OWNERS: [&str; 4] = ["arena", "budget", "streams", "observe"];
const PAGE_PATH: [&str; 9] = [
    "fault", "eviction", "install", "prefetch", "pins", "regions", "remap", "backend", "signals",
];

fn src() -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The field lines of `struct NAME { ... }` in `text`.
fn fields<'a>(text: &'a str, name: &str) -> Vec<&'a str> {
    let start = text
        .find(&format!("struct {name} {{"))
        .unwrap_or_else(|| panic!("no struct {name}"));
    let body = &text[start..];
    let end = body.find("\n}").unwrap();
    body[..end]
        .lines()
        .skip(1)
        .map(str::trim)
        .filter(|l| !l.starts_with("//") && !l.starts_with('#') && l.contains(':'))
        .collect()
}

#[test]
fn the_runtime_composes_at_most_ten_parts() {
    let lib = std::fs::read_to_string(src().join("lib.rs")).unwrap();
    let f = fields(&lib, "Runtime");
    assert!(
        f.len() <= 10,
        "Runtime has {} fields:\n{}",
        f.len(),
        f.join("\n")
    );
    for o in OWNERS {
        assert!(
            f.iter().any(|l| l.starts_with(&format!("pub(crate) {o}:"))),
            "Runtime does not hold its {o}:\n{}",
            f.join("\n")
        );
    }
}

#[test]
fn owners_keep_their_fields_and_sit_below_the_page_path() {
    let g = crate_graph(&src());
    for o in OWNERS {
        let text = std::fs::read_to_string(src().join(format!("{o}.rs"))).unwrap();
        let ty = {
            let mut c = o.chars();
            let first = c.next().unwrap().to_ascii_uppercase();
            format!("{first}{}", c.as_str())
        };
        let open: Vec<&str> = fields(&text, &ty)
            .into_iter()
            .filter(|l| l.starts_with("pub"))
            .collect();
        assert!(open.is_empty(), "{ty} shows its fields: {open:?}");
        let names = g.get(o).unwrap_or_else(|| panic!("no module {o}"));
        for up in PAGE_PATH {
            assert!(!names.contains(up), "{o} names {up}, a module above it");
        }
    }
}

#[test]
fn only_what_runs_in_the_program() {
    let g = crate_graph(&src());
    for tool in ["launch", "outside", "sim"] {
        assert!(!g.contains_key(tool), "the runtime holds {tool}");
    }
}
