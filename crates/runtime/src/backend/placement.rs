//! Where a page's copies live: the one placement rule that routing, the
//! replicas' health and `farmem stat` all read, so that they cannot drift
//! apart. Pages are grouped in stripe units of `FARMEM_STRIPE` pages; copy
//! k of unit u is on server (u + k) mod N, so the copies of one unit are on
//! k consecutive servers and every server holds the same share.

/// The server holding copy `copy` of stripe unit `unit`, of `servers`.
pub fn replica_server(unit: u64, copy: usize, servers: usize) -> usize {
    debug_assert!(servers > 0);
    farmem_sys::usize_from((unit + copy as u64) % servers as u64)
}

/// Of the `down.len()` servers' stripe units (one per server is enough: the
/// rule repeats every N units), how many have fewer live copies than
/// `replicas`: those with a copy on a lost server.
pub fn stripe_units_short(down: &[bool], replicas: usize) -> usize {
    let ns = down.len();
    (0..ns as u64)
        .filter(|&u| (0..replicas.max(1)).any(|k| down[replica_server(u, k, ns)]))
        .count()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_are_on_consecutive_servers_and_shares_are_even() {
        assert_eq!(replica_server(0, 0, 3), 0);
        assert_eq!(replica_server(2, 1, 3), 0);
        let mut held = [0; 4];
        for u in 0..400 {
            for k in 0..2 {
                held[replica_server(u, k, 4)] += 1;
            }
        }
        assert_eq!(held, [200; 4]);
        // One server of three down, two copies: two units in three short.
        assert_eq!(stripe_units_short(&[false, true, false], 2), 2);
        assert_eq!(stripe_units_short(&[false, false, false], 2), 0);
    }
}
