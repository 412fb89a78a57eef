//! Spawn (PMIx_Spawn, MPI_Comm_spawn): a process of the session asks its node server,
//! which forwards the call here (`DaemonMsg::Data`), for a new job.
//!
//! The launcher places the job on the live node servers and tells every one of them
//! about it (`LauncherMsg::AddJob`). Only once all of them know it does it start the
//! job's processes (`LauncherMsg::StartJob`): no node server then meets a process of a
//! namespace it cannot place. Once every server started its share, the caller gets the
//! job's namespace. A node server lost meanwhile no longer counts (its share of the
//! processes is lost with it, as `--enable-recovery` says); a spawn therefore never
//! waits for a server that is gone. A spawn with a timeout (`SpawnOpts::timeout_ms`)
//! that is not done in time fails with `CohortError::Timeout`, and its job is cancelled
//! (`LauncherMsg::CancelJob`): no server starts its processes any more, those started
//! are killed, and the session no longer waits for them.

use std::collections::{BTreeMap, BTreeSet};

use cohort_proto::control::{DaemonMsg, LauncherMsg};
use cohort_proto::msg::Response;
use cohort_proto::spawn::{
    spawned_nspace, validate_spawn, SpawnApp, SpawnBinding, SpawnOpts, MAX_SPAWNED_JOBS,
};
use cohort_proto::{CohortError, JobMap, NodeId, ProcId, Rank};
use tokio::time::{Duration, Instant};

use super::Launcher;
use crate::monitor::{Step, Verdict};

/// The session's spawns: those in progress, and the next job index.
#[derive(Debug, Default)]
pub(super) struct Spawns {
    pending: BTreeMap<u32, Pending>,
    /// Jobs spawned so far (the next one is `count + 1`).
    count: u32,
    /// A node server refused a spawned job: the servers may now disagree on the
    /// session's jobs, so no further spawn is made (why).
    refused: Option<String>,
    /// Node servers lost: no spawn places processes there or waits for them.
    gone: BTreeSet<NodeId>,
    /// Spawned jobs whose parent asked to be told when they end
    /// (`SpawnOpts::notify_completion`): job index → the parent.
    notify: BTreeMap<u32, ProcId>,
    /// The host slots each bound spawned process took (`SpawnOpts::cpus_per_proc` of
    /// them): (job, rank) → (host key, slots). Entries of processes that ended are
    /// dropped at the next spawn.
    slots: BTreeMap<(u32, Rank), (String, Vec<u32>)>,
    /// The cores each process of a spawned job needs (`SpawnOpts::cpus_per_proc`, at
    /// least 1), by job index; jobs not named here need one.
    per_proc: BTreeMap<u32, u32>,
}

impl Spawns {
    /// The cores each process of job `index` needs (the launched job excepted).
    pub(super) fn per_proc(&self, index: u32) -> u32 {
        self.per_proc.get(&index).copied().unwrap_or(1)
    }
}

/// A spawn between its request and its answer.
#[derive(Debug)]
struct Pending {
    /// Where the caller waits: its node server, and the call's token there.
    home: NodeId,
    token: u64,
    nspace: cohort_proto::Nspace,
    /// Node servers that have not answered the current step.
    waiting: BTreeSet<NodeId>,
    /// Every server knows the job: its processes are being started.
    starting: bool,
    /// The caller, and when its spawn times out (`SpawnOpts::timeout_ms`).
    caller: ProcId,
    timeout: Option<(u64, Instant)>,
}

impl Spawns {
    /// When the next spawn with a timeout times out.
    pub(super) fn next_deadline(&self) -> Option<Instant> {
        self.pending
            .values()
            .filter_map(|p| p.timeout)
            .map(|t| t.1)
            .min()
    }
}

impl Launcher {
    /// Process `caller` (on node server `home`, call `token`) asks for a new job.
    pub(super) async fn on_spawn(
        &mut self,
        home: NodeId,
        token: u64,
        caller: ProcId,
        apps: Vec<SpawnApp>,
        opts: SpawnOpts,
    ) {
        let index = self.spawns.count + 1;
        let placed = self.place_spawn(index, &caller, &apps, &opts);
        let (job, bind_to) = match placed {
            Ok(placed) => placed,
            Err(e) => {
                let result = Err(e);
                let _ = self
                    .tell(home, &LauncherMsg::DataReply { token, result })
                    .await;
                return;
            }
        };
        tracing::info!(
            %caller, nspace = %job.nspace, np = job.size(),
            "spawning a job"
        );
        self.spawns.count = index;
        if opts.notify_completion {
            self.spawns.notify.insert(index, caller.clone());
        }
        // Bound like the launched job (or as the spawn asks), on the cores its hosts
        // have left. Under a rankfile, which cores are left is the file's business:
        // not bound.
        let bound = bind_to != cohort_topology::BindTo::None && self.rank_map.is_none();
        let new: Vec<u32> = (0..self.nodes).map(|n| job.count_on(n)).collect();
        let per_proc = opts.cpus_per_proc.max(1);
        let slots = crate::daemon::spawn_slots(
            &self.node_hosts(),
            &self.taken_slots(bound),
            &new,
            bound,
            per_proc,
        );
        for (node, taken) in slots.iter().enumerate() {
            let host = crate::daemon::host_key(&self.daemons[node].host).to_string();
            let ranks = job.ranks_on(node as NodeId).into_iter();
            for (rank, held) in ranks.zip(taken.chunks(per_proc as usize)) {
                self.spawns
                    .slots
                    .insert((index, rank), (host.clone(), held.to_vec()));
            }
        }
        if per_proc > 1 {
            self.spawns.per_proc.insert(index, per_proc);
        }
        // Counted from now on, so the session does not end while the job starts.
        if let Err(e) = self.monitor.add_job(index, job.clone(), caller.clone()) {
            tracing::error!(index, "the monitor refused a spawned job: {e}");
        }
        // With --pmix, Open MPI yields when idle on hosts this job oversubscribes.
        let env = match self.args.pmix {
            true => self.open_mpi_settings(),
            false => Vec::new(),
        };
        // An absurdly large timeout is none rather than an overflow.
        let timeout = opts.timeout_ms.filter(|&ms| ms > 0).and_then(|ms| {
            let at = Instant::now().checked_add(Duration::from_millis(ms))?;
            Some((ms, at))
        });
        let msg = LauncherMsg::AddJob {
            index,
            job: job.clone(),
            parent: caller.clone(),
            apps,
            env,
            bind: bound.then(|| {
                Box::new(SpawnBinding {
                    bind_to: bind_to.as_str().to_string(),
                    slots,
                    per_proc,
                })
            }),
        };
        let told = self.tell_live(&msg).await;
        self.spawns.pending.insert(
            index,
            Pending {
                home,
                token,
                nspace: job.nspace,
                waiting: told,
                starting: false,
                caller,
                timeout,
            },
        );
        self.spawn_progress(index).await;
    }

    /// The host slots the live processes of the session hold, by host key: the
    /// launched job's (from each node server's first slot, when it is bound; each rank
    /// `--cpus-per-rank` of them) and the spawned ones' (their spawn's cores per
    /// process each, as [`Launcher::on_spawn`] gave them). Forgets those of processes
    /// that ended.
    fn taken_slots(&mut self, bound: bool) -> BTreeMap<String, BTreeSet<u32>> {
        let mut taken: BTreeMap<String, BTreeSet<u32>> = BTreeMap::new();
        if !bound {
            return taken;
        }
        let launched = self.monitor.job().clone();
        for node in 0..self.nodes {
            let host = crate::daemon::host_key(&self.daemons[node as usize].host);
            let first = self
                .placement
                .first_slots
                .get(node as usize)
                .copied()
                .unwrap_or(0);
            let held = taken.entry(host.to_string()).or_default();
            let pe = self.args.cpus_per_rank.max(1);
            for (i, rank) in launched.ranks_on(node).into_iter().enumerate() {
                if self.monitor.alive(0, rank) {
                    let at = (first + i as u32) * pe;
                    held.extend(at..at + pe);
                }
            }
        }
        let monitor = &self.monitor;
        self.spawns
            .slots
            .retain(|&(job, rank), _| monitor.alive(job, rank));
        for (host, slots) in self.spawns.slots.values() {
            taken.entry(host.clone()).or_default().extend(slots);
        }
        taken
    }

    /// What a spawn's processes are bound to: what it asks for (PMIX_BINDTO), else
    /// what the launched job is bound to.
    fn spawn_bind_to(&self, opts: &SpawnOpts) -> Result<cohort_topology::BindTo, String> {
        match &opts.bind_to {
            Some(what) => crate::cli::parse_bind_to(what),
            None => Ok(self.placement.bind_to),
        }
    }

    /// The job of a spawn: checked, named and placed on the live node servers (those
    /// `opts.hosts` names, if any); and what its processes are bound to.
    fn place_spawn(
        &self,
        index: u32,
        caller: &ProcId,
        apps: &[SpawnApp],
        opts: &SpawnOpts,
    ) -> Result<(JobMap, cohort_topology::BindTo), CohortError> {
        let refuse = |why: String| CohortError::BadRequest(format!("spawn by {caller}: {why}"));
        if let Some(why) = &self.spawns.refused {
            return Err(refuse(format!("spawning is off in this session: {why}")));
        }
        validate_spawn(apps).map_err(refuse)?;
        let bind_to = self.spawn_bind_to(opts).map_err(refuse)?;
        if index > MAX_SPAWNED_JOBS {
            return Err(refuse(format!(
                "a session spawns at most {MAX_SPAWNED_JOBS} jobs"
            )));
        }
        let primary = self.monitor.job();
        let live: Vec<NodeId> = (0..self.nodes)
            .filter(|&n| self.daemons[n as usize].running && !self.spawns.gone.contains(&n))
            .collect();
        let nodes: Vec<NodeId> = if opts.hosts.is_empty() {
            live
        } else {
            if let Some(h) = opts
                .hosts
                .iter()
                .find(|h| !primary.node_names.iter().any(|n| n == *h))
            {
                return Err(refuse(format!(
                    "no node server of the session is on host {h:?}"
                )));
            }
            live.into_iter()
                .filter(|&n| opts.hosts.contains(&primary.node_names[n as usize]))
                .collect()
        };
        if nodes.is_empty() {
            return Err(refuse(
                "none of the node servers it may use is running".into(),
            ));
        }
        let sizes = apps.iter().map(|a| a.maxprocs).collect();
        let nspace = spawned_nspace(&primary.nspace, index);
        let mut job =
            JobMap::spawned(nspace, primary, sizes, &nodes, opts.mapping).map_err(refuse)?;
        // Each app's process set: a name no job of the session still uses.
        let session = self.monitor.session();
        let mut first = 0;
        for (i, app) in apps.iter().enumerate() {
            let ranks = first..first + app.maxprocs;
            first += app.maxprocs;
            let Some(name) = &app.pset else {
                continue;
            };
            if let Some(why) = session.pset_clash(name) {
                return Err(refuse(format!("application {i}: {why}")));
            }
            let members = cohort_proto::RankSet::range(ranks);
            job.define_pset(name, members)
                .map_err(|e| refuse(format!("application {i}: {e}")))?;
        }
        Ok((job, bind_to))
    }

    /// A node server's answer about spawn `index` (`JobAdded`, `JobStarted`); the
    /// session's end if a refusal left no process running.
    pub(super) async fn on_spawn_answer(
        &mut self,
        node: NodeId,
        msg: DaemonMsg,
    ) -> Option<Verdict> {
        let (index, refused) = match msg {
            DaemonMsg::JobAdded { index, result } => (index, result.err()),
            DaemonMsg::JobStarted { index } => (index, None),
            _ => return None,
        };
        if let Some(why) = refused {
            let why = format!(
                "node server {} refused job {index}: {why}",
                self.monitor.node_name(node)
            );
            tracing::error!("{why}");
            self.spawns.refused = Some(why.clone());
            // Every spawn not yet started fails; the processes it counted never come.
            let mut verdict = None;
            let unstarted: Vec<u32> = self
                .spawns
                .pending
                .iter()
                .filter(|(_, p)| !p.starting)
                .map(|(&i, _)| i)
                .collect();
            for i in unstarted {
                if let Some(p) = self.spawns.pending.remove(&i) {
                    let err = CohortError::BadRequest(format!("spawn failed: {why}"));
                    let reply = LauncherMsg::DataReply {
                        token: p.token,
                        result: Err(err),
                    };
                    let _ = self.tell(p.home, &reply).await;
                    if let Step::End(v) = self.monitor.abandon_job(i) {
                        verdict = Some(v);
                    }
                }
            }
            return verdict;
        }
        if let Some(p) = self.spawns.pending.get_mut(&index) {
            p.waiting.remove(&node);
        }
        self.spawn_progress(index).await;
        None
    }

    /// Spawns whose timeout passed fail with `CohortError::Timeout`, naming the node
    /// servers that did not answer and the processes not started; their jobs are
    /// cancelled. The session's end, if those were the last processes it waited for.
    pub(super) async fn expire_spawns(&mut self) -> Option<Verdict> {
        let now = Instant::now();
        let due: Vec<u32> = self
            .spawns
            .pending
            .iter()
            .filter(|(_, p)| p.timeout.is_some_and(|t| t.1 <= now))
            .map(|(&i, _)| i)
            .collect();
        let mut verdict = None;
        for index in due {
            let Some(p) = self.spawns.pending.remove(&index) else {
                continue;
            };
            let timeout_ms = p.timeout.map_or(0, |t| t.0);
            let names: Vec<String> = p
                .waiting
                .iter()
                .map(|&n| self.monitor.node_name(n))
                .collect();
            let step = match p.starting {
                true => "started its processes",
                false => "added the job",
            };
            // The job's processes not started: all of them while servers are still
            // adding the job, else those of the servers that did not answer.
            let missing: Vec<ProcId> = match self.monitor.session().get(index) {
                Some(job) => (0..job.size())
                    .filter(|&r| {
                        !p.starting
                            || job
                                .rank_node
                                .get(r as usize)
                                .is_some_and(|n| p.waiting.contains(n))
                    })
                    .map(|r| ProcId::new(job.nspace.as_str(), r))
                    .collect(),
                None => Vec::new(),
            };
            let op = format!(
                "spawn of {} by {} (node server(s) {} had not {step})",
                p.nspace,
                p.caller,
                names.join(", ")
            );
            tracing::warn!(%op, timeout_ms, "spawn timed out; cancelling its job");
            let err = CohortError::Timeout {
                op,
                timeout_ms,
                missing,
            };
            let reply = LauncherMsg::DataReply {
                token: p.token,
                result: Err(err),
            };
            if let Err(e) = self.tell(p.home, &reply).await {
                tracing::warn!(node = p.home, error = %e, "could not answer a spawn");
            }
            // In order after AddJob (and StartJob) on every control connection: a
            // server that answers late still starts nothing, or kills what it started.
            self.tell_live(&LauncherMsg::CancelJob { index }).await;
            self.spawns.notify.remove(&index);
            if let Step::End(v) = self.monitor.abandon_job(index) {
                verdict = Some(v);
            }
        }
        verdict
    }

    /// Node server `node` is gone: no spawn waits for it.
    pub(super) async fn spawns_node_lost(&mut self, node: NodeId) {
        self.spawns.gone.insert(node);
        let indices: Vec<u32> = self.spawns.pending.keys().copied().collect();
        for index in indices {
            if let Some(p) = self.spawns.pending.get_mut(&index) {
                p.waiting.remove(&node);
            }
            self.spawn_progress(index).await;
        }
    }

    /// Moves spawn `index` on once no node server it waits for is left.
    async fn spawn_progress(&mut self, index: u32) {
        // Every server knows the job: start it (a step with no server left to wait
        // for is done at once).
        loop {
            let Some(p) = self.spawns.pending.get_mut(&index) else {
                return;
            };
            if !p.waiting.is_empty() {
                return;
            }
            if p.starting {
                break;
            }
            p.starting = true;
            let told = self.tell_live(&LauncherMsg::StartJob { index }).await;
            if let Some(p) = self.spawns.pending.get_mut(&index) {
                p.waiting = told;
            }
        }
        let Some(p) = self.spawns.pending.remove(&index) else {
            return;
        };
        tracing::info!(nspace = %p.nspace, "spawned job started");
        let reply = LauncherMsg::DataReply {
            token: p.token,
            result: Ok(Response::Spawned(p.nspace)),
        };
        if let Err(e) = self.tell(p.home, &reply).await {
            tracing::warn!(node = p.home, error = %e, "could not answer a spawn");
        }
    }

    /// A rank of job `index` exited: once it was the job's last, every node server is
    /// told (`LauncherMsg::JobGone`: its process sets are deleted, its namespace is no
    /// longer active), and so is the parent that asked (`LauncherMsg::JobEnded`).
    pub(super) async fn spawned_rank_exited(&mut self, index: u32) {
        let Some(exit_code) = self.monitor.job_exit_code(index) else {
            return;
        };
        if !self.monitor.end_job(index) {
            return;
        }
        self.tell_live(&LauncherMsg::JobGone { index }).await;
        let Some(parent) = self.spawns.notify.remove(&index) else {
            return;
        };
        let Some(home) = self.monitor.session().node_of(&parent) else {
            return;
        };
        let msg = LauncherMsg::JobEnded {
            index,
            parent,
            exit_code,
        };
        if let Err(e) = self.tell(home, &msg).await {
            tracing::debug!(node = home, error = %e, "could not tell a spawned job's end");
        }
    }

    /// Spawned jobs that ended without a rank exit report (their last ranks were lost
    /// with a node server) are ended as [`Launcher::spawned_rank_exited`] ends them.
    pub(super) async fn spawned_jobs_lost(&mut self) {
        for index in self.monitor.jobs_not_ended() {
            self.spawned_rank_exited(index).await;
        }
    }

    /// Sends `msg` to every running node server; returns those it reached and that
    /// are not lost (a lost one is not waited for).
    async fn tell_live(&mut self, msg: &LauncherMsg) -> BTreeSet<NodeId> {
        let failed: BTreeSet<NodeId> = self
            .tell_running(msg, None)
            .await
            .into_iter()
            .map(|(n, _)| n)
            .collect();
        (0..self.nodes)
            .filter(|n| {
                let d = &self.daemons[*n as usize];
                d.running
                    && d.writer.is_some()
                    && !failed.contains(n)
                    && !self.spawns.gone.contains(n)
            })
            .collect()
    }
}
