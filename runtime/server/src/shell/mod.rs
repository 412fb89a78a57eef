//! cohortd's process shell: takes the secrets out of the environment, binds the node
//! service, registers with the launcher, starts and watches this node's ranks, forwards
//! their output, and stops everything on `Shutdown`, a signal or a lost launcher.
//!
//! Everything runs on one thread (current-thread runtime + `LocalSet`): the node
//! service needs it, and ranks' parent-death signal is tied to the spawning thread.

mod args;
mod control;
mod guard;
mod output;
mod placement;
mod procs;
mod ranks;

use cohort_os::TerminatingSignals;
use std::fmt;
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use cohort_core::DetectorConfig;
use cohort_proto::control::{DaemonMsg, LauncherMsg, RegisterExchange, StackTrace};
use cohort_proto::env::{self, from_hex, to_hex};
use cohort_proto::{JobMap, NodeId, RankSet};
use cohort_server::{NodeService, ServiceConfig};
use cohort_topology::{hostlist, BindTo, Locality, NicInfo, NicKind, SwitchMap};
use cohort_transport::{VerbsOptions, DEVICE_ENV};
use tokio::net::tcp::OwnedWriteHalf;
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::time::{sleep_until, Instant};

use args::DaemonArgs;
use control::FromLauncher;
use output::{OutputSink, Stream};
use placement::NodePlacement;
use ranks::{RankExit, RankTemplate, Ranks};

/// Ranks get this long between SIGTERM and SIGKILL.
const RANK_GRACE: Duration = Duration::from_secs(2);
/// Bound on waiting for SIGKILLed ranks to be reaped.
const KILL_WAIT: Duration = Duration::from_secs(2);
/// Bound on the node service's goodbye.
const SERVICE_SHUTDOWN: Duration = Duration::from_secs(2);
/// Bound on connecting to the launcher.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Bound on flushing forwarded output at exit.
const OUTPUT_FLUSH: Duration = Duration::from_secs(2);

/// Writes `cohortd: <msg>` to stderr, ignoring a closed stderr (the launcher may be
/// gone; that must not turn into a panic).
pub(crate) fn say(msg: fmt::Arguments<'_>) {
    // One write per message, so lines from concurrent processes do not interleave.
    let line = format!("cohortd: {msg}\n");
    let _ = std::io::stderr().write_all(line.as_bytes());
}

/// The per-job secrets, taken from (and removed from) the environment.
struct Secrets {
    job_secret: Vec<u8>,
    client_token: Vec<u8>,
}

impl Secrets {
    /// Reads and unsets both variables. Must run before any thread is started.
    fn take_from_env() -> Result<Secrets, String> {
        let secret = std::env::var_os(env::JOB_SECRET);
        let token = std::env::var_os(env::CLIENT_TOKEN);
        std::env::remove_var(env::JOB_SECRET);
        std::env::remove_var(env::CLIENT_TOKEN);
        Ok(Secrets {
            job_secret: decode_secret(env::JOB_SECRET, secret)?,
            client_token: decode_secret(env::CLIENT_TOKEN, token)?,
        })
    }
}

impl Secrets {
    /// Over ssh: reads `SECRET TOKEN` (hex) as one line from stdin, at most
    /// [`MAX_SECRET_LINE`] bytes, byte by byte so that nothing after it is consumed.
    /// The variables are removed from the environment all the same.
    fn read_line_from(mut input: impl std::io::Read) -> Result<Secrets, String> {
        std::env::remove_var(env::JOB_SECRET);
        std::env::remove_var(env::CLIENT_TOKEN);
        let mut line = Vec::new();
        let mut byte = [0u8; 1];
        loop {
            match input.read(&mut byte) {
                Ok(0) => {
                    return Err("stdin ended before the job secret (cohortd --ssh reads it \
                                from `cohort run` over ssh)"
                        .into())
                }
                Ok(_) if byte[0] == b'\n' => break,
                Ok(_) if line.len() >= MAX_SECRET_LINE => {
                    return Err("the secret line on stdin is too long".into())
                }
                Ok(_) => line.push(byte[0]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(format!("cannot read the job secret from stdin: {e}")),
            }
        }
        let line = String::from_utf8_lossy(&line);
        let mut words = line.split_whitespace();
        let (Some(secret), Some(token), None) = (words.next(), words.next(), words.next()) else {
            return Err("the secret line on stdin is not `SECRET TOKEN`".into());
        };
        Ok(Secrets {
            job_secret: decode_secret(env::JOB_SECRET, Some(secret.into()))?,
            client_token: decode_secret(env::CLIENT_TOKEN, Some(token.into()))?,
        })
    }
}

/// Longest secret line `cohortd --ssh` reads (two hex strings and a space).
const MAX_SECRET_LINE: usize = 1024;

/// Over ssh: a thread that reads stdin until it ends — the launcher's ssh session is
/// gone (the launcher died, or killed its ssh) — and then stops this node server as
/// SIGTERM would (its ranks are stopped, its directories removed).
fn watch_stdin(node_name: String) {
    let spawned = std::thread::Builder::new()
        .name("stdin-watch".into())
        .spawn(move || {
            use std::io::Read;
            let mut buf = [0u8; 256];
            let mut stdin = std::io::stdin().lock();
            loop {
                match stdin.read(&mut buf) {
                    Ok(0) => break,
                    Ok(_) => {}
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(_) => break,
                }
            }
            say(format_args!(
                "{node_name}: the launcher's ssh session ended (stdin closed); stopping"
            ));
            // SAFETY: kill on our own pid; the signal handler stops us cleanly.
            unsafe { libc::kill(libc::getpid(), libc::SIGTERM) };
        });
    if let Err(e) = spawned {
        say(format_args!("cannot watch stdin: {e}"));
    }
}

fn decode_secret(name: &str, value: Option<std::ffi::OsString>) -> Result<Vec<u8>, String> {
    let value =
        value.ok_or_else(|| format!("{name} is not set (cohortd is started by `cohort run`)"))?;
    value
        .to_str()
        .and_then(from_hex)
        .filter(|b| !b.is_empty())
        .ok_or_else(|| format!("{name} is not a non-empty hex string"))
}

/// Entry point; returns the process exit status.
pub fn main() -> i32 {
    let mut raw = std::env::args();
    if raw.nth(1).as_deref() == Some(guard::GUARD_ARG) {
        return guard::run(&raw.next().unwrap_or_default());
    }
    let argv = match args::expand_slurm(std::env::args_os().collect(), |k| std::env::var(k).ok()) {
        Ok(argv) => argv,
        Err(e) => {
            say(format_args!("{e}"));
            return 2;
        }
    };
    let args = DaemonArgs::parse_from(argv);
    if args.slurm {
        // Before any thread: the step's per-task variables are not the ranks'.
        for var in args::SLURM_TASK_VARS {
            std::env::remove_var(var);
        }
    }
    let secrets = if args.ssh {
        Secrets::read_line_from(std::io::stdin().lock())
    } else {
        Secrets::take_from_env()
    };
    let secrets = match secrets {
        Ok(s) => s,
        Err(e) => {
            say(format_args!("{e}"));
            return 2;
        }
    };
    if let Err(e) = args.validate() {
        say(format_args!("{e}"));
        return 2;
    }
    if let Err(e) = args.check_pmix_libdir(&cohort_os::host_name()) {
        say(format_args!("{e}"));
        return 1;
    }
    cohort_os::init_tracing();
    cohort_os::raise_fd_limit();

    let stdout = OutputSink::spawn(Stream::Stdout);
    let stderr = OutputSink::spawn(Stream::Stderr);
    let (stdout, stderr) = match (stdout, stderr) {
        (Ok(o), Ok(e)) => (o, e),
        (Err(e), _) | (_, Err(e)) => {
            say(format_args!("cannot start the output threads: {e}"));
            return 1;
        }
    };
    // After the output threads (they keep every CPU), before the runtime: this thread
    // is the progress thread.
    let span = tracing::info_span!("cohortd", node = %args.node_name);
    let placement = span.in_scope(|| {
        let placement = NodePlacement::discover(args.slot_unit(), args.cpu_set.clone());
        placement.bind_progress_thread();
        placement
    });
    if let Err(e) = placement
        .check_cpu_set()
        .and_then(|()| placement.check_rank_map(&args))
    {
        say(format_args!("{}: {e}", args.node_name));
        return 1;
    }
    let rt = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            say(format_args!("cannot start the async runtime: {e}"));
            return 1;
        }
    };
    let local = tokio::task::LocalSet::new();
    let (stdout, stderr) = (Rc::new(stdout), Rc::new(stderr));
    // The daemon's main future runs as a task of its own: `LocalSet::block_on` polls
    // the future it is given whenever any task of the set is woken — on every turn of
    // a polling node server — and this one selects over signals, the launcher and the
    // ranks each time it is polled.
    let main = {
        let (stdout, stderr) = (stdout.clone(), stderr.clone());
        local.spawn_local(async move {
            let _enter = span.enter();
            run(args, secrets, &placement, &stdout, &stderr).await
        })
    };
    let code = local.block_on(&rt, main).unwrap_or_else(|e| {
        say(format_args!("the daemon's main task failed: {e}"));
        1
    });
    // Dropping the runtime drops the forwarding tasks and with them the last senders,
    // so the writer threads can drain and stop.
    drop(local);
    drop(rt);
    // The main task dropped its references when it completed.
    for sink in [stdout, stderr] {
        if let Ok(sink) = Rc::try_unwrap(sink) {
            sink.close(OUTPUT_FLUSH);
        }
    }
    code
}

/// Why cohortd stops.
#[derive(Debug)]
enum End {
    /// The launcher said so.
    Shutdown,
    /// The launcher is gone (or unusable).
    LauncherLost(String),
    Signal(i32),
    /// Something on our side broke; the launcher was told with `Fatal`.
    Fatal(String),
}

impl End {
    fn exit_code(&self) -> i32 {
        match self {
            End::Shutdown => 0,
            End::LauncherLost(_) | End::Fatal(_) => 1,
            End::Signal(sig) => 128 + sig,
        }
    }
}

async fn run(
    args: DaemonArgs,
    secrets: Secrets,
    placement: &NodePlacement,
    stdout: &OutputSink,
    stderr: &OutputSink,
) -> i32 {
    let node_name = args.node_name.clone();
    // Built exactly as the launcher built it, so every process agrees on the map
    // (`validate` checked that it can be built, and the application contexts cut).
    let (mut job, apps) = match (args.job(), args.app_commands()) {
        (Ok(job), Ok(apps)) => (job, apps),
        (Err(e), _) | (_, Err(e)) => {
            say(format_args!("{node_name}: {e}"));
            return 2;
        }
    };
    job.node_names[args.node as usize] = node_name.clone();
    let token_hex = to_hex(&secrets.client_token);
    let job_secret = secrets.job_secret.clone();
    let verbs = verbs_options(&args, placement.nic.as_ref());
    let Some((svc, socket_dir)) = bind_service(&args, &job, secrets, verbs).await else {
        return 1;
    };
    // Served as `pmix.hwlocxml2`: local processes load it instead of discovering the host.
    svc.set_local_topology(placement.hwloc_xml().map(str::to_string));
    let mut signals = match TerminatingSignals::new() {
        Ok(s) => s,
        Err(e) => {
            say(format_args!(
                "{node_name}: cannot install signal handlers: {e}"
            ));
            return finish(&svc, &socket_dir, &args, End::Fatal(e.to_string())).await;
        }
    };
    if args.ssh {
        // After the handlers: its SIGTERM is handled like any other.
        watch_stdin(node_name.clone());
    }
    let (link, mut from_launcher, start_env) = match await_start(
        &args,
        &job,
        &job_secret,
        &svc,
        placement.cores(),
        &mut signals,
    )
    .await
    {
        Ok(started) => started,
        Err(end) => return finish(&svc, &socket_dir, &args, end).await,
    };
    // The job's -x variables, then what the launcher chose once it knew every node.
    let mut exports = args.export.clone();
    exports.extend(start_env.into_iter().map(|(k, v)| (k.into(), v.into())));

    let (exit_tx, mut exits) = mpsc::unbounded_channel();
    let bindings = placement.rank_bindings(&args, &job);
    let template = RankTemplate {
        bindings,
        unbound_cpus: placement.unbound_cpus().cloned(),
        job,
        node: args.node,
        apps,
        exports,
        spin_us: args.spin_us,
        allgather: args.allgather,
        server_uri: svc.socket_path(),
        token_hex,
        tag_output: args.tag_output,
        timestamp_output: args.timestamp_output,
        merge_stderr: args.merge_stderr_to_stdout,
        output_dir: args.output_dir.clone(),
        stdin: args.stdin,
        ompi_env: args.pmix_libdir.is_some(),
    };
    let nspace = template.job.nspace.to_string();
    let mut ranks = Ranks::new(
        template,
        exit_tx,
        guard::Guard::start(&node_name, &socket_dir),
    )
    .with_layout(placement.layout(), args.map_by, args.cpus_per_rank)
    .with_topology(placement.topology())
    .reporting_bindings(args.report_bindings);
    // Before any rank can connect: each learns its local peers' locality at once.
    svc.set_local_bindings(&nspace, ranks.local_bindings(0));
    ranks.launch_all(stdout, stderr);

    let mut link = Some(link);
    let end = serve(
        &svc,
        &mut ranks,
        &mut link,
        &mut from_launcher,
        &mut exits,
        &mut signals,
        args.detector(),
        (stdout, stderr),
    )
    .await;
    match &end {
        End::Shutdown => tracing::debug!("shutdown requested"),
        End::LauncherLost(why) => say(format_args!(
            "{node_name}: lost the launcher ({why}); stopping {} rank(s)",
            ranks.running()
        )),
        End::Signal(sig) => tracing::info!(sig, "terminating on a signal"),
        End::Fatal(why) => say(format_args!("{node_name}: {why}")),
    }
    if matches!(end, End::LauncherLost(_)) {
        link = None;
    }
    stop_ranks(&svc, &mut ranks, &mut link, &mut exits).await;
    finish(&svc, &socket_dir, &args, end).await
}

/// The verbs device, port and GID: `--ib-device` / `--ib-gid-index`, else
/// `COHORT_IB_DEVICE` / `COHORT_IB_GID_INDEX` (filled in by the fabric), else the
/// preferred NIC when it is an OpenFabrics device not known to be down — the device
/// the progress thread sits near — else the fabric's default (the first active one).
fn verbs_options(args: &DaemonArgs, nic: Option<&NicInfo>) -> VerbsOptions {
    let mut opts = VerbsOptions {
        gid_index: args.ib_gid_index,
        ..VerbsOptions::default()
    };
    if let Some((name, port)) = &args.ib_device {
        opts.device = Some(name.clone());
        opts.port = *port;
    } else if std::env::var(DEVICE_ENV).map_or(true, |v| v.trim().is_empty()) {
        if let Some(nic) = nic.filter(|n| n.kind == NicKind::OpenFabrics && n.active != Some(false))
        {
            tracing::info!(device = %nic.name, "verbs: preferring the RDMA device nearest this node server");
            opts.device = Some(nic.name.clone());
        }
    }
    opts
}

/// Creates the private socket directory and binds the node service in it.
async fn bind_service(
    args: &DaemonArgs,
    job: &JobMap,
    secrets: Secrets,
    verbs: VerbsOptions,
) -> Option<(NodeService, PathBuf)> {
    let socket_dir = args.job_dir.join(format!("node{}", args.node));
    // Under Slurm or over ssh the launcher's job directory is on its own host: on
    // every other node the first node server there makes it.
    if args.slurm || args.ssh {
        if let Err(e) = ensure_job_dir(&args.job_dir) {
            say(format_args!(
                "{}: cannot create the job directory {}: {e}",
                args.node_name,
                args.job_dir.display()
            ));
            return None;
        }
    }
    if let Err(e) = create_private_dir(&socket_dir) {
        say(format_args!(
            "{}: cannot create the socket directory {}: {e}",
            args.node_name,
            socket_dir.display()
        ));
        return None;
    }
    let switches = match &args.topology {
        Some(path) => match load_switch_map(path, job) {
            Ok(map) => Some(Arc::new(map)),
            Err(e) => {
                say(format_args!("{}: {e}", args.node_name));
                remove_dir(&socket_dir);
                return None;
            }
        },
        None => None,
    };
    let cfg = ServiceConfig {
        node: args.node,
        job: job.clone(),
        job_secret: secrets.job_secret,
        client_token: secrets.client_token,
        fabric_listen: args.listen,
        socket_dir: socket_dir.clone(),
        switches,
        verbs,
        spin: Duration::from_micros(args.spin_us),
        shm_fence: !args.no_shm_fence,
        allgather: args.allgather,
        detector: args.detector(),
    };
    match NodeService::bind(cfg).await {
        Ok(svc) => {
            tracing::debug!(
                fabric = %svc.fabric_addr(),
                socket = %svc.socket_path().display(),
                "node service bound"
            );
            Some((svc, socket_dir))
        }
        Err(e) => {
            say(format_args!(
                "{}: cannot start the node service (fabric on {}): {e}",
                args.node_name, args.listen
            ));
            remove_dir(&socket_dir);
            None
        }
    }
}

/// Reads the switch map and says how the job's nodes sit on it. The launcher has
/// checked the file already and warned about nodes it does not list.
fn load_switch_map(
    path: &Path,
    job: &JobMap,
) -> Result<SwitchMap, cohort_topology::TopologyFileError> {
    let map = SwitchMap::from_file(path)?;
    for w in map.warnings() {
        tracing::debug!(file = %path.display(), "{w}");
    }
    let locality = Locality::new(&map, &job.node_names);
    let unknown: Vec<&str> = locality
        .unknown()
        .into_iter()
        .map(|n| job.node_names[n as usize].as_str())
        .collect();
    tracing::info!(
        file = %path.display(),
        switches = map.switch_count(),
        leaf_switches = locality.leaf_switches(),
        "collective trees are hierarchical (switch leaders first)"
    );
    if !unknown.is_empty() {
        tracing::debug!(
            nodes = %hostlist::compress(&unknown),
            "nodes not on the switch map"
        );
    }
    Ok(map)
}

/// The launcher's connection once it said Start, and the variables it added for the
/// ranks.
type Started = (
    OwnedWriteHalf,
    mpsc::UnboundedReceiver<FromLauncher>,
    Vec<(String, String)>,
);

/// Registers with the launcher, waits for the peer list and starts the service on it.
/// `Err` says why the node server stops before any rank ran.
async fn await_start(
    args: &DaemonArgs,
    job: &JobMap,
    job_secret: &[u8],
    svc: &NodeService,
    cores: u32,
    signals: &mut TerminatingSignals,
) -> Result<Started, End> {
    let (mut link, mut from_launcher) =
        connect(args, job_secret, svc, cores).await.map_err(|e| {
            say(format_args!(
                "{}: cannot register with the launcher at {}: {e}",
                args.node_name, args.control
            ));
            End::LauncherLost(e)
        })?;
    let (peers, env, digest) = loop {
        tokio::select! {
            ev = from_launcher.recv() => match ev.unwrap_or(FromLauncher::Closed(None)) {
                FromLauncher::Msg(LauncherMsg::Start { peers, env, universe, job_digest }) => {
                    svc.set_universe(universe);
                    break (peers, env, job_digest);
                }
                FromLauncher::Msg(LauncherMsg::Heartbeat) => continue,
                FromLauncher::Msg(LauncherMsg::Shutdown) => return Err(End::Shutdown),
                FromLauncher::Msg(LauncherMsg::Ending) => {
                    // Stopped before it started: no peer to expect anything of yet.
                    svc.job_ending();
                    let _ = control::send(&mut link, &DaemonMsg::Ending).await;
                    continue;
                }
                FromLauncher::Msg(other) => {
                    return Err(End::Fatal(format!("the launcher sent {other:?} before Start")));
                }
                FromLauncher::Closed(e) => {
                    return Err(End::LauncherLost(e.unwrap_or_else(|| "connection closed".into())));
                }
            },
            sig = signals.recv() => return Err(End::Signal(sig)),
        }
    };
    let own_digest = job.digest();
    let mismatch = if peers.len() != args.nodes as usize {
        Some(format!(
            "the launcher sent {} peer addresses for {} nodes",
            peers.len(),
            args.nodes
        ))
    } else if digest != own_digest {
        // A bug (both build the map from the same arguments): say so rather than
        // wait for ranks the others place elsewhere.
        Some(format!(
            "its map of job {} (digest {own_digest:016x}: {} ranks, here {}) differs from \
             the launcher's (digest {digest:016x}); not starting",
            job.nspace,
            job.size(),
            RankSet::from_ranks(job.ranks_on(args.node))
        ))
    } else {
        None
    };
    if let Some(reason) = mismatch {
        let fatal = DaemonMsg::Fatal {
            reason: reason.clone(),
        };
        let _ = control::send(&mut link, &fatal).await;
        say(format_args!("{}: {reason}", args.node_name));
        return Err(End::Fatal(reason));
    }
    svc.start(peers);
    Ok((link, from_launcher, env))
}

/// Debug builds only, for the cluster tests: `COHORT_TEST_HOLD_START_JOB=NODE:MS`
/// makes node server NODE wait MS milliseconds before it starts a spawned job's
/// processes (and reads its next control message), as a server too slow to answer
/// `StartJob` would: the only way to cancel a spawn in its starting phase on purpose.
/// Release builds ignore it.
async fn hold_start_for_tests(node: NodeId) {
    hold_for_tests("COHORT_TEST_HOLD_START_JOB", "StartJob", node).await
}

/// Debug builds only, for the cluster tests: `VAR=NODE:MS` makes node server NODE
/// wait MS milliseconds before it acts on the launcher's `what` (and reads its next
/// control message); its service (fabric, failure detector) runs on meanwhile.
/// `COHORT_TEST_HOLD_START_JOB` (see [`hold_start_for_tests`]) and
/// `COHORT_TEST_HOLD_SHUTDOWN` (a server slow to shut down while the others are gone).
/// Release builds ignore them.
async fn hold_for_tests(var: &str, what: &str, node: NodeId) {
    if !cfg!(debug_assertions) {
        return;
    }
    let Ok(v) = std::env::var(var) else {
        return;
    };
    let hold = v
        .split_once(':')
        .and_then(|(n, ms)| Some((n.parse::<NodeId>().ok()?, ms.parse::<u64>().ok()?)));
    if let Some((n, ms)) = hold.filter(|&(n, _)| n == node) {
        tracing::info!(node = n, ms, "holding {what} ({var})");
        tokio::time::sleep(Duration::from_millis(ms)).await;
    }
}

/// Runs the job on this node: reports rank exits until the launcher, a signal or a
/// broken control connection ends it. `link` is `None` afterwards if it broke. With
/// the failure `detector` (the launcher then sends heartbeats), a launcher silent for
/// its timeout is lost too.
#[allow(clippy::too_many_arguments)]
async fn serve(
    svc: &NodeService,
    ranks: &mut Ranks,
    link: &mut Option<OwnedWriteHalf>,
    from_launcher: &mut mpsc::UnboundedReceiver<FromLauncher>,
    exits: &mut mpsc::UnboundedReceiver<RankExit>,
    signals: &mut TerminatingSignals,
    detector: Option<DetectorConfig>,
    (stdout, stderr): (&OutputSink, &OutputSink),
) -> End {
    let launcher_timeout = detector.map(|d| d.timeout);
    tell(link, &DaemonMsg::Launched).await;
    let mut reports = svc.reports();
    let mut heard = tokio::time::Instant::now();
    let (stdin_taken, mut stdin_acks) = mpsc::unbounded_channel::<()>();
    let (traces_done, mut traces) = mpsc::unbounded_channel::<DaemonMsg>();
    loop {
        if link.is_none() {
            return End::LauncherLost("cannot write to the control connection".into());
        }
        let silence_ends = launcher_timeout.map(|t| heard + t);
        tokio::select! {
            _ = tokio::time::sleep_until(silence_ends.unwrap_or(heard)), if silence_ends.is_some() => {
                let t = launcher_timeout.unwrap_or_default();
                return End::LauncherLost(format!(
                    "no message from the launcher for {:.1} s",
                    t.as_secs_f64()
                ));
            }
            Some(msg) = async { reports.as_mut()?.recv().await } => tell(link, &msg).await,
            Some(()) = stdin_acks.recv() => tell(link, &DaemonMsg::StdinTaken).await,
            Some(msg) = traces.recv() => tell(link, &msg).await,
            ev = from_launcher.recv() => {
                let ev = ev.unwrap_or(FromLauncher::Closed(None));
                if matches!(ev, FromLauncher::Msg(_)) {
                    // Any message counts as a heartbeat.
                    heard = tokio::time::Instant::now();
                }
                match ev {
                    FromLauncher::Msg(LauncherMsg::Heartbeat) => {}
                    FromLauncher::Msg(LauncherMsg::Shutdown) => {
                        hold_for_tests("COHORT_TEST_HOLD_SHUTDOWN", "Shutdown", svc.node()).await;
                        return End::Shutdown;
                    }
                    FromLauncher::Msg(LauncherMsg::Ending) => {
                        svc.job_ending();
                        tell(link, &DaemonMsg::Ending).await;
                    }
                    FromLauncher::Msg(LauncherMsg::PeerLost { node }) => svc.peer_lost(node),
                    FromLauncher::Msg(LauncherMsg::PeerGone { node }) => {
                        // A heartbeat period (the launcher sends this only with the
                        // detector on).
                        let grace = detector.unwrap_or(DetectorConfig::DEFAULT).period;
                        svc.peer_gone(node, grace);
                    }
                    FromLauncher::Msg(LauncherMsg::KeepWatching { node }) => svc.keep_watching(node),
                    FromLauncher::Msg(LauncherMsg::DataReply { token, result }) => {
                        svc.data_answer(token, result)
                    }
                    FromLauncher::Msg(LauncherMsg::Stdin { data }) => ranks.feed_stdin(data, &stdin_taken),
                    FromLauncher::Msg(LauncherMsg::StdinEnd) => ranks.end_stdin(),
                    FromLauncher::Msg(LauncherMsg::AddJob { index, job, parent, apps, env, bind }) => {
                        let env = env.into_iter().nth(svc.node() as usize).unwrap_or_default();
                        // The policy and this node's slots, if it binds here.
                        let bind = bind.and_then(|b| {
                            let slots = b.slots.into_iter().nth(svc.node() as usize)?;
                            let policy = b.bind_to.parse::<BindTo>().ok()?;
                            (policy != BindTo::None && !slots.is_empty())
                                .then_some((policy, slots, b.per_proc))
                        });
                        // The engine first: it checks the job and the index.
                        let nspace = job.nspace.to_string();
                        let result = svc
                            .add_job(index, job.clone(), parent)
                            .and_then(|()| ranks.add_job(index, job, &apps, env, bind));
                        if result.is_ok() {
                            svc.set_local_bindings(&nspace, ranks.local_bindings(index));
                        }
                        if let Err(e) = &result {
                            tracing::warn!(index, error = %e, "refusing a spawned job");
                        }
                        tell(link, &DaemonMsg::JobAdded { index, result }).await;
                    }
                    FromLauncher::Msg(LauncherMsg::JobEnded { index, parent, exit_code }) => {
                        svc.job_ended(index, parent, exit_code);
                    }
                    FromLauncher::Msg(LauncherMsg::StartJob { index }) => {
                        hold_start_for_tests(svc.node()).await;
                        ranks.launch_job(index, stdout, stderr);
                        svc.job_started(index);
                        tell(link, &DaemonMsg::JobStarted { index }).await;
                    }
                    FromLauncher::Msg(LauncherMsg::JobGone { index }) => svc.job_gone(index),
                    FromLauncher::Msg(LauncherMsg::CancelJob { index }) => {
                        svc.job_gone(index);
                        let killed = ranks.cancel_job(index);
                        tracing::info!(index, killed, "spawned job cancelled (its spawn timed out)");
                    }
                    FromLauncher::Msg(LauncherMsg::Survey { token, except, within_ms }) => {
                        svc.survey(token, except, Duration::from_millis(within_ms));
                    }
                    FromLauncher::Msg(LauncherMsg::StackTraces) => {
                        let done = traces_done.clone();
                        let running = ranks.running_pids();
                        tokio::task::spawn_local(async move {
                            let traces = stack_traces(running).await;
                            let _ = done.send(DaemonMsg::StackTraces { traces });
                        });
                    }
                    FromLauncher::Msg(LauncherMsg::Probe) => {
                        let silent_ms = svc
                            .unheard()
                            .map_or(u64::MAX, |d| d.as_millis().try_into().unwrap_or(u64::MAX));
                        tell(link, &DaemonMsg::Heard { silent_ms }).await;
                    }
                    FromLauncher::Msg(other) => {
                        tracing::warn!(?other, "ignoring an unexpected control message");
                    }
                    FromLauncher::Closed(e) => {
                        return End::LauncherLost(e.unwrap_or_else(|| "connection closed".into()));
                    }
                }
            }
            Some(exit) = exits.recv() => handle_exit(svc, ranks, link, exit).await,
            sig = signals.recv() => return End::Signal(sig),
        }
    }
}

/// SIGTERM, grace, SIGKILL, then whatever is left in the ranks' process groups. Exits
/// seen meanwhile are still reported while the launcher listens.
/// How long gdb may take to print one rank's stack.
const STACK_TRACE_LIMIT: Duration = Duration::from_secs(20);

/// The stacks of `running` ranks ((job, rank, pid)), each printed by gdb attached to
/// it (all at once, each within [`STACK_TRACE_LIMIT`]), or why not (no gdb on this
/// host, no permission to attach, too slow).
async fn stack_traces(running: Vec<(u32, cohort_proto::Rank, u32)>) -> Vec<StackTrace> {
    let mut tasks = Vec::new();
    for (job, rank, pid) in running {
        tasks.push((
            job,
            rank,
            pid,
            tokio::task::spawn_local(async move {
                let gdb = tokio::process::Command::new("gdb")
                    .args(["-batch", "-nx", "-q", "-p"])
                    .arg(pid.to_string())
                    .args(["-ex", "thread apply all bt"])
                    .env("LC_ALL", "C")
                    .stdin(std::process::Stdio::null())
                    .kill_on_drop(true)
                    .output();
                match tokio::time::timeout(STACK_TRACE_LIMIT, gdb).await {
                    Ok(Ok(out)) => {
                        let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
                        text.push_str(&String::from_utf8_lossy(&out.stderr));
                        text
                    }
                    Ok(Err(e)) if e.kind() == std::io::ErrorKind::NotFound => {
                        "gdb is not installed on this host (it prints the stacks)".to_string()
                    }
                    Ok(Err(e)) => format!("cannot run gdb: {e}"),
                    Err(_) => format!(
                        "gdb took more than {} s; given up",
                        STACK_TRACE_LIMIT.as_secs()
                    ),
                }
            }),
        ));
    }
    let mut traces = Vec::with_capacity(tasks.len());
    for (job, rank, pid, task) in tasks {
        let text = task
            .await
            .unwrap_or_else(|e| format!("gdb task failed: {e}"));
        traces.push(StackTrace {
            job,
            rank,
            pid,
            text,
        });
    }
    traces.sort_by_key(|t| (t.job, t.rank));
    traces
}

async fn stop_ranks(
    svc: &NodeService,
    ranks: &mut Ranks,
    link: &mut Option<OwnedWriteHalf>,
    exits: &mut mpsc::UnboundedReceiver<RankExit>,
) {
    ranks.signal_running(libc::SIGTERM);
    drain_exits(svc, ranks, link, exits, RANK_GRACE).await;
    if ranks.running() > 0 {
        tracing::info!(
            left = ranks.running(),
            "ranks ignored SIGTERM; killing them"
        );
        ranks.signal_running(libc::SIGKILL);
        drain_exits(svc, ranks, link, exits, KILL_WAIT).await;
    }
    let leftovers = ranks.kill_leftovers();
    if leftovers > 0 {
        tracing::debug!(leftovers, "killed processes left in rank process groups");
    }
    ranks.dismiss_guard();
}

/// Handles one rank exit: tells the service and, while it listens, the launcher
/// (`link` becomes `None` when writing to it fails).
async fn handle_exit(
    svc: &NodeService,
    ranks: &mut Ranks,
    link: &mut Option<OwnedWriteHalf>,
    exit: RankExit,
) {
    tracing::debug!(job = exit.job, rank = exit.rank, status = ?exit.status, "rank exited");
    ranks.exited(exit.job, exit.rank);
    svc.proc_exited(exit.job, exit.rank);
    let msg = DaemonMsg::RankExited {
        job: exit.job,
        rank: exit.rank,
        status: exit.status,
    };
    tell(link, &msg).await;
}

/// Sends `msg` to the launcher while the control connection works; `link` becomes
/// `None` when writing to it fails.
async fn tell(link: &mut Option<OwnedWriteHalf>, msg: &DaemonMsg) {
    if let Some(w) = link.as_mut() {
        if control::send(w, msg).await.is_err() {
            *link = None;
        }
    }
}

/// Handles rank exits until none is running or `budget` has passed.
async fn drain_exits(
    svc: &NodeService,
    ranks: &mut Ranks,
    link: &mut Option<OwnedWriteHalf>,
    exits: &mut mpsc::UnboundedReceiver<RankExit>,
    budget: Duration,
) {
    let deadline = Instant::now() + budget;
    while ranks.running() > 0 {
        tokio::select! {
            Some(exit) = exits.recv() => handle_exit(svc, ranks, link, exit).await,
            _ = sleep_until(deadline) => return,
        }
    }
}

/// Stops the node service, removes the socket directory (and the job directory when
/// the launcher is gone and we were the last), and returns the exit status.
async fn finish(svc: &NodeService, socket_dir: &Path, args: &DaemonArgs, end: End) -> i32 {
    if tokio::time::timeout(SERVICE_SHUTDOWN, svc.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("the node service did not shut down within {SERVICE_SHUTDOWN:?}");
    }
    remove_dir(socket_dir);
    if args.slurm || args.ssh || matches!(end, End::LauncherLost(_)) {
        // Only succeeds once it is empty, i.e. for the last node server out (under
        // Slurm, the one that made it on its node; the launcher removes its own).
        let _ = std::fs::remove_dir(&args.job_dir);
    }
    end.exit_code()
}

/// Connects to the launcher and registers; returns the write half and the reader's
/// event stream.
async fn connect(
    args: &DaemonArgs,
    job_secret: &[u8],
    svc: &NodeService,
    cores: u32,
) -> Result<(OwnedWriteHalf, mpsc::UnboundedReceiver<FromLauncher>), String> {
    let stream = tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(args.control))
        .await
        .map_err(|_| format!("no answer within {CONNECT_TIMEOUT:?}"))?
        .map_err(|e| e.to_string())?;
    let _ = stream.set_nodelay(true);
    // With the failure detector, a launcher gone or cut off breaks the connection
    // once our data to it goes unanswered for a peer timeout.
    if let Err(e) = cohort_os::set_tcp_user_timeout(&stream, args.detector().map(|d| d.timeout)) {
        tracing::warn!(error = %e, "cannot set TCP_USER_TIMEOUT on the control connection");
    }
    let (mut reader, mut writer) = stream.into_split();
    // Both sides prove the job secret without sending it (cohort_proto::auth): the
    // launcher first, so nothing this server says after it goes to an impostor.
    let nonce = cohort_proto::auth::nonce().map_err(|e| format!("no random nonce: {e}"))?;
    let fabric_addr = svc.fabric_addr();
    let pid = std::process::id();
    let host = cohort_os::host_name();
    let register = DaemonMsg::Register {
        node: args.node,
        nonce,
        fabric_addr: fabric_addr.clone(),
        pid,
        host: host.clone(),
        cores,
    };
    control::send(&mut writer, &register)
        .await
        .map_err(|e| e.to_string())?;
    let challenge = tokio::time::timeout(CONNECT_TIMEOUT, control::read_launcher_msg(&mut reader))
        .await
        .map_err(|_| format!("no challenge within {CONNECT_TIMEOUT:?}"))?
        .map_err(|e| e.to_string())?;
    let Some(LauncherMsg::Challenge {
        nonce: launcher_nonce,
        proof,
    }) = challenge
    else {
        return Err("the launcher did not answer the registration with a challenge".into());
    };
    let exchange = RegisterExchange {
        node: args.node,
        nonce: &nonce,
        fabric_addr: &fabric_addr,
        pid,
        host: &host,
        cores,
        launcher_nonce: &launcher_nonce,
    };
    if !exchange.launcher_proven(job_secret, &proof) {
        return Err("it did not prove it holds this job's secret".into());
    }
    let answer = DaemonMsg::Proof {
        proof: exchange.daemon_proof(job_secret),
    };
    control::send(&mut writer, &answer)
        .await
        .map_err(|e| e.to_string())?;
    let (tx, rx) = mpsc::unbounded_channel();
    tokio::task::spawn_local(control::read_loop(reader, tx));
    Ok((writer, rx))
}

/// Creates `dir` with mode 0700 (tightening it if it already exists).
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let meta = std::fs::symlink_metadata(dir)?;
            if !meta.is_dir() {
                return Err(std::io::Error::other("exists and is not a directory"));
            }
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
        }
        Err(e) => Err(e),
    }
}

/// Makes the job directory (mode 0700) if it does not exist; one that does must be a
/// directory of ours that nobody else may write to.
fn ensure_job_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::MetadataExt;
    match std::fs::DirBuilder::new().mode(0o700).create(dir) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            let meta = std::fs::symlink_metadata(dir)?;
            // SAFETY: getuid has no preconditions and cannot fail.
            let uid = unsafe { libc::getuid() };
            if !meta.is_dir() || meta.uid() != uid || meta.mode() & 0o022 != 0 {
                return Err(std::io::Error::other(
                    "exists, and is not a directory of this user's that only it may write to",
                ));
            }
            Ok(())
        }
        Err(e) => Err(e),
    }
}

fn remove_dir(dir: &Path) {
    match std::fs::remove_dir_all(dir) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => tracing::warn!(dir = %dir.display(), "cannot remove: {e}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_must_be_hex() {
        assert_eq!(
            decode_secret("X", Some("00ff".into())).unwrap(),
            vec![0, 255]
        );
        assert!(decode_secret("X", None).unwrap_err().contains("not set"));
        assert!(decode_secret("X", Some("xyz".into())).is_err());
        assert!(decode_secret("X", Some("".into())).is_err());
    }

    #[test]
    fn secrets_come_as_one_line_on_stdin() {
        let s = Secrets::read_line_from(&b"00ff abcd\nmore"[..]).unwrap();
        assert_eq!(
            (s.job_secret, s.client_token),
            (vec![0, 255], vec![0xab, 0xcd])
        );
        let e = |input: &[u8]| Secrets::read_line_from(input).err().unwrap();
        assert!(e(b"").contains("stdin ended"));
        assert!(e(b"00ff abcd").contains("stdin ended"));
        assert!(e(b"00ff\n").contains("SECRET TOKEN"));
        assert!(e(b"00ff ab cd\n").contains("SECRET TOKEN"));
        assert!(e(b"00ff zz\n").contains("hex"));
        assert!(e(&vec![b'a'; 5000]).contains("too long"));
    }

    #[test]
    fn private_dir_is_0700() {
        let base = std::env::temp_dir().join(format!("cohortd-test-{}", std::process::id()));
        std::fs::create_dir_all(&base).unwrap();
        std::fs::set_permissions(&base, std::fs::Permissions::from_mode(0o755)).unwrap();
        create_private_dir(&base).unwrap();
        let mode = std::fs::metadata(&base).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        let fresh = base.join("node0");
        create_private_dir(&fresh).unwrap();
        let mode = std::fs::metadata(&fresh).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        std::fs::remove_dir_all(&base).unwrap();
    }
}
