//! Shared by the module tests of several crates (included with `#[path]`):
//! which of its own modules a source file names, the graph of a crate's
//! top-level modules, and a circle in that graph.
//!
//! The scan reads source text, not the compiler's resolution: comments
//! (doc comments too: a link is not a dependency) and the insides of
//! string and character literals are left out, then every path that
//! starts at the crate root is followed: `crate::x`, `$crate::x`, a
//! `super::` chain that climbs to the root, groups across lines
//! (`use crate::{a, b::{c, d}}` names `a` and `b`), and a name the root
//! re-exports from a module (`pub use m::Item` in lib.rs: `crate::Item`
//! names `m`). A file that glob-imports the root (`use super::*` at its
//! top) also names every module it writes as a bare `m::`. Not traced:
//! names reached through a glob re-export (`pub use m::*` in lib.rs).

#![allow(dead_code)] // each test uses its own part

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Each top-level module of a crate and the other top-level modules it
/// names.
pub type Graph = BTreeMap<String, BTreeSet<String>>;

/// The names `src`, a file directly under the root (as `src/x.rs`), reaches
/// at the root in code: `crate::x`, `$crate::x`, `super::x` (doc and
/// ordinary comments left out: a link is not a dependency).
pub fn named_modules(src: &str) -> BTreeSet<String> {
    let tokens = tokens(&code_of(src));
    let mut out = BTreeSet::new();
    for r in root_paths(&tokens, &[String::from("_")]) {
        if let RootPath::Names(n) = r {
            out.extend(n);
        }
    }
    out
}

/// The graph of the crate whose sources are in `src`: its top-level
/// modules (a file `src/X.rs` or a folder `src/X/`, every file below it
/// counting as `X`), each with the other top-level modules its files name.
/// The root (`lib.rs`, `main.rs`) is no module: it declares the others and
/// re-exports their items, which are traced to their module. Test code is
/// left out: items under `#[cfg(test)]`, and the files of modules declared
/// so (`#[cfg(test)] mod tests;`).
pub fn crate_graph(src: &Path) -> Graph {
    let mut files: BTreeMap<String, Vec<(PathBuf, Vec<String>)>> = BTreeMap::new();
    let mut roots = Vec::new();
    for e in std::fs::read_dir(src).unwrap() {
        let p = e.unwrap().path();
        let stem = p.file_stem().unwrap().to_str().unwrap().to_string();
        if p.is_dir() {
            let mut below = Vec::new();
            rs_files(&p, &mut below);
            for f in below {
                let path = module_path(src, &f);
                files.entry(stem.clone()).or_default().push((f, path));
            }
        } else if p.extension().is_some_and(|x| x == "rs") {
            if stem == "lib" || stem == "main" {
                roots.push(p);
            } else {
                files.entry(stem.clone()).or_default().push((p, vec![stem]));
            }
        }
    }
    // The files of test modules, by module path.
    let mut tests: BTreeSet<Vec<String>> = BTreeSet::new();
    for f in roots.iter().chain(files.values().flatten().map(|f| &f.0)) {
        let here = if roots.contains(f) {
            Vec::new()
        } else {
            module_path(src, f)
        };
        let (_, test_mods) = without_tests(tokens(&code_of(&std::fs::read_to_string(f).unwrap())));
        for m in test_mods {
            let mut p = here.clone();
            p.push(m);
            tests.insert(p);
        }
    }
    let is_test = |path: &[String]| (1..=path.len()).any(|n| tests.contains(&path[..n]));
    files.retain(|_, fs| {
        fs.retain(|f| !is_test(&f.1));
        !fs.is_empty()
    });
    let modules: BTreeSet<String> = files.keys().cloned().collect();
    let mut exported = BTreeMap::new();
    for r in &roots {
        exported.extend(root_exports(&std::fs::read_to_string(r).unwrap(), &modules));
    }
    files
        .iter()
        .map(|(m, fs)| {
            let mut named = BTreeSet::new();
            for (f, path) in fs {
                let src = std::fs::read_to_string(f).unwrap();
                named.extend(names_in(&src, path, &modules, &exported));
            }
            named.retain(|n| n != m);
            (m.clone(), named)
        })
        .collect()
}

/// A circle in `g`, as the modules along it with the first repeated at the
/// end (`a -> b -> a`), or None when `g` has none.
pub fn circle(g: &Graph) -> Option<Vec<String>> {
    let mut done = BTreeSet::new();
    for m in g.keys() {
        if let Some(c) = circle_from(g, m, &mut Vec::new(), &mut done) {
            return Some(c);
        }
    }
    None
}

/// A circle reachable from `m` (depth first; `path` is the way down,
/// `done` the modules from which no circle is reachable).
fn circle_from(
    g: &Graph,
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
    for n in g.get(m).into_iter().flatten() {
        if let Some(c) = circle_from(g, n, path, done) {
            return Some(c);
        }
    }
    path.pop();
    done.insert(m.to_string());
    None
}

/// Every `.rs` file below `dir`.
fn rs_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rs_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The module path of file `f` below `src`: `a/b.rs` and `a/b/mod.rs`
/// are `[a, b]`.
fn module_path(src: &Path, f: &Path) -> Vec<String> {
    let rel = f.strip_prefix(src).unwrap().with_extension("");
    let mut parts: Vec<String> = rel
        .components()
        .map(|c| c.as_os_str().to_str().unwrap().to_string())
        .collect();
    if parts.last().is_some_and(|l| l == "mod") {
        parts.pop();
    }
    parts
}

/// The names the root re-exports from a module, and the module: from
/// `pub use m::{A, b::C as D}` in lib.rs, A and D name m.
fn root_exports(src: &str, modules: &BTreeSet<String>) -> BTreeMap<String, String> {
    let (t, _) = without_tests(tokens(&code_of(src)));
    let mut out = BTreeMap::new();
    let mut i = 0;
    while i < t.len() {
        if t[i] == "use" {
            let mut j = i + 1;
            if matches!(t.get(j).map(String::as_str), Some("crate" | "self"))
                && t.get(j + 1).is_some_and(|x| x == "::")
            {
                j += 2;
            }
            let mut bound = Vec::new();
            let end = use_tree(&t, j, &mut Vec::new(), &mut bound);
            for (path, name) in bound {
                if path.len() > 1 && modules.contains(&path[0]) {
                    out.insert(name, path[0].clone());
                }
            }
            i = end;
        } else {
            i += 1;
        }
    }
    out
}

/// Parses the use tree at `t[i]`, adding each (full path, bound name) to
/// `out` (a glob binds nothing); returns the index after it.
fn use_tree(
    t: &[String],
    mut i: usize,
    prefix: &mut Vec<String>,
    out: &mut Vec<(Vec<String>, String)>,
) -> usize {
    let depth = prefix.len();
    while i < t.len() {
        let tok = t[i].as_str();
        if tok == "{" {
            i += 1;
            while i < t.len() && t[i] != "}" {
                i = use_tree(t, i, prefix, out);
                if t.get(i).is_some_and(|x| x == ",") {
                    i += 1;
                }
            }
            i += 1;
            break;
        } else if tok == "*" {
            i += 1;
            break;
        } else if is_ident(tok) {
            prefix.push(tok.to_string());
            i += 1;
            if t.get(i).is_some_and(|x| x == "::") {
                i += 1;
                continue;
            }
            let mut name = tok.to_string();
            if t.get(i).is_some_and(|x| x == "as") {
                name = t.get(i + 1).cloned().unwrap_or_default();
                i += 2;
            }
            if name != "self" && name != "_" {
                out.push((prefix.clone(), name));
            }
            break;
        } else {
            break;
        }
    }
    prefix.truncate(depth);
    i
}

/// What a path from the crate root names.
enum RootPath {
    /// The root's items (or modules) of these names.
    Names(Vec<String>),
    /// All of the root (`use super::*` up to it).
    Glob,
}

/// The top-level modules that `src`, the file of module `path`, names.
fn names_in(
    src: &str,
    path: &[String],
    modules: &BTreeSet<String>,
    exported: &BTreeMap<String, String>,
) -> BTreeSet<String> {
    let (t, _) = without_tests(tokens(&code_of(src)));
    let mut out = BTreeSet::new();
    let mut glob = false;
    for r in root_paths(&t, path) {
        match r {
            RootPath::Names(n) => {
                for n in n {
                    if modules.contains(&n) {
                        out.insert(n);
                    } else if let Some(m) = exported.get(&n) {
                        out.insert(m.clone());
                    }
                }
            }
            RootPath::Glob => glob = true,
        }
    }
    if glob {
        // The root's modules are in scope by their bare names.
        for (i, w) in t.iter().enumerate() {
            let starts_path = i == 0 || t[i - 1] != "::";
            if starts_path && modules.contains(w) && t.get(i + 1).is_some_and(|x| x == "::") {
                out.insert(w.clone());
            }
        }
    }
    out
}

/// Every path in tokens `t` (the file of module `path`) that reaches the
/// crate root, by what it names there. Inline `mod x { ... }` blocks are
/// followed, so that a test module's `super::` is its file's module.
fn root_paths(t: &[String], path: &[String]) -> Vec<RootPath> {
    let mut out = Vec::new();
    let mut here: Vec<String> = path.to_vec();
    // For each inline module open: the brace depth it closes at.
    let mut inline: Vec<usize> = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    while i < t.len() {
        let tok = t[i].as_str();
        match tok {
            "{" => depth += 1,
            "}" => {
                depth = depth.saturating_sub(1);
                if inline.last() == Some(&depth) {
                    inline.pop();
                    here.pop();
                }
            }
            "mod"
                if is_ident(t.get(i + 1).map_or("", String::as_str))
                    && t.get(i + 2).is_some_and(|x| x == "{") =>
            {
                here.push(t[i + 1].clone());
                inline.push(depth);
                depth += 1;
                i += 3;
                continue;
            }
            _ => {}
        }
        let starts_path = i == 0 || t[i - 1] != "::";
        let mut base: Option<Vec<String>> = None;
        let mut j = i;
        if starts_path && (tok == "crate" || tok == "$crate") {
            base = Some(Vec::new());
            j += 1;
        } else if starts_path && tok == "super" {
            let mut b = here.clone();
            b.pop();
            j += 1;
            while t.get(j).is_some_and(|x| x == "::") && t.get(j + 1).is_some_and(|x| x == "super")
            {
                b.pop();
                j += 2;
            }
            base = Some(b);
        }
        match base {
            Some(b) if b.is_empty() && t.get(j).is_some_and(|x| x == "::") => {
                match t.get(j + 1).map(String::as_str) {
                    Some("*") => out.push(RootPath::Glob),
                    Some("{") => out.push(RootPath::Names(group_heads(t, j + 2))),
                    Some(n) if is_ident(n) => out.push(RootPath::Names(vec![n.to_string()])),
                    _ => {}
                }
                i = j + 1;
            }
            _ => i += 1,
        }
    }
    out
}

/// Tokens `t` less the items under `#[cfg(test)]`, and the names of the
/// modules so declared in files of their own (`#[cfg(test)] mod x;`).
fn without_tests(t: Vec<String>) -> (Vec<String>, Vec<String>) {
    const CFG_TEST: [&str; 7] = ["#", "[", "cfg", "(", "test", ")", "]"];
    let mut out = Vec::with_capacity(t.len());
    let mut files = Vec::new();
    let mut i = 0;
    while i < t.len() {
        if !t[i..].starts_with(&CFG_TEST.map(String::from)) {
            out.push(t[i].clone());
            i += 1;
            continue;
        }
        i += CFG_TEST.len();
        // Other attributes of the item.
        while t.get(i).is_some_and(|x| x == "#") {
            let mut depth = 0;
            i += 1;
            while i < t.len() {
                match t[i].as_str() {
                    "[" => depth += 1,
                    "]" => depth -= 1,
                    _ => {}
                }
                i += 1;
                if depth == 0 {
                    break;
                }
            }
        }
        // The item: up to its `;`, or its body's closing brace.
        let start = i;
        let mut depth = 0;
        while i < t.len() {
            match t[i].as_str() {
                "{" => depth += 1,
                "}" => {
                    depth -= 1;
                    if depth == 0 {
                        i += 1;
                        break;
                    }
                }
                ";" if depth == 0 => {
                    let item = &t[start..i];
                    if let [.., m, name] = item {
                        if m == "mod" {
                            files.push(name.clone());
                        }
                    }
                    i += 1;
                    break;
                }
                _ => {}
            }
            i += 1;
        }
    }
    (out, files)
}

/// The first name of each entry of the group that starts at `t[i]` (just
/// after its `{`): `{a, b::{c, d}}` gives a and b.
fn group_heads(t: &[String], mut i: usize) -> Vec<String> {
    let mut out = Vec::new();
    let mut depth = 1;
    let mut head = true;
    while i < t.len() && depth > 0 {
        match t[i].as_str() {
            "{" => depth += 1,
            "}" => depth -= 1,
            "," if depth == 1 => head = true,
            w if depth == 1 && head && is_ident(w) => {
                if w != "self" {
                    out.push(w.to_string());
                }
                head = false;
            }
            _ => {}
        }
        i += 1;
    }
    out
}

fn is_ident(s: &str) -> bool {
    s.chars()
        .next()
        .is_some_and(|c| c.is_alphabetic() || c == '_')
}

/// `code` as identifiers (`$crate` one of them), `::`, and single marks.
fn tokens(code: &str) -> Vec<String> {
    let c: Vec<char> = code.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < c.len() {
        let ch = c[i];
        let word = |k: usize| k < c.len() && (c[k].is_alphanumeric() || c[k] == '_');
        if ch.is_whitespace() {
            i += 1;
        } else if word(i) || (ch == '$' && word(i + 1)) {
            let start = i;
            i += 1;
            while word(i) {
                i += 1;
            }
            out.push(c[start..i].iter().collect());
        } else if ch == ':' && c.get(i + 1) == Some(&':') {
            out.push("::".to_string());
            i += 2;
        } else {
            out.push(ch.to_string());
            i += 1;
        }
    }
    out
}

/// `src` without comments, and with every string and character literal
/// emptied: what is left is code.
fn code_of(src: &str) -> String {
    let c: Vec<char> = src.chars().collect();
    let at = |i: usize, s: &str| s.chars().enumerate().all(|(k, x)| c.get(i + k) == Some(&x));
    let word = |i: usize| c[i].is_alphanumeric() || c[i] == '_';
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    while i < c.len() {
        if at(i, "//") {
            while i < c.len() && c[i] != '\n' {
                i += 1;
            }
        } else if at(i, "/*") {
            // Block comments nest.
            let mut depth = 0;
            while i < c.len() {
                if at(i, "/*") {
                    depth += 1;
                    i += 2;
                } else if at(i, "*/") {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            out.push(' ');
        } else if c[i] == 'r'
            && (i == 0 || !word(i - 1) || (c[i - 1] == 'b' && (i < 2 || !word(i - 2))))
            && (at(i + 1, "\"") || at(i + 1, "#\"") || at(i + 1, "##\"") || at(i + 1, "###\""))
        {
            // A raw string: r"..", r#".."#, ...
            let mut hashes = 0;
            i += 1;
            while c[i] == '#' {
                hashes += 1;
                i += 1;
            }
            i += 1;
            let close = format!("\"{}", "#".repeat(hashes));
            while i < c.len() && !at(i, &close) {
                i += 1;
            }
            i += close.len();
            out.push_str("\"\"");
        } else if c[i] == '"' {
            i += 1;
            while i < c.len() && c[i] != '"' {
                i += if c[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if c[i] == '\'' && c.get(i + 1) == Some(&'\\') {
            // An escaped character: '\n', '\'', '\u{..}'.
            i += 3;
            while i < c.len() && c[i] != '\'' {
                i += 1;
            }
            i += 1;
            out.push_str("' '");
        } else if c[i] == '\'' && c.get(i + 2) == Some(&'\'') {
            i += 3;
            out.push_str("' '");
        } else {
            // A lifetime's quote, or code.
            out.push(c[i]);
            i += 1;
        }
    }
    out
}
