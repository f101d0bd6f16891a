//! The repair thread: when a memory server is lost and pages have more
//! than one copy, it gives every stripe unit that had a copy there that
//! copy back on a live server, while the program runs (the copying itself
//! is the backend's, in `backend/remote/repair.rs`). It sleeps until a
//! server is lost or leaving (it asks every server whether it is leaving
//! four times a second, `farmem serve --drain`); a loss during a pass
//! makes another pass follow.
//!
//! It alone can tell which pages hold content on the servers: the page
//! table's ON_SERVER bit, or a page still Evicting (its write-back may have
//! reached the servers before its bit is set; see the hazard there).

use crate::page::{State, ON_SERVER};
use crate::Runtime;
use farmem_sys::msg::MsgBuf;
use farmem_sys::PAGE_SIZE;
use std::fmt::Write as _;
use std::time::Duration;

/// Start the repair thread, where pages have copies to repair (once, from
/// `init`).
pub(crate) fn start(rt: &'static Runtime) -> std::io::Result<()> {
    let Some(servers) = rt.backend.memory_servers() else {
        return Ok(());
    };
    if servers.servers().0 < 2 {
        return Ok(());
    }
    let t = std::thread::Builder::new()
        .name("farmem-repair".into())
        .spawn(move || {
            // Signals are the program's business, not this thread's.
            std::mem::forget(farmem_sys::signal::SignalBlock::new());
            run(rt)
        })?;
    servers.repairs(t.thread().clone());
    Ok(())
}

/// Whether page `p` holds content on the servers.
fn stored(rt: &Runtime, p: u64) -> bool {
    let p = farmem_sys::usize_from(p);
    if p >= rt.arena.npages() {
        return false;
    }
    let w = rt.arena.table().load(p);
    w.has(ON_SERVER) || w.state() == State::Evicting
}

fn run(rt: &'static Runtime) {
    let Some(servers) = rt.backend.memory_servers() else {
        return;
    };
    let (mut seen, mut seen_short) = (0, 0);
    // Whether the last pass left every page it saw with all its copies:
    // only then can short writes since (to pages allocated during it, see
    // `repair_pass`) be repaired by another.
    let mut placed_all = true;
    // One line for a failing look at the servers, not one every 250 ms.
    let mut warned = false;
    loop {
        if crate::fork::is_forked_child() {
            return;
        }
        answer_join_requests(servers);
        if let (Err(e), false) = (servers.watch(), warned) {
            warned = true;
            let mut m = MsgBuf::new();
            let _ = writeln!(
                m,
                "farmem: warning: cannot ask the memory servers whether one is leaving ({e})"
            );
            farmem_sys::write_stderr(m.as_bytes());
        }
        let (losses, short) = servers.losses();
        if losses == seen && (short == seen_short || !placed_all || seen == 0) {
            // Woken by a loss, or the next look at the servers; the
            // timeout also covers a wake-up that came before this thread
            // was known to the backend, and short writes.
            std::thread::park_timeout(Duration::from_millis(250));
            continue;
        }
        let repeat = losses == seen;
        (seen, seen_short) = (losses, short);
        let bound = crate::sync::lock(&rt.regions).top() as u64;
        let mut m = MsgBuf::new();
        match servers.repair(&|p| stored(rt, p), bound) {
            Ok(pass) => {
                placed_all = pass.pages_left_short == 0 && pass.pages_lost == 0;
                let moved = pass.pages_moved > 0;
                if !moved && (pass.pages_short == 0 || (repeat && pass.pages_copied == 0)) {
                    continue;
                }
                report(&mut m, &pass);
            }
            Err(e) => {
                let _ = writeln!(
                    m,
                    "farmem: warning: repair stopped ({e}); pages keep the copies they have"
                );
            }
        }
        farmem_sys::write_stderr(m.as_bytes());
    }
}

/// One line on a pass that found pages short or moved some.
fn report(m: &mut MsgBuf, pass: &crate::backend::RepairPass) {
    if pass.pages_short == 0 {
        let _ = writeln!(
            m,
            "farmem: rebalance: {} pages ({} MiB) moved to the servers that joined, in {} ms",
            pass.pages_moved,
            (pass.pages_moved * PAGE_SIZE as u64) >> 20,
            pass.millis
        );
        return;
    }
    let _ = write!(
        m,
        "farmem: repair: {} pages ({} MiB) copied to new servers in {} ms",
        pass.pages_copied,
        (pass.pages_copied * PAGE_SIZE as u64) >> 20,
        pass.millis
    );
    if pass.pages_left_short == 0 && pass.pages_lost == 0 {
        let _ = write!(m, "; every page has all its copies again");
    }
    if pass.pages_left_short > 0 {
        let _ = write!(
            m,
            "; {} pages keep fewer copies (no live server left to take them)",
            pass.pages_left_short
        );
    }
    if pass.pages_lost > 0 {
        let _ = write!(m, "; {} pages have no copy left", pass.pages_lost);
    }
    if pass.pages_moved > 0 {
        let _ = write!(
            m,
            "; {} pages moved to the servers that joined",
            pass.pages_moved
        );
    }
    let _ = writeln!(m);
}

/// Serve a `farmem join` request, if one is waiting: add each server it
/// names, and answer line by line.
fn answer_join_requests(servers: &dyn crate::backend::MemoryServers) {
    let Ok(dir) = crate::publish::dir(false) else {
        return;
    };
    let (ask, answer) = crate::publish::join_paths(&dir, std::process::id());
    let Ok(text) = std::fs::read_to_string(&ask) else {
        return;
    };
    let _ = std::fs::remove_file(&ask);
    let mut out = String::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let r = line
            .parse::<farmem_wire::ServerAddr>()
            .map_err(|e| e.to_string())
            .and_then(|a| servers.join(&a).map_err(|e| e.to_string()));
        match r {
            Ok(()) => out.push_str(&format!("ok {line}\n")),
            Err(e) => {
                farmem_sys::write_stderr(
                    format!("farmem: cannot add memory server {line}: {e}\n").as_bytes(),
                );
                out.push_str(&format!("error {line}: {e}\n"));
            }
        }
    }
    let tmp = answer.with_extension("joined.new");
    if std::fs::write(&tmp, out).is_ok() {
        let _ = std::fs::rename(&tmp, &answer);
    }
}
