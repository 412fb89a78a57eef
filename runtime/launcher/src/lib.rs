//! `cohort run`, the job launcher (mpirun/prterun-like): starts one `cohortd` node
//! server per node, authenticates them over a private control channel, hands them the
//! peer list, forwards nothing but decisions, and turns rank exits, node-server
//! failures, timeouts and signals into one exit status. It never leaves a node server,
//! a rank or the job directory behind.
//!
//! [`monitor`] decides (no I/O); [`launch`] is the tokio glue around it. [`topo`] is
//! `cohort topo`, and decides the job's placement on this host for `cohort run`.

pub mod cli;
pub mod control;
pub mod daemon;
pub mod jobdir;
pub mod launch;
pub mod monitor;
pub mod reaper;
pub mod slurm;
pub mod ssh;
pub mod topo;

/// Writes `cohort: <msg>` to stderr. A closed stderr is ignored rather than turned into
/// a panic half-way through tearing a job down.
pub fn say(msg: std::fmt::Arguments<'_>) {
    use std::io::Write;
    // One write per message, so lines from concurrent processes do not interleave.
    let line = format!("cohort: {msg}\n");
    let _ = std::io::stderr().write_all(line.as_bytes());
}
