//! The report's modules form no circle: each module (a file `src/X.rs` or
//! a folder `src/X/`) is listed with every `crate::Y` module its files
//! name, and the graph must be acyclic, so that each output kind can be
//! read, and changed, from the bottom up. `words` (escaping, the machine
//! line) names no other module. A new circle fails here and is named.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

#[path = "../../../tests/support/crate_modules.rs"]
mod crate_modules;
use crate_modules::named_modules;

/// Each module of the crate and the modules it names.
fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files: BTreeMap<String, Vec<std::path::PathBuf>> = BTreeMap::new();
    for e in std::fs::read_dir(&src).unwrap() {
        let p = e.unwrap().path();
        let stem = p.file_stem().unwrap().to_str().unwrap().to_string();
        if p.is_dir() {
            for f in std::fs::read_dir(&p).unwrap() {
                let f = f.unwrap().path();
                if f.extension().is_some_and(|x| x == "rs") {
                    files.entry(stem.clone()).or_default().push(f);
                }
            }
        } else if p.extension().is_some_and(|x| x == "rs") && stem != "lib" {
            files.entry(stem).or_default().push(p);
        }
    }
    let modules: BTreeSet<String> = files.keys().cloned().collect();
    files
        .iter()
        .map(|(m, fs)| {
            let named = fs
                .iter()
                .flat_map(|f| named_modules(&std::fs::read_to_string(f).unwrap()))
                .filter(|n| n != m && modules.contains(n))
                .collect();
            (m.clone(), named)
        })
        .collect()
}

/// A circle through `m`, if the graph has one reachable from it.
fn circle(
    g: &BTreeMap<String, BTreeSet<String>>,
    m: &str,
    path: &mut Vec<String>,
    done: &mut BTreeSet<String>,
) -> Option<Vec<String>> {
    if let Some(i) = path.iter().position(|p| p == m) {
        let mut c = path[i..].to_vec();
        c.push(m.to_string());
        return Some(c);
    }
    if done.contains(m) {
        return None;
    }
    path.push(m.to_string());
    for n in &g[m] {
        if let Some(c) = circle(g, n, path, done) {
            return Some(c);
        }
    }
    path.pop();
    done.insert(m.to_string());
    None
}

#[test]
fn no_module_circle() {
    let g = graph();
    assert!(g.contains_key("words") && g.contains_key("bench"), "{g:?}");
    let mut done = BTreeSet::new();
    for m in g.keys() {
        if let Some(c) = circle(&g, m, &mut Vec::new(), &mut done) {
            panic!("a circle of modules: {}", c.join(" -> "));
        }
    }
    assert!(g["words"].is_empty(), "words names {:?}", g["words"]);
}

#[test]
fn a_circle_is_found() {
    let mut g = BTreeMap::new();
    g.insert("a".to_string(), BTreeSet::from(["b".to_string()]));
    g.insert("b".to_string(), BTreeSet::from(["a".to_string()]));
    let c = circle(&g, "a", &mut Vec::new(), &mut BTreeSet::new()).unwrap();
    assert_eq!(c, ["a", "b", "a"]);
}
