//! `cohort run` end to end: prepare the job (secrets, job directory, control listener),
//! start the node servers, register them, start the ranks, then feed what happens
//! (control messages, node-server exits, signals, timers) to the [`JobMonitor`] until
//! it ends the job, and tear everything down.
//!
//! Runs on a current-thread runtime so every node server is spawned by the main
//! thread, which its parent-death signal is tied to.

use cohort_os::TerminatingSignals;
use std::ffi::OsString;
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use cohort_proto::control::{DaemonMsg, ExitStatus, LauncherMsg, StdinTarget};
use cohort_proto::env::{random_bytes, to_hex};
use cohort_proto::{JobMap, NodeId, Rank, RankSet};
use cohort_topology::placement::{job_map, job_map_with_counts};
use cohort_topology::rankfile::RankMap;
use cohort_topology::switches::{slurm_topology_file, SLURM_CONF_ENV};
use cohort_topology::{hostlist, Discover, Locality, SlotUnit, SwitchMap};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::{sleep_until, Instant};

use crate::cli::{JobPlan, RunArgs};
use crate::control::{self, Registration};
use crate::daemon::{self, DaemonLaunch};
use crate::jobdir::JobDir;
use crate::monitor::{
    describe_status, signal_name, Accusation, JobMonitor, Judgement, LinkReport, Severance, Step,
    Tribunal, Verdict, FAILURE_EXIT,
};
use crate::reaper;
use crate::slurm;
use crate::ssh::{self, Launch};
use crate::topo::{plan_job, JobPlacement};

mod allocation;
mod spawn;

use allocation::{display_allocation, plural, Allocated};

/// How long every node server has to register, unless `COHORT_STARTUP_TIMEOUT` (in
/// seconds) says otherwise.
pub const STARTUP_TIMEOUT: Duration = Duration::from_secs(60);
pub const STARTUP_TIMEOUT_ENV: &str = "COHORT_STARTUP_TIMEOUT";

fn startup_timeout() -> Duration {
    std::env::var(STARTUP_TIMEOUT_ENV)
        .ok()
        .and_then(|s| s.trim().parse::<u64>().ok())
        .filter(|&s| s > 0)
        .map(Duration::from_secs)
        .unwrap_or(STARTUP_TIMEOUT)
}
/// How long node servers get to stop their ranks and exit after `Shutdown` (their own
/// SIGTERM→SIGKILL grace for ranks is 2 s) before the launcher SIGKILLs them.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(4);
/// How long the launcher waits for every node server to acknowledge that the job is
/// ending (`LauncherMsg::Ending`) before it tells them to shut down anyway.
const ENDING_WAIT: Duration = Duration::from_secs(2);
/// How long SIGKILLed node servers may take to be reaped before we stop waiting.
const KILL_WAIT: Duration = Duration::from_secs(5);
/// How long the srun step that kills a lost node server on its node may take.
const KILL_STEP_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the end of srun's stderr may take to be relayed once srun ended.
const RELAY_DRAIN: Duration = Duration::from_secs(2);
/// How long the agent that kills a lost node server on its host may take.
const KILL_AGENT_TIMEOUT: Duration = Duration::from_secs(10);
/// Most lines of a launch agent's stderr held back while its node server starts.
const HELD_LINES: usize = 64;
/// Budget for killing processes orphaned below us at the very end.
const SWEEP_BUDGET: Duration = Duration::from_secs(3);

/// Runs `cohort run` and returns the process exit status.
pub fn run(args: RunArgs) -> i32 {
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            crate::say(format_args!("cannot start the async runtime: {e}"));
            return FAILURE_EXIT;
        }
    };
    rt.block_on(async move {
        // Handlers first: a Ctrl-C from here on tears the job down properly.
        let mut signals = match TerminatingSignals::new() {
            Ok(s) => s,
            Err(e) => {
                crate::say(format_args!("cannot install signal handlers: {e}"));
                return FAILURE_EXIT;
            }
        };
        match Launcher::prepare(args).await {
            Ok(launcher) => launcher.run(&mut signals).await,
            Err(msg) => {
                crate::say(format_args!("{msg}"));
                FAILURE_EXIT
            }
        }
    })
}

/// What happens to a running job, as seen by the launcher.
#[derive(Debug)]
enum Event {
    Registered(Registration),
    Msg {
        node: NodeId,
        msg: DaemonMsg,
    },
    ControlClosed {
        node: NodeId,
        error: Option<String>,
    },
    DaemonExited {
        node: NodeId,
        how: String,
    },
    /// Under Slurm: the srun step of every node server ended (`how`: srun's status).
    StepEnded {
        how: String,
    },
}

/// One node server, from spawn to reaping.
#[derive(Debug)]
struct Daemon {
    /// Its pid (and process group) on this host; under Slurm, the pid it registered
    /// with, on its node (never signalled from here).
    pid: u32,
    writer: Option<OwnedWriteHalf>,
    fabric_addr: Option<String>,
    /// The host name it registered with.
    host: String,
    /// The cores of that host, as it registered them.
    cores: u32,
    running: bool,
    /// Over ssh: the pid the node server registered with, on its host.
    remote_pid: Option<u32>,
    /// Over ssh: the agent's stderr while the node server starts (see [`Held`]).
    held: Option<Held>,
}

impl Daemon {
    /// A node server just started, not registered yet.
    fn started(pid: u32) -> Daemon {
        Daemon {
            pid,
            writer: None,
            fabric_addr: None,
            host: String::new(),
            cores: 0,
            running: true,
            remote_pid: None,
            held: None,
        }
    }
}

/// A launch agent's stderr lines held back until its node server has started: ssh's
/// own complaints (host unreachable, refused, cohortd not found there) are quoted in
/// the error that names the host, rather than printed apart from it. Released to our
/// stderr once every node server registered; from then on the lines go straight
/// through (they carry the node server's and its ranks' stderr).
#[derive(Clone, Debug, Default)]
struct Held(std::sync::Arc<std::sync::Mutex<Option<Vec<Vec<u8>>>>>);

impl Held {
    fn new() -> Held {
        Held(std::sync::Arc::new(std::sync::Mutex::new(Some(Vec::new()))))
    }

    /// Holds `line`, or returns it to be written now.
    fn hold(&self, line: Vec<u8>) -> Option<Vec<u8>> {
        let mut held = self.0.lock().unwrap_or_else(|e| e.into_inner());
        match held.as_mut() {
            Some(lines) if lines.len() < HELD_LINES => {
                lines.push(line);
                None
            }
            _ => Some(line),
        }
    }

    /// Stops holding; returns what was held.
    fn release(&self) -> Vec<Vec<u8>> {
        let mut held = self.0.lock().unwrap_or_else(|e| e.into_inner());
        held.take().unwrap_or_default()
    }

    /// The last few held lines, printable, joined: what ssh said.
    fn tail(&self) -> String {
        let held = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let lines = held.as_deref().unwrap_or_default();
        let start = lines.len().saturating_sub(4);
        let text: Vec<String> = lines[start..]
            .iter()
            .map(|l| printable(String::from_utf8_lossy(l).trim()))
            .filter(|l| !l.is_empty())
            .collect();
        text.join(" / ")
    }
}

/// How many ranks `cohort run` without `-n` starts, as mpirun: the allocation's tasks
/// under Slurm, the sum of the hosts' slots over ssh (every host must give slots), this
/// host's cores when every node server runs here.
fn default_np(
    launch: &Launch,
    ssh: Option<&SshHosts>,
    unit: SlotUnit,
    cpu_set: Option<&cohort_topology::CpuSet>,
) -> Result<u32, String> {
    match (launch, ssh) {
        (Launch::Slurm(alloc), _) => alloc.tasks.or(alloc.num_nodes).ok_or_else(|| {
            "-n not given, and the Slurm allocation names no task count \
             (SLURM_NTASKS, SLURM_TASKS_PER_NODE): give -n N"
                .to_string()
        }),
        (Launch::Ssh, Some(hosts)) => {
            let mut total: u32 = 0;
            for h in &hosts.hosts {
                let slots = h.slots.ok_or_else(|| {
                    format!(
                        "-n not given, and host {} has no slots: give -n N, or slots=N \
                         for every host",
                        h.name
                    )
                })?;
                total = total.saturating_add(slots);
            }
            Ok(total)
        }
        _ => Ok(local_slots(unit, cpu_set)),
    }
}

/// This host's slots: its cores (or hardware threads) within `cpu_set`, at least one.
fn local_slots(unit: SlotUnit, cpu_set: Option<&cohort_topology::CpuSet>) -> u32 {
    let topo = Discover {
        io: false,
        xml: false,
    }
    .run();
    let cores = cohort_topology::NodeLayout::for_slots(&topo, unit, cpu_set).num_cores();
    u32::try_from(cores).unwrap_or(u32::MAX).max(1)
}

/// Ranks per node server under Slurm: the allocation's tasks on each of `names` (the
/// nodes in use, the allocation's first) cap an even split, with more ranks than
/// tasks filling every node's tasks and spreading the rest evenly. `None` (an even
/// split by `--map-by`) when Slurm gave no per-node task counts for them.
fn slurm_slot_counts(
    np: u32,
    alloc: &slurm::Allocation,
    names: &[String],
) -> Result<Option<Vec<u32>>, String> {
    if alloc.tasks_per_node.len() < names.len() {
        return Ok(None);
    }
    let nodes: Vec<ssh::Host> = names
        .iter()
        .zip(&alloc.tasks_per_node)
        .map(|(name, &tasks)| ssh::Host {
            user: None,
            name: name.clone(),
            slots: Some(tasks),
        })
        .collect();
    ssh::rank_counts(np, &nodes, true)
}

/// The longest `--rank-map` argument handed to node servers (Linux refuses a single
/// argument over 128 KiB).
const MAX_RANK_MAP_ARG: usize = 100_000;

/// Prints what `--display-allocation` shows (see [`allocation`]) on stdout.
fn print_allocation(
    args: &RunArgs,
    alloc: Option<&slurm::Allocation>,
    slurm_nodes: Option<&slurm::Nodes>,
    ssh_hosts: Option<&SshHosts>,
    node_names: &[String],
) {
    let shown = match (alloc, slurm_nodes, ssh_hosts) {
        (Some(alloc), Some(n), _) => Allocated::Slurm {
            alloc,
            names: &n.names,
        },
        (_, _, Some(s)) => {
            let mut from = Vec::new();
            if !args.host.is_empty() {
                from.push("--host".to_string());
            }
            if let Some(f) = &args.hostfile {
                from.push(format!("--hostfile {}", f.display()));
            }
            Allocated::Ssh {
                hosts: &s.hosts,
                from: from.join(", "),
            }
        }
        _ => Allocated::Local {
            host: cohort_os::host_name(),
            slots: local_slots(args.slot_unit(), args.cpu_set.as_ref()),
            unit: args.slot_unit(),
            cpu_set: args.cpu_set.as_ref(),
            names: node_names,
        },
    };
    print!("{}", display_allocation(&shown));
    let _ = std::io::Write::flush(&mut std::io::stdout());
}

/// The job map `--display-map` prints: a header, then each node server with the ranks
/// it runs (compressed, `0-3,8`), each range with its app context when the job has
/// several.
fn display_map(job: &JobMap, policy: &str) -> String {
    let rule = "=".repeat(24);
    let mut out = format!(
        "{rule} JOB MAP {rule}\njob {}: {} on {} ({policy})\n",
        job.nspace,
        plural(job.size(), "rank"),
        plural(job.num_nodes, "node server"),
    );
    for node in 0..job.num_nodes {
        let ranks = job.ranks_on(node);
        let name = job
            .node_names
            .get(node as usize)
            .map_or("?", String::as_str);
        out.push_str(&format!("  {name}: {}", plural(ranks.len() as u32, "rank")));
        // Ranks of one app context are consecutive: one range per app here.
        let mut by_app: Vec<(u32, Vec<Rank>)> = Vec::new();
        for r in ranks {
            let app = job.app_of(r).unwrap_or(0);
            match by_app.last_mut() {
                Some((a, rs)) if *a == app => rs.push(r),
                _ => by_app.push((app, vec![r])),
            }
        }
        let parts: Vec<String> = by_app
            .into_iter()
            .map(|(app, rs)| match job.num_apps() > 1 {
                true => format!("{} (app {app})", RankSet::from_ranks(rs)),
                false => RankSet::from_ranks(rs).to_string(),
            })
            .collect();
        if !parts.is_empty() {
            out.push_str(&format!(": {}", parts.join(", ")));
        }
        out.push('\n');
    }
    out.push_str(&"=".repeat(rule.len() * 2 + 9));
    out.push('\n');
    out
}

/// Ranks per node server for `-N k` (`--npernode`, `--map-by ppr:k:node`): `k` on
/// each in turn until the `np` ranks are placed, as Open MPI's ppr mapper.
fn per_node_counts(np: u32, k: u32, nodes: u32) -> Result<Vec<u32>, String> {
    let room = u64::from(k) * u64::from(nodes);
    if u64::from(np) > room {
        return Err(format!(
            "{np} ranks do not fit: -N/--npernode {k} places at most {room} on {nodes} node \
             server(s) (--nodes sets how many node servers run here)"
        ));
    }
    let mut left = np;
    Ok((0..nodes)
        .map(|_| {
            let c = left.min(k);
            left -= c;
            c
        })
        .collect())
}

/// Over ssh: a host with slots must hold the ranks -N gives it.
fn check_slots(counts: &[u32], k: u32, hosts: &[ssh::Host]) -> Result<(), String> {
    for (h, &c) in hosts.iter().zip(counts) {
        if let Some(slots) = h.slots.filter(|&s| c > s) {
            return Err(format!(
                "host {} has {slots} slot(s), fewer than the {c} rank(s) -N/--npernode {k} \
                 gives it (--oversubscribe allows it)",
                h.name
            ));
        }
    }
    Ok(())
}

/// How long `--get-stack-traces` waits for the node servers' stacks (each gives gdb
/// 20 s per rank, all ranks at once).
const STACK_TRACES_WAIT: Duration = Duration::from_secs(30);

/// The job's application contexts as node servers take them (see `DaemonLaunch`).
struct AppLayout {
    /// Every app's program and arguments, one after another.
    command: Vec<OsString>,
    /// (ranks, words of `command`) of each app; empty for a job of one app.
    layout: Vec<(u32, usize)>,
    /// `-x` variables of the apps after the first, resolved: (app, VAR, VAL).
    exports: Vec<(u32, String, OsString)>,
    /// `--wdir` of each app that has one: (app, absolute directory).
    wdirs: Vec<(u32, PathBuf)>,
}

impl AppLayout {
    fn new(plan: &JobPlan) -> Result<AppLayout, String> {
        let mut exports = Vec::new();
        for (k, app) in plan.apps.iter().enumerate().skip(1) {
            let resolved = daemon::resolve_exports(&app.export)?;
            exports.extend(resolved.into_iter().map(|(var, val)| (k as u32, var, val)));
        }
        let layout = match plan.apps.len() {
            1 => Vec::new(),
            _ => plan.apps.iter().map(|a| (a.np, a.command.len())).collect(),
        };
        let wdirs = plan
            .apps
            .iter()
            .enumerate()
            .filter_map(|(k, a)| Some((k as u32, a.wdir.clone()?)))
            .collect();
        Ok(AppLayout {
            command: plan.apps.iter().flat_map(|a| a.command.clone()).collect(),
            layout,
            exports,
            wdirs,
        })
    }
}

/// The hosts the node servers run on over ssh.
#[derive(Clone)]
struct SshHosts {
    hosts: Vec<ssh::Host>,
    /// Each host's fabric address (resolved here, or `--node-addrs`).
    addrs: Vec<std::net::IpAddr>,
    /// The launch agent's words.
    agent: Vec<String>,
    /// The cohortd the hosts run.
    cohortd: PathBuf,
}

/// The srun step that runs every node server under Slurm.
struct SlurmStep {
    alloc: slurm::Allocation,
    srun: PathBuf,
    nodes: slurm::Nodes,
    /// The step's name (`--job-name`), to find it for scancel.
    name: String,
    /// srun's pid (its own process group), while it runs.
    pid: Option<u32>,
    /// Relays srun's stderr (the node servers' and their ranks' too) to ours.
    relay: Option<JoinHandle<()>>,
}

struct Launcher {
    args: RunArgs,
    /// `--rankfile`: every rank's node and slot as node servers take it
    /// (`cohortd --rank-map`).
    rank_map: Option<String>,
    cohortd: PathBuf,
    exports: Vec<(String, OsString)>,
    /// `--pmix`: where cohort's `libpmix.so.2` is on every node server's host.
    pmix_libdir: Option<PathBuf>,
    apps: AppLayout,
    job_secret: Vec<u8>,
    client_token: Vec<u8>,
    job_dir: JobDir,
    listener: Option<TcpListener>,
    control_addr: SocketAddr,
    monitor: JobMonitor,
    /// How many node servers the job has.
    nodes: u32,
    placement: JobPlacement,
    /// Ranks per node server when -N or the hosts' slots decided them; empty: the
    /// even split of --map-by.
    node_ranks: Vec<u32>,
    /// Under Slurm: the allocation's nodes the node servers run on, and their step.
    slurm: Option<SlurmStep>,
    /// Over ssh: the hosts the node servers run on.
    ssh: Option<SshHosts>,
    /// Tasks relaying launch agents' stderr (drained before we exit).
    relays: Vec<JoinHandle<()>>,
    /// Over ssh: the agents killing lost node servers on their hosts (awaited, bounded,
    /// before we exit: a frozen node server does not stop by itself).
    kills: Vec<JoinHandle<()>>,
    /// Switch map file handed to every node server.
    topology: Option<PathBuf>,
    /// The node servers' failure detector (`--heartbeat`, `--peer-timeout`).
    detector: Option<cohort_core::DetectorConfig>,
    /// Judges reports of silent node servers.
    tribunal: Tribunal,
    /// The job's data store (publish / lookup; `cohort_core::datastore`): here, in
    /// the one process that lives exactly as long as the job, so that no node server's
    /// loss takes it. Its clock counts from `store_epoch`.
    store: cohort_core::datastore::DataStore,
    store_epoch: Instant,
    /// Which ranks get this launcher's stdin (`--stdin`, or none when it is not read:
    /// see [`stdin_readable`]).
    stdin_target: StdinTarget,
    /// Chunks of this launcher's stdin, from its reader thread (started with the
    /// ranks); `None` once it ended (or was never read).
    stdin_rx: Option<mpsc::Receiver<Vec<u8>>>,
    /// Node servers that have not yet taken the last chunk sent: the next is read only
    /// when none is left (so a rank that does not read holds stdin, not memory).
    stdin_waiting: std::collections::BTreeSet<NodeId>,
    daemons: Vec<Daemon>,
    /// Jobs the session's processes spawned, and those being spawned.
    spawns: spawn::Spawns,
    started: bool,
    launched: u32,
    tx: mpsc::UnboundedSender<Event>,
    rx: mpsc::UnboundedReceiver<Event>,
    tasks: Vec<JoinHandle<()>>,
}

impl Launcher {
    async fn prepare(mut args: RunArgs) -> Result<Launcher, String> {
        if let Some(dir) = args.output_filename.take() {
            let here = std::env::current_dir()
                .map_err(|e| format!("--output-filename {}: {e}", dir.display()))?;
            args.output_filename = Some(here.join(dir));
        }
        let srun = slurm::find_srun(std::env::var_os("PATH").as_deref());
        let hosts_given = !args.host.is_empty() || args.hostfile.is_some();
        let launch = ssh::choose(
            args.launcher,
            hosts_given,
            slurm::Allocation::from_env(|k| std::env::var(k).ok()),
            srun.as_deref(),
        )?;
        let alloc = match &launch {
            Launch::Slurm(a) => Some(a.clone()),
            Launch::Local | Launch::Ssh => None,
        };
        let slurm_nodes = match &alloc {
            Some(a) => Some(slurm::resolve_nodes(a, args.nodes, &args.node_addrs)?),
            None => None,
        };
        let ssh_hosts = match launch {
            Launch::Ssh => Some(ssh_hosts(&args)?),
            _ => None,
        };
        let nodes = match (&slurm_nodes, &ssh_hosts) {
            (Some(n), _) => n.names.len() as u32,
            (None, Some(s)) => s.hosts.len() as u32,
            (None, None) => args.nodes.unwrap_or(1),
        };
        if launch == Launch::Local && nodes > daemon::MAX_NODES {
            return Err(format!(
                "--nodes {} is more than the {} node servers one host can address",
                nodes,
                daemon::MAX_NODES
            ));
        }
        if !args.node_addrs.is_empty() && args.node_addrs.len() != nodes as usize {
            return Err(format!(
                "--node-addrs lists {} address(es) for {} node server(s); give one per node",
                args.node_addrs.len(),
                nodes
            ));
        }
        // The node servers' names, as the job map will give them.
        let node_names: Vec<String> = match (&slurm_nodes, &ssh_hosts) {
            (Some(n), _) => n.names.clone(),
            (None, Some(s)) => s.hosts.iter().map(|h| h.name.clone()).collect(),
            (None, None) => (0..nodes).map(|i| format!("node{i}")).collect(),
        };
        if args.display_allocation {
            print_allocation(
                &args,
                alloc.as_ref(),
                slurm_nodes.as_ref(),
                ssh_hosts.as_ref(),
                &node_names,
            );
        }
        // --rankfile: the file now (a missing one is refused before anything starts),
        // read against the node servers' names.
        let rankfile = match &args.rankfile {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| format!("--rankfile {}: {e}", path.display()))?;
                Some((path.clone(), text))
            }
            None => None,
        };
        let read_rankfile = |np: Option<u32>| -> Option<Result<RankMap, String>> {
            let (path, text) = rankfile.as_ref()?;
            Some(
                cohort_topology::rankfile::parse_rankfile(text, &node_names, np)
                    .map_err(|e| format!("--rankfile {}: {e}", path.display())),
            )
        };
        // Without -n, the file's ranks are the job: read once, here.
        let mut rank_map = None;
        if args.np.is_none() && args.more_apps.is_empty() {
            if let Some(map) = read_rankfile(None).transpose()? {
                args.np = Some(map.ranks.len() as u32);
                rank_map = Some(map);
            }
        }
        if args.np.is_none() && args.more_apps.is_empty() {
            args.np = Some(match args.per_node {
                Some(k) => k
                    .checked_mul(nodes)
                    .filter(|&n| n < cohort_proto::RANK_WILDCARD)
                    .ok_or_else(|| format!("-N {k} on {nodes} node servers: too many ranks"))?,
                None => default_np(
                    &launch,
                    ssh_hosts.as_ref(),
                    args.slot_unit(),
                    args.cpu_set.as_ref(),
                )?,
            });
        }
        let detector = args.detector()?;
        let plan = args.plan()?;
        let rank_map = match rank_map {
            Some(map) => Some(map),
            None => read_rankfile(Some(plan.np)).transpose()?,
        };
        // The map as node servers take it (`cohortd --rank-map`): one argument of every
        // node server's command line (Linux takes 128 KiB).
        let rank_map_arg = rank_map.as_ref().map(RankMap::to_string);
        if let Some(text) = rank_map_arg.as_ref().filter(|t| t.len() > MAX_RANK_MAP_ARG) {
            return Err(format!(
                "--rankfile: {} ranks with their slots are too many to hand to the node \
                 servers ({} bytes as text, at most {MAX_RANK_MAP_ARG})",
                plan.np,
                text.len()
            ));
        }
        let stdin_target = match args.stdin {
            StdinTarget::Rank(r) if r >= plan.np => {
                return Err(format!("--stdin {r}: the job has {} rank(s)", plan.np))
            }
            StdinTarget::None => StdinTarget::None,
            t if stdin_readable() => t,
            _ => {
                tracing::info!("stdin is a terminal this job is in the background of: not read");
                StdinTarget::None
            }
        };
        // Ranks per node server when -N or hosts' slots decide them (else an even
        // split by --map-by).
        let node_ranks = match (args.per_node, &ssh_hosts) {
            _ if rank_map.is_some() => None,
            (Some(k), hosts) => {
                let counts = per_node_counts(plan.np, k, nodes)?;
                if let Some(h) = hosts.as_ref().filter(|_| !args.oversubscribe) {
                    check_slots(&counts, k, &h.hosts)?;
                }
                Some(counts)
            }
            (None, Some(h)) => ssh::rank_counts(plan.np, &h.hosts, args.oversubscribe)?,
            // Under Slurm the allocation's tasks on each node are its slots, as mpirun
            // counts them (srun's placement when -n is the allocation's); more ranks
            // than tasks are spread evenly on top, as cohort always allowed there.
            (None, None) => match (&alloc, &slurm_nodes) {
                (Some(a), Some(n)) => slurm_slot_counts(plan.np, a, &n.names)?,
                _ => None,
            },
        };
        let cohortd = daemon::find_cohortd()?;
        let mut exports = daemon::mca_exports(&args.mca)?;
        exports.extend(daemon::resolve_exports(&args.export)?);
        let pmix_libdir = match args.pmix {
            true => {
                let libdir = pmix_libdir(&launch, &args)?;
                let over_ssh = launch == Launch::Ssh;
                exports = daemon::pmix_exports(exports, &libdir, |k| ranks_env(over_ssh, k));
                Some(libdir)
            }
            false => None,
        };
        let apps = AppLayout::new(&plan)?;
        let random = |n| random_bytes(n).map_err(|e| format!("cannot read random bytes: {e}"));
        let job_secret = random(32)?;
        let client_token = random(32)?;
        let nspace = format!("cohort.{}.{}", std::process::id(), to_hex(&random(2)?));
        // The job map before anything exists: a set named like the job's namespace is
        // refused here.
        let mut job = match node_ranks.as_deref() {
            Some(counts) => job_map_with_counts(args.rank_order(), nspace, counts),
            None => job_map(args.rank_order(), nspace, plan.np, nodes),
        };
        if let Some(map) = &rank_map {
            job.rank_node = map.rank_node();
        }
        if let Some(n) = &slurm_nodes {
            job.node_names.clone_from(&n.names);
        }
        if let Some(s) = &ssh_hosts {
            job.node_names = s.hosts.iter().map(|h| h.name.clone()).collect();
        }
        if plan.apps.len() > 1 {
            job.set_apps(plan.apps.iter().map(|a| a.np).collect())?;
        }
        for (name, members) in &plan.psets {
            job.define_pset(name, members.clone())
                .map_err(|e| format!("--pset: {e}"))?;
        }
        let job_dir =
            JobDir::create().map_err(|e| format!("cannot create the job directory: {e}"))?;
        let control_ip = match (&slurm_nodes, &ssh_hosts) {
            (Some(n), _) => slurm::control_ip(args.control_addr, n.addrs[0])?,
            (None, Some(s)) => slurm::control_ip(args.control_addr, s.addrs[0])?,
            (None, None) => args
                .control_addr
                .unwrap_or(std::net::Ipv4Addr::LOCALHOST.into()),
        };
        let listener = TcpListener::bind(SocketAddr::new(control_ip, 0))
            .await
            .map_err(|e| format!("cannot listen for node servers on {control_ip}: {e}"))?;
        let control_addr = listener
            .local_addr()
            .map_err(|e| format!("control listener: {e}"))?;
        let topology = topology_file(args.topology.as_deref(), &job)?;
        let placement = match launch {
            // Every node server runs on this host, so this host's cores decide.
            Launch::Local => {
                let topo = Discover {
                    io: false,
                    xml: false,
                }
                .run();
                if let Some(map) = &rank_map {
                    // Every node server is on this host: its cores decide for all.
                    let layout =
                        cohort_topology::NodeLayout::for_slots(&topo, args.slot_unit(), None);
                    map.check_slots(&layout, None).map_err(|e| {
                        format!(
                            "--rankfile {}: {e} (this host, {})",
                            args.rankfile.as_deref().unwrap_or(Path::new("")).display(),
                            topo.machine.hostname
                        )
                    })?;
                }
                if let Some(set) = &args.cpu_set {
                    let layout =
                        cohort_topology::NodeLayout::for_slots(&topo, args.slot_unit(), Some(set));
                    if layout.num_cores() == 0 {
                        return Err(format!(
                            "--cpu-set {set}: none of these CPUs is usable on this host (it \
                             has CPUs {})",
                            topo.machine.cpuset
                        ));
                    }
                }
                plan_job(
                    args.bind_to,
                    args.cpus_per_rank,
                    args.slot_unit(),
                    &job,
                    &topo,
                    args.cpu_set.as_ref(),
                )
            }
            // One node server per host: each decides on its own host's cores, unless
            // --bind-to says (passed on as given).
            Launch::Slurm(_) | Launch::Ssh => JobPlacement {
                bind_to: args.bind_to.unwrap_or(match args.slot_unit() {
                    SlotUnit::Core => cohort_topology::BindTo::Core,
                    SlotUnit::Hwthread => cohort_topology::BindTo::Hwthread,
                }),
                first_slots: vec![0; nodes as usize],
                notice: None,
            },
        };
        if let Some(notice) = placement
            .notice
            .as_ref()
            .filter(|_| rank_map.is_none())
            .filter(|n| !args.quiet || n.starts_with("warning:"))
        {
            crate::say(format_args!("{notice}"));
        }
        let slurm = match (alloc, slurm_nodes, srun) {
            (Some(alloc), Some(nodes), Some(srun)) => {
                tracing::info!(
                    job = %alloc.job_id, nodes = %hostlist::compress(&nodes.names),
                    addrs = ?nodes.addrs, control = %control_addr,
                    "node servers run on the Slurm allocation's nodes"
                );
                Some(SlurmStep {
                    name: format!("cohortd.{}", job.nspace),
                    alloc,
                    srun,
                    nodes,
                    pid: None,
                    relay: None,
                })
            }
            _ => None,
        };
        if let Some(s) = &ssh_hosts {
            tracing::info!(
                hosts = %hostlist::compress(&job.node_names), addrs = ?s.addrs,
                agent = ?s.agent, cohortd = %s.cohortd.display(), control = %control_addr,
                "node servers run on the hosts, started over the launch agent"
            );
        }
        if args.display_map {
            let mut policy = match (args.per_node, &args.rankfile) {
                (_, Some(file)) => format!("--rankfile {}", file.display()),
                (Some(k), None) => format!("-N {k}"),
                (None, None) => format!("--map-by {}", args.map_by),
            };
            if args.per_node.is_none() && node_ranks.is_some() {
                policy.push_str(", within the hosts' slots");
            }
            if args.cpus_per_rank > 1 {
                policy.push_str(&format!(", {} cores per rank", args.cpus_per_rank));
            }
            print!("{}", display_map(&job, &policy));
            let _ = std::io::Write::flush(&mut std::io::stdout());
        }
        tracing::info!(
            nspace = %job.nspace, np = plan.np, apps = plan.apps.len(),
            psets = plan.psets.len(), nodes,
            map_by = %args.map_by, per_node = ?node_ranks, bind_to = %placement.bind_to,
            cohortd = %cohortd.display(), job_dir = %job_dir.path().display(),
            "launching"
        );
        let (tx, rx) = mpsc::unbounded_channel();
        Ok(Launcher {
            monitor: JobMonitor::new(job, args.enable_recovery),
            placement,
            node_ranks: node_ranks.unwrap_or_default(),
            rank_map: rank_map_arg,
            topology,
            detector,
            tribunal: {
                let d = detector.unwrap_or(cohort_core::DetectorConfig::DEFAULT);
                Tribunal::new(d.timeout, d.period, nodes as NodeId)
            },
            nodes,
            slurm,
            ssh: ssh_hosts,
            relays: Vec::new(),
            kills: Vec::new(),
            args,
            cohortd,
            exports,
            pmix_libdir,
            apps,
            job_secret,
            client_token,
            job_dir,
            listener: Some(listener),
            control_addr,
            daemons: Vec::new(),
            started: false,
            store: Default::default(),
            store_epoch: Instant::now(),
            spawns: Default::default(),
            stdin_target,
            stdin_rx: None,
            stdin_waiting: Default::default(),
            launched: 0,
            tx,
            rx,
            tasks: Vec::new(),
        })
    }

    async fn run(mut self, signals: &mut TerminatingSignals) -> i32 {
        reaper::become_subreaper();
        let verdict = match self.spawn_daemons() {
            Ok(()) => self.watch(signals).await,
            Err(reason) => Verdict::StartupFailed { reason },
        };
        let code = self.monitor.exit_code(&verdict);
        if let Some(msg) = self.monitor.message(&verdict) {
            crate::say(format_args!("{msg}"));
        }
        self.shut_down(signals).await;
        code
    }

    fn spawn_daemons(&mut self) -> Result<(), String> {
        let listener = self.listener.take().expect("listener is taken once");
        self.tasks.push(tokio::spawn(accept_loop(
            listener,
            self.job_secret.clone(),
            self.nodes,
            self.detector.map(|d| d.timeout),
            self.tx.clone(),
        )));
        if self.slurm.is_some() {
            return self.spawn_step();
        }
        if self.ssh.is_some() {
            return self.spawn_over_ssh();
        }
        let job = self.monitor.job().clone();
        for node in 0..self.nodes {
            let ip = match self.args.node_addrs.get(node as usize) {
                Some(ip) => *ip,
                None => daemon::node_address(node)
                    .expect("node count checked in prepare")
                    .into(),
            };
            let launch = DaemonLaunch {
                bind_to: Some(self.placement.bind_to),
                first_slot: self.placement.first_slots[node as usize],
                // Every node server runs on this host: see `RunArgs::allgather`.
                allgather: Some(
                    self.args
                        .allgather
                        .unwrap_or(cohort_topology::Allgather::Tree),
                ),
                ..self.daemon_launch(&job, node, &job.node_names[node as usize], ip)
            };
            let child = launch
                .spawn(&self.cohortd, &self.job_secret, &self.client_token)
                .map_err(|e| {
                    format!(
                        "cannot start {} for {}: {e}",
                        self.cohortd.display(),
                        launch.node_name
                    )
                })?;
            let pid = child.id().unwrap_or(0);
            tracing::debug!(node, pid, "node server started");
            self.daemons.push(Daemon::started(pid));
            self.watch_exit(child, move |how| Event::DaemonExited { node, how });
        }
        Ok(())
    }

    /// What every node server of this job is started with, node server `node` named
    /// `node_name` listening on `ip`, as on a host of its own (binding and the
    /// allgather left to cohortd unless given; no Slurm or ssh details).
    fn daemon_launch<'a>(
        &'a self,
        job: &'a JobMap,
        node: NodeId,
        node_name: &'a str,
        ip: IpAddr,
    ) -> DaemonLaunch<'a> {
        DaemonLaunch {
            node,
            nodes: self.nodes,
            node_name,
            listen: SocketAddr::new(ip, 0),
            control: self.control_addr,
            job_dir: self.job_dir.path(),
            nspace: &job.nspace,
            np: job.size(),
            map_by: self.args.map_by,
            rank_by: self.args.rank_by,
            bind_to: self.args.bind_to,
            first_slot: 0,
            cpus_per_rank: self.args.cpus_per_rank,
            use_hwthread_cpus: self.args.use_hwthread_cpus,
            quiet: self.args.quiet,
            cpu_set: self.args.cpu_set.as_ref(),
            tag_output: self.args.tag_output,
            timestamp_output: self.args.timestamp_output,
            merge_stderr_to_stdout: self.args.merge_stderr_to_stdout,
            output_dir: self.args.output_filename.as_deref(),
            report_bindings: self.args.report_bindings,
            stdin: self.stdin_target,
            topology: self.topology.as_deref(),
            ib_device: self.args.ib_device.as_deref(),
            ib_gid_index: self.args.ib_gid_index,
            spin_us: self.args.spin_us,
            no_shm_fence: self.args.no_shm_fence,
            detector: self.detector,
            allgather: self.args.allgather,
            exports: &self.exports,
            pmix_libdir: self.pmix_libdir.as_deref(),
            apps: &self.apps.layout,
            app_exports: &self.apps.exports,
            app_wdirs: &self.apps.wdirs,
            psets: &job.psets,
            command: &self.apps.command,
            slurm_addrs: None,
            ssh_names: None,
            node_ranks: &self.node_ranks,
            rank_map: self.rank_map.as_deref(),
        }
    }

    /// Under Slurm: starts every node server with one srun step over the allocation's
    /// nodes, and watches srun (the node servers are not our children: each one's end
    /// shows as its control connection closing, all of them as srun's exit).
    fn spawn_step(&mut self) -> Result<(), String> {
        let step = self.slurm.as_ref().expect("under Slurm");
        let job = self.monitor.job().clone();
        let launch = DaemonLaunch {
            slurm_addrs: Some((&step.nodes.addrs, &step.nodes.names)),
            ..self.daemon_launch(&job, 0, "", step.nodes.addrs[0])
        };
        let srun_args =
            slurm::srun_args(&step.nodes.names, &step.name, slurm::cluster_binds_tasks());
        let mut child = launch
            .spawn_srun(
                &step.srun,
                &srun_args,
                &self.cohortd,
                &self.job_secret,
                &self.client_token,
            )
            .map_err(|e| format!("cannot start {}: {e}", step.srun.display()))?;
        let pid = child.id().unwrap_or(0);
        tracing::debug!(pid, job = %step.alloc.job_id, "srun step started");
        let relay = child
            .stderr
            .take()
            .map(|err| tokio::spawn(relay_srun_stderr(err, self.tx.clone())));
        if let Some(step) = self.slurm.as_mut() {
            step.pid = Some(pid);
            step.relay = relay;
        }
        for _ in 0..self.nodes {
            self.daemons.push(Daemon::started(0));
        }
        self.watch_exit(child, |how| Event::StepEnded { how });
        Ok(())
    }

    /// Over ssh: starts every node server through the launch agent, one per host, and
    /// writes each one's secrets to the agent's stdin (kept open while the job runs).
    /// The agents are our children: each one's end is its node server's.
    fn spawn_over_ssh(&mut self) -> Result<(), String> {
        let hosts = self.ssh.clone().expect("over ssh");
        let job = self.monitor.job().clone();
        let cwd = std::env::current_dir().ok();
        let env = ssh::forwarded_env(std::env::vars_os());
        let secrets = format!(
            "{} {}\n",
            to_hex(&self.job_secret),
            to_hex(&self.client_token)
        );
        for node in 0..self.nodes {
            let host = &hosts.hosts[node as usize];
            let launch = DaemonLaunch {
                ssh_names: Some(&job.node_names),
                ..self.daemon_launch(&job, node, &host.name, hosts.addrs[node as usize])
            };
            let remote = ssh::remote_command(&hosts.cohortd, cwd.as_deref(), &env, &launch.args());
            let agent = ssh::agent_args(&hosts.agent, host);
            tracing::debug!(node, host = %host.destination(), ?agent, ?remote,
                "starting a node server over the launch agent");
            let spawned = launch.spawn_agent(&agent, &remote);
            let mut child = spawned.map_err(|e| {
                format!(
                    "cannot start the launch agent {} for host {}: {e}",
                    hosts.agent[0], host.name
                )
            })?;
            let pid = child.id().unwrap_or(0);
            let held = Held::new();
            if let Some(err) = child.stderr.take() {
                self.relays
                    .push(tokio::spawn(relay_agent_stderr(err, held.clone())));
            }
            if let Some(mut stdin) = child.stdin.take() {
                let line = secrets.clone();
                // Written at once (a pipe takes it whole), then held open: cohortd
                // stops when it closes. Dropped when the tasks are aborted at the end.
                self.tasks.push(tokio::spawn(async move {
                    use tokio::io::AsyncWriteExt;
                    if let Err(e) = stdin.write_all(line.as_bytes()).await {
                        tracing::debug!(node, "cannot write to the launch agent: {e}");
                        return;
                    }
                    let _ = stdin.flush().await;
                    std::future::pending::<()>().await;
                }));
            }
            tracing::debug!(node, pid, host = %host.name, "launch agent started");
            let mut d = Daemon::started(pid);
            d.held = Some(held);
            self.daemons.push(d);
            self.watch_exit(child, move |how| Event::DaemonExited { node, how });
        }
        Ok(())
    }

    /// Sends `ended(how it ended)` once `child` (a node server, or the srun step of
    /// all of them) exits.
    fn watch_exit(
        &mut self,
        mut child: tokio::process::Child,
        ended: impl FnOnce(String) -> Event + Send + 'static,
    ) {
        let tx = self.tx.clone();
        self.tasks.push(tokio::spawn(async move {
            let how = match child.wait().await {
                Ok(st) => describe_status(&rank_status(st)),
                Err(e) => format!("could not be waited for ({e})"),
            };
            let _ = tx.send(ended(how));
        }));
    }

    /// Runs the job until something ends it.
    async fn watch(&mut self, signals: &mut TerminatingSignals) -> Verdict {
        let startup_limit = startup_timeout();
        let startup_deadline = Instant::now() + startup_limit;
        let timeout = self.args.timeout;
        // An absurdly large --timeout is no timeout rather than an overflow.
        let job_deadline = timeout.and_then(|s| Instant::now().checked_add(Duration::from_secs(s)));
        let never = Instant::now() + Duration::from_secs(86_400);
        // With the failure detector, node servers hear from the launcher every
        // heartbeat period once the job started (`LauncherMsg::Heartbeat`).
        let period = self.detector.map(|d| d.period);
        let mut next_beat = Instant::now();
        loop {
            let judge_at = self.tribunal.deadline().map(Instant::from_std);
            let store_at = self.store.next_deadline().map(|d| self.store_epoch + d);
            let spawn_at = self.spawns.next_deadline();
            let stdin_ready = self.stdin_rx.is_some() && self.stdin_waiting.is_empty();
            let beat = period.filter(|_| self.started);
            let event = tokio::select! {
                _ = sleep_until(next_beat), if beat.is_some() => {
                    next_beat = Instant::now() + beat.unwrap_or_default();
                    self.heartbeat().await;
                    continue;
                }
                ev = self.rx.recv() => ev.expect("the launcher holds a sender"),
                sig = signals.recv() => return Verdict::Interrupted { signal: sig },
                _ = sleep_until(startup_deadline), if !self.started => {
                    let reason = self.missing_registrations(startup_limit);
                    return Verdict::StartupFailed { reason };
                }
                _ = sleep_until(job_deadline.unwrap_or(never)), if job_deadline.is_some() => {
                    if self.args.get_stack_traces {
                        self.print_stack_traces().await;
                    }
                    return Verdict::TimedOut { secs: timeout.unwrap_or_default() };
                }
                chunk = next_stdin(&mut self.stdin_rx), if stdin_ready => {
                    self.forward_stdin(chunk).await;
                    continue;
                }
                _ = sleep_until(store_at.unwrap_or(never)), if store_at.is_some() => {
                    let now = self.store_epoch.elapsed();
                    let answers = self.store.expire(now);
                    self.send_data_answers(answers).await;
                    continue;
                }
                _ = sleep_until(spawn_at.unwrap_or(never)), if spawn_at.is_some() => {
                    match self.expire_spawns().await {
                        Some(verdict) => return verdict,
                        None => continue,
                    }
                }
                _ = sleep_until(judge_at.unwrap_or(never)), if judge_at.is_some() => {
                    match self.judge(Vec::new()).await {
                        Some(verdict) => return verdict,
                        None => continue,
                    }
                }
            };
            if let Some(verdict) = self.handle(event).await {
                return verdict;
            }
        }
    }

    /// A publish, lookup or unpublish of `proc`, forwarded by node server `node`, for
    /// the job's data store; answered now, or later for a lookup that waits.
    async fn on_data(
        &mut self,
        node: NodeId,
        token: u64,
        proc: cohort_proto::ProcId,
        req: cohort_proto::msg::Request,
    ) {
        if self.monitor.session().node_of(&proc) != Some(node) {
            tracing::warn!(node, %proc, "ignoring a data store call for a process that node server does not host");
            return;
        }
        if let cohort_proto::msg::Request::Spawn { apps, opts } = req {
            return self.on_spawn(node, token, proc, apps, opts).await;
        }
        let now = self.store_epoch.elapsed();
        let answers = self.store.call(&proc, node, token, req, now);
        self.send_data_answers(answers).await;
    }

    /// Sends the data store's answers to the callers' node servers.
    async fn send_data_answers(&mut self, answers: Vec<cohort_core::datastore::Answer>) {
        for a in answers {
            let msg = LauncherMsg::DataReply {
                token: a.token,
                result: a.result,
            };
            if let Err(e) = self.tell(a.home, &msg).await {
                tracing::warn!(node = a.home, error = %e, "could not answer a data store call");
            }
        }
    }

    /// Sends every running node server a heartbeat. (A broken connection shows up on
    /// its reading side.)
    async fn heartbeat(&mut self) {
        self.tell_running(&LauncherMsg::Heartbeat, None).await;
    }

    /// `--get-stack-traces`: has every running node server print its running ranks'
    /// stacks with gdb, and prints them (on stderr) as they come, waiting at most a
    /// little longer than a node server gives gdb.
    async fn print_stack_traces(&mut self) {
        let mut waiting: std::collections::BTreeSet<NodeId> = self
            .daemons
            .iter()
            .enumerate()
            .filter(|(_, d)| d.running && d.writer.is_some())
            .map(|(n, _)| n as NodeId)
            .collect();
        for (node, _) in self.tell_running(&LauncherMsg::StackTraces, None).await {
            waiting.remove(&node);
        }
        if waiting.is_empty() {
            return;
        }
        crate::say(format_args!(
            "the job timed out; the running ranks' stacks (gdb on each host):"
        ));
        let deadline = Instant::now() + STACK_TRACES_WAIT;
        while !waiting.is_empty() {
            let event = tokio::select! {
                ev = self.rx.recv() => ev,
                _ = sleep_until(deadline) => break,
            };
            match event {
                Some(Event::Msg {
                    node,
                    msg: DaemonMsg::StackTraces { traces },
                }) => {
                    waiting.remove(&node);
                    for t in traces {
                        let text = t.text.trim_end();
                        eprintln!(
                            "cohort: stack of {} on {} (pid {}):\n{text}",
                            self.monitor.rank_name(t.job, t.rank),
                            self.monitor.node_name(node),
                            t.pid
                        );
                    }
                }
                // The job goes on meanwhile (ranks exit, node servers report).
                Some(other) => {
                    let _ = self.handle(other).await;
                }
                None => break,
            }
        }
        if !waiting.is_empty() {
            let names: Vec<String> = waiting.iter().map(|&n| self.monitor.node_name(n)).collect();
            crate::say(format_args!(
                "no stacks from {} within {} s",
                names.join(", "),
                STACK_TRACES_WAIT.as_secs()
            ));
        }
    }

    /// Sends `msg` to node server `node`, if it registered.
    async fn tell(&mut self, node: NodeId, msg: &LauncherMsg) -> std::io::Result<()> {
        match self.daemons[node as usize].writer.as_mut() {
            Some(w) => control::send(w, msg).await,
            None => Ok(()),
        }
    }

    /// Sends `msg` to every running node server but `except`; returns those it could
    /// not be sent to, and why.
    async fn tell_running(
        &mut self,
        msg: &LauncherMsg,
        except: Option<NodeId>,
    ) -> Vec<(NodeId, std::io::Error)> {
        let mut failed = Vec::new();
        for (node, d) in self.daemons.iter_mut().enumerate() {
            let node = node as NodeId;
            if Some(node) == except || !d.running {
                continue;
            }
            if let Some(w) = d.writer.as_mut() {
                if let Err(e) = control::send(w, msg).await {
                    failed.push((node, e));
                }
            }
        }
        failed
    }

    async fn handle(&mut self, event: Event) -> Option<Verdict> {
        match event {
            Event::Registered(reg) => self.on_registered(reg).await,
            Event::Msg {
                node,
                msg:
                    DaemonMsg::PeerSilent {
                        node: silent,
                        silent_ms,
                    },
            } => self.on_peer_silent(node, silent, silent_ms).await,
            Event::Msg {
                node,
                msg: DaemonMsg::Heard { silent_ms },
            } => {
                self.tribunal.heard(node, Duration::from_millis(silent_ms));
                self.judge(Vec::new()).await
            }
            Event::Msg {
                node,
                msg:
                    DaemonMsg::FabricLost {
                        node: lost,
                        reason,
                        unreachable,
                    },
            } => self.on_fabric_lost(node, lost, reason, unreachable).await,
            Event::Msg {
                node,
                msg: DaemonMsg::Reached { token, nodes },
            } => {
                self.tribunal.reached(node, token, nodes);
                self.judge(Vec::new()).await
            }
            Event::Msg {
                node,
                msg: DaemonMsg::Data { token, proc, req },
            } => {
                self.on_data(node, token, proc, req).await;
                None
            }
            Event::Msg {
                node,
                msg: msg @ (DaemonMsg::JobAdded { .. } | DaemonMsg::JobStarted { .. }),
            } => self.on_spawn_answer(node, msg).await,
            Event::Msg { node, msg } => {
                // A spawned job's rank: its parent may wait to hear of the job's end.
                let spawned = match msg {
                    DaemonMsg::RankExited { job, .. } if job > 0 => Some(job),
                    _ => None,
                };
                let verdict = self.on_message(node, msg);
                if let (Some(job), None) = (spawned, &verdict) {
                    self.spawned_rank_exited(job).await;
                }
                verdict
            }
            Event::ControlClosed { node, error } => {
                let reason = match error {
                    Some(e) => format!("broke its control connection ({e})"),
                    None => "closed its control connection".to_string(),
                };
                // Without the launcher it stops (or is gone already). Under Slurm this
                // is all the launcher sees of its end.
                if self.slurm.is_some() {
                    self.daemons[node as usize].running = false;
                }
                self.daemon_gone(node, reason).await
            }
            Event::StepEnded { how } => {
                if let Some(step) = self.slurm.as_mut() {
                    step.pid = None;
                }
                let mut verdict = None;
                for node in 0..self.nodes {
                    if !self.daemons[node as usize].running {
                        continue;
                    }
                    self.daemons[node as usize].running = false;
                    let reason = format!("ended with its srun step (srun {how})");
                    let v = self.daemon_gone(node, reason).await;
                    verdict = verdict.or(v);
                }
                verdict
            }
            Event::DaemonExited { node, how } if self.slurm.is_some() => {
                // srun's report of a task that ended: acted on during startup only, when
                // no rank runs and only srun and node servers write to srun's stderr
                // (afterwards the control connection tells).
                let d = self.daemons.get_mut(node as usize)?;
                if self.started || !d.running {
                    return None;
                }
                d.running = false;
                self.daemon_gone(node, format!("ended: {how} (srun)")).await
            }
            Event::DaemonExited { node, how } if self.ssh.is_some() => {
                let d = &mut self.daemons[node as usize];
                d.running = false;
                let agent = self.ssh.as_ref().map_or("ssh", |s| s.agent[0].as_str());
                let mut reason = format!("({agent}, pid {}) {how} unexpectedly", d.pid);
                if let Some(said) = d.held.as_ref().map(Held::tail).filter(|t| !t.is_empty()) {
                    reason.push_str(&format!(" [its stderr: {said}]"));
                }
                self.daemon_gone(node, reason).await
            }
            Event::DaemonExited { node, how } => {
                self.daemons[node as usize].running = false;
                let pid = self.daemons[node as usize].pid;
                self.daemon_gone(node, format!("(pid {pid}) {how} unexpectedly"))
                    .await
            }
        }
    }

    /// Node server `node` is gone (`reason`): announced to the others, then failed
    /// (see [`Launcher::daemon_failed`]); the reports about it are settled now.
    async fn daemon_gone(&mut self, node: NodeId, reason: String) -> Option<Verdict> {
        self.announce_lost(node, true).await;
        let verdict = self.daemon_failed(node, reason).await;
        let judged = self.judge(Vec::new()).await;
        verdict.or(judged)
    }

    async fn daemon_failed(&mut self, node: NodeId, reason: String) -> Option<Verdict> {
        // Its lookups waiting here need no answer; its ranks' proc-persistent data goes.
        // Nor will it take stdin, or a spawn's processes.
        self.stdin_waiting.remove(&node);
        self.store.home_lost(node);
        for proc in self.monitor.session().procs_on(node) {
            self.store.proc_terminated(&proc);
        }
        self.spawns_node_lost(node).await;
        if self.started && self.monitor.recovery() {
            // Its ranks die with it (parent-death signal); the job goes on.
            return match self.monitor.node_lost(node, &reason) {
                Step::Continue => {
                    self.spawned_jobs_lost().await;
                    None
                }
                Step::Notice(msg) => {
                    crate::say(format_args!("{msg}"));
                    self.spawned_jobs_lost().await;
                    None
                }
                Step::End(verdict) => {
                    // Its ranks were the last ones: say why before the job's verdict.
                    crate::say(format_args!(
                        "node server {} {reason}; its ranks are lost",
                        self.monitor.node_name(node)
                    ));
                    Some(verdict)
                }
            };
        }
        Some(if self.started {
            Verdict::DaemonFailed { node, reason }
        } else {
            Verdict::StartupFailed {
                reason: format!(
                    "node server {} {reason} during startup",
                    self.monitor.node_name(node)
                ),
            }
        })
    }

    async fn on_registered(&mut self, reg: Registration) -> Option<Verdict> {
        let node = reg.node;
        let slot = &mut self.daemons[node as usize];
        if self.started || slot.writer.is_some() {
            tracing::warn!(node, "refusing a second registration for node{node}");
            return None;
        }
        if self.slurm.is_some() {
            slot.pid = reg.pid;
        } else if self.ssh.is_some() {
            slot.remote_pid = Some(reg.pid);
        } else if reg.pid != slot.pid {
            tracing::warn!(
                node,
                expected = slot.pid,
                got = reg.pid,
                "node server registered with an unexpected pid"
            );
        }
        tracing::debug!(node, fabric = %reg.fabric_addr, host = %reg.host, "node server registered");
        slot.writer = Some(reg.writer);
        slot.fabric_addr = Some(reg.fabric_addr);
        slot.host = reg.host;
        slot.cores = reg.cores;
        let mut reader = reg.reader;
        let tx = self.tx.clone();
        self.tasks.push(tokio::spawn(async move {
            loop {
                match control::read_daemon_msg(&mut reader).await {
                    Ok(Some(msg)) => {
                        if tx.send(Event::Msg { node, msg }).is_err() {
                            return;
                        }
                    }
                    Ok(None) => {
                        let _ = tx.send(Event::ControlClosed { node, error: None });
                        return;
                    }
                    Err(e) => {
                        let error = Some(e.to_string());
                        let _ = tx.send(Event::ControlClosed { node, error });
                        return;
                    }
                }
            }
        }));

        if self.daemons.iter().any(|d| d.fabric_addr.is_none()) {
            return None;
        }
        let peers: Vec<String> = self
            .daemons
            .iter()
            .map(|d| d.fabric_addr.clone().unwrap_or_default())
            .collect();
        self.started = true;
        tracing::info!(?peers, "every node server registered; starting the ranks");
        self.release_held();
        let mut envs = match self.args.pmix {
            true => self.open_mpi_settings(),
            false => Vec::new(),
        };
        let job_size = self.monitor.job().size();
        let universe = match self.stated_slots() {
            Some(slots) => slots.max(job_size),
            None => daemon::universe_size(&self.node_hosts(), job_size),
        };
        tracing::info!(universe, "the session's universe size (PMIX_UNIV_SIZE)");
        let job_digest = self.monitor.job().digest();
        for (node, d) in self.daemons.iter_mut().enumerate() {
            let Some(w) = d.writer.as_mut() else { continue };
            let env = envs.get_mut(node).map(std::mem::take).unwrap_or_default();
            let start = LauncherMsg::Start {
                peers: peers.clone(),
                env,
                universe,
                job_digest,
            };
            if let Err(e) = control::send(w, &start).await {
                return Some(Verdict::DaemonFailed {
                    node: node as NodeId,
                    reason: format!("could not be told to start ({e})"),
                });
            }
        }
        if self.stdin_target != StdinTarget::None {
            self.stdin_rx = Some(read_stdin());
        }
        None
    }

    /// The next chunk of this launcher's stdin (`None`: it ended) to the node servers
    /// of the ranks that take it; the next is read once they all took this one.
    async fn forward_stdin(&mut self, chunk: Option<Vec<u8>>) {
        let job = self.monitor.job();
        let nodes: Vec<NodeId> = match self.stdin_target {
            StdinTarget::Rank(r) => job.rank_node.get(r as usize).copied().into_iter().collect(),
            StdinTarget::All => (0..self.nodes).collect(),
            StdinTarget::None => Vec::new(),
        };
        let msg = match chunk {
            Some(data) => LauncherMsg::Stdin { data },
            None => {
                self.stdin_rx = None;
                LauncherMsg::StdinEnd
            }
        };
        let more = matches!(msg, LauncherMsg::Stdin { .. });
        for node in nodes {
            if !self.daemons[node as usize].running {
                continue;
            }
            match self.tell(node, &msg).await {
                Ok(()) if more => {
                    self.stdin_waiting.insert(node);
                }
                Ok(()) => {}
                Err(e) => tracing::debug!(node, error = %e, "could not forward stdin"),
            }
        }
    }

    /// `--pmix`: each node server's ranks' Open MPI settings, from the node servers'
    /// host names, fabric addresses, cores and ranks ([`daemon::open_mpi_env`]).
    /// Open MPI's settings for each node server's processes (`--pmix`), counting the
    /// processes of every job of the session.
    fn open_mpi_settings(&self) -> Vec<Vec<(String, String)>> {
        let nodes = self.node_hosts();
        let over_ssh = self.ssh.is_some();
        let envs = daemon::open_mpi_env(&nodes, &self.exports, |k| ranks_env(over_ssh, k));
        let hosts: Vec<&str> = nodes.iter().map(|n| n.host.as_str()).collect();
        tracing::info!(
            hosts = ?hosts, chosen = ?envs,
            "--pmix: Open MPI's settings for each node server's ranks (none: Open MPI's defaults)"
        );
        envs
    }

    /// The slots the allocation states, as PRRTE counts its universe: under Slurm the
    /// allocation's tasks, over ssh each host's slots (a host given none: its cores),
    /// once any host gives some. `None`: no slots stated (the hosts' cores decide).
    fn stated_slots(&self) -> Option<u32> {
        if let Some(step) = &self.slurm {
            return step.alloc.tasks;
        }
        let hosts = &self.ssh.as_ref()?.hosts;
        if hosts.iter().all(|h| h.slots.is_none()) {
            return None;
        }
        let slots = hosts
            .iter()
            .zip(&self.daemons)
            .map(|(h, d)| h.slots.unwrap_or(d.cores));
        Some(slots.fold(0u32, u32::saturating_add))
    }

    /// Every node server's host, its cores, and the cores the live processes of every
    /// job of the session it runs need.
    fn node_hosts(&self) -> Vec<daemon::NodeHost> {
        let session = self.monitor.session();
        self.daemons
            .iter()
            .enumerate()
            .map(|(node, d)| daemon::NodeHost {
                host: d.host.clone(),
                fabric_addr: d.fabric_addr.clone().unwrap_or_default(),
                cores: d.cores,
                // The cores they need: a launched rank takes --cpus-per-rank, a
                // spawned one its spawn's cores per process.
                ranks: (0u32..)
                    .zip(session.jobs())
                    .map(|(index, j)| {
                        let live = j.ranks_on(node as NodeId).into_iter();
                        let n = live.filter(|&r| self.monitor.alive(index, r)).count() as u32;
                        match index {
                            0 => n.saturating_mul(self.args.cpus_per_rank.max(1)),
                            _ => n.saturating_mul(self.spawns.per_proc(index)),
                        }
                    })
                    .sum(),
            })
            .collect()
    }

    fn on_message(&mut self, node: NodeId, msg: DaemonMsg) -> Option<Verdict> {
        match msg {
            DaemonMsg::Register { .. } | DaemonMsg::Proof { .. } => {
                tracing::warn!(node, "ignoring a repeated registration");
                None
            }
            DaemonMsg::Launched => {
                self.launched += 1;
                tracing::debug!(node, "ranks launched");
                if self.launched == self.nodes {
                    tracing::info!("every rank has been launched");
                }
                None
            }
            DaemonMsg::RankExited { job, rank, status } => {
                tracing::debug!(node, job, rank, ?status, "rank exited");
                match self.monitor.exited(node, job, rank, status) {
                    Ok(Step::Continue) => None,
                    Ok(Step::Notice(msg)) => {
                        crate::say(format_args!("{msg}"));
                        None
                    }
                    Ok(Step::End(verdict)) => Some(verdict),
                    Err(bogus) => {
                        tracing::warn!("ignoring a bogus rank exit: {bogus}");
                        None
                    }
                }
            }
            DaemonMsg::Fatal { reason } => Some(Verdict::DaemonFailed {
                node,
                reason: format!("reported a fatal error: {}", printable(&reason)),
            }),
            // Judged in `handle` (their judgements need the control connections).
            DaemonMsg::PeerSilent { .. }
            | DaemonMsg::Heard { .. }
            | DaemonMsg::FabricLost { .. }
            | DaemonMsg::Reached { .. }
            | DaemonMsg::Data { .. }
            | DaemonMsg::JobAdded { .. }
            | DaemonMsg::JobStarted { .. } => None,
            // Late (after `--get-stack-traces` stopped waiting): dropped.
            DaemonMsg::StackTraces { .. } => None,
            // Answered only while the job ends (`announce_ending` reads it).
            DaemonMsg::Ending => None,
            DaemonMsg::DataProcGone { job, rank } => {
                // The data store drops the process's waiting lookups and
                // proc-persistent values, if that node server hosts it.
                let session = self.monitor.session();
                let proc = session
                    .get(job)
                    .map(|j| cohort_proto::ProcId::new(j.nspace.clone(), rank))
                    .filter(|p| session.node_of(p) == Some(node));
                if let Some(proc) = proc {
                    self.store.proc_terminated(&proc);
                }
                None
            }
            DaemonMsg::StdinTaken => {
                self.stdin_waiting.remove(&node);
                None
            }
        }
    }

    /// Node server `by` declared `silent` lost for its silence: the tribunal asks the
    /// accused (see [`Tribunal`]).
    async fn on_peer_silent(
        &mut self,
        by: NodeId,
        silent: NodeId,
        silent_ms: u64,
    ) -> Option<Verdict> {
        if !self.names_a_peer(by, silent, "silent") {
            return None;
        }
        tracing::info!(by, silent, silent_ms, "node server reported silent");
        let accusation = Accusation {
            by,
            silent,
            silent_ms,
        };
        let mut out = Vec::new();
        self.tribunal
            .accuse(accusation, std::time::Instant::now(), &mut out);
        self.judge(out).await
    }

    /// Whether node server `by`'s report of a `what` node server names another node
    /// server of the job (a report that does not is logged and ignored).
    fn names_a_peer(&self, by: NodeId, other: NodeId, what: &str) -> bool {
        let peer = other != by && (other as usize) < self.daemons.len();
        if !peer {
            tracing::warn!(
                by,
                other,
                "ignoring a report of a {what} node server that is not a peer"
            );
        }
        peer
    }

    /// Node server `by`'s fabric lost `lost`: if `lost` still runs, the tribunal ends
    /// it (a closed connection) or one of the two (`unreachable`: after a survey of
    /// both; see [`Tribunal`]).
    async fn on_fabric_lost(
        &mut self,
        by: NodeId,
        lost: NodeId,
        reason: String,
        unreachable: bool,
    ) -> Option<Verdict> {
        if !self.names_a_peer(by, lost, "lost") {
            return None;
        }
        let reason = printable(&reason);
        tracing::info!(by, lost, %reason, unreachable, "node server's fabric lost another");
        let report = LinkReport {
            by,
            lost,
            reason,
            unreachable,
        };
        let mut out = Vec::new();
        self.tribunal
            .fabric_lost(report, std::time::Instant::now(), &mut out);
        self.judge(out).await
    }

    /// Decides what the tribunal can, after `out`, and carries it all out: probes go to
    /// the accused; each condemned node server is killed (a frozen one must not come
    /// back into a job that went on without it; its ranks die with it), and every other
    /// node server is told it is lost, so that all of them route around it even if its
    /// connections never break for them (a network that drops its packets closes
    /// nothing).
    async fn judge(&mut self, mut out: Vec<Judgement>) -> Option<Verdict> {
        let daemons = &self.daemons;
        self.tribunal.decide(
            std::time::Instant::now(),
            |n| daemons.get(n as usize).is_some_and(|d| d.running),
            &mut out,
        );
        let mut verdict = None;
        for j in out {
            match j {
                Judgement::Probe { node } => {
                    // Unsent, it goes unanswered: the accused is condemned.
                    let _ = self.tell(node, &LauncherMsg::Probe).await;
                }
                Judgement::Moot { accusation: a } => tracing::debug!(
                    by = a.by,
                    silent = a.silent,
                    "report of silence about a node server gone or condemned already"
                ),
                Judgement::Acquit {
                    accusation: a,
                    answer,
                } => {
                    tracing::warn!(
                        by = a.by,
                        silent = a.silent,
                        heard_ms = answer.as_millis() as u64,
                        "not acting on a report of silence: the node server it names heard \
                         from another a moment before (the sender, or the link between them, \
                         is cut off); the sender keeps watching it"
                    );
                    let again = LauncherMsg::KeepWatching { node: a.silent };
                    let _ = self.tell(a.by, &again).await;
                }
                Judgement::Dropped { accusation: a, why } => tracing::warn!(
                    by = a.by,
                    silent = a.silent,
                    "not acting on a report of silence: {why}"
                ),
                Judgement::Condemn {
                    accusation: a,
                    answer,
                } => {
                    let why = match answer {
                        None => "did not answer (frozen, or its host is gone)".to_string(),
                        Some(d) => format!(
                            "had heard from no other node server for {:.1} s (cut off)",
                            d.as_secs_f64()
                        ),
                    };
                    let reason = format!(
                        "sent nothing for {:.1} s: {} declared it lost and it {why}",
                        a.silent_ms as f64 / 1000.0,
                        self.monitor.node_name(a.by)
                    );
                    if let Some(v) = self.condemn(a.silent, reason).await {
                        verdict.get_or_insert(v);
                    }
                }
                Judgement::Survey {
                    node,
                    token,
                    except,
                    within,
                } => {
                    let survey = LauncherMsg::Survey {
                        token,
                        except,
                        within_ms: within.as_millis() as u64,
                    };
                    // Unsent, it goes unanswered: that server goes.
                    let _ = self.tell(node, &survey).await;
                }
                Judgement::Sever { report, node, why } => {
                    let reason = self.severance(&report, node, &why);
                    if let Some(v) = self.condemn(node, reason).await {
                        verdict.get_or_insert(v);
                    }
                }
                Judgement::Unanswered { node, after } => {
                    let reason = format!(
                        "did not answer (frozen, or its host is gone) when asked after {} was \
                         found silent",
                        self.monitor.node_name(after)
                    );
                    if let Some(v) = self.condemn(node, reason).await {
                        verdict.get_or_insert(v);
                    }
                }
                // Every server that had a connection to a lost one reports it: the
                // echoes of a loss already acted upon.
                Judgement::Ignored { report, why } => tracing::debug!(
                    by = report.by,
                    lost = report.lost,
                    "not acting on a report of a lost node server: {why}"
                ),
            }
        }
        verdict
    }

    /// Why node server `node` goes for the broken link `r` names, for the job's output.
    fn severance(&self, r: &LinkReport, node: NodeId, why: &Severance) -> String {
        let other = if node == r.lost { r.by } else { r.lost };
        let (name, other_name) = (self.monitor.node_name(node), self.monitor.node_name(other));
        let why = match why {
            Severance::NoAnswer => "it did not answer (frozen, or its host is gone)".to_string(),
            Severance::ReachedFewer { mine, theirs } => {
                format!("it reached {mine} other node server(s), {other_name} reached {theirs}")
            }
            Severance::Tie { each } => format!(
                "each reached {each} other node server(s) and {name} has the higher node id"
            ),
            Severance::RoutedAround => {
                "it still ran, and every node server routes around it already".to_string()
            }
        };
        let link = if node == r.lost {
            format!("was lost by {other_name}'s fabric ({})", r.reason)
        } else {
            format!("lost {other_name} on the fabric ({})", r.reason)
        };
        format!("{link}: the job cannot use both it and {other_name}, and {why}")
    }

    /// Kills node server `node` (`reason`: why, for the job's output) and tells the
    /// others it is lost.
    async fn condemn(&mut self, node: NodeId, reason: String) -> Option<Verdict> {
        let pid = self.daemons[node as usize].pid;
        if let Some(step) = &self.slurm {
            // On another host: a step of its own on that node SIGKILLs it there, and
            // closing its control connection stops it (and its ranks) should that
            // fail while it still runs.
            tracing::info!(
                node,
                pid,
                "killing a node server declared lost (srun … kill)"
            );
            if pid != 0 {
                let name = &step.nodes.names[node as usize];
                let args = slurm::kill_args(name, pid);
                let srun = step.srun.clone();
                self.tasks.push(tokio::spawn(async move {
                    let run = tokio::process::Command::new(&srun)
                        .args(&args)
                        .stdin(std::process::Stdio::null())
                        .kill_on_drop(true)
                        .status();
                    match tokio::time::timeout(KILL_STEP_TIMEOUT, run).await {
                        Ok(Ok(st)) if st.success() => {}
                        Ok(Ok(st)) => tracing::warn!(node, "srun … kill: {st}"),
                        Ok(Err(e)) => tracing::warn!(node, "srun … kill: {e}"),
                        Err(_) => tracing::warn!(node, "srun … kill: no answer"),
                    }
                }));
            }
            let d = &mut self.daemons[node as usize];
            d.writer = None;
            d.running = false;
            self.announce_lost(node, false).await;
            return self
                .daemon_failed(node, format!("(pid {pid}) {reason}; killed"))
                .await;
        }
        if let (Some(hosts), Some(remote)) = (&self.ssh, self.daemons[node as usize].remote_pid) {
            // On another host: the agent runs kill there (a frozen node server does not
            // notice its session ending); ending the session stops it otherwise.
            tracing::info!(
                node,
                pid = remote,
                "killing a node server declared lost (over the launch agent)"
            );
            let mut agent = ssh::agent_args(&hosts.agent, &hosts.hosts[node as usize]);
            agent.push(format!("kill -KILL {remote}").into());
            self.kills.push(tokio::spawn(async move {
                let run = tokio::process::Command::new(&agent[0])
                    .args(&agent[1..])
                    .stdin(std::process::Stdio::null())
                    .stdout(std::process::Stdio::null())
                    .kill_on_drop(true)
                    .status();
                match tokio::time::timeout(KILL_AGENT_TIMEOUT, run).await {
                    Ok(Ok(st)) if st.success() => {}
                    Ok(Ok(st)) => tracing::warn!(node, "kill over the launch agent: {st}"),
                    Ok(Err(e)) => tracing::warn!(node, "kill over the launch agent: {e}"),
                    Err(_) => tracing::warn!(node, "kill over the launch agent: no answer"),
                }
            }));
        }
        // The verdict's own message (condemned: …; killed) says so.
        tracing::info!(node, pid, "killing a node server declared lost");
        reaper::signal_group(pid, libc::SIGKILL);
        self.announce_lost(node, false).await;
        self.daemon_failed(node, format!("(pid {pid}) {reason}; killed"))
            .await
    }

    /// Tells every other running node server, once the job started and with the
    /// failure detector on, that `node` is lost: `gone` (its process ended, or its
    /// control connection closed), or condemned here. They route around it and drop
    /// their connections to it: at once if condemned (what it sends until it dies must
    /// not count), after their fabric reported it if gone (so that what it sent
    /// before still counts). A server that awaits a verdict about it (its fabric only
    /// found it unreachable) needs this; the others learn of it this way at the latest.
    async fn announce_lost(&mut self, node: NodeId, gone: bool) {
        if !self.started || self.detector.is_none() || !self.tribunal.lost(node) {
            return;
        }
        let lost = if gone {
            LauncherMsg::PeerGone { node }
        } else {
            LauncherMsg::PeerLost { node }
        };
        for (other, e) in self.tell_running(&lost, Some(node)).await {
            tracing::warn!(node = other, error = %e, "could not tell a node server of a loss");
        }
    }

    fn missing_registrations(&self, limit: Duration) -> String {
        let missing: Vec<String> = self
            .daemons
            .iter()
            .enumerate()
            .filter(|(_, d)| d.fabric_addr.is_none())
            .map(|(i, d)| {
                let name = match d.pid {
                    0 => self.monitor.node_name(i as NodeId),
                    pid => format!("{} (pid {pid})", self.monitor.node_name(i as NodeId)),
                };
                match d.held.as_ref().map(Held::tail).filter(|t| !t.is_empty()) {
                    Some(said) => format!("{name} [its launch agent's stderr: {said}]"),
                    None => name,
                }
            })
            .collect();
        format!(
            "node server(s) {} did not register within {} s",
            missing.join(", "),
            limit.as_secs()
        )
    }

    /// Stops every node server (Shutdown, then SIGKILL after the grace period), reaps
    /// them, kills anything orphaned below us, and removes the job directory.
    async fn shut_down(&mut self, signals: &mut TerminatingSignals) {
        self.announce_ending(signals).await;
        let mut unregistered = false;
        for (node, d) in self.daemons.iter_mut().enumerate() {
            if !d.running {
                continue;
            }
            let told = match d.writer.as_mut() {
                Some(w) => matches!(
                    tokio::time::timeout(
                        Duration::from_secs(1),
                        control::send(w, &LauncherMsg::Shutdown)
                    )
                    .await,
                    Ok(Ok(()))
                ),
                None => false,
            };
            if !told && self.slurm.is_some() {
                unregistered = true;
            } else if !told {
                // Not registered (or unreachable): its SIGTERM handler does the same.
                tracing::debug!(node, "sending SIGTERM to an unregistered node server");
                reaper::signal_group(d.pid, libc::SIGTERM);
            }
        }
        if self.slurm.is_some() {
            if unregistered {
                // One node server that cannot be told holds the step: srun cancels it
                // on SIGTERM.
                tracing::debug!("ending the srun step: a node server cannot be told");
                self.end_step(libc::SIGTERM);
            }
            return self.shut_down_step(signals).await;
        }

        let grace_end = Instant::now() + SHUTDOWN_GRACE;
        let mut kill_deadline: Option<Instant> = None;
        while self.daemons.iter().any(|d| d.running) {
            let far = Instant::now() + Duration::from_secs(3600);
            tokio::select! {
                ev = self.rx.recv() => match ev.expect("the launcher holds a sender") {
                    Event::DaemonExited { node, how } => {
                        tracing::debug!(node, "node server {how}");
                        self.daemons[node as usize].running = false;
                    }
                    Event::Msg { node, msg: DaemonMsg::RankExited { rank, status, .. } } => {
                        tracing::debug!(node, rank, ?status, "rank exited during shutdown");
                    }
                    other => tracing::trace!(?other, "ignored during shutdown"),
                },
                _ = sleep_until(grace_end), if kill_deadline.is_none() => {
                    let names = self.running_names();
                    let grace = SHUTDOWN_GRACE.as_secs();
                    crate::say(format_args!(
                        "node server(s) {names} did not stop within {grace} s; killing them"
                    ));
                    kill_deadline = Some(self.kill_daemons());
                }
                sig = signals.recv(), if kill_deadline.is_none() => {
                    crate::say(format_args!(
                        "received {} while stopping the job; killing the node servers now",
                        signal_name(sig)
                    ));
                    kill_deadline = Some(self.kill_daemons());
                }
                _ = sleep_until(kill_deadline.unwrap_or(far)), if kill_deadline.is_some() => {
                    tracing::error!("node server(s) {} could not be reaped", self.running_names());
                    break;
                }
            }
        }
        // Over ssh: lost node servers are killed on their hosts (each agent is bounded
        // by KILL_AGENT_TIMEOUT), and whatever the agents relay last (a rank's last
        // stderr lines) is written before we go.
        for kill in &mut self.kills {
            let _ = kill.await;
        }
        let drain_end = Instant::now() + RELAY_DRAIN;
        for relay in &mut self.relays {
            let _ = tokio::time::timeout_at(drain_end, relay).await;
        }
        self.clean_up();
    }

    /// The last of a shutdown: stops the watching tasks, kills what the job left
    /// behind below us, and removes the job directory.
    fn clean_up(&mut self) {
        for task in self.tasks.drain(..) {
            task.abort();
        }
        for task in self.relays.drain(..).chain(self.kills.drain(..)) {
            task.abort();
        }
        // Blocking is fine here: nothing else is left to drive.
        let swept = reaper::sweep_orphans(SWEEP_BUDGET);
        if swept > 0 {
            tracing::info!(swept, "killed processes the job left behind");
        }
        self.job_dir.remove();
    }

    /// Before any node server is told to shut down: tells every running one that the
    /// job is ending ([`LauncherMsg::Ending`]) and waits until each acknowledged, for
    /// [`ENDING_WAIT`] at most (a signal ends the wait). A node server that shuts down
    /// closes its fabric connections; another that still took the job for running
    /// would log that as a failure and tell every other server of it, over connections
    /// made for the purpose (as seen with 64 node servers).
    async fn announce_ending(&mut self, signals: &mut TerminatingSignals) {
        if !self.started {
            // The fabric carries nothing before the job starts.
            return;
        }
        let mut waiting = std::collections::BTreeSet::new();
        for (node, d) in self.daemons.iter_mut().enumerate() {
            let Some(w) = d.writer.as_mut().filter(|_| d.running) else {
                continue;
            };
            let sent = tokio::time::timeout(
                Duration::from_secs(1),
                control::send(w, &LauncherMsg::Ending),
            )
            .await;
            if matches!(sent, Ok(Ok(()))) {
                waiting.insert(node as NodeId);
            }
        }
        let deadline = Instant::now() + ENDING_WAIT;
        while !waiting.is_empty() {
            tokio::select! {
                ev = self.rx.recv() => match ev.expect("the launcher holds a sender") {
                    Event::Msg { node, msg: DaemonMsg::Ending } => {
                        waiting.remove(&node);
                    }
                    Event::Msg { node, msg: DaemonMsg::RankExited { rank, status, .. } } => {
                        tracing::debug!(node, rank, ?status, "rank exited while the job ends");
                    }
                    Event::ControlClosed { node, .. } => {
                        waiting.remove(&node);
                    }
                    Event::DaemonExited { node, how } => {
                        tracing::debug!(node, "node server {how}");
                        if self.slurm.is_none() {
                            self.daemons[node as usize].running = false;
                        }
                        waiting.remove(&node);
                    }
                    Event::StepEnded { how } => {
                        tracing::debug!("srun step ended: srun {how}");
                        if let Some(step) = self.slurm.as_mut() {
                            step.pid = None;
                        }
                        waiting.clear();
                    }
                    other => tracing::trace!(?other, "ignored while the job ends"),
                },
                _ = sleep_until(deadline) => {
                    tracing::debug!(?waiting, "node servers did not acknowledge the job's end in time");
                    break;
                }
                sig = signals.recv() => {
                    tracing::debug!(sig, "signal while the job ends; shutting down now");
                    break;
                }
            }
        }
    }

    /// Under Slurm: waits for srun to end after every node server was told to stop;
    /// past the grace period (or on a signal) the step is cancelled.
    async fn shut_down_step(&mut self, signals: &mut TerminatingSignals) {
        let grace_end = Instant::now() + SHUTDOWN_GRACE;
        let mut kill_deadline: Option<Instant> = None;
        while self.slurm.as_ref().is_some_and(|s| s.pid.is_some()) {
            let far = Instant::now() + Duration::from_secs(3600);
            tokio::select! {
                ev = self.rx.recv() => match ev.expect("the launcher holds a sender") {
                    Event::StepEnded { how } => {
                        tracing::debug!("srun step ended: srun {how}");
                        if let Some(step) = self.slurm.as_mut() {
                            step.pid = None;
                        }
                    }
                    other => tracing::trace!(?other, "ignored during shutdown"),
                },
                _ = sleep_until(grace_end), if kill_deadline.is_none() => {
                    let grace = SHUTDOWN_GRACE.as_secs();
                    crate::say(format_args!(
                        "the node servers' srun step did not end within {grace} s; cancelling it"
                    ));
                    kill_deadline = Some(self.end_step(libc::SIGTERM));
                }
                sig = signals.recv(), if kill_deadline.is_none() => {
                    crate::say(format_args!(
                        "received {} while stopping the job; cancelling the node servers' \
                         srun step now",
                        signal_name(sig)
                    ));
                    kill_deadline = Some(self.end_step(libc::SIGTERM));
                }
                _ = sleep_until(kill_deadline.unwrap_or(far)), if kill_deadline.is_some() => {
                    tracing::error!("srun did not end; cancelling its step and killing it");
                    if let Some(step) = &self.slurm {
                        slurm::cancel_step(&step.alloc.job_id, &step.name);
                    }
                    self.end_step(libc::SIGKILL);
                    break;
                }
            }
        }
        // Whatever srun wrote last (a rank's last stderr lines) is relayed before we go.
        if let Some(relay) = self.slurm.as_mut().and_then(|s| s.relay.take()) {
            let _ = tokio::time::timeout(RELAY_DRAIN, relay).await;
        }
        self.clean_up();
    }

    /// Sends `signal` to srun (SIGTERM: srun cancels the step, killing every task).
    fn end_step(&self, signal: i32) -> Instant {
        if let Some(pid) = self.slurm.as_ref().and_then(|s| s.pid) {
            reaper::signal_group(pid, signal);
        }
        Instant::now() + KILL_WAIT
    }

    fn kill_daemons(&self) -> Instant {
        for d in self.daemons.iter().filter(|d| d.running) {
            reaper::signal_group(d.pid, libc::SIGKILL);
        }
        Instant::now() + KILL_WAIT
    }

    /// Over ssh: writes what the launch agents said while their node servers started,
    /// and lets their stderr through from now on.
    fn release_held(&self) {
        use std::io::Write;
        for d in &self.daemons {
            if let Some(held) = &d.held {
                for line in held.release() {
                    let _ = std::io::stderr().write_all(&line);
                }
            }
        }
    }

    fn running_names(&self) -> String {
        let names: Vec<String> = self
            .daemons
            .iter()
            .enumerate()
            .filter(|(_, d)| d.running)
            .map(|(i, _)| self.monitor.node_name(i as NodeId))
            .collect();
        names.join(", ")
    }
}

/// The switch map file the node servers build their trees from: `--topology`, else a
/// `topology.conf` next to `$SLURM_CONF`. A `--topology` file that cannot be used is
/// an error; a Slurm one is ignored with a warning. `None` when no file applies or it
/// lists none of the job's nodes.
fn topology_file(given: Option<&Path>, job: &JobMap) -> Result<Option<PathBuf>, String> {
    let (path, explicit) = match given {
        Some(p) => (p.to_path_buf(), true),
        None => match slurm_topology_file(std::env::var_os(SLURM_CONF_ENV).as_deref()) {
            Some(p) => (p, false),
            None => return Ok(None),
        },
    };
    // Node servers may start in another directory.
    let path = std::path::absolute(&path).unwrap_or(path);
    let map = match SwitchMap::from_file(&path) {
        Ok(map) => map,
        Err(e) if explicit => return Err(e.to_string()),
        Err(e) => {
            crate::say(format_args!(
                "warning: {e} (found next to ${SLURM_CONF_ENV}); collective trees ignore it"
            ));
            return Ok(None);
        }
    };
    for w in map.warnings() {
        crate::say(format_args!(
            "warning: topology file {}:{}: {}",
            path.display(),
            w.line,
            w.message
        ));
    }
    let locality = Locality::new(&map, &job.node_names);
    let unknown: Vec<&str> = locality
        .unknown()
        .into_iter()
        .map(|n| job.node_names[n as usize].as_str())
        .collect();
    if unknown.len() == job.node_names.len() {
        let msg = format!(
            "topology file {} lists none of this job's nodes ({}); collective trees are flat",
            path.display(),
            hostlist::compress(&job.node_names)
        );
        if explicit {
            crate::say(format_args!("warning: {msg}"));
        } else {
            tracing::info!("{msg}");
        }
        return Ok(None);
    }
    if !unknown.is_empty() {
        crate::say(format_args!(
            "warning: topology file {} does not list node(s) {}; their trees ignore the switch map",
            path.display(),
            hostlist::compress(&unknown)
        ));
    }
    tracing::info!(
        file = %path.display(),
        from = if explicit { "--topology" } else { SLURM_CONF_ENV },
        switches = map.switch_count(),
        leaf_switches = locality.leaf_switches(),
        "collective trees follow the switch map in {}",
        path.display()
    );
    Ok(Some(path))
}

/// The hosts of `--host`/`--hostfile` (the first `--nodes`), each one's fabric address
/// (`--node-addrs`, else the host resolved here: an IP address as it is, a name by the
/// resolver, IPv4 first), the launch agent and the cohortd the hosts run.
fn ssh_hosts(args: &RunArgs) -> Result<SshHosts, String> {
    let hosts = ssh::hosts(&args.host, args.hostfile.as_deref(), args.nodes)?;
    let addrs = if args.node_addrs.is_empty() {
        let mut addrs = Vec::with_capacity(hosts.len());
        for h in &hosts {
            let ip = slurm::resolve_host(&h.name)
                .map_err(|e| format!("address of host {}: {e} (give --node-addrs)", h.name))?;
            addrs.push(ip);
        }
        addrs
    } else {
        args.node_addrs.clone()
    };
    // Loopback addresses among others: a name this host's resolver maps to itself
    // (Debian's 127.0.1.1 line), useless to the other hosts. (All loopback is one
    // host, as in tests.)
    if addrs.iter().any(|a| !a.is_loopback()) {
        for (h, ip) in hosts.iter().zip(&addrs) {
            if ip.is_loopback() {
                crate::say(format_args!(
                    "warning: host {} resolves to {ip}, a loopback address the other hosts' \
                     node servers cannot reach (give --node-addrs)",
                    h.name
                ));
            }
        }
    }
    let agent_env = std::env::var(ssh::AGENT_ENV).ok();
    let agent = ssh::agent_words(args.launch_agent.as_deref(), agent_env.as_deref())?;
    let local = daemon::find_cohortd()?;
    let cohortd = ssh::remote_cohortd(
        args.prefix.as_deref(),
        std::env::var_os(ssh::PREFIX_ENV).as_deref(),
        &local,
    );
    Ok(SshHosts {
        hosts,
        addrs,
        agent,
        cohortd,
    })
}

/// Whether this launcher may read its stdin: not when it is a terminal whose
/// foreground this process group is not (a read would stop the job with SIGTTIN).
fn stdin_readable() -> bool {
    // SAFETY: isatty, tcgetpgrp and getpgrp only read the state of fd 0 and this
    // process.
    unsafe { libc::isatty(0) == 0 || libc::tcgetpgrp(0) == libc::getpgrp() }
}

/// Reads this launcher's stdin on a thread of its own (a blocking read that the
/// runtime need not wait for at exit), in chunks of at most
/// [`cohort_proto::control::MAX_STDIN_CHUNK`]; the channel closes at its end (or on
/// an error, which ends it too).
fn read_stdin() -> mpsc::Receiver<Vec<u8>> {
    let (tx, rx) = mpsc::channel(1);
    let spawned = std::thread::Builder::new()
        .name("cohort-stdin".into())
        .spawn(move || {
            use std::io::Read;
            let mut stdin = std::io::stdin().lock();
            let mut buf = vec![0u8; cohort_proto::control::MAX_STDIN_CHUNK];
            loop {
                match stdin.read(&mut buf) {
                    Ok(0) => return,
                    Ok(n) => {
                        if tx.blocking_send(buf[..n].to_vec()).is_err() {
                            return;
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        tracing::debug!(error = %e, "reading stdin failed; treating it as its end");
                        return;
                    }
                }
            }
        });
    if let Err(e) = spawned {
        tracing::warn!(error = %e, "cannot start the stdin reader; the ranks' stdin ends at once");
    }
    rx
}

/// The next chunk of stdin (`None`: it ended).
async fn next_stdin(rx: &mut Option<mpsc::Receiver<Vec<u8>>>) -> Option<Vec<u8>> {
    rx.as_mut()?.recv().await
}

/// Variable `k` of this launcher's environment as the ranks will inherit it: locally
/// and under Slurm (srun passes the environment on) they do; over ssh they do not (the
/// hosts' sshd starts cohortd with its own), so it does not count there as the user's
/// choice of a setting the ranks must get.
fn ranks_env(over_ssh: bool, k: &str) -> Option<OsString> {
    match over_ssh {
        true => None,
        false => std::env::var_os(k),
    }
}

/// `--pmix`: where cohort's `libpmix.so.2` is on the node servers' hosts. Over ssh
/// with `--prefix` (or `COHORT_PREFIX`), where the hosts also run `PREFIX/bin/cohortd`:
/// the installed layout, `PREFIX/lib/cohort/pmix` (checked there, by each node server).
/// Otherwise this launcher's own ([`daemon::find_pmix_libdir`], checked here), at the
/// same path on every host: a shared install, as for cohortd.
fn pmix_libdir(launch: &Launch, args: &RunArgs) -> Result<PathBuf, String> {
    if *launch == Launch::Ssh {
        let env_prefix = std::env::var_os(ssh::PREFIX_ENV);
        if let Some(prefix) = ssh::prefix(args.prefix.as_deref(), env_prefix.as_deref()) {
            return Ok(daemon::installed_pmix_libdir(&prefix));
        }
    }
    daemon::find_pmix_libdir()
}

/// Copies a launch agent's stderr to ours line by line (it carries its node server's
/// and that server's ranks' stderr too), holding lines back while `held` holds.
async fn relay_agent_stderr(err: tokio::process::ChildStderr, held: Held) {
    use std::io::Write;
    use tokio::io::AsyncBufReadExt;
    let mut reader = tokio::io::BufReader::new(err);
    loop {
        let mut line = Vec::new();
        match reader.read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        if let Some(line) = held.hold(line) {
            let _ = std::io::stderr().write_all(&line);
        }
    }
}

/// Accepts control connections and forwards every authenticated registration. With
/// `stall` (the failure detector's timeout), a connection whose data goes unanswered
/// that long breaks (`TCP_USER_TIMEOUT`): the node server's host is gone or cut off.
async fn accept_loop(
    listener: TcpListener,
    secret: Vec<u8>,
    num_nodes: u32,
    stall: Option<Duration>,
    tx: mpsc::UnboundedSender<Event>,
) {
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!("control listener: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        if let Err(e) = cohort_os::set_tcp_user_timeout(&stream, stall) {
            tracing::warn!(%peer, error = %e, "cannot set TCP_USER_TIMEOUT on a control connection");
        }
        let secret = secret.clone();
        let tx = tx.clone();
        tokio::spawn(async move {
            match control::handshake(stream, &secret, num_nodes).await {
                Ok(reg) => {
                    let _ = tx.send(Event::Registered(reg));
                }
                Err(why) => {
                    tracing::warn!(%peer, "refused a control connection: {why}");
                    crate::say(format_args!(
                        "refused a control connection from {peer}: {why}"
                    ));
                }
            }
        });
    }
}

/// Copies srun's stderr to ours line by line (it carries the node servers' and their
/// ranks' stderr too), and turns srun's reports of tasks that ended into
/// `DaemonExited` (task i is node server i).
async fn relay_srun_stderr(err: tokio::process::ChildStderr, tx: mpsc::UnboundedSender<Event>) {
    use std::io::Write;
    use tokio::io::AsyncBufReadExt;
    let mut reader = tokio::io::BufReader::new(err);
    let mut line = Vec::new();
    loop {
        line.clear();
        match reader.read_until(b'\n', &mut line).await {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let _ = std::io::stderr().write_all(&line);
        if let Some((node, how)) = slurm::task_exit(&String::from_utf8_lossy(&line)) {
            let _ = tx.send(Event::DaemonExited { node, how });
        }
    }
}

/// std's exit status in the wire form.
pub fn rank_status(st: std::process::ExitStatus) -> ExitStatus {
    use std::os::unix::process::ExitStatusExt;
    ExitStatus {
        code: st.code(),
        signal: st.signal(),
    }
}

/// Strips control characters from text a node server sent, before it reaches a terminal.
fn printable(s: &str) -> String {
    s.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .take(1000)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Over ssh the ranks do not inherit this launcher's environment, so none of it
    /// counts as a setting they get; locally and under Slurm it does.
    #[test]
    fn over_ssh_the_launchers_environment_is_not_the_ranks() {
        std::env::var_os("PATH").expect("tests run with a PATH");
        assert_eq!(ranks_env(true, "PATH"), None);
        assert_eq!(ranks_env(false, "PATH"), std::env::var_os("PATH"));
    }

    #[test]
    fn the_displayed_map_lists_each_node_servers_ranks() {
        let mut job = job_map_with_counts(cohort_topology::MapBy::Slot, "ns", &[3, 2, 0]);
        let map = display_map(&job, "-N 3");
        let lines: Vec<&str> = map.lines().collect();
        assert_eq!(
            lines[1..5],
            [
                "job ns: 5 ranks on 3 node servers (-N 3)",
                "  node0: 3 ranks: 0-2",
                "  node1: 2 ranks: 3-4",
                "  node2: 0 ranks",
            ]
        );
        assert!(
            lines[0].contains("JOB MAP") && lines[5].starts_with("===="),
            "{map}"
        );
        job.set_apps(vec![2, 3]).unwrap();
        let map = display_map(&job, "x");
        assert!(
            map.contains("  node0: 3 ranks: 0-1 (app 0), 2 (app 1)\n"),
            "{map}"
        );
        assert!(map.contains("  node1: 2 ranks: 3-4 (app 1)\n"), "{map}");
    }

    /// Under Slurm each node's tasks are its slots: `salloc -N 2 -n 4` may give 3 and
    /// 1, and 4 ranks then run as srun's 4 tasks would, not 2 and 2. More ranks than
    /// tasks fill them and spread the rest; no per-node counts leave --map-by to it.
    #[test]
    fn under_slurm_the_allocations_tasks_are_each_nodes_slots() {
        let alloc = |tasks: Vec<u32>| slurm::Allocation {
            job_id: "1".into(),
            nodelist: "n[1-3]".into(),
            num_nodes: Some(3),
            tasks: None,
            tasks_per_node: tasks,
            cpus_per_node: Vec::new(),
        };
        let names: Vec<String> = ["n1", "n2", "n3"].map(String::from).into();
        let uneven = alloc(vec![3, 1, 2]);
        assert_eq!(
            slurm_slot_counts(6, &uneven, &names),
            Ok(Some(vec![3, 1, 2]))
        );
        assert_eq!(
            slurm_slot_counts(4, &uneven, &names),
            Ok(Some(vec![2, 1, 1]))
        );
        assert_eq!(
            slurm_slot_counts(8, &uneven, &names),
            Ok(Some(vec![4, 2, 2]))
        );
        // --nodes 2: the first two nodes' tasks
        assert_eq!(
            slurm_slot_counts(4, &uneven, &names[..2]),
            Ok(Some(vec![3, 1]))
        );
        assert_eq!(slurm_slot_counts(4, &alloc(vec![]), &names), Ok(None));
    }

    #[test]
    fn k_ranks_per_node_server_fill_them_in_turn() {
        assert_eq!(per_node_counts(6, 2, 3), Ok(vec![2, 2, 2]));
        assert_eq!(per_node_counts(3, 2, 3), Ok(vec![2, 1, 0]));
        assert_eq!(per_node_counts(1, 4, 2), Ok(vec![1, 0]));
        let e = per_node_counts(7, 2, 3).unwrap_err();
        assert!(e.contains("7 ranks") && e.contains("at most 6"), "{e}");
        let host = |name: &str, slots| ssh::Host {
            user: None,
            name: name.into(),
            slots,
        };
        let hosts = [host("a", None), host("b", Some(1)), host("c", Some(2))];
        assert_eq!(check_slots(&[2, 1, 2], 2, &hosts), Ok(()));
        let e = check_slots(&[2, 2, 2], 2, &hosts).unwrap_err();
        assert!(e.contains("host b has 1 slot"), "{e}");
    }
}
