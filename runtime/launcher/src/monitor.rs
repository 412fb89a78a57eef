//! The job's fate, decided without I/O: which rank exits end the job, what the user is
//! told, and which exit status `cohort run` returns. [`crate::launch`] feeds it events.

use cohort_proto::control::ExitStatus;
use cohort_proto::{JobMap, NodeId, Rank};

/// Exit status of a job stopped by `--timeout` (as coreutils' `timeout`).
pub const TIMEOUT_EXIT: i32 = 124;
/// Exit status when a node server fails or the launcher cannot start the job.
pub const FAILURE_EXIT: i32 = 1;

/// A rank that ended abnormally.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RankFailure {
    pub rank: Rank,
    pub node: NodeId,
    pub status: ExitStatus,
}

/// Why the job ends.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Every rank exited.
    Completed,
    /// A rank failed and recovery is off.
    RankFailed(RankFailure),
    /// A node server died, dropped its control connection or reported a fatal error.
    DaemonFailed { node: NodeId, reason: String },
    /// The node servers could not be brought up.
    StartupFailed { reason: String },
    /// `--timeout` expired.
    TimedOut { secs: u64 },
    /// The launcher received a terminating signal.
    Interrupted { signal: i32 },
}

/// What a rank exit means for the job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// Keep going.
    Continue,
    /// Keep going, but tell the user (a failure tolerated by `--enable-recovery`).
    Notice(String),
    /// End the job.
    End(Verdict),
}

/// A `RankExited` the launcher will not believe.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum BogusExit {
    #[error("node{node} reported rank {rank}, which is not in the job")]
    UnknownRank { node: NodeId, rank: Rank },
    #[error("node{node} reported rank {rank}, which runs on node{owner}")]
    WrongNode {
        node: NodeId,
        rank: Rank,
        owner: NodeId,
    },
    #[error("node{node} reported rank {rank} exiting twice")]
    Duplicate { node: NodeId, rank: Rank },
}

/// Tracks every rank of the job until it ends.
#[derive(Debug)]
pub struct JobMonitor {
    job: JobMap,
    recovery: bool,
    exited: Vec<Option<ExitStatus>>,
    remaining: u32,
    first_failure: Option<RankFailure>,
    failures: u32,
}

impl JobMonitor {
    pub fn new(job: JobMap, recovery: bool) -> JobMonitor {
        let size = job.size();
        JobMonitor {
            exited: vec![None; size as usize],
            remaining: size,
            job,
            recovery,
            first_failure: None,
            failures: 0,
        }
    }

    pub fn job(&self) -> &JobMap {
        &self.job
    }

    /// Ranks still running.
    pub fn remaining(&self) -> u32 {
        self.remaining
    }

    pub fn first_failure(&self) -> Option<&RankFailure> {
        self.first_failure.as_ref()
    }

    /// Node `node` says `rank` ended with `status`.
    pub fn rank_exited(
        &mut self,
        node: NodeId,
        rank: Rank,
        status: ExitStatus,
    ) -> Result<Step, BogusExit> {
        let owner = *self
            .job
            .rank_node
            .get(rank as usize)
            .ok_or(BogusExit::UnknownRank { node, rank })?;
        if owner != node {
            return Err(BogusExit::WrongNode { node, rank, owner });
        }
        let slot = &mut self.exited[rank as usize];
        if slot.is_some() {
            return Err(BogusExit::Duplicate { node, rank });
        }
        *slot = Some(status);
        self.remaining -= 1;

        let mut step = Step::Continue;
        if !status.success() {
            let failure = RankFailure { rank, node, status };
            self.failures += 1;
            if self.first_failure.is_none() {
                self.first_failure = Some(failure.clone());
            }
            if !self.recovery {
                return Ok(Step::End(Verdict::RankFailed(failure)));
            }
            step = Step::Notice(format!(
                "rank {rank} on {} {}; continuing (--enable-recovery)",
                self.node_name(node),
                describe_status(&status)
            ));
        }
        if self.remaining == 0 {
            return Ok(Step::End(Verdict::Completed));
        }
        Ok(step)
    }

    pub fn recovery(&self) -> bool {
        self.recovery
    }

    /// Node server `node` died (`--enable-recovery`): its ranks that are still running
    /// died with it (their parent-death signal is SIGKILL) and count as killed.
    pub fn node_lost(&mut self, node: NodeId, reason: &str) -> Step {
        let killed = ExitStatus {
            code: None,
            signal: Some(libc::SIGKILL),
        };
        let ranks: Vec<Rank> = self
            .job
            .ranks_on(node)
            .into_iter()
            .filter(|&r| self.exited[r as usize].is_none())
            .collect();
        if ranks.is_empty() {
            return Step::Continue;
        }
        for &rank in &ranks {
            if let Ok(Step::End(v)) = self.rank_exited(node, rank, killed) {
                return Step::End(v);
            }
        }
        Step::Notice(format!(
            "node server {} {reason}; its ranks {} are lost; continuing (--enable-recovery)",
            self.node_name(node),
            ranks
                .iter()
                .map(|r| r.to_string())
                .collect::<Vec<_>>()
                .join(",")
        ))
    }

    /// The status `cohort run` exits with. A rank failure seen before the job ended
    /// wins over the reason it ended (timeout, lost node server).
    pub fn exit_code(&self, verdict: &Verdict) -> i32 {
        let first = self.first_failure.as_ref().map(|f| f.status.shell_code());
        match verdict {
            Verdict::Completed => first.unwrap_or(0),
            Verdict::RankFailed(f) => nonzero(f.status.shell_code()),
            Verdict::DaemonFailed { .. } | Verdict::StartupFailed { .. } => {
                first.unwrap_or(FAILURE_EXIT)
            }
            Verdict::TimedOut { .. } => first.unwrap_or(TIMEOUT_EXIT),
            Verdict::Interrupted { signal } => 128 + signal,
        }
    }

    /// The line printed (after `cohort: `) when the job ends this way; `None` when
    /// every rank exited 0.
    pub fn message(&self, verdict: &Verdict) -> Option<String> {
        let code = self.exit_code(verdict);
        Some(match verdict {
            Verdict::Completed => {
                let f = self.first_failure.as_ref()?;
                format!(
                    "the job finished, but {} rank(s) failed; the first, rank {} on {}, {} (exit status {code})",
                    self.failures,
                    f.rank,
                    self.node_name(f.node),
                    describe_status(&f.status),
                )
            }
            Verdict::RankFailed(f) => {
                let hint = if f.status.code == Some(127) {
                    " (program not found or not startable?)"
                } else {
                    ""
                };
                format!(
                    "rank {} on {} {}{hint}; terminating the job (exit status {code})",
                    f.rank,
                    self.node_name(f.node),
                    describe_status(&f.status),
                )
            }
            Verdict::DaemonFailed { node, reason } => format!(
                "node server {} {reason}; terminating the job (exit status {code})",
                self.node_name(*node)
            ),
            Verdict::StartupFailed { reason } => {
                format!("could not start the job: {reason} (exit status {code})")
            }
            Verdict::TimedOut { secs } => format!(
                "the job did not finish within --timeout {secs} s; terminating it (exit status {code})"
            ),
            Verdict::Interrupted { signal } => format!(
                "received {}; terminating the job (exit status {code})",
                signal_name(*signal)
            ),
        })
    }

    pub fn node_name(&self, node: NodeId) -> String {
        self.job
            .node_names
            .get(node as usize)
            .cloned()
            .unwrap_or_else(|| format!("node{node}"))
    }
}

fn nonzero(code: i32) -> i32 {
    if code == 0 {
        FAILURE_EXIT
    } else {
        code
    }
}

/// `exited with status 2` / `was killed by signal 9 (SIGKILL)`.
pub fn describe_status(status: &ExitStatus) -> String {
    match (status.code, status.signal) {
        (Some(c), _) => format!("exited with status {c}"),
        (None, Some(s)) => format!("was killed by signal {s} ({})", signal_name(s)),
        (None, None) => "ended for an unknown reason".to_string(),
    }
}

/// Conventional name of a signal number (Linux numbering).
pub fn signal_name(sig: i32) -> String {
    let name = match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGXFSZ => "SIGXFSZ",
        _ => return format!("signal {sig}"),
    };
    name.to_string()
}

/// A node server's report that the node server it watches fell silent (its failure
/// detector declared it lost).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Accusation {
    pub by: NodeId,
    pub silent: NodeId,
    pub silent_ms: u64,
}

/// Which node servers accused of silence are lost, from the accusations that arrived
/// together (within a couple of heartbeat periods of each other).
///
/// A frozen or crashed server accuses nobody. A server the network cut off hears
/// nobody: it accuses the server it watches at about the time it is accused itself.
/// So an accused server's own accusations are not believed: accusations against
/// servers that accuse are judged first, and an accusation by a condemned server is
/// dropped. Among servers that accuse each other (two of them, cut apart), the
/// earliest accusation wins. Accusations of a server that is not `running` are
/// dropped. Returns the condemned servers, each with the accusation that condemned
/// it, in that order.
pub fn judge(accusations: &[Accusation], running: impl Fn(NodeId) -> bool) -> Vec<Accusation> {
    let accuses = |n: NodeId| accusations.iter().any(|a| a.by == n);
    let mut order: Vec<&Accusation> = accusations.iter().collect();
    // Stable: arrival order within each class.
    order.sort_by_key(|a| !accuses(a.silent));
    let mut condemned: Vec<Accusation> = Vec::new();
    for a in order {
        let judged = |n: NodeId| condemned.iter().any(|c| c.silent == n);
        if a.by == a.silent || judged(a.by) || judged(a.silent) || !running(a.silent) {
            continue;
        }
        condemned.push(a.clone());
    }
    condemned
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(c: i32) -> ExitStatus {
        ExitStatus {
            code: Some(c),
            signal: None,
        }
    }
    fn killed(s: i32) -> ExitStatus {
        ExitStatus {
            code: None,
            signal: Some(s),
        }
    }

    #[test]
    fn clean_job_exits_zero_after_last_rank() {
        let mut m = JobMonitor::new(JobMap::block("ns", 3, 2), false);
        assert_eq!(m.rank_exited(0, 0, code(0)), Ok(Step::Continue));
        assert_eq!(m.rank_exited(1, 2, code(0)), Ok(Step::Continue));
        let end = m.rank_exited(0, 1, code(0)).unwrap();
        assert_eq!(end, Step::End(Verdict::Completed));
        assert_eq!(m.exit_code(&Verdict::Completed), 0);
        assert_eq!(m.message(&Verdict::Completed), None);
    }

    #[test]
    fn a_lost_node_server_under_recovery_counts_its_running_ranks_as_killed() {
        let mut m = JobMonitor::new(JobMap::block("ns", 4, 2), true);
        assert_eq!(m.rank_exited(1, 2, code(0)), Ok(Step::Continue));
        // node1 (ranks 2, 3) dies: rank 2 had already exited, rank 3 dies with it.
        let Step::Notice(msg) = m.node_lost(1, "closed its control connection") else {
            panic!("a notice, the job goes on");
        };
        assert!(msg.contains("node1") && msg.contains("ranks 3 "), "{msg}");
        assert_eq!(m.remaining(), 2);
        // The second report of the same death (control connection, then exit) is quiet.
        assert_eq!(m.node_lost(1, "exited"), Step::Continue);
        assert_eq!(m.rank_exited(0, 0, code(0)), Ok(Step::Continue));
        let end = m.rank_exited(0, 1, code(0)).unwrap();
        assert_eq!(end, Step::End(Verdict::Completed));
        assert_eq!(
            m.exit_code(&Verdict::Completed),
            137,
            "the killed rank's status"
        );
    }

    #[test]
    fn failure_without_recovery_ends_the_job_with_its_status() {
        let mut m = JobMonitor::new(JobMap::block("ns", 4, 2), false);
        let Step::End(v) = m.rank_exited(1, 3, killed(9)).unwrap() else {
            panic!("a killed rank must end the job");
        };
        assert_eq!(m.exit_code(&v), 137);
        let msg = m.message(&v).unwrap();
        assert!(msg.contains("rank 3 on node1"), "{msg}");
        assert!(msg.contains("SIGKILL") && msg.contains("137"), "{msg}");
    }

    #[test]
    fn recovery_keeps_going_and_reports_the_first_failure() {
        let mut m = JobMonitor::new(JobMap::block("ns", 3, 1), true);
        assert!(matches!(m.rank_exited(0, 2, code(5)), Ok(Step::Notice(_))));
        assert!(matches!(m.rank_exited(0, 0, code(7)), Ok(Step::Notice(_))));
        let end = m.rank_exited(0, 1, code(0)).unwrap();
        assert_eq!(end, Step::End(Verdict::Completed));
        assert_eq!(m.exit_code(&Verdict::Completed), 5);
        let msg = m.message(&Verdict::Completed).unwrap();
        assert!(
            msg.contains("2 rank(s) failed") && msg.contains("rank 2"),
            "{msg}"
        );
        // A later timeout does not hide the earlier failure.
        assert_eq!(m.exit_code(&Verdict::TimedOut { secs: 1 }), 5);
    }

    #[test]
    fn timeouts_signals_and_lost_servers() {
        let m = JobMonitor::new(JobMap::block("ns", 2, 2), false);
        assert_eq!(m.exit_code(&Verdict::TimedOut { secs: 3 }), 124);
        assert_eq!(m.exit_code(&Verdict::Interrupted { signal: 2 }), 130);
        assert_eq!(m.exit_code(&Verdict::Interrupted { signal: 15 }), 143);
        let lost = Verdict::DaemonFailed {
            node: 1,
            reason: "exited unexpectedly".into(),
        };
        assert_eq!(m.exit_code(&lost), 1);
        assert!(m.message(&lost).unwrap().contains("node1"));
    }

    #[test]
    fn bogus_reports_are_refused() {
        let mut m = JobMonitor::new(JobMap::block("ns", 4, 2), false);
        assert!(matches!(
            m.rank_exited(0, 9, code(0)),
            Err(BogusExit::UnknownRank { .. })
        ));
        assert!(matches!(
            m.rank_exited(0, 3, code(0)),
            Err(BogusExit::WrongNode { owner: 1, .. })
        ));
        m.rank_exited(0, 0, code(0)).unwrap();
        assert!(matches!(
            m.rank_exited(0, 0, code(0)),
            Err(BogusExit::Duplicate { .. })
        ));
        assert_eq!(m.remaining(), 3);
    }

    fn accuse(by: NodeId, silent: NodeId) -> Accusation {
        Accusation {
            by,
            silent,
            silent_ms: 3000,
        }
    }

    fn condemned(accusations: &[Accusation]) -> Vec<NodeId> {
        judge(accusations, |_| true)
            .into_iter()
            .map(|a| a.silent)
            .collect()
    }

    #[test]
    fn a_frozen_server_is_condemned_by_its_watcher() {
        assert_eq!(condemned(&[accuse(3, 2)]), [2]);
        // Two frozen servers, reported together.
        assert_eq!(condemned(&[accuse(3, 2), accuse(1, 0)]), [2, 0]);
    }

    #[test]
    fn a_server_cut_off_is_condemned_and_its_own_accusation_dropped() {
        // Node 2 is cut off: node 3 accuses it, and it accuses node 1, in either order.
        assert_eq!(condemned(&[accuse(2, 1), accuse(3, 2)]), [2]);
        assert_eq!(condemned(&[accuse(3, 2), accuse(2, 1)]), [2]);
    }

    #[test]
    fn of_two_servers_cut_apart_the_first_accused_is_condemned() {
        assert_eq!(condemned(&[accuse(0, 1), accuse(1, 0)]), [1]);
        assert_eq!(condemned(&[accuse(1, 0), accuse(0, 1)]), [0]);
    }

    #[test]
    fn accusations_of_servers_gone_or_of_oneself_are_dropped() {
        assert!(judge(&[accuse(3, 2)], |n| n != 2).is_empty());
        assert!(condemned(&[accuse(2, 2)]).is_empty());
        assert_eq!(condemned(&[accuse(3, 2), accuse(0, 2)]), [2]);
    }
}
