//! One command under every policy of [`crate::plan::policy_plan`] (seed
//! 003): its time, its rate over time (a number its output prints, taken by
//! a regular expression), the change against the default policy, and where
//! its memory was.

use crate::plan::Placement;
use crate::run::run_for;
use crate::topology::Topology;
use crate::NumaError;
use farmem_probe::machine::Machine;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The command under one policy.
#[derive(Serialize, Deserialize, Clone, Debug)]
pub struct PolicyResult {
    pub policy: String,
    #[serde(deserialize_with = "farmem_probe::json::nan_if_null")]
    pub seconds: f64,
    /// Mean of the rate samples, when a rate expression is given.
    pub mean_rate: Option<f64>,
    /// Against the default policy: positive is better (higher rate, or less time).
    #[serde(deserialize_with = "farmem_probe::json::nan_if_null")]
    pub change_pct: f64,
    /// (seconds since start, rate) for every output line the expression matched.
    pub series: Vec<(f64, f64)>,
    pub by_node: BTreeMap<usize, u64>,
    pub exit: String,
}

/// A whole policy comparison, as `farmem numa policies --json` writes it.
#[derive(Serialize, Deserialize, Debug)]
pub struct PolicyReport {
    pub machine: Machine,
    pub topology: Topology,
    pub params: PolicyParams,
    pub results: Vec<PolicyResult>,
    /// Set on a machine of one node, where every policy is the same.
    pub note: Option<String>,
}

#[derive(Serialize, Deserialize, Debug)]
pub struct PolicyParams {
    pub cmd: Vec<String>,
    pub duration: Option<f64>,
    pub rate_regex: Option<String>,
}

/// [`run`] on `topology`'s machine, with what the report needs beside.
pub fn report(
    topology: Topology,
    plan: &[Placement],
    cmd: &[String],
    duration: Option<f64>,
    rate: Option<&regex::Regex>,
    progress: impl FnMut(),
) -> Result<PolicyReport, NumaError> {
    let results = run(plan, cmd, duration, rate, progress)?;
    Ok(PolicyReport {
        machine: Machine::detect(),
        note: topology.one_node_note(),
        topology,
        params: PolicyParams {
            cmd: cmd.to_vec(),
            duration,
            rate_regex: rate.map(|r| r.as_str().to_string()),
        },
        results,
    })
}

/// The numbers `re` finds in `lines` (its first group, or the whole match),
/// with the time each line arrived.
pub fn rate_series(lines: &[(f64, String)], re: &regex::Regex) -> Vec<(f64, f64)> {
    lines
        .iter()
        .filter_map(|(ts, l)| {
            let c = re.captures(l)?;
            let m = c.get(1).or_else(|| c.get(0))?;
            m.as_str().trim().parse::<f64>().ok().map(|v| (*ts, v))
        })
        .collect()
}

/// Run `cmd` under every placement of `plan` (the default policy first),
/// stopping each after `duration` seconds when given.
pub fn run(
    plan: &[Placement],
    cmd: &[String],
    duration: Option<f64>,
    rate: Option<&regex::Regex>,
    mut progress: impl FnMut(),
) -> Result<Vec<PolicyResult>, NumaError> {
    if cmd.is_empty() {
        return Err(NumaError::Workload(
            "give the command to run after --".into(),
        ));
    }
    if duration.is_some_and(|d| !(d > 0.0 && d < 86400.0)) {
        return Err(NumaError::Workload(
            "--duration must be between 0 and 86400 seconds".into(),
        ));
    }
    let mut results = Vec::new();
    for p in plan {
        let o = run_for(cmd, p, duration)?;
        progress();
        let series = rate.map(|re| rate_series(&o.lines, re)).unwrap_or_default();
        if rate.is_some() && series.is_empty() {
            return Err(NumaError::Workload(format!(
                "--rate-regex matched no number in the output of {} under {}",
                cmd[0],
                p.numactl_args()
            )));
        }
        let mean = (!series.is_empty())
            .then(|| series.iter().map(|s| s.1).sum::<f64>() / series.len() as f64);
        results.push(PolicyResult {
            policy: p.numactl_args(),
            seconds: o.wall_s,
            mean_rate: mean,
            change_pct: 0.0,
            series,
            by_node: o.by_node,
            exit: o.status.to_string(),
        });
    }
    changes(&mut results);
    Ok(results)
}

/// Every result against the first (the default policy): the mean rate's
/// change, or the time's where there is no rate.
fn changes(results: &mut [PolicyResult]) {
    let Some(first) = results.first() else {
        return;
    };
    let (base_rate, base_s) = (first.mean_rate, first.seconds);
    for r in results {
        r.change_pct = match (r.mean_rate, base_rate) {
            (Some(m), Some(b)) if b > 0.0 => (m / b - 1.0) * 100.0,
            _ => (base_s / r.seconds - 1.0) * 100.0,
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(seconds: f64, mean_rate: Option<f64>) -> PolicyResult {
        PolicyResult {
            policy: String::new(),
            seconds,
            mean_rate,
            change_pct: 0.0,
            series: vec![],
            by_node: BTreeMap::new(),
            exit: String::new(),
        }
    }

    #[test]
    fn change_is_rate_first_then_time() {
        let mut r = vec![result(2.0, Some(100.0)), result(1.0, Some(125.0))];
        changes(&mut r);
        assert_eq!(r[1].change_pct.round(), 25.0);
        let mut r = vec![result(2.0, None), result(1.0, None)];
        changes(&mut r);
        assert_eq!(r[1].change_pct.round(), 100.0);
    }

    #[test]
    fn the_series_takes_the_first_group_with_its_time() {
        let re = regex::Regex::new(r"ops=([0-9.]+)").unwrap();
        let lines = vec![
            (0.5, "ops=10".to_string()),
            (0.7, "noise".into()),
            (1.0, "ops=12.5 more".into()),
        ];
        assert_eq!(rate_series(&lines, &re), [(0.5, 10.0), (1.0, 12.5)]);
    }

    /// On this machine: a command under every policy, its rate read back.
    #[test]
    fn a_command_under_every_policy() {
        let t = crate::topology::Topology::read(std::path::Path::new("/sys")).unwrap();
        let plan = crate::plan::policy_plan(&t).unwrap();
        let cmd: Vec<String> = ["/bin/sh", "-c", "echo rate=5; echo rate=7"]
            .map(String::from)
            .into();
        let re = regex::Regex::new(r"rate=(\d+)").unwrap();
        let got = run(&plan, &cmd, None, Some(&re), || {}).unwrap();
        assert_eq!(got.len(), plan.len());
        for r in &got {
            assert_eq!(r.mean_rate, Some(6.0));
            assert_eq!(r.change_pct, 0.0);
        }
        let none = regex::Regex::new(r"absent=(\d+)").unwrap();
        let e = run(&plan, &cmd, None, Some(&none), || {}).unwrap_err();
        assert!(e.to_string().contains("--rate-regex"), "{e}");
        assert!(run(&plan, &cmd, Some(0.0), None, || {}).is_err());
    }
}
