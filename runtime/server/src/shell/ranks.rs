//! This node's ranks: started with the job's environment, each in its own process
//! group and killed if cohortd dies; output forwarded; an exit reported only after the
//! rank's output has been forwarded; stopped all together at the end.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::fs::File;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use cohort_proto::control::{ExitStatus, StdinTarget};
use cohort_proto::env;
use cohort_proto::msg::LocalBinding;
use cohort_proto::spawn::SpawnApp;
use cohort_proto::{JobMap, NodeId, Rank};
use cohort_topology::affinity::CpuMask;
use cohort_topology::{BindTo, MapBy, NodeLayout, Topology};
use cohort_topology::{Binding, CpuSet};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;
use tokio::task::spawn_local;

use super::args::AppCommand;
use super::guard::Guard;
use super::output::{forward, LineTagger, OutputSink};
use super::procs::{live_groups, signal_group};
use super::say;
use cohort_os::parent_death_signal;

/// Exit code reported for a rank whose program could not be started (as a shell does).
pub const NOT_STARTED: i32 = 127;
/// After a rank exits, how long its output may take to reach EOF before the exit is
/// reported anyway (a background child can hold the pipe open forever).
const OUTPUT_DRAIN: Duration = Duration::from_secs(2);

/// A rank ended (its output is forwarded).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RankExit {
    /// Its job: 0 for the launched one, k for the session's k-th spawned job.
    pub job: u32,
    pub rank: Rank,
    pub status: ExitStatus,
}

/// What every rank of this node shares.
#[derive(Clone, Debug)]
pub struct RankTemplate {
    pub job: JobMap,
    pub node: NodeId,
    /// What each application context's ranks run (index: PMIX_APPNUM).
    pub apps: Vec<AppCommand>,
    /// The job's `-x` variables (an app's own ones go on top).
    pub exports: Vec<(OsString, OsString)>,
    /// `COHORT_SPIN_US` for the ranks (an exported value wins).
    pub spin_us: u64,
    /// `COHORT_ALLGATHER` for the ranks: what this node server was told.
    pub allgather: cohort_topology::Allgather,
    pub server_uri: PathBuf,
    pub token_hex: String,
    pub tag_output: bool,
    /// `--timestamp-output`: lines start with the time they are forwarded.
    pub timestamp_output: bool,
    /// `--merge-stderr-to-stdout`.
    pub merge_stderr: bool,
    /// `--output-filename`: where each rank's output files go instead of forwarding.
    pub output_dir: Option<PathBuf>,
    /// Which ranks take the launcher's stdin (a pipe fed by `LauncherMsg::Stdin`);
    /// the others read /dev/null.
    pub stdin: StdinTarget,
    /// Each local rank's binding (`COHORT_BINDING`); a missing rank is unbound.
    pub bindings: BTreeMap<Rank, Binding>,
    /// The CPUs unbound ranks get (cohortd's own, before it bound its progress thread).
    pub unbound_cpus: Option<CpuSet>,
    /// `--pmix` (Open MPI programs): the ranks also get the `OMPI_COMM_WORLD_*`
    /// variables Open MPI's mpirun sets, which scripts read (e.g. to pick a GPU).
    pub ompi_env: bool,
}

impl RankTemplate {
    /// With `--output-filename`: rank `rank` of job `job`'s stdout and stderr files,
    /// created (truncated) under `DIR/<job + 1>/rank.<rank>/`, as Open MPI lays them
    /// out.
    fn output_files(&self, job: u32, rank: Rank) -> std::io::Result<Option<(File, File)>> {
        let Some(root) = &self.output_dir else {
            return Ok(None);
        };
        let dir = root
            .join((u64::from(job) + 1).to_string())
            .join(format!("rank.{rank}"));
        let open = |name: &str| -> std::io::Result<File> {
            let path = dir.join(name);
            File::create(&path).map_err(|e| {
                std::io::Error::new(e.kind(), format!("output file {}: {e}", path.display()))
            })
        };
        std::fs::create_dir_all(&dir).map_err(|e| {
            std::io::Error::new(e.kind(), format!("output directory {}: {e}", dir.display()))
        })?;
        let out = open("stdout")?;
        let err = match self.merge_stderr {
            true => out.try_clone()?,
            false => open("stderr")?,
        };
        Ok(Some((out, err)))
    }

    /// The template of a job spawned in the session: `job`'s processes run `apps`,
    /// with the session's `-x` variables, then `env` (the launcher's), then an app's
    /// own ones; unbound (until given bindings), reading /dev/null.
    pub fn spawned(
        &self,
        job: JobMap,
        apps: &[SpawnApp],
        env: Vec<(String, String)>,
    ) -> RankTemplate {
        let mut exports = self.exports.clone();
        exports.extend(env.into_iter().map(|(k, v)| (k.into(), v.into())));
        RankTemplate {
            job,
            exports,
            apps: apps
                .iter()
                .map(|a| AppCommand {
                    command: a.command.iter().map(OsString::from).collect(),
                    exports: a
                        .env
                        .iter()
                        .map(|(k, v)| (OsString::from(k), OsString::from(v)))
                        .collect(),
                    cwd: a.cwd.as_ref().map(PathBuf::from),
                })
                .collect(),
            stdin: StdinTarget::None,
            bindings: BTreeMap::new(),
            ..self.clone()
        }
    }

    fn node_name(&self) -> &str {
        &self.job.node_names[self.node as usize]
    }

    /// The application context `rank` runs, and its index.
    fn app(&self, rank: Rank) -> (u32, &AppCommand) {
        let n = self.job.app_of(rank).unwrap_or(0);
        let app = self.apps.get(n as usize).unwrap_or(&self.apps[0]);
        (n, app)
    }

    /// The command of `rank`, whose rank among the session's processes on this node
    /// (PMIX_NODE_RANK) is `node_rank`.
    fn command(&self, rank: Rank, node_rank: u32) -> Command {
        let (appnum, app) = self.app(rank);
        let mut cmd = Command::new(&app.command[0]);
        let local_rank = self.job.local_rank(rank).unwrap_or(0);
        if self.ompi_env {
            cmd.env("OMPI_COMM_WORLD_RANK", rank.to_string())
                .env("OMPI_COMM_WORLD_SIZE", self.job.size().to_string())
                .env("OMPI_COMM_WORLD_LOCAL_RANK", local_rank.to_string())
                .env(
                    "OMPI_COMM_WORLD_LOCAL_SIZE",
                    self.job.count_on(self.node).to_string(),
                )
                .env("OMPI_COMM_WORLD_NODE_RANK", node_rank.to_string());
        }
        if let Some(dir) = &app.cwd {
            cmd.current_dir(dir);
        }
        cmd.args(&app.command[1..])
            .env_remove(env::JOB_SECRET)
            .env(env::SPIN_US, self.spin_us.to_string())
            .envs(self.exports.iter().map(|(k, v)| (k, v)))
            .envs(app.exports.iter().map(|(k, v)| (k, v)))
            .env(env::APPNUM, appnum.to_string())
            .env(env::ALLGATHER, self.allgather.to_string())
            .env(env::SERVER_URI, &self.server_uri)
            .env(env::CLIENT_TOKEN, &self.token_hex)
            .env(env::NSPACE, self.job.nspace.as_str())
            .env(env::RANK, rank.to_string())
            .env(env::SIZE, self.job.size().to_string())
            .env(env::LOCAL_RANK, local_rank.to_string())
            .env(env::NODE_ID, self.node.to_string())
            .env(env::NODE_NAME, self.node_name())
            .env(env::BINDING, self.binding(rank).to_string())
            // The PMIx client environment, under the PMIx standard's names, for PMIx
            // programs running on cohort's libpmix.so.2 (runtime/pmix), which itself
            // reads the COHORT_* variables: Open MPI's ext3x component takes the
            // client role only when PMIX_SERVER_URI is set (it does not parse it).
            .env("PMIX_NAMESPACE", self.job.nspace.as_str())
            .env("PMIX_RANK", rank.to_string())
            .env(
                "PMIX_SERVER_URI",
                format!("cohort:{}", self.server_uri.display()),
            )
            .stdin(if self.stdin.takes(rank) {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(false);
        // SAFETY: the hooks only make async-signal-safe syscalls.
        unsafe {
            cmd.pre_exec(parent_death_signal(libc::SIGKILL, "cohortd"));
            cmd.pre_exec(cohort_os::restore_fd_limit());
        }
        self.bind(&mut cmd, rank);
        cmd
    }

    fn binding(&self, rank: Rank) -> Binding {
        self.bindings
            .get(&rank)
            .cloned()
            .unwrap_or(Binding::Unbound)
    }

    /// Binds the child before it execs: to its CPUs (failing the start if the kernel
    /// refuses, rather than running unbound while `COHORT_BINDING` says otherwise), or,
    /// unbound, back to every CPU cohortd had (best effort).
    fn bind(&self, cmd: &mut Command, rank: Rank) {
        let binding = self.binding(rank);
        let (cpus, required) = match &binding {
            Binding::Cpus(cpus) => (cpus, true),
            Binding::Unbound => match &self.unbound_cpus {
                Some(cpus) => (cpus, false),
                None => return,
            },
        };
        let mask = match CpuMask::new(cpus) {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!(rank, %cpus, "cannot bind rank {rank}: {e}");
                if required {
                    cmd.env(env::BINDING, Binding::Unbound.to_string());
                }
                return;
            }
        };
        // SAFETY: the hook makes one async-signal-safe syscall on a prebuilt mask.
        unsafe {
            cmd.pre_exec(move || match mask.apply() {
                Err(e) if required => Err(e),
                _ => Ok(()),
            });
        }
    }
}

/// The ranks this node server started and has not yet seen exit.
pub struct Ranks {
    /// What the ranks of each job of the session run (index: the job's).
    templates: Vec<RankTemplate>,
    /// (job, rank) → its pid, which is also its process group id.
    running: BTreeMap<(u32, Rank), u32>,
    /// Every process group we created, for the final sweep.
    groups: Vec<u32>,
    exits: mpsc::UnboundedSender<RankExit>,
    /// Sweeps those groups if this node server dies (see [`Guard`]).
    guard: Option<Guard>,
    /// The stdin writers of the ranks that take the launcher's stdin.
    stdin: BTreeMap<Rank, mpsc::UnboundedSender<StdinCmd>>,
    /// Spawned jobs cancelled (their spawn timed out): none of their ranks starts.
    cancelled: BTreeSet<u32>,
    /// This node's cores and the session's mapping policy, for binding spawned jobs.
    layout: Option<(NodeLayout, MapBy, u32)>,
    /// This host, by which bound ranks' locality strings are written.
    topology: Option<Topology>,
    /// Say how each rank is bound as it starts (`--report-bindings`).
    report_bindings: bool,
}

/// What a rank's stdin writer does next.
enum StdinCmd {
    /// Write these bytes; the ack goes once every writer let go of it.
    Data(std::rc::Rc<[u8]>, std::rc::Rc<ChunkAck>),
    /// Close the pipe (the launcher's stdin ended).
    End,
}

/// Tells the launcher a stdin chunk was taken when the last writer lets go of it
/// (written, or its rank gone).
pub struct ChunkAck(mpsc::UnboundedSender<()>);

impl Drop for ChunkAck {
    fn drop(&mut self) {
        let _ = self.0.send(());
    }
}

/// Writes what comes to a rank's stdin, in order; once a write fails (the rank closed
/// its stdin or ended) the rest is dropped, still releasing each chunk.
async fn write_stdin(
    mut pipe: tokio::process::ChildStdin,
    mut rx: mpsc::UnboundedReceiver<StdinCmd>,
) {
    use tokio::io::AsyncWriteExt;
    let mut broken = false;
    while let Some(cmd) = rx.recv().await {
        match cmd {
            StdinCmd::Data(bytes, ack) => {
                if !broken && pipe.write_all(&bytes).await.is_err() {
                    broken = true;
                }
                drop(ack);
            }
            StdinCmd::End => break,
        }
    }
}

impl Ranks {
    pub fn new(
        template: RankTemplate,
        exits: mpsc::UnboundedSender<RankExit>,
        guard: Option<Guard>,
    ) -> Ranks {
        Ranks {
            templates: vec![template],
            running: BTreeMap::new(),
            groups: Vec::new(),
            exits,
            guard,
            stdin: BTreeMap::new(),
            cancelled: BTreeSet::new(),
            layout: None,
            topology: None,
            report_bindings: false,
        }
    }

    /// Reports each rank's binding on stderr as it starts (`--report-bindings`).
    pub fn reporting_bindings(mut self, report: bool) -> Ranks {
        self.report_bindings = report;
        self
    }

    /// This host as the node server found it: [`Ranks::local_bindings`] places bound
    /// ranks on it (without it, they have none).
    pub fn with_topology(mut self, topology: Topology) -> Ranks {
        self.topology = Some(topology);
        self
    }

    /// Where the bound ranks of job `index` on this node sit (their PMIX_CPUSET and
    /// PMIX_LOCALITY_STRING), by rank. A rank bound to every CPU counts as unbound,
    /// as PMIx has it.
    pub fn local_bindings(&self, index: u32) -> Vec<LocalBinding> {
        let (Some(t), Some(topo)) = (self.templates.get(index as usize), &self.topology) else {
            return Vec::new();
        };
        t.bindings
            .iter()
            .filter_map(|(&rank, b)| {
                let cpus = b.cpus()?;
                Some(LocalBinding {
                    rank,
                    cpus: cpus.to_string(),
                    locality: topo.locality_string(cpus)?,
                })
            })
            .collect()
    }

    /// This node's cores and the session's `--map-by` and `--cpus-per-rank` (which
    /// order the slots), by which spawned jobs are bound when the launcher gives them
    /// slots (without: they run unbound). A spawned process takes one slot.
    pub fn with_layout(mut self, layout: NodeLayout, map_by: MapBy, pe: u32) -> Ranks {
        self.layout = Some((layout, map_by, pe));
        self
    }

    /// Hands `data`, the next bytes of the launcher's stdin, to every local rank that
    /// takes it; `taken` hears once all wrote it (at once if there is none).
    pub fn feed_stdin(&mut self, data: Vec<u8>, taken: &mpsc::UnboundedSender<()>) {
        let ack = std::rc::Rc::new(ChunkAck(taken.clone()));
        let data: std::rc::Rc<[u8]> = data.into();
        self.stdin
            .retain(|_, w| w.send(StdinCmd::Data(data.clone(), ack.clone())).is_ok());
    }

    /// The launcher's stdin ended: every rank's stdin pipe closes once written out.
    pub fn end_stdin(&mut self) {
        for (_, w) in std::mem::take(&mut self.stdin) {
            let _ = w.send(StdinCmd::End);
        }
    }

    /// Starts every rank of this node of the launched job. Must run on the thread
    /// that outlives them (the parent-death signal is tied to it) and inside a
    /// `LocalSet`.
    pub fn launch_all(&mut self, stdout: &OutputSink, stderr: &OutputSink) {
        self.launch_job(0, stdout, stderr);
    }

    /// Job `index` of the session, spawned: its ranks run as `apps` say (see
    /// [`RankTemplate::spawned`]), bound by `bind` (the policy, and the host's slots
    /// they take, in rank order) if given. Refused unless it is the next one.
    pub fn add_job(
        &mut self,
        index: u32,
        job: JobMap,
        apps: &[SpawnApp],
        env: Vec<(String, String)>,
        bind: Option<(BindTo, Vec<u32>, u32)>,
    ) -> Result<(), String> {
        if index as usize != self.templates.len() {
            return Err(format!(
                "spawn {index} arrived while {} was expected",
                self.templates.len()
            ));
        }
        let node = self.templates[0].node;
        let bindings = match (&self.layout, bind) {
            (Some((layout, map_by, pe)), Some((bind_to, slots, per_proc))) => job
                .ranks_on(node)
                .into_iter()
                .zip(slots.chunks(per_proc.max(1) as usize))
                .map(|(rank, held)| {
                    (
                        rank,
                        layout.binding(*map_by, bind_to, held.iter().copied(), *pe),
                    )
                })
                .collect(),
            _ => BTreeMap::new(),
        };
        let mut template = self.templates[0].spawned(job, apps, env);
        template.bindings = bindings;
        self.templates.push(template);
        Ok(())
    }

    /// Starts this node's ranks of job `index` (as [`Ranks::launch_all`]).
    pub fn launch_job(&mut self, index: u32, stdout: &OutputSink, stderr: &OutputSink) {
        let Some(t) = self.templates.get(index as usize) else {
            return;
        };
        if self.cancelled.contains(&index) {
            return;
        }
        if self.report_bindings {
            self.report(index);
        }
        for rank in t.job.ranks_on(t.node) {
            self.launch(index, rank, stdout, stderr);
        }
    }

    /// One line per rank of job `index` on this node: what it is bound to, with a map
    /// of the host (as mpirun's --report-bindings).
    fn report(&self, index: u32) {
        let t = &self.templates[index as usize];
        let host = self
            .topology
            .as_ref()
            .map_or("", |topo| topo.machine.hostname.as_str());
        for rank in t.job.ranks_on(t.node) {
            let what = match (t.binding(rank), &self.topology) {
                (Binding::Cpus(cpus), Some(topo)) => {
                    format!("bound to {}", topo.describe_binding(&cpus))
                }
                (Binding::Cpus(cpus), None) => format!("bound to CPUs {cpus}"),
                (Binding::Unbound, _) => match &t.unbound_cpus {
                    Some(cpus) => format!("not bound (CPUs {cpus})"),
                    None => "not bound".to_string(),
                },
            };
            say(format_args!(
                "{} ({host}): rank {rank} of {} {what}",
                t.node_name(),
                t.job.nspace
            ));
        }
    }

    fn launch(&mut self, job: u32, rank: Rank, stdout: &OutputSink, stderr: &OutputSink) {
        let template = &self.templates[job as usize];
        // The processes of earlier jobs on this node come first (PMIX_NODE_RANK).
        let earlier = self.templates[..job as usize].iter().map(|t| &t.job);
        let node_rank = template.job.node_rank_after(earlier, rank).unwrap_or(0);
        // Said apart: spawn's error for a missing directory would name the program.
        let started = match &template.app(rank).1.cwd {
            Some(dir) if !dir.is_dir() => Err(std::io::Error::new(
                std::io::ErrorKind::NotFound,
                format!("its working directory {} is not a directory", dir.display()),
            )),
            _ => template.output_files(job, rank).and_then(|files| {
                let mut cmd = template.command(rank, node_rank);
                if let Some((out, err)) = files {
                    cmd.stdout(out).stderr(err);
                }
                cmd.spawn()
            }),
        };
        let mut child = match started {
            Ok(child) => child,
            Err(e) => {
                let bound = match template.binding(rank) {
                    Binding::Cpus(cpus) => format!(" bound to CPUs {cpus}"),
                    Binding::Unbound => String::new(),
                };
                let of = if job > 0 {
                    format!(" of job {}", template.job.nspace)
                } else {
                    String::new()
                };
                say(format_args!(
                    "{}: cannot start rank {rank}{of}{bound}: {:?}: {e}",
                    template.node_name(),
                    template.app(rank).1.command[0],
                ));
                let status = ExitStatus {
                    code: Some(NOT_STARTED),
                    signal: None,
                };
                let _ = self.exits.send(RankExit { job, rank, status });
                return;
            }
        };
        let pid = child.id().unwrap_or(0);
        tracing::debug!(job, rank, pid, "rank started");
        if let Some(pipe) = child.stdin.take() {
            let (tx, rx) = mpsc::unbounded_channel();
            spawn_local(write_stdin(pipe, rx));
            self.stdin.insert(rank, tx);
        }
        self.running.insert((job, rank), pid);
        self.groups.push(pid);
        if let Some(guard) = self.guard.as_mut() {
            guard.watch(pid);
        }

        let template = &self.templates[job as usize];
        let tagger = |stream: &str| {
            let prefix = match (template.tag_output, template.timestamp_output) {
                (true, _) => LineTagger::tag(&template.job.nspace, rank, stream),
                // A time alone still says which stream the line came from.
                (false, true) => format!("<{stream}>: ").into_bytes(),
                (false, false) => Vec::new(),
            };
            match template.timestamp_output {
                true => LineTagger::new(prefix).stamped(),
                false => LineTagger::new(prefix),
            }
        };
        let err_sink = match template.merge_stderr {
            true => stdout.sender(),
            false => stderr.sender(),
        };
        let out = child
            .stdout
            .take()
            .map(|p| spawn_local(forward(p, tagger("stdout"), stdout.sender())));
        let err = child
            .stderr
            .take()
            .map(|p| spawn_local(forward(p, tagger("stderr"), err_sink)));
        let exits = self.exits.clone();
        spawn_local(async move {
            let status = wait(&mut child, rank).await;
            let drained = async {
                if let Some(t) = out {
                    let _ = t.await;
                }
                if let Some(t) = err {
                    let _ = t.await;
                }
            };
            if tokio::time::timeout(OUTPUT_DRAIN, drained).await.is_err() {
                tracing::debug!(rank, "output still open after exit (held by a child?)");
            }
            let _ = exits.send(RankExit { job, rank, status });
        });
    }

    /// Spawned job `index` is cancelled: its ranks running here are killed (their
    /// exits are reported as any), and none starts any more. Returns how many were
    /// killed.
    /// The ranks running now: (job, rank, pid).
    pub fn running_pids(&self) -> Vec<(u32, Rank, u32)> {
        self.running
            .iter()
            .map(|(&(j, r), &pid)| (j, r, pid))
            .collect()
    }

    pub fn cancel_job(&mut self, index: u32) -> usize {
        if index == 0 {
            return 0;
        }
        self.cancelled.insert(index);
        let mut killed = 0;
        for (&(job, rank), &pgid) in self.running.range((index, 0)..=(index, Rank::MAX)) {
            tracing::debug!(job, rank, pgid, "killing a rank of a cancelled job");
            signal_group(pgid, libc::SIGKILL);
            killed += 1;
        }
        killed
    }

    /// Records that rank `rank` of job `job` exited; `false` if it was not running.
    pub fn exited(&mut self, job: u32, rank: Rank) -> bool {
        self.running.remove(&(job, rank)).is_some()
    }

    pub fn running(&self) -> usize {
        self.running.len()
    }

    /// Signals the process group of every rank not yet seen exiting.
    pub fn signal_running(&self, signal: i32) {
        for (&(job, rank), &pgid) in &self.running {
            tracing::debug!(job, rank, pgid, signal, "signalling rank");
            signal_group(pgid, signal);
        }
    }

    /// After the final sweep: the guard is no longer needed.
    pub fn dismiss_guard(&mut self) {
        if let Some(guard) = self.guard.take() {
            guard.dismiss();
        }
    }

    /// SIGKILLs whatever is left in the ranks' process groups (their children).
    pub fn kill_leftovers(&self) -> usize {
        let live = live_groups(&self.groups);
        for &pgid in &live {
            signal_group(pgid, libc::SIGKILL);
        }
        live.len()
    }
}

async fn wait(child: &mut Child, rank: Rank) -> ExitStatus {
    use std::os::unix::process::ExitStatusExt;
    match child.wait().await {
        Ok(st) => ExitStatus {
            code: st.code(),
            signal: st.signal(),
        },
        Err(e) => {
            tracing::warn!(rank, "cannot wait for rank: {e}");
            ExitStatus {
                code: None,
                signal: None,
            }
        }
    }
}
