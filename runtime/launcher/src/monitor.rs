//! The job's fate, decided without I/O: which rank exits end the job, what the user is
//! told, and which exit status `cohort run` returns. [`crate::launch`] feeds it events.

use std::collections::{BTreeSet, VecDeque};
use std::time::{Duration, Instant};

use cohort_core::take_where;
use cohort_proto::control::ExitStatus;
use cohort_proto::{JobMap, NodeId, Rank, Session};

/// Exit status of a job stopped by `--timeout` (as coreutils' `timeout`).
pub const TIMEOUT_EXIT: i32 = 124;
/// Exit status when a node server fails or the launcher cannot start the job.
pub const FAILURE_EXIT: i32 = 1;

/// A rank that ended abnormally.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RankFailure {
    /// Its job: 0 for the launched one, k for the k-th spawned.
    pub job: u32,
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
    #[error("node{node} reported rank {rank} of job {job}, which is not in the session")]
    UnknownRank { node: NodeId, job: u32, rank: Rank },
    #[error("node{node} reported rank {rank}, which runs on node{owner}")]
    WrongNode {
        node: NodeId,
        rank: Rank,
        owner: NodeId,
    },
    #[error("node{node} reported rank {rank} exiting twice")]
    Duplicate { node: NodeId, rank: Rank },
}

/// Tracks every rank of the session (the launched job and those spawned) until it
/// ends.
#[derive(Debug)]
pub struct JobMonitor {
    session: Session,
    recovery: bool,
    /// `exited[j][r]`: how rank `r` of job `j` ended, once it did.
    exited: Vec<Vec<Option<ExitStatus>>>,
    remaining: u32,
    first_failure: Option<RankFailure>,
    failures: u32,
    /// Spawned jobs that no longer count (never started, or cancelled): their ranks'
    /// exits are not failures of the session.
    abandoned: BTreeSet<u32>,
}

impl JobMonitor {
    pub fn new(job: JobMap, recovery: bool) -> JobMonitor {
        let size = job.size();
        JobMonitor {
            exited: vec![vec![None; size as usize]],
            remaining: size,
            session: Session::new(job),
            recovery,
            first_failure: None,
            failures: 0,
            abandoned: BTreeSet::new(),
        }
    }

    /// Whether rank `rank` of job `job` still runs, as far as the session counts it:
    /// known, not ended, and not of a cancelled job (whose processes are killed).
    pub fn alive(&self, job: u32, rank: Rank) -> bool {
        !self.abandoned.contains(&job)
            && self
                .exited
                .get(job as usize)
                .and_then(|j| j.get(rank as usize))
                .is_some_and(Option::is_none)
    }

    /// The launched job.
    pub fn job(&self) -> &JobMap {
        self.session.primary()
    }

    /// Every job of the session.
    pub fn session(&self) -> &Session {
        &self.session
    }

    /// Job `index`, spawned by `parent`, was started: its ranks count from now on.
    pub fn add_job(
        &mut self,
        index: u32,
        job: JobMap,
        parent: cohort_proto::ProcId,
    ) -> Result<(), String> {
        let size = job.size();
        self.session.add(index, job, parent)?;
        self.exited.push(vec![None; size as usize]);
        self.remaining += size;
        Ok(())
    }

    /// Spawned job `index` ended (every rank exited): its process sets are deleted
    /// from the session, so their names may be given again. Whether it had not ended
    /// (nor been abandoned) before.
    pub fn end_job(&mut self, index: u32) -> bool {
        let ended = index == 0
            || self
                .session
                .state(index)
                .is_none_or(|s| s == cohort_proto::JobState::Ended);
        if ended {
            return false;
        }
        self.session.set_ended(index);
        true
    }

    /// The spawned jobs that have not ended (nor been abandoned).
    pub fn jobs_not_ended(&self) -> Vec<u32> {
        (1..self.session.jobs().len() as u32)
            .filter(|&i| self.session.state(i) != Some(cohort_proto::JobState::Ended))
            .collect()
    }

    /// Ranks still running.
    pub fn remaining(&self) -> u32 {
        self.remaining
    }

    pub fn first_failure(&self) -> Option<&RankFailure> {
        self.first_failure.as_ref()
    }

    /// Whether every rank of job `index` ended; if so, its exit code: its first
    /// failed rank's shell-style status, or 0.
    pub fn job_exit_code(&self, index: u32) -> Option<i32> {
        let exited = self.exited.get(index as usize)?;
        let mut code = 0;
        for status in exited {
            let status = (*status)?;
            if code == 0 && !status.success() {
                code = nonzero(status.shell_code());
            }
        }
        Some(code)
    }

    /// Spawned job `index` will not start (a node server refused it), or was cancelled
    /// (its spawn timed out): its ranks no longer count, and those that started and
    /// are yet to exit (killed) are no failures. Ends the session if they were the
    /// last ones.
    pub fn abandon_job(&mut self, index: u32) -> Step {
        let Some(exited) = self.exited.get_mut(index as usize).filter(|_| index > 0) else {
            return Step::Continue;
        };
        self.abandoned.insert(index);
        self.session.set_ended(index);
        let never = ExitStatus {
            code: None,
            signal: None,
        };
        for slot in exited.iter_mut().filter(|s| s.is_none()) {
            *slot = Some(never);
            self.remaining -= 1;
        }
        if self.remaining == 0 {
            Step::End(Verdict::Completed)
        } else {
            Step::Continue
        }
    }

    /// Node `node` says rank `rank` of the launched job ended with `status`.
    #[cfg(test)]
    pub fn rank_exited(
        &mut self,
        node: NodeId,
        rank: Rank,
        status: ExitStatus,
    ) -> Result<Step, BogusExit> {
        self.exited(node, 0, rank, status)
    }

    /// Node `node` says rank `rank` of job `job` ended with `status`.
    pub fn exited(
        &mut self,
        node: NodeId,
        job: u32,
        rank: Rank,
        status: ExitStatus,
    ) -> Result<Step, BogusExit> {
        let owner = *self
            .session
            .get(job)
            .and_then(|j| j.rank_node.get(rank as usize))
            .ok_or(BogusExit::UnknownRank { node, job, rank })?;
        if owner != node {
            return Err(BogusExit::WrongNode { node, rank, owner });
        }
        if self.abandoned.contains(&job) {
            return Ok(Step::Continue);
        }
        let slot = &mut self.exited[job as usize][rank as usize];
        if slot.is_some() {
            return Err(BogusExit::Duplicate { node, rank });
        }
        *slot = Some(status);
        self.remaining -= 1;

        let mut step = Step::Continue;
        if !status.success() {
            let failure = RankFailure {
                job,
                rank,
                node,
                status,
            };
            self.failures += 1;
            if self.first_failure.is_none() {
                self.first_failure = Some(failure.clone());
            }
            if !self.recovery {
                return Ok(Step::End(Verdict::RankFailed(failure)));
            }
            step = Step::Notice(format!(
                "{} on {} {}; continuing (--enable-recovery)",
                self.rank_name(job, rank),
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
        let mut ranks: Vec<(u32, Rank)> = Vec::new();
        for (j, job) in self.session.jobs().iter().enumerate() {
            let exited = &self.exited[j];
            ranks.extend(
                job.ranks_on(node)
                    .into_iter()
                    .filter(|&r| exited[r as usize].is_none())
                    .map(|r| (j as u32, r)),
            );
        }
        if ranks.is_empty() {
            return Step::Continue;
        }
        for &(job, rank) in &ranks {
            if let Ok(Step::End(v)) = self.exited(node, job, rank, killed) {
                return Step::End(v);
            }
        }
        // "ranks 2,3 and job J@1's ranks 0,4": each job's ranks, the launched job's first.
        let mut parts: Vec<String> = Vec::new();
        for (j, job) in self.session.jobs().iter().enumerate() {
            let list: Vec<String> = ranks
                .iter()
                .filter(|&&(k, _)| k as usize == j)
                .map(|(_, r)| r.to_string())
                .collect();
            if list.is_empty() {
                continue;
            }
            let list = list.join(",");
            parts.push(match j {
                0 => format!("ranks {list}"),
                _ => format!("job {}'s ranks {list}", job.nspace),
            });
        }
        Step::Notice(format!(
            "node server {} {reason}; its {} are lost; continuing (--enable-recovery)",
            self.node_name(node),
            parts.join(" and ")
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
                    "the job finished, but {} rank(s) failed; the first, {} on {}, {} (exit status {code})",
                    self.failures,
                    self.rank_name(f.job, f.rank),
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
                    "{} on {} {}{hint}; terminating the job (exit status {code})",
                    self.rank_name(f.job, f.rank),
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
                "the job did not finish within --timeout {secs} s{}; terminating it (exit status {code})",
                match self.still_running() {
                    Some(running) => format!("; still running: {running}"),
                    None => String::new(),
                }
            ),
            Verdict::Interrupted { signal } => format!(
                "received {}; terminating the job (exit status {code})",
                signal_name(*signal)
            ),
        })
    }

    /// "rank R", or "rank R of job NSPACE" for a spawned job's rank.
    /// The ranks that have not ended, by job and node server (`ranks 1-3 on node0,
    /// rank 5 on node1, job X's rank 0 on node0`); `None` when none runs. What a
    /// `--timeout` found still running: where a hang is.
    pub fn still_running(&self) -> Option<String> {
        let mut parts: Vec<String> = Vec::new();
        for (j, job) in self.session.jobs().iter().enumerate() {
            if self.abandoned.contains(&(j as u32)) {
                continue;
            }
            let exited = &self.exited[j];
            for node in 0..job.num_nodes {
                let ranks: Vec<Rank> = job
                    .ranks_on(node)
                    .into_iter()
                    .filter(|&r| exited[r as usize].is_none())
                    .collect();
                if ranks.is_empty() {
                    continue;
                }
                let what = match ranks.len() {
                    1 => "rank",
                    _ => "ranks",
                };
                let set = cohort_proto::RankSet::from_ranks(ranks);
                let of = match j {
                    0 => String::new(),
                    _ => format!("job {}'s ", job.nspace),
                };
                parts.push(format!("{of}{what} {set} on {}", self.node_name(node)));
            }
        }
        (!parts.is_empty()).then(|| parts.join(", "))
    }

    pub fn rank_name(&self, job: u32, rank: Rank) -> String {
        match job {
            0 => format!("rank {rank}"),
            j => format!("rank {rank} of job {}", self.nspace_of(j)),
        }
    }

    fn nspace_of(&self, job: u32) -> String {
        self.session
            .get(job)
            .map_or_else(|| format!("#{job}"), |j| j.nspace.to_string())
    }

    pub fn node_name(&self, node: NodeId) -> String {
        self.session
            .primary()
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

/// A node server's report that its fabric lost another: a connection broke (data went
/// unanswered for a peer timeout, the other end closed it) or could not be made. Both
/// may still run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LinkReport {
    pub by: NodeId,
    pub lost: NodeId,
    pub reason: String,
    /// The fabric only found `lost` unreachable, and `by` awaits the verdict. If not,
    /// `lost` closed or reset its connections: `by` acted on the loss already, and
    /// every server routes around `lost`.
    pub unreachable: bool,
}

/// Why [`Judgement::Sever`] ends the node server it names rather than the other end.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Severance {
    /// It did not answer the survey in time (frozen, or its host is gone).
    NoAnswer,
    /// It reached `mine` other node servers, the other end `theirs`, more.
    ReachedFewer { mine: usize, theirs: usize },
    /// Both reached `each` other node servers: the higher node id goes (so the node
    /// server of rank 0 outlives a split in two).
    Tie { each: usize },
    /// Its connections to the reporter ended while it still ran (it dropped them, or
    /// closed one on a malformed frame): the reporter acted on the loss, and every
    /// server routes around it already.
    RoutedAround,
}

/// Judges reports of silent node servers ([`Accusation`]s) by asking the accused.
///
/// A frozen server, or one whose host died, does not answer; a server the network cut
/// off answers that it has heard from no other server for a long time. Either is
/// condemned. A server that heard from another recently is not: it can talk to the job,
/// and its accuser is the one cut off (a server cut off hears nobody, so it accuses the
/// server it watches, and the next one after that, until its own watcher accuses it).
/// So each accusation makes the launcher ask the accused server how long it has heard
/// from no other server (`Probe` / `Heard`), and accusations are decided in arrival
/// order: dropped if the accuser was condemned meanwhile or the accused is gone;
/// condemned if the answer is at least half the peer timeout, or none came within the
/// probe timeout; acquitted otherwise (the accuser then watches the accused again). Deciding in order also settles two servers cut
/// apart, which accuse each other: the first accused is condemned, and its accusation
/// then comes from a condemned server.
///
/// A server condemned for not answering may have failed with others (a rack's power,
/// a switch), and the watcher of the next may be among them: the ring alone would find
/// them one timeout after the other. So every other server is asked at once, and one
/// that does not answer within half a timeout is condemned too
/// ([`Judgement::Unanswered`]).
///
/// Reports of fabric losses ([`LinkReport`]s) are another matter; with the detector
/// on, node servers report every loss their fabric finds, so that all end up seeing
/// the same losses. A closed connection was acted upon by its reporter already (every
/// server routes around the server it names), so that server goes if it still runs,
/// a little later (its process most likely ended, which the launcher sees meanwhile):
/// [`Severance::RoutedAround`]. An `unreachable` one was not: if the server it names
/// still runs, the link between the two broke, and the reporter's fabric dropped what
/// it had queued for the other, so the job cannot go on with both, even if the link
/// works again. Both are surveyed (each pings every other server,
/// [`Judgement::Survey`]), and one goes ([`Judgement::Sever`]): one that does not
/// answer; else the one that reached fewer other servers (a server cut off from
/// everyone reports every server it sends to, and reaches none); else the higher node
/// id. Reports whose sender or subject was condemned or is gone meanwhile are dropped
/// (the launcher announces every server gone).
///
/// Sans-IO: the launcher feeds it accusations, reports, answers and the time, and
/// carries out the [`Judgement`]s.
#[derive(Debug)]
pub struct Tribunal {
    /// Half the peer timeout: an accused server silent that long is cut off.
    cut_off: Duration,
    /// How long an accused server has to answer.
    probe_timeout: Duration,
    queue: VecDeque<Accusation>,
    /// Probes sent and not yet answered: the accused server, and when it is too late.
    asked: Vec<(NodeId, Instant)>,
    /// Answers: the accused server and how long it had heard from no other.
    answers: Vec<(NodeId, Duration)>,
    condemned: Vec<NodeId>,
    /// How long a surveyed server pings, and how long it then has to answer.
    survey_window: Duration,
    survey_slack: Duration,
    /// Reports of fabric losses being judged, in arrival order (no two share a server).
    cases: VecDeque<Case>,
    /// Reports waiting for a case that shares a server with them.
    held: VecDeque<LinkReport>,
    /// Reports of closed connections (not `unreachable`), each with when it is
    /// decided: a server whose process ended is gone by then.
    closes: Vec<(LinkReport, Instant)>,
    next_token: u64,
    /// How many node servers the job has.
    nodes: NodeId,
    /// How long a server asked in a sweep has to answer.
    sweep_timeout: Duration,
    /// Servers asked in a sweep and not answered yet: each with when it is too late,
    /// and the server whose silence started the sweep.
    swept: Vec<(NodeId, Instant, NodeId)>,
    /// Servers whose loss was announced (see [`Tribunal::lost`]).
    announced: Vec<NodeId>,
}

/// A [`LinkReport`] being judged.
#[derive(Debug)]
struct Case {
    report: LinkReport,
    token: u64,
    /// When the survey is over, answered or not.
    until: Instant,
    /// The survey's answers: of the reporter, and of the server it reported.
    by_reached: Option<Vec<NodeId>>,
    lost_reached: Option<Vec<NodeId>>,
}

/// What the launcher must do for the [`Tribunal`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Judgement {
    /// Ask node server `node` how long it has heard from no other.
    Probe { node: NodeId },
    /// Condemn `accusation.silent`; `answer` is its own, if it gave one.
    Condemn {
        accusation: Accusation,
        answer: Option<Duration>,
    },
    /// Not acted upon, and why.
    Dropped { accusation: Accusation, why: String },
    /// Not acted upon: the accused heard from another server `answer` before, so it
    /// talks to the job; its accuser is cut off, or only the link between the two is
    /// broken. The accuser must keep watching it (it moved its watch on when it
    /// reported), or nobody would.
    Acquit {
        accusation: Accusation,
        answer: Duration,
    },
    /// Not acted upon: the accused is gone or condemned already (a crashed server's
    /// watcher reports it too, a timeout after the crash).
    Moot { accusation: Accusation },
    /// Ask node server `node` which others it reaches: ping every other one but
    /// `except` for `within`, then answer `token` (see [`Tribunal::reached`]).
    Survey {
        node: NodeId,
        token: u64,
        except: NodeId,
        within: Duration,
    },
    /// End node server `node`, one end of the broken link `report` names, and tell
    /// every other one it is lost.
    Sever {
        report: LinkReport,
        node: NodeId,
        why: Severance,
    },
    /// A report not acted upon, and why.
    Ignored { report: LinkReport, why: String },
    /// Condemn `node`: it did not answer the sweep made after `after` was condemned
    /// for not answering (servers that fail together: a rack's power, a switch).
    Unanswered { node: NodeId, after: NodeId },
}

impl Tribunal {
    /// For a detector with `timeout` and `period` in a job of `nodes` node servers: an
    /// accused server has two periods to answer.
    pub fn new(timeout: Duration, period: Duration, nodes: NodeId) -> Tribunal {
        Tribunal {
            cut_off: timeout / 2,
            probe_timeout: period * 2,
            queue: VecDeque::new(),
            asked: Vec::new(),
            answers: Vec::new(),
            condemned: Vec::new(),
            survey_window: period * 2,
            survey_slack: period * 2,
            cases: VecDeque::new(),
            held: VecDeque::new(),
            closes: Vec::new(),
            next_token: 1,
            nodes,
            sweep_timeout: (timeout / 2).max(period * 2),
            swept: Vec::new(),
            announced: Vec::new(),
        }
    }

    /// `after` was condemned for not answering: it may have failed with others (its
    /// rack's power, its switch), whose watchers may be among them, so that the ring
    /// would find them one timeout after the other. Every other server still running
    /// is asked at once; one that does not answer within half a timeout is condemned
    /// too ([`Judgement::Unanswered`]).
    fn sweep(
        &mut self,
        after: NodeId,
        now: Instant,
        running: &impl Fn(NodeId) -> bool,
        out: &mut Vec<Judgement>,
    ) {
        for node in 0..self.nodes {
            let asked = self.asked.iter().any(|(n, _)| *n == node)
                || self.swept.iter().any(|(n, _, _)| *n == node);
            if node == after || asked || self.condemned.contains(&node) || !running(node) {
                continue;
            }
            self.swept.push((node, now + self.sweep_timeout, after));
            out.push(Judgement::Probe { node });
        }
    }

    /// Node server `node` is lost (condemned here, or gone); `false` if it was known
    /// already. Reports about it, or from it, are not acted upon any more.
    pub fn lost(&mut self, node: NodeId) -> bool {
        if self.announced.contains(&node) {
            return false;
        }
        self.announced.push(node);
        if !self.condemned.contains(&node) {
            self.condemned.push(node);
        }
        true
    }

    /// A server's fabric lost another (see [`Tribunal`]). For an `unreachable` report,
    /// surveys start at once unless a case shares a server with it; a closed
    /// connection is decided two heartbeats later.
    pub fn fabric_lost(&mut self, report: LinkReport, now: Instant, out: &mut Vec<Judgement>) {
        if report.unreachable {
            self.held.push_back(report);
            self.open_cases(now, out);
        } else {
            // Its process most likely ended: give the launcher time to see that.
            self.closes.push((report, now + self.survey_slack));
        }
    }

    /// Starts a case, with its surveys, for each held report that shares no server
    /// with a case being judged: a server that crashed, or that the network cut off,
    /// is reported by (or reports) many, and is surveyed once, not once per report.
    /// Reports about a link being judged, or from or about a condemned server, are
    /// not acted upon.
    fn open_cases(&mut self, now: Instant, out: &mut Vec<Judgement>) {
        let pair = |r: &LinkReport| (r.by.min(r.lost), r.by.max(r.lost));
        let shares = |a: &LinkReport, b: &LinkReport| {
            a.by == b.by || a.by == b.lost || a.lost == b.by || a.lost == b.lost
        };
        let mut waiting = VecDeque::new();
        while let Some(report) = self.held.pop_front() {
            let why = if self.condemned.contains(&report.by) {
                Some("its sender was condemned")
            } else if self.condemned.contains(&report.lost) {
                Some("the server it names was condemned already")
            } else if self.cases.iter().any(|c| pair(&c.report) == pair(&report)) {
                Some("that link is being judged already")
            } else {
                None
            };
            if let Some(why) = why {
                out.push(Judgement::Ignored {
                    report,
                    why: why.into(),
                });
                continue;
            }
            if self.cases.iter().any(|c| shares(&c.report, &report)) {
                waiting.push_back(report);
                continue;
            }
            let token = self.next_token;
            self.next_token += 1;
            for (node, except) in [(report.by, report.lost), (report.lost, report.by)] {
                out.push(Judgement::Survey {
                    node,
                    token,
                    except,
                    within: self.survey_window,
                });
            }
            self.cases.push_back(Case {
                report,
                token,
                until: now + self.survey_window + self.survey_slack,
                by_reached: None,
                lost_reached: None,
            });
        }
        self.held = waiting;
    }

    /// Node server `node` answered survey `token`: it reached `nodes`.
    pub fn reached(&mut self, node: NodeId, token: u64, nodes: Vec<NodeId>) {
        let Some(c) = self.cases.iter_mut().find(|c| c.token == token) else {
            return;
        };
        if node == c.report.by {
            c.by_reached = Some(nodes);
        } else if node == c.report.lost {
            c.lost_reached = Some(nodes);
        }
    }

    /// A report of silence arrived.
    pub fn accuse(&mut self, a: Accusation, now: Instant, out: &mut Vec<Judgement>) {
        let node = a.silent;
        self.queue.push_back(a);
        let known = self.answers.iter().any(|(n, _)| *n == node);
        if !known && !self.asked.iter().any(|(n, _)| *n == node) {
            self.asked.push((node, now + self.probe_timeout));
            out.push(Judgement::Probe { node });
        }
    }

    /// Node server `node` answered a probe: it has heard from no other for `silent`.
    pub fn heard(&mut self, node: NodeId, silent: Duration) {
        self.swept.retain(|(n, _, _)| *n != node);
        if let Some(i) = self.asked.iter().position(|(n, _)| *n == node) {
            self.asked.swap_remove(i);
            self.answers.push((node, silent));
        }
    }

    /// When [`Tribunal::decide`] must run next at the latest.
    pub fn deadline(&self) -> Option<Instant> {
        let cases = self.cases.iter().map(|c| c.until);
        let swept = self.swept.iter().map(|(_, d, _)| *d);
        let closes = self.closes.iter().map(|(_, d)| *d);
        self.asked
            .iter()
            .map(|(_, d)| *d)
            .chain(cases)
            .chain(swept)
            .chain(closes)
            .min()
    }

    /// Decides the accusations that can be, in arrival order; `running` says whether a
    /// node server is still up.
    pub fn decide(
        &mut self,
        now: Instant,
        running: impl Fn(NodeId) -> bool,
        out: &mut Vec<Judgement>,
    ) {
        while let Some(a) = self.queue.front().cloned() {
            let drop = |why: &str| Judgement::Dropped {
                accusation: a.clone(),
                why: why.to_string(),
            };
            if a.by == a.silent {
                out.push(drop("it names its sender"));
            } else if self.condemned.contains(&a.by) {
                out.push(drop("its sender was condemned"));
            } else if self.condemned.contains(&a.silent) || !running(a.silent) {
                out.push(Judgement::Moot {
                    accusation: a.clone(),
                });
            } else if let Some(&(_, silent)) = self.answers.iter().find(|(n, _)| *n == a.silent) {
                if silent >= self.cut_off {
                    self.condemned.push(a.silent);
                    out.push(Judgement::Condemn {
                        accusation: a.clone(),
                        answer: Some(silent),
                    });
                } else {
                    out.push(Judgement::Acquit {
                        accusation: a.clone(),
                        answer: silent,
                    });
                }
            } else if self.asked.iter().any(|(n, d)| *n == a.silent && *d <= now) {
                self.condemned.push(a.silent);
                out.push(Judgement::Condemn {
                    accusation: a.clone(),
                    answer: None,
                });
                self.sweep(a.silent, now, &running, out);
            } else {
                break; // waiting for the answer
            }
            self.queue.pop_front();
            if !self.queue.iter().any(|q| q.silent == a.silent) {
                // The next accusation of it asks again.
                self.answers.retain(|(n, _)| *n != a.silent);
                self.asked.retain(|(n, _)| *n != a.silent);
            }
        }
        self.decide_closes(now, &running, out);
        self.decide_cases(now, &running, out);
        for (node, _, after) in take_where(&mut self.swept, |(_, d, _)| *d <= now) {
            if !self.condemned.contains(&node) && running(node) {
                self.condemned.push(node);
                // No sweep after it: every server was asked in this one.
                out.push(Judgement::Unanswered { node, after });
            }
        }
    }

    /// Reports of closed connections that are due: a server gone or condemned
    /// meanwhile is left be; one that still runs goes (every server routes around it
    /// already), whatever became of the reporter (whose loss the reported server may
    /// have spread in turn).
    fn decide_closes(
        &mut self,
        now: Instant,
        running: &impl Fn(NodeId) -> bool,
        out: &mut Vec<Judgement>,
    ) {
        for (report, _) in take_where(&mut self.closes, |(_, d)| *d <= now) {
            if self.condemned.contains(&report.lost) || !running(report.lost) {
                out.push(Judgement::Ignored {
                    report,
                    why: "the server it names is gone or condemned".into(),
                });
            } else {
                self.condemned.push(report.lost);
                out.push(Judgement::Sever {
                    node: report.lost,
                    report,
                    why: Severance::RoutedAround,
                });
            }
        }
    }

    /// The [`LinkReport`]s that can be decided, in arrival order.
    fn decide_cases(
        &mut self,
        now: Instant,
        running: &impl Fn(NodeId) -> bool,
        out: &mut Vec<Judgement>,
    ) {
        while let Some(c) = self.cases.front() {
            let r = c.report.clone();
            let ignore = |why: &str| Judgement::Ignored {
                report: r.clone(),
                why: why.to_string(),
            };
            let answered = c.by_reached.is_some() && c.lost_reached.is_some();
            let over = answered || c.until <= now;
            let mut no_answer = None;
            let judgement = if self.condemned.contains(&r.by) {
                ignore("its sender was condemned")
            } else if self.condemned.contains(&r.lost) {
                ignore("the server it names was condemned already")
            } else if !running(r.lost) {
                ignore("the server it names is gone (its loss is announced)")
            } else if !running(r.by) {
                ignore("its sender is gone")
            } else if !over {
                return; // waiting for the survey
            } else {
                let (node, why) = match (&c.by_reached, &c.lost_reached) {
                    (_, None) => (r.lost, Severance::NoAnswer),
                    (None, _) => (r.by, Severance::NoAnswer),
                    (Some(by), Some(lost)) => {
                        let count =
                            |v: &[NodeId], not: NodeId| v.iter().filter(|&&n| n != not).count();
                        let (b, l) = (count(by, r.lost), count(lost, r.by));
                        if b < l {
                            (r.by, Severance::ReachedFewer { mine: b, theirs: l })
                        } else if l < b {
                            (r.lost, Severance::ReachedFewer { mine: l, theirs: b })
                        } else {
                            (r.by.max(r.lost), Severance::Tie { each: b })
                        }
                    }
                };
                self.condemned.push(node);
                if why == Severance::NoAnswer {
                    no_answer = Some(node);
                }
                Judgement::Sever {
                    report: r.clone(),
                    node,
                    why,
                }
            };
            out.push(judgement);
            if let Some(node) = no_answer {
                self.sweep(node, now, running, out);
            }
            self.cases.pop_front();
        }
        self.open_cases(now, out);
    }
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

    /// A `--timeout` names the ranks still running, by node server: where the job
    /// hangs.
    #[test]
    fn a_timeout_names_the_ranks_still_running() {
        let mut m = JobMonitor::new(JobMap::block("ns", 6, 2), false);
        for r in [0, 4] {
            assert!(matches!(
                m.rank_exited(r / 3, r, code(0)),
                Ok(Step::Continue)
            ));
        }
        let msg = m.message(&Verdict::TimedOut { secs: 5 }).unwrap();
        assert_eq!(
            msg,
            "the job did not finish within --timeout 5 s; still running: ranks 1-2 on \
             node0, ranks 3,5 on node1; terminating it (exit status 124)"
        );
    }

    #[test]
    fn a_spawned_job_counts_until_its_last_rank_and_is_named_in_messages() {
        let mut m = JobMonitor::new(JobMap::block("ns", 2, 2), true);
        let parent = cohort_proto::ProcId::new("ns", 0);
        let child = JobMap::spawned(
            "ns@1".into(),
            m.job(),
            vec![4],
            &[0, 1],
            cohort_proto::spawn::SpawnMapping::RoundRobin,
        )
        .unwrap();
        m.add_job(1, child, parent.clone()).unwrap();
        assert_eq!(m.remaining(), 6);
        // The launched job's ranks end first: the session goes on for the spawned one.
        assert_eq!(m.exited(0, 0, 0, code(0)), Ok(Step::Continue));
        assert_eq!(m.exited(1, 0, 1, code(0)), Ok(Step::Continue));
        assert!(matches!(
            m.exited(0, 1, 1, code(0)),
            Err(BogusExit::WrongNode { owner: 1, .. })
        ));
        assert!(matches!(
            m.exited(0, 2, 0, code(0)),
            Err(BogusExit::UnknownRank { job: 2, .. })
        ));
        let Step::Notice(msg) = m.exited(1, 1, 1, code(4)).unwrap() else {
            panic!("a notice under recovery");
        };
        assert!(msg.contains("rank 1 of job ns@1 on node1"), "{msg}");
        // node0 hosts spawned ranks 0 and 2; rank 3 (node1) still runs.
        let Step::Notice(msg) = m.node_lost(0, "exited") else {
            panic!("spawned rank 3 still runs: {m:?}");
        };
        assert!(msg.contains("its job ns@1's ranks 0,2 are lost"), "{msg}");
        assert_eq!(m.remaining(), 1);
        // What still runs (for the host slots of the next spawn): only rank 3.
        assert!(m.alive(1, 3));
        assert!(!m.alive(1, 1) && !m.alive(0, 0) && !m.alive(1, 9) && !m.alive(2, 0));
        let end = m.exited(1, 1, 3, code(0)).unwrap();
        assert_eq!(end, Step::End(Verdict::Completed));
        assert_eq!(
            m.exit_code(&end_verdict(end)),
            4,
            "the first failure's status"
        );
        // A second spawn the node servers refused does not keep the session alive.
        let mut m = JobMonitor::new(JobMap::block("ns", 1, 1), false);
        let child = JobMap::spawned(
            "ns@1".into(),
            m.job(),
            vec![2],
            &[0],
            cohort_proto::spawn::SpawnMapping::Block,
        )
        .unwrap();
        m.add_job(1, child, parent).unwrap();
        assert_eq!(m.exited(0, 0, 0, code(0)), Ok(Step::Continue));
        assert_eq!(m.abandon_job(1), Step::End(Verdict::Completed));
        // A cancelled spawn (timed out): its started ranks, killed, are no failures,
        // and the session does not wait for the others.
        let mut m = JobMonitor::new(JobMap::block("ns", 1, 1), false);
        let child = JobMap::spawned(
            "ns@1".into(),
            m.job(),
            vec![2],
            &[0],
            cohort_proto::spawn::SpawnMapping::Block,
        )
        .unwrap();
        m.add_job(1, child, cohort_proto::ProcId::new("ns", 0))
            .unwrap();
        assert_eq!(m.abandon_job(1), Step::Continue, "rank 0 of ns still runs");
        assert_eq!(m.remaining(), 1);
        assert!(
            m.alive(0, 0) && !m.alive(1, 0),
            "a cancelled job's ranks are killed"
        );
        let killed = ExitStatus {
            code: None,
            signal: Some(libc::SIGKILL),
        };
        assert_eq!(m.exited(0, 1, 1, killed), Ok(Step::Continue));
        assert!(m.first_failure().is_none());
        assert!(matches!(
            m.exited(0, 1, 2, killed),
            Err(BogusExit::UnknownRank { job: 1, .. })
        ));
        assert_eq!(
            m.exited(0, 0, 0, code(0)),
            Ok(Step::End(Verdict::Completed))
        );
    }

    fn end_verdict(step: Step) -> Verdict {
        match step {
            Step::End(v) => v,
            other => panic!("not an end: {other:?}"),
        }
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

    const T: Duration = Duration::from_secs(3);
    const P: Duration = Duration::from_millis(250);

    /// Runs `steps` against a tribunal and returns what was condemned, in order.
    /// Steps: `Accuse(by, silent)`, `Heard(node, ms)`, `At(ms)` (the clock; the
    /// tribunal decides after every step).
    fn run(steps: &[Do]) -> (Vec<NodeId>, Vec<Judgement>) {
        let t0 = Instant::now();
        let mut now = t0;
        let mut t = Tribunal::new(T, P, 5);
        let mut out = Vec::new();
        for step in steps {
            match *step {
                Do::Accuse(by, silent) => t.accuse(accuse(by, silent), now, &mut out),
                Do::Heard(node, ms) => t.heard(node, Duration::from_millis(ms)),
                Do::At(ms) => now = t0 + Duration::from_millis(ms),
            }
            t.decide(now, |_| true, &mut out);
        }
        let condemned = out
            .iter()
            .filter_map(|j| match j {
                Judgement::Condemn { accusation, .. } => Some(accusation.silent),
                _ => None,
            })
            .collect();
        (condemned, out)
    }

    #[derive(Clone, Copy)]
    enum Do {
        Accuse(NodeId, NodeId),
        Heard(NodeId, u64),
        At(u64),
    }
    use Do::*;

    #[test]
    fn an_accused_server_is_asked_once() {
        let (_, out) = run(&[Accuse(3, 2), Accuse(0, 2)]);
        assert_eq!(out, [Judgement::Probe { node: 2 }]);
    }

    #[test]
    fn a_frozen_server_is_condemned_when_it_does_not_answer() {
        let (condemned, _) = run(&[Accuse(3, 2), At(400)]);
        assert!(condemned.is_empty(), "still within the probe timeout");
        let (condemned, out) = run(&[Accuse(3, 2), At(500)]);
        assert_eq!(condemned, [2]);
        assert!(matches!(out[1], Judgement::Condemn { answer: None, .. }));
    }

    #[test]
    fn a_server_cut_off_is_condemned_and_its_own_accusation_dropped() {
        // Node 2 is cut off: it accuses 1, node 3 accuses it, in either order. 2 heard
        // nobody for 3 s; 1 heard from 0 a moment ago.
        for steps in [
            [Accuse(2, 1), Accuse(3, 2), Heard(1, 200), Heard(2, 3100)],
            [Accuse(3, 2), Accuse(2, 1), Heard(2, 3100), Heard(1, 200)],
        ] {
            assert_eq!(run(&steps).0, [2]);
        }
    }

    /// An accused server that heard from another recently talks to the job: acquitted,
    /// so that its accuser watches it again.
    #[test]
    fn an_accused_server_that_hears_others_is_acquitted() {
        let (condemned, out) = run(&[Accuse(0, 1), Heard(1, 100)]);
        assert!(condemned.is_empty());
        assert!(
            matches!(&out[1], Judgement::Acquit { accusation, answer }
                if accusation.by == 0 && accusation.silent == 1
                    && *answer == Duration::from_millis(100)),
            "{out:?}"
        );
    }

    #[test]
    fn two_neighbours_cut_off_are_both_condemned_and_nobody_else() {
        // Nodes 1 and 2 each cut off: 3 accuses 2, 2 accuses 1, 1 accuses 0; then 3
        // watches 1 and accuses it while 1 accuses 4.
        let (condemned, _) = run(&[
            Accuse(1, 0),
            Accuse(2, 1),
            Accuse(3, 2),
            Heard(0, 200),
            Heard(1, 3000),
            Heard(2, 3000),
            At(3000),
            Accuse(1, 4),
            Heard(4, 100),
            Accuse(3, 1),
            Heard(1, 6000),
        ]);
        // 1 is condemned on 2's word (2 heard nobody, but its accusation of 1 came
        // before 2 was condemned, and 1 heard nobody either): both cut off, both go.
        assert_eq!(condemned, [1, 2]);
    }

    #[test]
    fn of_two_servers_cut_apart_the_first_accused_is_condemned() {
        let (condemned, _) = run(&[Accuse(0, 1), Accuse(1, 0), Heard(0, 3000), Heard(1, 3000)]);
        assert_eq!(condemned, [1]);
    }

    #[test]
    fn accusations_of_servers_gone_or_of_oneself_are_dropped() {
        let mut t = Tribunal::new(T, P, 5);
        let mut out = Vec::new();
        let now = Instant::now();
        t.accuse(accuse(3, 2), now, &mut out);
        t.accuse(accuse(2, 2), now, &mut out);
        t.decide(now, |n| n != 2, &mut out);
        assert!(
            !out.iter().any(|j| matches!(j, Judgement::Condemn { .. })),
            "{out:?}"
        );
        assert!(
            matches!(
                &out[1..],
                [Judgement::Moot { .. }, Judgement::Dropped { .. }]
            ),
            "{out:?}"
        );
    }

    #[test]
    fn a_later_accusation_asks_again() {
        // 2 was heard recently the first time; silent the second time.
        let (condemned, out) = run(&[
            Accuse(3, 2),
            Heard(2, 100),
            At(5000),
            Accuse(3, 2),
            Heard(2, 3000),
        ]);
        assert_eq!(condemned, [2]);
        assert_eq!(probed(&out), [2, 2]);
    }

    fn link(by: NodeId, lost: NodeId) -> LinkReport {
        LinkReport {
            by,
            lost,
            reason: "timed out".into(),
            unreachable: true,
        }
    }

    /// Reports `link(by, lost)`, then feeds the survey answers (`None`: no answer) at
    /// `at_ms`, and returns every judgement.
    fn judge_link(
        reports: &[(NodeId, NodeId)],
        answers: &[(NodeId, Option<Vec<NodeId>>)],
        at_ms: u64,
        running: impl Fn(NodeId) -> bool + Copy,
    ) -> Vec<Judgement> {
        let (t0, mut t, mut out) = tribunal();
        for &(by, lost) in reports {
            t.fabric_lost(link(by, lost), t0, &mut out);
        }
        t.decide(t0, running, &mut out);
        let token = out
            .iter()
            .find_map(|j| match j {
                Judgement::Survey { token, .. } => Some(*token),
                _ => None,
            })
            .expect("a survey");
        for (node, reached) in answers {
            if let Some(r) = reached {
                t.reached(*node, token, r.clone());
            }
        }
        t.decide(t0 + Duration::from_millis(at_ms), running, &mut out);
        out
    }

    /// The servers probed, in order.
    fn probed(out: &[Judgement]) -> Vec<NodeId> {
        pick(out, |j| match j {
            Judgement::Probe { node } => Some(*node),
            _ => None,
        })
    }

    /// What `f` picks from the judgements, in order.
    fn pick<T>(out: &[Judgement], f: impl FnMut(&Judgement) -> Option<T>) -> Vec<T> {
        out.iter().filter_map(f).collect()
    }

    fn severed(out: &[Judgement]) -> Vec<(NodeId, Severance)> {
        pick(out, |j| match j {
            Judgement::Sever { node, why, .. } => Some((*node, why.clone())),
            _ => None,
        })
    }

    /// A fresh tribunal for 5 servers, the time it starts, and an empty judgement list.
    fn tribunal() -> (Instant, Tribunal, Vec<Judgement>) {
        (Instant::now(), Tribunal::new(T, P, 5), Vec::new())
    }

    /// Both ends of a link reported broken are surveyed, once, whichever end reports
    /// it and however often.
    #[test]
    fn a_broken_link_surveys_both_ends_once() {
        let (t0, mut t, mut out) = tribunal();
        t.fabric_lost(link(0, 3), t0, &mut out);
        t.fabric_lost(link(3, 0), t0, &mut out);
        t.fabric_lost(link(0, 3), t0, &mut out);
        let surveys: Vec<(NodeId, NodeId)> = out
            .iter()
            .filter_map(|j| match j {
                Judgement::Survey {
                    node,
                    except,
                    within,
                    ..
                } => {
                    assert_eq!(*within, P * 2);
                    Some((*node, *except))
                }
                _ => None,
            })
            .collect();
        assert_eq!(surveys, [(0, 3), (3, 0)]);
        let ignored = out
            .iter()
            .filter(|j| matches!(j, Judgement::Ignored { .. }))
            .count();
        assert_eq!(ignored, 2, "{out:?}");
        assert_eq!(t.deadline(), Some(t0 + P * 4));
    }

    /// Two servers cut apart that reach as many others: the higher node id goes,
    /// whichever end reported the link.
    #[test]
    fn of_two_servers_cut_apart_the_higher_node_id_goes() {
        for report in [(1, 2), (2, 1)] {
            let out = judge_link(
                &[report],
                &[(1, Some(vec![0, 3])), (2, Some(vec![3, 0]))],
                0,
                |_| true,
            );
            assert_eq!(
                severed(&out),
                [(2, Severance::Tie { each: 2 })],
                "{report:?}"
            );
        }
    }

    /// A server cut off from every other reports the servers it sends to: it goes, not
    /// the server it reports, because it reaches none.
    #[test]
    fn a_server_cut_off_from_all_goes_whichever_end_reports() {
        for report in [(0, 2), (2, 0)] {
            let out = judge_link(
                &[report],
                &[(0, Some(vec![])), (2, Some(vec![1, 3]))],
                0,
                |_| true,
            );
            assert_eq!(
                severed(&out),
                [(0, Severance::ReachedFewer { mine: 0, theirs: 2 })],
                "{report:?}"
            );
        }
    }

    /// The other end of a link counts for nobody (a stale answer naming it).
    #[test]
    fn the_other_end_does_not_count_as_reached() {
        let out = judge_link(
            &[(1, 2)],
            &[(1, Some(vec![0, 2])), (2, Some(vec![0, 3]))],
            0,
            |_| true,
        );
        assert_eq!(
            severed(&out),
            [(1, Severance::ReachedFewer { mine: 1, theirs: 2 })]
        );
    }

    /// An end that does not answer the survey goes, once the survey is over, not
    /// before.
    #[test]
    fn an_end_that_does_not_answer_the_survey_goes() {
        let answers = [(1, Some(vec![0])), (2, None)];
        let early = judge_link(&[(1, 2)], &answers, 999, |_| true);
        assert!(severed(&early).is_empty(), "{early:?}");
        let out = judge_link(&[(1, 2)], &answers, 1000, |_| true);
        assert_eq!(severed(&out), [(2, Severance::NoAnswer)]);
        let out = judge_link(&[(1, 2)], &[(1, None), (2, Some(vec![0]))], 1000, |_| true);
        assert_eq!(severed(&out), [(1, Severance::NoAnswer)]);
    }

    /// A report of a server that is gone, or condemned already, or from one, is not
    /// acted upon.
    #[test]
    fn reports_about_servers_gone_or_condemned_end_nobody() {
        let out = judge_link(&[(1, 2)], &[], 0, |n| n != 2);
        assert!(
            matches!(&out[2..], [Judgement::Ignored { report, why }]
                if report.lost == 2 && why.contains("is gone")),
            "{out:?}"
        );
        // 2 cut off from all: condemned on 1's report; 2's report of 3 then comes
        // from a condemned server, and 4's of 2 names one.
        let (t0, mut t, mut out) = tribunal();
        t.fabric_lost(link(1, 2), t0, &mut out);
        t.fabric_lost(link(2, 3), t0, &mut out);
        t.fabric_lost(link(4, 2), t0, &mut out);
        t.reached(1, 1, vec![0, 3, 4]);
        t.reached(2, 1, vec![]);
        t.decide(t0 + P * 4, |_| true, &mut out);
        assert_eq!(
            severed(&out),
            [(2, Severance::ReachedFewer { mine: 0, theirs: 3 })]
        );
        let ignored: Vec<&str> = out
            .iter()
            .filter_map(|j| match j {
                Judgement::Ignored { why, .. } => Some(why.as_str()),
                _ => None,
            })
            .collect();
        assert_eq!(
            ignored,
            [
                "its sender was condemned",
                "the server it names was condemned already"
            ]
        );
        assert!(t.deadline().is_none());
    }
    /// Servers that fail together (a rack's power): the first found for not answering
    /// makes the launcher ask every other server at once; one that does not answer
    /// within half a timeout goes too, without waiting for its watcher (which may be
    /// among them), and nobody who answers does.
    #[test]
    fn servers_that_fail_together_are_found_by_one_sweep() {
        let (t0, mut t, mut out) = tribunal();
        t.accuse(accuse(3, 2), t0, &mut out);
        let condemned_at = t0 + P * 2;
        t.decide(condemned_at, |_| true, &mut out);
        let probed = probed(&out);
        assert_eq!(probed, [2, 0, 1, 3, 4], "{out:?}");
        for node in [0, 3, 4] {
            t.heard(node, Duration::from_millis(10));
        }
        let due = condemned_at + T / 2;
        assert_eq!(t.deadline(), Some(due));
        let mut late = Vec::new();
        t.decide(due - Duration::from_millis(1), |_| true, &mut late);
        assert!(late.is_empty(), "{late:?}");
        t.decide(due, |_| true, &mut late);
        assert_eq!(late, [Judgement::Unanswered { node: 1, after: 2 }]);
        assert_eq!(t.deadline(), None, "no second sweep");
    }

    /// A server condemned with an answer (cut off) starts no sweep; one severed for not
    /// answering a survey does.
    #[test]
    fn only_servers_that_do_not_answer_start_a_sweep() {
        let (_, out) = run(&[Accuse(3, 2), Heard(2, 3000)]);
        assert_eq!(probed(&out), [2], "{out:?}");
        let out = judge_link(&[(1, 2)], &[(1, Some(vec![0]))], 1000, |_| true);
        let probed = probed(&out);
        assert_eq!(severed(&out), [(2, Severance::NoAnswer)]);
        assert_eq!(probed, [0, 1, 3, 4], "{out:?}");
    }
    fn surveyed(out: &[Judgement]) -> Vec<(NodeId, u64)> {
        pick(out, |j| match j {
            Judgement::Survey { node, token, .. } => Some((*node, *token)),
            _ => None,
        })
    }

    /// A server reported by many (crashed, or cut off) is surveyed once, not once per
    /// report; the reports held meanwhile are dropped once it is condemned.
    #[test]
    fn reports_sharing_a_server_are_surveyed_one_at_a_time() {
        let (t0, mut t, mut out) = tribunal();
        for by in [0, 1, 3] {
            t.fabric_lost(link(by, 2), t0, &mut out);
        }
        assert_eq!(surveyed(&out), [(0, 1), (2, 1)], "{out:?}");
        t.reached(0, 1, vec![1, 3, 4]);
        t.decide(t0 + P * 4, |_| true, &mut out);
        assert_eq!(severed(&out), [(2, Severance::NoAnswer)]);
        let ignored = out
            .iter()
            .filter(|j| {
                matches!(j, Judgement::Ignored { report, why }
                    if report.lost == 2 && why == "the server it names was condemned already")
            })
            .count();
        assert_eq!(ignored, 2, "{out:?}");
        assert_eq!(surveyed(&out).len(), 2, "no second survey: {out:?}");
    }

    /// A held report is judged once the case it waited for is decided without ending
    /// either of its servers.
    #[test]
    fn a_held_report_is_surveyed_after_the_case_before_it() {
        let (t0, mut t, mut out) = tribunal();
        t.fabric_lost(link(0, 1), t0, &mut out);
        t.fabric_lost(link(1, 2), t0, &mut out);
        assert_eq!(surveyed(&out), [(0, 1), (1, 1)]);
        t.reached(0, 1, vec![]);
        t.reached(1, 1, vec![2, 3]);
        t.decide(t0, |_| true, &mut out);
        assert_eq!(
            severed(&out),
            [(0, Severance::ReachedFewer { mine: 0, theirs: 2 })]
        );
        assert_eq!(surveyed(&out), [(0, 1), (1, 1), (1, 2), (2, 2)], "{out:?}");
    }
    fn closed(by: NodeId, lost: NodeId) -> LinkReport {
        LinkReport {
            by,
            lost,
            reason: "closed the connection without a goodbye".into(),
            unreachable: false,
        }
    }

    /// A closed connection was acted upon by its reporter (every server routes around
    /// the server it names): that server goes if it still runs two heartbeats later,
    /// with no survey, even if the reporter was condemned meanwhile (the other end
    /// may have spread the reporter's loss in turn); one gone by then is left be.
    #[test]
    fn a_closed_connection_ends_the_server_it_names_if_it_still_runs() {
        let (t0, mut t, mut out) = tribunal();
        t.fabric_lost(closed(1, 2), t0, &mut out);
        t.fabric_lost(closed(2, 1), t0, &mut out);
        t.fabric_lost(closed(3, 4), t0, &mut out);
        assert!(surveyed(&out).is_empty(), "{out:?}");
        t.decide(t0 + P, |_| true, &mut out);
        assert!(
            severed(&out).is_empty(),
            "not before two heartbeats: {out:?}"
        );
        assert_eq!(t.deadline(), Some(t0 + P * 2));
        t.decide(t0 + P * 2, |n| n != 4, &mut out);
        assert_eq!(
            severed(&out),
            [(2, Severance::RoutedAround), (1, Severance::RoutedAround)]
        );
        assert!(
            matches!(out.last(), Some(Judgement::Ignored { report, .. }) if report.lost == 4),
            "a gone server is left be: {out:?}"
        );
        assert_eq!(t.deadline(), None);
    }
}
