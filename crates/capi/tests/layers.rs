//! capi's modules are layers that only point down (src/lib.rs lists them):
//! every `crate::module` a source file names in code must sit in a lower
//! layer than the file itself, and the call families never name each
//! other. A new arrow upward or sideways fails here, naming the file and
//! the module.

use std::collections::BTreeSet;
use std::path::Path;

#[path = "../../../tests/support/crate_modules.rs"]
mod crate_modules;
use crate_modules::named_modules;

/// Layer of each module, bottom first.
const LAYERS: &[&[&str]] = &[
    &["reg", "forward", "table", "selector"],
    &["pin"],
    &[
        "io", "net", "files", "process", "sync", "aio", "remote", "signals",
    ],
    &["router"],
    &["dispatch"],
    &["api"],
];

fn layer_of(m: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&m))
}

#[test]
fn each_module_names_only_lower_layers() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut problems = Vec::new();
    let mut seen = BTreeSet::new();
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        let stem = p.file_stem().unwrap().to_str().unwrap().to_string();
        if p.extension().is_none_or(|x| x != "rs") || stem == "lib" {
            continue;
        }
        seen.insert(stem.clone());
        let Some(own) = layer_of(&stem) else {
            problems.push(format!(
                "src/{stem}.rs is in no layer: add it to LAYERS here and to the list in src/lib.rs"
            ));
            continue;
        };
        let src = std::fs::read_to_string(&p).unwrap();
        for m in named_modules(&src) {
            if m == stem {
                continue;
            }
            match layer_of(&m) {
                Some(l) if l < own => {}
                Some(l) => problems.push(format!(
                    "src/{stem}.rs (layer {own}) names crate::{m} (layer {l}): arrows only point down"
                )),
                None => problems.push(format!(
                    "src/{stem}.rs names crate::{m}, which is in no layer"
                )),
            }
        }
    }
    for l in LAYERS.iter().flat_map(|l| l.iter()) {
        assert!(seen.contains(*l), "LAYERS lists {l}, which has no file");
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}

#[test]
fn the_scanner_sees_paths_groups_and_macro_paths_but_not_comments() {
    let src = "use crate::pin::{a, b};\nuse crate::{io, net::x};\nlet f = $crate::forward::real!();\n/// [`crate::api`]\nx(); // crate::router\n";
    let got: Vec<String> = named_modules(src).into_iter().collect();
    assert_eq!(got, ["forward", "io", "net", "pin"]);
}
