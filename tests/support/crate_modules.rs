//! Shared by the layering tests of several crates (included with
//! `#[path]`): which of its own modules a source file names.

use std::collections::BTreeSet;

/// The modules `src` names as `crate::x` or `$crate::x` in code (doc and
/// ordinary comments left out: a link is not a dependency).
pub fn named_modules(src: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for line in src.lines() {
        let code = match line.find("//") {
            Some(i) => &line[..i],
            None => line,
        };
        let mut rest = code;
        while let Some(i) = rest.find("crate::") {
            let after = &rest[i + "crate::".len()..];
            let name: String = after
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if after.starts_with('{') {
                // `use crate::{a, b::c}`
                let inner = &after[1..after.find('}').unwrap_or(after.len())];
                for part in inner.split(',') {
                    let m = part.trim().split("::").next().unwrap_or("").trim();
                    if !m.is_empty() {
                        out.insert(m.to_string());
                    }
                }
            } else if !name.is_empty() {
                out.insert(name);
            }
            rest = after;
        }
    }
    out
}
