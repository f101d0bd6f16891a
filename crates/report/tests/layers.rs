//! The report's modules form no circle: each module (a file `src/X.rs` or
//! a folder `src/X/`) is listed with every `crate::Y` module its files
//! name (test code aside), and the graph must be acyclic, so that each
//! output kind can be read, and changed, from the bottom up. `words`
//! (escaping, the machine line) names no other module. A new circle fails
//! here and is named. (`crates/sys/tests/import_circles.rs` checks every
//! crate for circles; this adds the report's own rule for `words`.)

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

#[path = "../../../tests/support/crate_modules.rs"]
mod crate_modules;
use crate_modules::{circle, crate_graph};

#[test]
fn no_module_circle() {
    let g = crate_graph(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"));
    assert!(g.contains_key("words") && g.contains_key("bench"), "{g:?}");
    if let Some(c) = circle(&g) {
        panic!("a circle of modules: {}", c.join(" -> "));
    }
    assert!(g["words"].is_empty(), "words names {:?}", g["words"]);
}

#[test]
fn a_circle_is_found() {
    let mut g = BTreeMap::new();
    g.insert("a".to_string(), BTreeSet::from(["b".to_string()]));
    g.insert("b".to_string(), BTreeSet::from(["a".to_string()]));
    assert_eq!(circle(&g).unwrap(), ["a", "b", "a"]);
}
