//! Spawn (the PMIx "Process Management" chapter's PMIx_Spawn, MPI_Comm_spawn): a
//! running process starts a new job, a namespace of its own in the same session, on
//! the session's node servers.
//!
//! The launcher places the new job and tells every node server about it before any of
//! its processes starts, so every server can resolve the new namespace's processes by
//! the time one of them calls.

use serde::{Deserialize, Serialize};

use crate::ids::Nspace;

/// The most processes one spawn may start.
pub const MAX_SPAWN_PROCS: u32 = 1 << 16;
/// The most spawns of one session (each a namespace every node server keeps).
pub const MAX_SPAWNED_JOBS: u32 = 1 << 14;

/// One application context of a spawn (pmix_app_t): `maxprocs` processes running
/// `command`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpawnApp {
    /// The program (resolved through `PATH` on the node server's host) and its
    /// arguments.
    pub command: Vec<String>,
    /// How many processes run it (at least 1).
    pub maxprocs: u32,
    /// `VAR=VAL` added to these processes' environment, over the session's `-x` ones.
    pub env: Vec<(String, String)>,
    /// The working directory (PMIX_WDIR). The client library makes it absolute before
    /// it sends the spawn: `None` is the spawning process's directory, a relative path
    /// is taken from there (as OpenPMIx's `PMIx_Spawn`). A node server given `None` (an
    /// older client) starts the processes in its own directory.
    pub cwd: Option<String>,
    /// A process set these processes form (PMIX_PSET_NAME, as `--pset NAME` in an
    /// app context of `cohort run`): defined in the whole session while the job runs.
    #[serde(default)]
    pub pset: Option<String>,
}

/// How a spawn's processes are placed on the session's node servers (PMIX_MAPBY).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum SpawnMapping {
    /// Block-wise over the node servers, as `cohort run` places ranks by default.
    #[default]
    Block,
    /// One per node server in turn (`node`, `ppr:1:node`).
    RoundRobin,
    /// K per node server in turn (`ppr:K:node`): node servers 0 to K-1 of the
    /// placement get ranks 0 to K-1, and so on; more processes than K per node server
    /// is refused.
    PerNode(u32),
}

/// Options of a spawn.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpawnOpts {
    pub mapping: SpawnMapping,
    /// Place the processes on these node servers only, by name (PMIX_HOST); empty:
    /// every live one.
    pub hosts: Vec<String>,
    /// Tell the spawning process when every process of the job ended
    /// (PMIX_NOTIFY_COMPLETION): a `codes::JOB_END` event.
    pub notify_completion: bool,
    /// Fail the spawn with [`CohortError::Timeout`](crate::CohortError::Timeout) if
    /// its processes are not all started within this many milliseconds (PMIX_TIMEOUT,
    /// PMIX_SPAWN_TIMEOUT); the job is then cancelled: whatever of it started is
    /// killed. `None` or 0: no limit (a frozen node server then holds the spawn until
    /// the failure detector condemns it).
    pub timeout_ms: Option<u64>,
    /// Cores per process (PMIX_CPUS_PER_PROC, `PE=n` of PMIX_MAPBY; as
    /// `--cpus-per-rank` for the launched job): where the spawned job is bound, each
    /// process gets this many of its host's free cores (0 or 1: one).
    #[serde(default)]
    pub cpus_per_proc: u32,
    /// What each process is bound to (PMIX_BINDTO): `none`, `core`, `hwthread`,
    /// `numa`, `package` (or `socket`), with Open MPI's qualifiers accepted, in place
    /// of the launched job's `--bind-to`; `None`: as the launched job.
    #[serde(default)]
    pub bind_to: Option<String>,
}

/// How a spawned job's processes are bound: like the launched job, on the cores their
/// hosts have left.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SpawnBinding {
    /// The launched job's binding policy (`core`, `numa`).
    pub bind_to: String,
    /// Per node server (missing: none), the host's slots this job's processes there
    /// take, in rank order: the lowest that no live process of the session holds.
    /// Empty: unbound there (the host would hold more live processes than cores).
    /// Each process takes `per_proc` of them in turn.
    pub slots: Vec<Vec<u32>>,
    /// The slots each process takes ([`SpawnOpts::cpus_per_proc`], at least 1).
    #[serde(default = "one")]
    pub per_proc: u32,
}

fn one() -> u32 {
    1
}

/// Checks a spawn request: at least one app, each with a program and at least one
/// process, at most [`MAX_SPAWN_PROCS`] in all.
pub fn validate_spawn(apps: &[SpawnApp]) -> Result<u32, String> {
    if apps.is_empty() {
        return Err("a spawn needs at least one application".into());
    }
    let mut total: u32 = 0;
    for (i, app) in apps.iter().enumerate() {
        if app.command.first().is_none_or(|c| c.is_empty()) {
            return Err(format!("application {i} names no program"));
        }
        if app.maxprocs == 0 {
            return Err(format!("application {i} asks for no process"));
        }
        if app.command.iter().any(|a| a.contains('\0')) {
            return Err(format!("application {i} has a NUL byte in its command"));
        }
        if app
            .env
            .iter()
            .any(|(k, v)| k.is_empty() || k.contains(['=', '\0']) || v.contains('\0'))
        {
            return Err(format!(
                "application {i} has a malformed environment variable"
            ));
        }
        total = total
            .checked_add(app.maxprocs)
            .filter(|&t| t <= MAX_SPAWN_PROCS)
            .ok_or_else(|| format!("more than {MAX_SPAWN_PROCS} processes"))?;
    }
    Ok(total)
}

/// The namespace of the session's `k`-th spawned job (k ≥ 1), after the launched
/// job's `primary` (PRRTE names them the same way).
pub fn spawned_nspace(primary: &str, k: u32) -> Nspace {
    Nspace::new(&format!("{primary}@{k}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn app(cmd: &str, n: u32) -> SpawnApp {
        SpawnApp {
            command: vec![cmd.into()],
            maxprocs: n,
            env: Vec::new(),
            cwd: None,
            pset: None,
        }
    }

    #[test]
    fn spawn_requests_are_checked() {
        assert_eq!(validate_spawn(&[app("a", 2), app("b", 3)]), Ok(5));
        assert!(validate_spawn(&[]).unwrap_err().contains("at least one"));
        assert!(validate_spawn(&[app("", 1)])
            .unwrap_err()
            .contains("no program"));
        assert!(validate_spawn(&[app("a", 0)])
            .unwrap_err()
            .contains("no process"));
        let big = validate_spawn(&[app("a", MAX_SPAWN_PROCS), app("b", 1)]);
        assert!(big.unwrap_err().contains("more than"));
        let mut bad = app("a", 1);
        bad.env.push(("A=B".into(), "c".into()));
        assert!(validate_spawn(&[bad]).unwrap_err().contains("environment"));
    }

    #[test]
    fn spawned_namespaces_follow_the_launched_one() {
        assert_eq!(spawned_nspace("cohort.1.ab", 3).as_str(), "cohort.1.ab@3");
    }
}
