//! What every output shares and nothing else defines: HTML escaping and
//! the machine as one line or a table's header. A leaf: it names no other
//! module of this crate, so every module may use it (tests/layers.rs).

use farmem_probe::machine::Machine;

/// `s` as HTML text.
pub fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The machine in one line, as the report heads a page or a section.
pub fn machine_line(m: &Machine) -> String {
    format!(
        "{} · {} CPUs · {} NUMA node(s) · Linux {} · THP {}",
        or_unknown(&m.cpu_model),
        m.cpus,
        m.numa_nodes,
        or_unknown(&m.kernel),
        or_unknown(&m.thp)
    )
}

fn or_unknown(s: &str) -> &str {
    if s.is_empty() {
        "?"
    } else {
        s
    }
}

/// The machine as a text table's first line ("machine: ...\n"), if known.
pub fn machine_header(m: Option<&Machine>) -> String {
    m.map(|m| format!("machine: {}\n", m.summary()))
        .unwrap_or_default()
}
