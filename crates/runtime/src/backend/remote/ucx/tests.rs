use super::*;
use std::cell::Cell;

#[test]
fn a_retired_lane_is_skipped_never_waited_on() {
    let lanes: Vec<Retirable<()>> = (0..3).map(|_| Retirable::new(())).collect();
    // Lane 1 times out while held: retired, and busy for good.
    let (i, g) = take_any(&lanes, 1).unwrap();
    assert_eq!(i, 1);
    g.retire();
    drop(g);
    // A batch starting at the retired lane takes the next live one.
    let (i, g2) = take_any(&lanes, 1).unwrap();
    assert_eq!(i, 2);
    let (i, g0) = take_any(&lanes, 1).unwrap();
    assert_eq!(i, 0);
    // Live lanes all held: busy, not gone.
    assert!(matches!(take_any(&lanes, 1), Err(NoLane::AllBusy)));
    g0.retire();
    g2.retire();
    drop((g0, g2));
    assert!(matches!(take_any(&lanes, 0), Err(NoLane::AllRetired)));
}

/// `drain` over scripted operations: `script[r]` is the statuses
/// request r reports, one a poll, its last repeated.
fn run(script: &[&[ucx::Status]], timeout_ticks: u64) -> (Drained, Vec<usize>) {
    let mut pending: Vec<(usize, usize)> = (0..script.len()).map(|r| (r, 10 + r)).collect();
    let polls: Vec<Cell<usize>> = script.iter().map(|_| Cell::new(0)).collect();
    let clock = Cell::new(0u64);
    let d = drain(
        &mut pending,
        timeout_ticks,
        || clock.set(clock.get() + 1),
        |r| {
            let k = polls[r].get();
            polls[r].set(k + 1);
            script[r][k.min(script[r].len() - 1)]
        },
        || clock.get(),
    );
    (d, polls.iter().map(Cell::get).collect())
}

const P: ucx::Status = ucx::UCS_INPROGRESS;
const OK: ucx::Status = ucx::UCS_OK;
const ERR: ucx::Status = -3;

#[test]
fn a_failure_mid_batch_still_waits_for_the_rest() {
    // Request 1 fails at once; 0 and 2 complete later. The drain goes
    // on until both are done, and names the first failure.
    let (d, polls) = run(&[&[P, P, P, OK], &[ERR], &[P, P, P, P, OK]], 100);
    assert_eq!(
        d,
        Drained::Complete {
            failed: Some((11, ERR))
        }
    );
    assert_eq!(polls, [4, 1, 5], "each polled until complete, never after");
}

#[test]
fn operations_left_in_flight_at_the_deadline_are_reported() {
    let (d, _) = run(&[&[ERR], &[P], &[OK]], 5);
    assert_eq!(
        d,
        Drained::TimedOut {
            failed: Some((10, ERR)),
            server: 11,
            left: 1
        }
    );
    let (d, _) = run(&[&[OK], &[P, OK]], 5);
    assert_eq!(d, Drained::Complete { failed: None });
    let (d, _) = run(&[], 5);
    assert_eq!(d, Drained::Complete { failed: None });
}
