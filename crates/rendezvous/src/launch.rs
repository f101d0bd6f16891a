//! A server's rank and its job's size, from the launcher's environment
//! (Open MPI, Slurm, PMIx, MPICH) or the command line.

use crate::{RendezvousError, MAX_JOB_LEN, MAX_SIZE};

/// A server's place in its job, from the launcher or the command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Launch {
    /// The launcher that set the variables ("Open MPI", "Slurm", ...), or
    /// "command line".
    pub launcher: &'static str,
    /// Identifies this job: entries of another job are stale. Empty when
    /// the launcher gives none (MPICH's Hydra); staleness is then told by
    /// whether the servers answer.
    pub job: String,
    pub rank: u32,
    pub size: u32,
}

fn number(var: &str, v: &str) -> Result<u32, RendezvousError> {
    v.trim().parse().map_err(|_| RendezvousError::Invalid {
        what: "environment variable",
        given: format!("{var}={v}"),
        why: "not a whole number".into(),
    })
}

impl Launch {
    /// Find rank, size and job in the variables a launcher sets, the first
    /// of these that is present: Open MPI (`OMPI_COMM_WORLD_RANK`/`SIZE`,
    /// job `PMIX_NAMESPACE` or `OMPI_MCA_ess_base_jobid`), Slurm
    /// (`SLURM_PROCID`/`SLURM_NTASKS`, job `SLURM_JOB_ID.SLURM_STEP_ID`),
    /// PMIx (`PMIX_RANK`, job `PMIX_NAMESPACE`; the size must come from
    /// elsewhere), MPICH/Hydra (`PMI_RANK`/`PMI_SIZE`). `None` when none is.
    /// `var` reads one variable (the environment, or a test's table).
    pub fn detect(var: impl Fn(&str) -> Option<String>) -> Result<Option<Launch>, RendezvousError> {
        let both = |r: &str, s: &str| -> Result<Option<(u32, Option<u32>)>, RendezvousError> {
            let Some(rank) = var(r) else { return Ok(None) };
            let size = var(s).map(|v| number(s, &v)).transpose()?;
            Ok(Some((number(r, &rank)?, size)))
        };
        let found = if let Some(rs) = both("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE")? {
            let job = var("PMIX_NAMESPACE")
                .or_else(|| var("OMPI_MCA_ess_base_jobid"))
                .unwrap_or_default();
            Some(("Open MPI", job, rs))
        } else if let Some(rs) = both("SLURM_PROCID", "SLURM_NTASKS")? {
            let job = match (var("SLURM_JOB_ID"), var("SLURM_STEP_ID")) {
                (Some(j), Some(s)) => format!("{j}.{s}"),
                (Some(j), None) => j,
                _ => String::new(),
            };
            Some(("Slurm", job, rs))
        } else if let Some(rs) = both("PMIX_RANK", "PMIX_SIZE")? {
            Some(("PMIx", var("PMIX_NAMESPACE").unwrap_or_default(), rs))
        } else {
            both("PMI_RANK", "PMI_SIZE")?.map(|rs| ("MPICH (PMI)", String::new(), rs))
        };
        let Some((launcher, job, (rank, size))) = found else {
            return Ok(None);
        };
        let size = size.ok_or_else(|| {
            RendezvousError::NoRank(format!(
                "{launcher} gives this server rank {rank} but not the job's size; pass --size N"
            ))
        })?;
        Launch {
            launcher,
            job,
            rank,
            size,
        }
        .checked()
        .map(Some)
    }

    /// This server's place: `rank` and `size` from the command line when
    /// given (then `size` alone overrides the launcher's), else the
    /// launcher's variables, read by `var`; `job` overrides the launcher's.
    pub fn resolve(
        rank: Option<u32>,
        size: Option<u32>,
        job: Option<String>,
        var: impl Fn(&str) -> Option<String>,
    ) -> Result<Launch, RendezvousError> {
        let detected = Launch::detect(var)?;
        let launch = match (rank, size, detected) {
            (Some(rank), Some(size), d) => Launch {
                launcher: "command line",
                job: d.map(|d| d.job).unwrap_or_default(),
                rank,
                size,
            },
            (None, size, Some(mut d)) => {
                if let Some(s) = size {
                    d.size = s;
                }
                d
            }
            (None, _, None) => {
                return Err(RendezvousError::NoRank(
                    "no launcher variables (OMPI_COMM_WORLD_RANK, SLURM_PROCID, PMIX_RANK, PMI_RANK) say it; \
                     start it with mpirun or srun, or pass --rank R --size N"
                        .into(),
                ))
            }
            (Some(_), None, _) => {
                return Err(RendezvousError::NoRank(
                    "--rank needs --size, the number of servers in the job".into(),
                ))
            }
        };
        Launch {
            job: job.unwrap_or(launch.job),
            ..launch
        }
        .checked()
    }

    /// Validate rank, size and job.
    pub fn checked(self) -> Result<Launch, RendezvousError> {
        let bad = |what, given: String, why: String| RendezvousError::Invalid { what, given, why };
        if self.size == 0 || self.size > MAX_SIZE {
            return Err(bad(
                "job size",
                self.size.to_string(),
                format!("give 1 to {MAX_SIZE} ranks"),
            ));
        }
        if self.rank >= self.size {
            return Err(bad(
                "rank",
                self.rank.to_string(),
                format!(
                    "ranks of a job of {} run from 0 to {}",
                    self.size,
                    self.size - 1
                ),
            ));
        }
        check_job(&self.job)?;
        Ok(self)
    }
}

pub(crate) fn check_job(job: &str) -> Result<(), RendezvousError> {
    if job.len() > MAX_JOB_LEN
        || !job
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "._:@+-".contains(c))
    {
        return Err(RendezvousError::Invalid {
            what: "job identifier",
            given: job.into(),
            why: format!("use at most {MAX_JOB_LEN} letters, digits and ._:@+-"),
        });
    }
    Ok(())
}
