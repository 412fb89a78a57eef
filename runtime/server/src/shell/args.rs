//! cohortd's command line, as `cohort run` writes it. Secrets are not here: they come
//! from the environment (see `Secrets` in the shell module).

use std::ffi::OsString;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::time::Duration;

use clap::builder::TypedValueParser as _;
use clap::Parser;
use cohort_core::DetectorConfig;
use cohort_proto::{JobMap, RankSet};
use cohort_topology::placement::{job_map, job_map_with_counts};
use cohort_topology::rankfile::RankMap;
use cohort_topology::{Allgather, BindTo, MapBy};

/// cohortd — the cohort node server (started by `cohort run`, not by hand)
#[derive(Clone, Debug, Parser)]
#[command(
    name = "cohortd",
    version,
    about = "cohortd — the cohort node server (one per node and job; started by `cohort run`)",
    after_help = "The job secret and client token are read from COHORT_JOB_SECRET and \
                  COHORT_TOKEN (hex) and removed from the environment before anything else runs; with \
                  --ssh, from one line on stdin instead."
)]
pub struct DaemonArgs {
    /// Index of this node server in the job (0-based)
    #[arg(long, value_name = "I")]
    pub node: u32,

    /// Number of node servers in the job
    #[arg(long, value_name = "M", value_parser = clap::value_parser!(u32).range(1..))]
    pub nodes: u32,

    /// Name of this node (what ranks see as COHORT_NODE_NAME)
    #[arg(long, value_name = "NAME")]
    pub node_name: String,

    /// Address the fabric listens on (port 0 = any)
    #[arg(long, value_name = "IP:PORT")]
    pub listen: SocketAddr,

    /// The launcher's control address
    #[arg(long, value_name = "IP:PORT")]
    pub control: SocketAddr,

    #[arg(
        long,
        value_name = "DIR",
        help = "The job's private directory; the client socket goes in <DIR>/node<I>"
    )]
    pub job_dir: PathBuf,

    /// Namespace of the job
    #[arg(long, value_name = "NS")]
    pub nspace: String,

    /// Number of ranks in the whole job
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..))]
    pub np: u32,

    /// How ranks are mapped (the launcher's --map-by; every node server must agree)
    #[arg(
        long,
        value_name = "POLICY",
        default_value_t = MapBy::Slot,
        value_parser = clap::builder::PossibleValuesParser::new(MapBy::NAMES)
            .map(|s| s.parse::<MapBy>().expect("a listed name"))
    )]
    pub map_by: MapBy,

    /// How ranks are numbered over the node servers, if not as --map-by says (the
    /// launcher's --rank-by): slot = in blocks, node = round-robin
    #[arg(long, value_name = "ORDER", value_parser = cohort_topology::placement::parse_rank_by)]
    pub rank_by: Option<MapBy>,

    /// What ranks are bound to [default: core, or none when this node's ranks
    /// outnumber its cores]
    #[arg(
        long,
        value_name = "WHAT",
        value_parser = clap::builder::PossibleValuesParser::new(BindTo::NAMES)
            .map(|s| s.parse::<BindTo>().expect("a listed name"))
    )]
    pub bind_to: Option<BindTo>,

    /// Placement slot of this node's first rank among all ranks on this host (node
    /// servers sharing a host bind their ranks to distinct cores)
    #[arg(long, value_name = "K", default_value_t = 0)]
    pub first_slot: u32,

    /// Cores each rank is bound to, consecutive in --map-by order (the launcher's
    /// --cpus-per-rank, --map-by …:PE=n)
    #[arg(
        long,
        value_name = "N",
        default_value_t = 1,
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    pub cpus_per_rank: u32,

    /// Place and bind ranks on these CPUs only (the launcher's --cpu-set): cores
    /// outside are not slots, unbound ranks run on them
    #[arg(long, value_name = "LIST", value_parser = cohort_topology::placement::parse_cpu_set)]
    pub cpu_set: Option<cohort_topology::CpuSet>,

    /// Leave out notes (such as "oversubscribed, not binding"); warnings still show
    /// (the launcher's -q)
    #[arg(long)]
    pub quiet: bool,

    /// Placement slots are hardware threads, not cores (the launcher's
    /// --use-hwthread-cpus): ranks bind to one thread each by default
    #[arg(long)]
    pub use_hwthread_cpus: bool,

    #[arg(
        long,
        help = "Prefix forwarded output lines with [NSPACE,RANK]<stdout>: / <stderr>:"
    )]
    pub tag_output: bool,

    /// Start forwarded output lines with the UTC time they are forwarded, in
    /// brackets, then `<stdout>: ` / `<stderr>: ` (or the tag)
    #[arg(long)]
    pub timestamp_output: bool,

    /// Forward the ranks' stderr to stdout (with --output-dir, into the stdout file)
    #[arg(long)]
    pub merge_stderr_to_stdout: bool,

    /// Write each rank's stdout and stderr to DIR/<job>/rank.<rank>/stdout and stderr
    /// (job 1: the launched one, k + 1: the session's k-th spawned job) instead of
    /// forwarding them (the launcher's --output-filename; an absolute path)
    #[arg(long, value_name = "DIR")]
    pub output_dir: Option<PathBuf>,

    /// Report each local rank's binding on stderr as it is planned (the launcher's
    /// --report-bindings)
    #[arg(long)]
    pub report_bindings: bool,

    /// RDMA device (and port) for the verbs fabric, e.g. mlx5_0 or mlx5_0:2. Default:
    /// COHORT_IB_DEVICE, else the active OpenFabrics device nearest this node server
    /// (the one its progress thread is bound near), else the first active one
    #[arg(long, value_name = "NAME[:PORT]", value_parser = parse_ib_device)]
    pub ib_device: Option<(String, Option<u8>)>,

    /// GID index for the verbs fabric (RoCE). Default: COHORT_IB_GID_INDEX, else the
    /// GID of the fabric's listen address
    #[arg(long, value_name = "N")]
    pub ib_gid_index: Option<u32>,

    /// Microseconds this node server polls (yielding the CPU) after handling a message
    /// before it sleeps in the kernel, and its ranks' default for their blocked calls
    /// (COHORT_SPIN_US, unless exported otherwise); 0 never polls
    #[arg(long, value_name = "US", default_value_t = cohort_proto::env::DEFAULT_SPIN_US)]
    pub spin_us: u64,

    /// Which ranks take the launcher's stdin (LauncherMsg::Stdin): a rank, `all` or
    /// `none` (the default); the others read /dev/null
    #[arg(long, value_name = "RANK|all|none", default_value = "none")]
    pub stdin: cohort_proto::control::StdinTarget,

    /// Milliseconds between this node server's heartbeats to the next one in the ring
    /// of node servers (the failure detector)
    #[arg(long, value_name = "MS", default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..))]
    pub heartbeat_ms: u64,

    /// Milliseconds of silence after which the node server this one watches is
    /// declared lost; 0 turns the failure detector off (only broken connections are
    /// losses then)
    #[arg(long, value_name = "MS", default_value_t = 10_000)]
    pub peer_timeout_ms: u64,

    /// Whole-job fences of a one-node job go through this node server instead of
    /// meeting in shared memory
    #[arg(long)]
    pub no_shm_fence: bool,

    /// How fences and collective-method group constructs gather contributions among
    /// node servers: tree, dissemination (Bruck allgather, then a lean outcome down a
    /// binary tree) or auto (per operation, from the cost model); every node server of
    /// the job must get the same
    #[arg(long, value_name = "ALGORITHM", default_value_t = Allgather::Auto)]
    pub allgather: Allgather,

    /// Slurm topology.conf (tree format) describing the switches: collective trees are
    /// built switch leaders first (every node server of the job must get the same file)
    #[arg(long, value_name = "FILE")]
    pub topology: Option<PathBuf>,

    /// Set VAR=VAL in every rank's environment (repeatable)
    #[arg(
        short = 'x',
        value_name = "VAR=VAL",
        value_parser = parse_export,
        action = clap::ArgAction::Append
    )]
    pub export: Vec<(OsString, OsString)>,

    /// An application context (MPMD), in order: NP ranks run the next ARGC words after
    /// `--` as program and arguments (repeatable; without it, every rank runs all of
    /// them)
    #[arg(
        long = "app",
        value_name = "NP:ARGC",
        value_parser = parse_app,
        action = clap::ArgAction::Append
    )]
    pub apps: Vec<(u32, usize)>,

    /// Set VAR=VAL in the environment of application context K's ranks only, over any
    /// -x of the same VAR (repeatable)
    #[arg(
        long = "app-export",
        value_name = "K:VAR=VAL",
        value_parser = parse_app_export,
        action = clap::ArgAction::Append
    )]
    pub app_exports: Vec<(u32, OsString, OsString)>,

    /// Start application context K's ranks in DIR (repeatable)
    #[arg(
        long = "app-wdir",
        value_name = "K:DIR",
        value_parser = parse_app_wdir,
        action = clap::ArgAction::Append
    )]
    pub app_wdirs: Vec<(u32, PathBuf)>,

    /// Process set NAME over the ranks of RANKLIST, e.g. ocean=0-3 or evens=0,2,4
    /// (repeatable; every node server of the job must get the same, in the same order)
    #[arg(
        long = "pset",
        value_name = "NAME=RANKLIST",
        value_parser = parse_pset,
        action = clap::ArgAction::Append
    )]
    pub psets: Vec<(String, RankSet)>,

    /// Started by srun under Slurm: the node index comes from SLURM_NODEID, the node
    /// name from SLURMD_NODENAME and the listen address from --node-addrs, in place
    /// of --node, --node-name and --listen (one command line for every node server)
    #[arg(long, requires = "node_addrs")]
    pub slurm: bool,

    /// With --slurm: every node server's fabric address, in node order
    #[arg(long, value_name = "IP,IP,…", value_delimiter = ',')]
    pub node_addrs: Vec<IpAddr>,

    /// Started over ssh (or another remote shell) by `cohort run`: the job secret and
    /// client token come as one line on stdin (`SECRET TOKEN`, hex) instead of the
    /// environment, the job directory is made on this host if missing, and stdin
    /// closing (the launcher's ssh session ended) stops this node server
    #[arg(long, conflicts_with = "slurm")]
    pub ssh: bool,

    /// Ranks of each node server, in node order (the launcher's slot-capped mapping:
    /// --map-by node deals ranks round-robin over the nodes with room left, the block
    /// policies give each node its count in turn); default: an even split
    #[arg(long, value_name = "N,N,…", value_delimiter = ',')]
    pub node_ranks: Vec<u32>,

    /// `cohort run --rankfile`: every rank's node and `slot=` (rank order, `NODE` or
    /// `NODE=SLOT`, joined by `/`), instead of --map-by / --node-ranks; a rank with a
    /// slot is bound to its cores on this host, one without is not bound
    #[arg(long, value_name = "MAP", value_parser = parse_rank_map)]
    pub rank_map: Option<RankMap>,

    /// `cohort run --pmix`: the directory the ranks' LD_LIBRARY_PATH starts with, which
    /// must hold cohort's libpmix.so.2 on this host (checked before registering)
    #[arg(long, value_name = "DIR")]
    pub pmix_libdir: Option<PathBuf>,

    /// Every node's name, in node order (the job map's; default node0, node1, …, with
    /// --node-name for this one)
    #[arg(long, value_name = "NAME,NAME,…", value_delimiter = ',')]
    pub node_names: Vec<String>,

    /// The rank program and its arguments (with --app: every app's, one after another)
    #[arg(last = true, required = true, value_name = "PROGRAM [ARGS]")]
    pub command: Vec<OsString>,
}

/// Variables of the srun step's environment that describe one task of it, not the
/// ranks a node server starts: removed before they could leak into the ranks'.
pub const SLURM_TASK_VARS: &[&str] = &[
    "SLURM_PROCID",
    "SLURM_LOCALID",
    "SLURM_NODEID",
    "SLURM_GTIDS",
    "SLURM_TASK_PID",
    "SLURM_CPU_BIND",
    "SLURM_CPU_BIND_LIST",
    "SLURM_CPU_BIND_TYPE",
    "SLURM_CPU_BIND_VERBOSE",
];

/// cohortd's command line with `--slurm` expanded: `--node I --node-name NAME
/// --listen IP:0` are put in front, I from SLURM_NODEID (else SLURM_PROCID: one task
/// per node), NAME from SLURMD_NODENAME (else the host name) and IP the I-th of
/// `--node-addrs`. Any other command line is returned as it is. `env` looks variables
/// up.
pub fn expand_slurm(
    argv: Vec<OsString>,
    env: impl Fn(&str) -> Option<String>,
) -> Result<Vec<OsString>, String> {
    let end = argv.iter().position(|a| a == "--").unwrap_or(argv.len());
    if !argv[..end].iter().any(|a| a == "--slurm") {
        return Ok(argv);
    }
    // --node-addrs LIST or --node-addrs=LIST, before `--`.
    let mut addrs: Option<String> = None;
    for (i, a) in argv[..end].iter().enumerate() {
        let a = a.to_string_lossy();
        if let Some(v) = a.strip_prefix("--node-addrs=") {
            addrs = Some(v.to_string());
        } else if a == "--node-addrs" {
            addrs = argv.get(i + 1).map(|v| v.to_string_lossy().into_owned());
        }
    }
    let addrs: Vec<IpAddr> = addrs
        .ok_or("--slurm needs --node-addrs")?
        .split(',')
        .map(|a| {
            a.trim()
                .parse()
                .map_err(|_| format!("--node-addrs: {a:?} is not an IP address"))
        })
        .collect::<Result<_, _>>()?;
    let var = |name: &str| env(name).filter(|v| !v.trim().is_empty());
    let (from, index) = match var("SLURM_NODEID") {
        Some(v) => ("SLURM_NODEID", v),
        None => (
            "SLURM_PROCID",
            var("SLURM_PROCID").ok_or(
                "--slurm: neither SLURM_NODEID nor SLURM_PROCID is set (cohortd --slurm is                  started by `cohort run` through srun)",
            )?,
        ),
    };
    let node: u32 = index
        .trim()
        .parse()
        .map_err(|_| format!("--slurm: {from}={index} is not a node index"))?;
    let ip = addrs.get(node as usize).ok_or_else(|| {
        format!(
            "--slurm: {from}={node}, but --node-addrs lists {} node(s)",
            addrs.len()
        )
    })?;
    let name = var("SLURMD_NODENAME")
        .or_else(|| var("HOSTNAME"))
        .unwrap_or_else(|| format!("node{node}"));
    let mut out = Vec::with_capacity(argv.len() + 6);
    let mut argv = argv.into_iter();
    out.extend(argv.next()); // the program name
    out.extend(
        [
            "--node".to_string(),
            node.to_string(),
            "--node-name".to_string(),
            name.trim().to_string(),
            "--listen".to_string(),
            SocketAddr::new(*ip, 0).to_string(),
        ]
        .map(OsString::from),
    );
    out.extend(argv);
    Ok(out)
}

/// What the ranks of one application context run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AppCommand {
    /// The program and its arguments.
    pub command: Vec<OsString>,
    /// `VAR=VAL` for this app's ranks only (after the job's `-x` ones).
    pub exports: Vec<(OsString, OsString)>,
    /// Where they run (`cohort run --wdir`, a spawn's PMIX_WDIR); `None`: where
    /// cohortd runs.
    pub cwd: Option<PathBuf>,
}

/// `NP:ARGC`, both at least 1.
fn parse_app(s: &str) -> Result<(u32, usize), String> {
    let parsed = s.split_once(':').and_then(|(np, argc)| {
        let np = np.parse::<u32>().ok().filter(|&n| n > 0)?;
        let argc = argc.parse::<usize>().ok().filter(|&n| n > 0)?;
        Some((np, argc))
    });
    parsed.ok_or_else(|| format!("expected NP:ARGC (both at least 1), got {s:?}"))
}

/// `K:VAR=VAL`.
fn parse_app_export(s: &str) -> Result<(u32, OsString, OsString), String> {
    let (app, kv) = s
        .split_once(':')
        .ok_or_else(|| format!("expected K:VAR=VAL, got {s:?}"))?;
    let app = app
        .parse::<u32>()
        .map_err(|_| format!("expected K:VAR=VAL with K an app number, got {s:?}"))?;
    let (k, v) = parse_export(kv)?;
    Ok((app, k, v))
}

/// `K:DIR`.
fn parse_app_wdir(s: &str) -> Result<(u32, PathBuf), String> {
    let (app, dir) = s
        .split_once(':')
        .filter(|(_, dir)| !dir.is_empty())
        .ok_or_else(|| format!("expected K:DIR, got {s:?}"))?;
    let app = app
        .parse::<u32>()
        .map_err(|_| format!("expected K:DIR with K an app number, got {s:?}"))?;
    Ok((app, PathBuf::from(dir)))
}

/// `NAME=RANKLIST` (the rank list has no `=`, the name may).
fn parse_rank_map(s: &str) -> Result<RankMap, String> {
    s.parse()
}

fn parse_pset(s: &str) -> Result<(String, RankSet), String> {
    let (name, list) = s
        .rsplit_once('=')
        .ok_or_else(|| format!("expected NAME=RANKLIST, got {s:?}"))?;
    Ok((name.to_string(), RankSet::parse(list)?))
}

fn parse_export(s: &str) -> Result<(OsString, OsString), String> {
    match s.split_once('=') {
        Some((k, v)) if !k.is_empty() => Ok((k.into(), v.into())),
        _ => Err(format!("expected VAR=VAL, got {s:?}")),
    }
}

impl DaemonArgs {
    /// What a placement slot is here.
    pub fn slot_unit(&self) -> cohort_topology::SlotUnit {
        cohort_topology::SlotUnit::of(self.use_hwthread_cpus)
    }

    /// Checks what clap cannot: the node index is inside the job, the detector's
    /// timings fit together, the application contexts cover the ranks and the command,
    /// the process sets are valid.
    pub fn validate(&self) -> Result<(), String> {
        if self.node >= self.nodes {
            return Err(format!(
                "--node {} is out of range for --nodes {}",
                self.node, self.nodes
            ));
        }
        if let Some(d) = self.detector() {
            d.validate()?;
        }
        if self.slurm && self.node_addrs.len() != self.nodes as usize {
            return Err(format!(
                "--node-addrs lists {} address(es) for --nodes {}",
                self.node_addrs.len(),
                self.nodes
            ));
        }
        if !self.node_names.is_empty() {
            if self.node_names.len() != self.nodes as usize {
                return Err(format!(
                    "--node-names lists {} name(s) for --nodes {}",
                    self.node_names.len(),
                    self.nodes
                ));
            }
            let listed = &self.node_names[self.node as usize];
            if *listed != self.node_name {
                return Err(format!(
                    "this is node {} ({}), but the launcher's node {} is {listed}: the \
                     step's node order is not the allocation's",
                    self.node, self.node_name, self.node
                ));
            }
        }
        self.app_commands()?;
        self.job()?;
        Ok(())
    }

    /// With `--pmix-libdir DIR`: `Err` says, for the user, that DIR holds no
    /// `libpmix.so.2` on this host (`host`) and what to do. Without it the ranks would
    /// load another libpmix.so.2 (OpenPMIx's, which cannot talk to cohort) or none, and
    /// fail in MPI_Init or at load with errors that do not say why.
    pub fn check_pmix_libdir(&self, host: &str) -> Result<(), String> {
        let Some(dir) = &self.pmix_libdir else {
            return Ok(());
        };
        if dir.join("libpmix.so.2").exists() {
            return Ok(());
        }
        Err(format!(
            "{}: --pmix: cohort's libpmix.so.2 is not in {} on this host ({host}), so the \
             ranks cannot load it. --pmix needs cohort's library at that path on every host: \
             install cohort at the same path everywhere (a shared file system), or over ssh \
             give --prefix PREFIX of an installed cohort (the hosts then use \
             PREFIX/lib/cohort/pmix)",
            self.node_name,
            dir.display()
        ))
    }

    /// The job map every process of the job agrees on: ranks mapped as the launcher
    /// mapped them, split into the application contexts, with the process sets.
    pub fn job(&self) -> Result<JobMap, String> {
        let order = cohort_topology::placement::rank_order(self.map_by, self.rank_by);
        let mut job = if let Some(map) = &self.rank_map {
            let mut job = job_map(order, self.nspace.clone(), self.np, self.nodes);
            job.rank_node = map.rank_node();
            job
        } else if self.node_ranks.is_empty() {
            job_map(order, self.nspace.clone(), self.np, self.nodes)
        } else {
            job_map_with_counts(order, self.nspace.clone(), &self.node_ranks)
        };
        if let Some(map) = &self.rank_map {
            if map.ranks.len() != self.np as usize {
                return Err(format!(
                    "--rank-map places {} rank(s); the job has {}",
                    map.ranks.len(),
                    self.np
                ));
            }
            if let Some((rank, (node, _))) = map
                .ranks
                .iter()
                .enumerate()
                .find(|(_, (n, _))| *n >= self.nodes)
            {
                return Err(format!(
                    "--rank-map places rank {rank} on node {node}; the job has {} node(s)",
                    self.nodes
                ));
            }
        }
        if job.size() != self.np || job.num_nodes != self.nodes {
            return Err(format!(
                "--node-ranks places {} rank(s) on {} node(s); the job has {} on {}",
                job.size(),
                job.num_nodes,
                self.np,
                self.nodes
            ));
        }
        if self.node_names.len() == self.nodes as usize {
            job.node_names.clone_from(&self.node_names);
        }
        if !self.apps.is_empty() {
            let sizes = self.apps.iter().map(|&(np, _)| np).collect();
            job.set_apps(sizes).map_err(|e| format!("--app: {e}"))?;
        }
        for (name, ranks) in &self.psets {
            job.define_pset(name, ranks.clone())
                .map_err(|e| format!("--pset: {e}"))?;
        }
        Ok(job)
    }

    /// What each application context runs: the command after `--` cut as --app says
    /// (or all of it for the one app without --app), with its --app-export variables.
    pub fn app_commands(&self) -> Result<Vec<AppCommand>, String> {
        let mut apps: Vec<AppCommand> = Vec::new();
        if self.apps.is_empty() {
            apps.push(AppCommand {
                command: self.command.clone(),
                exports: Vec::new(),
                cwd: None,
            });
        } else {
            let total: usize = self.apps.iter().map(|&(_, argc)| argc).sum();
            if total != self.command.len() {
                return Err(format!(
                    "--app: the application contexts take {total} word(s) after --, \
                     there are {}",
                    self.command.len()
                ));
            }
            let mut rest = &self.command[..];
            for &(_, argc) in &self.apps {
                let (command, more) = rest.split_at(argc);
                rest = more;
                apps.push(AppCommand {
                    command: command.to_vec(),
                    exports: Vec::new(),
                    cwd: None,
                });
            }
        }
        for (app, k, v) in &self.app_exports {
            let n = apps.len();
            let target = apps.get_mut(*app as usize).ok_or_else(|| {
                format!("--app-export: application context {app} is not one of the {n}")
            })?;
            target.exports.push((k.clone(), v.clone()));
        }
        for (app, dir) in &self.app_wdirs {
            let n = apps.len();
            let target = apps.get_mut(*app as usize).ok_or_else(|| {
                format!("--app-wdir: application context {app} is not one of the {n}")
            })?;
            target.cwd = Some(dir.clone());
        }
        Ok(apps)
    }

    /// The failure detector's timings (`None`: off).
    pub fn detector(&self) -> Option<DetectorConfig> {
        (self.peer_timeout_ms > 0).then(|| DetectorConfig {
            period: Duration::from_millis(self.heartbeat_ms),
            timeout: Duration::from_millis(self.peer_timeout_ms),
        })
    }
}

/// `NAME` or `NAME:PORT` (port 1-based).
fn parse_ib_device(v: &str) -> Result<(String, Option<u8>), String> {
    let (name, port) = match v.split_once(':') {
        Some((name, port)) => {
            let port: u8 = port
                .parse()
                .ok()
                .filter(|&p| p >= 1)
                .ok_or_else(|| format!("port {port:?} is not a port number (1-255)"))?;
            (name, Some(port))
        }
        None => (v, None),
    };
    if name.is_empty() {
        return Err("empty device name".into());
    }
    Ok((name.to_string(), port))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ib_device_flag_takes_a_name_and_an_optional_port() {
        assert_eq!(parse_ib_device("mlx5_0"), Ok(("mlx5_0".into(), None)));
        assert_eq!(parse_ib_device("rxe0:1"), Ok(("rxe0".into(), Some(1))));
        assert!(parse_ib_device("mlx5_0:0").unwrap_err().contains("port"));
        assert!(parse_ib_device("mlx5_0:x").unwrap_err().contains("port"));
        assert!(parse_ib_device(":1").unwrap_err().contains("empty"));
    }
    use clap::CommandFactory;

    #[test]
    fn ssh_mode_and_counted_ranks() {
        let parse = |extra: &[&str]| {
            let mut argv = vec![
                "cohortd",
                "--node",
                "1",
                "--nodes",
                "3",
                "--node-name",
                "h2",
                "--listen",
                "10.0.0.2:0",
                "--control",
                "10.0.0.9:4000",
                "--job-dir",
                "/tmp/j",
                "--nspace",
                "ns",
                "--np",
                "5",
                "--ssh",
                "--node-names",
                "h1,h2,h3",
            ];
            argv.extend_from_slice(extra);
            argv.extend_from_slice(&["--", "prog"]);
            DaemonArgs::try_parse_from(argv)
        };
        let a = parse(&["--node-ranks", "1,3,1", "--map-by", "node"]).unwrap();
        assert!(a.ssh && !a.slurm);
        a.validate().unwrap();
        assert_eq!(a.job().unwrap().rank_node, [0, 1, 2, 1, 1]);
        let a = parse(&["--node-ranks", "1,3"]).unwrap();
        assert!(a.validate().unwrap_err().contains("--node-ranks"));
        let a = parse(&["--node-ranks", "1,3,2"]).unwrap();
        assert!(a.validate().unwrap_err().contains("--node-ranks"));
        assert!(parse(&["--slurm", "--node-addrs", "10.0.0.1"]).is_err());
        // --rank-map (a rankfile): any node of each rank, checked against the job.
        let a = parse(&["--rank-map", "2=0:*/0/2/1=1-2/0"]).unwrap();
        a.validate().unwrap();
        assert_eq!(a.job().unwrap().rank_node, [2, 0, 2, 1, 0]);
        let a = parse(&["--rank-map", "2/0/2/1"]).unwrap();
        assert!(a
            .validate()
            .unwrap_err()
            .contains("--rank-map places 4 rank(s)"));
        let a = parse(&["--rank-map", "2/0/3/1/0"]).unwrap();
        assert!(a.validate().unwrap_err().contains("rank 2 on node 3"));
        assert!(parse(&["--rank-map", "0/x/0/0/0"]).is_err());
    }

    #[test]
    fn parses_what_the_launcher_writes() {
        DaemonArgs::command().debug_assert();
        let a = DaemonArgs::try_parse_from([
            "cohortd",
            "--node",
            "1",
            "--nodes",
            "3",
            "--node-name",
            "node1",
            "--listen",
            "127.0.1.2:0",
            "--control",
            "127.0.0.1:4000",
            "--job-dir",
            "/tmp/j",
            "--nspace",
            "cohort.1.ab12",
            "--np",
            "7",
            "--map-by",
            "node",
            "--bind-to",
            "none",
            "--first-slot",
            "3",
            "--tag-output",
            "--heartbeat-ms",
            "250",
            "--peer-timeout-ms",
            "3000",
            "-x",
            "A=b=c",
            "--",
            "sh",
            "-c",
            "echo -x",
        ])
        .unwrap();
        assert_eq!((a.node, a.nodes, a.np), (1, 3, 7));
        assert_eq!(
            (a.map_by, a.bind_to, a.first_slot),
            (MapBy::Node, Some(BindTo::None), 3)
        );
        assert!(a.tag_output);
        let period = Duration::from_millis(250);
        let timeout = Duration::from_secs(3);
        assert_eq!(a.detector(), Some(DetectorConfig { period, timeout }));
        assert_eq!(a.export, [("A".into(), "b=c".into())]);
        assert_eq!(a.command, ["sh", "-c", "echo -x"]);
        assert!(a.validate().is_ok());
    }

    fn slurm_env(
        pairs: &'static [(&'static str, &'static str)],
    ) -> impl Fn(&str) -> Option<String> {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    fn slurm_argv() -> Vec<OsString> {
        [
            "cohortd",
            "--slurm",
            "--nodes",
            "3",
            "--node-addrs",
            "10.77.0.11,10.77.0.12,10.77.0.13",
            "--node-names",
            "n1,n2,n3",
            "--control",
            "10.77.0.1:4000",
            "--job-dir",
            "/tmp/j",
            "--nspace",
            "ns",
            "--np",
            "6",
            "--",
            "prog",
            "--slurm",
        ]
        .map(OsString::from)
        .into()
    }

    #[test]
    fn slurm_node_index_name_and_address_come_from_the_step() {
        let env = slurm_env(&[
            ("SLURM_NODEID", "2"),
            ("SLURM_PROCID", "2"),
            ("SLURMD_NODENAME", "n3"),
        ]);
        let argv = expand_slurm(slurm_argv(), env).unwrap();
        let a = DaemonArgs::try_parse_from(argv).unwrap();
        assert_eq!((a.node, a.nodes, a.node_name.as_str()), (2, 3, "n3"));
        assert_eq!(a.listen, "10.77.0.13:0".parse().unwrap());
        assert!(a.slurm);
        assert_eq!(a.command, ["prog", "--slurm"]);
        assert!(a.validate().is_ok());
        assert_eq!(a.job().unwrap().node_names, ["n1", "n2", "n3"]);

        // A step whose node order is not the allocation's is refused.
        let env = slurm_env(&[("SLURM_NODEID", "2"), ("SLURMD_NODENAME", "n2")]);
        let a = DaemonArgs::try_parse_from(expand_slurm(slurm_argv(), env).unwrap()).unwrap();
        let e = a.validate().unwrap_err();
        assert!(e.contains("the launcher's node 2 is n3"), "{e}");

        // SLURM_PROCID when SLURM_NODEID is missing (one task per node).
        let env = slurm_env(&[("SLURM_PROCID", "0"), ("SLURMD_NODENAME", "n1")]);
        let a = DaemonArgs::try_parse_from(expand_slurm(slurm_argv(), env).unwrap()).unwrap();
        assert_eq!(
            (a.node, a.listen.ip().to_string().as_str()),
            (0, "10.77.0.11")
        );

        // Out of range, not a number, not under srun.
        let env = slurm_env(&[("SLURM_NODEID", "3")]);
        let e = expand_slurm(slurm_argv(), env).unwrap_err();
        assert!(e.contains("lists 3 node"), "{e}");
        let env = slurm_env(&[("SLURM_NODEID", "x")]);
        assert!(expand_slurm(slurm_argv(), env)
            .unwrap_err()
            .contains("not a node index"));
        let e = expand_slurm(slurm_argv(), slurm_env(&[])).unwrap_err();
        assert!(e.contains("SLURM_NODEID"), "{e}");

        // Without --slurm before `--`, the command line is left alone.
        let plain: Vec<OsString> = ["cohortd", "--node", "0", "--", "prog", "--slurm"]
            .map(OsString::from)
            .into();
        assert_eq!(expand_slurm(plain.clone(), slurm_env(&[])).unwrap(), plain);
    }

    #[test]
    fn slurm_node_addresses_must_cover_the_nodes() {
        let env = slurm_env(&[("SLURM_NODEID", "0"), ("SLURMD_NODENAME", "n1")]);
        let mut argv = slurm_argv();
        argv[5] = "10.77.0.11,10.77.0.12".into();
        let a = DaemonArgs::try_parse_from(expand_slurm(argv, env).unwrap()).unwrap();
        assert!(a.validate().unwrap_err().contains("--node-addrs"));
        let mut argv = slurm_argv();
        argv[5] = "n1,n2,n3".into();
        let env = slurm_env(&[("SLURM_NODEID", "0")]);
        assert!(expand_slurm(argv, env).unwrap_err().contains("not an IP"));
    }

    #[test]
    fn refuses_bad_values() {
        let base = |node: &str, x: &str| {
            DaemonArgs::try_parse_from([
                "cohortd",
                "--node",
                node,
                "--nodes",
                "2",
                "--node-name",
                "n",
                "--listen",
                "127.0.0.1:0",
                "--control",
                "127.0.0.1:1",
                "--job-dir",
                "/j",
                "--nspace",
                "ns",
                "--np",
                "1",
                "-x",
                x,
                "--",
                "p",
            ])
        };
        assert!(base("0", "NOEQUALS").is_err());
        assert!(base("2", "A=1").unwrap().validate().is_err());
        let defaults = base("0", "A=1").unwrap();
        assert_eq!(
            (defaults.map_by, defaults.bind_to, defaults.first_slot),
            (MapBy::Slot, None, 0)
        );
        assert_eq!(defaults.topology, None);
        assert_eq!(defaults.detector(), Some(DetectorConfig::DEFAULT));
        let mut off = defaults.clone();
        off.peer_timeout_ms = 0;
        assert_eq!((off.detector(), off.validate()), (None, Ok(())));
        let mut tight = defaults.clone();
        tight.peer_timeout_ms = 2000;
        assert!(tight
            .validate()
            .unwrap_err()
            .contains("three heartbeat periods"));
    }

    #[test]
    fn takes_a_topology_file() {
        let a = DaemonArgs::try_parse_from([
            "cohortd",
            "--node",
            "0",
            "--nodes",
            "1",
            "--node-name",
            "node0",
            "--listen",
            "127.0.1.1:0",
            "--control",
            "127.0.0.1:1",
            "--job-dir",
            "/j",
            "--nspace",
            "ns",
            "--np",
            "1",
            "--topology",
            "/etc/slurm/topology.conf",
            "--",
            "p",
        ])
        .unwrap();
        assert_eq!(
            a.topology.as_deref(),
            Some(std::path::Path::new("/etc/slurm/topology.conf"))
        );
    }
    fn mpmd(extra: &[&str]) -> Result<DaemonArgs, String> {
        let mut argv = vec![
            "cohortd",
            "--node",
            "0",
            "--nodes",
            "2",
            "--node-name",
            "node0",
            "--listen",
            "127.0.1.1:0",
            "--control",
            "127.0.0.1:1",
            "--job-dir",
            "/j",
            "--nspace",
            "cohort.9.ab",
            "--np",
            "5",
        ];
        argv.extend_from_slice(extra);
        let a = DaemonArgs::try_parse_from(argv).map_err(|e| e.to_string())?;
        a.validate()?;
        Ok(a)
    }

    #[test]
    fn application_contexts_cut_the_command_and_psets_label_ranks() {
        let a = mpmd(&[
            "-x",
            "G=1",
            "--app",
            "2:3",
            "--app",
            "3:1",
            "--app-export",
            "1:ICE=yes=really",
            "--app-wdir=1:/tmp/a:b",
            "--pset",
            "ocean=0-1",
            "--pset",
            "ice=2-4",
            "--pset",
            "evens=0,2,4",
            "--pset=-odd name=1,3-4",
            "--",
            "sh",
            "-c",
            "echo ocean",
            "./ice",
        ])
        .unwrap();
        let apps = a.app_commands().unwrap();
        assert_eq!(apps.len(), 2);
        assert_eq!(apps[0].command, ["sh", "-c", "echo ocean"]);
        assert!(apps[0].exports.is_empty());
        assert_eq!(apps[1].command, ["./ice"]);
        assert_eq!(apps[1].exports, [("ICE".into(), "yes=really".into())]);
        assert_eq!(apps[0].cwd, None);
        assert_eq!(apps[1].cwd, Some(PathBuf::from("/tmp/a:b")));
        let job = a.job().unwrap();
        assert_eq!(job.app_sizes, [2, 3]);
        assert_eq!(job.pset_names(), ["ocean", "ice", "evens", "-odd name"]);
        assert_eq!(job.psets_of(2).unwrap(), ["ice", "evens"]);
        assert_eq!(job.psets_of(3).unwrap(), ["ice", "-odd name"]);
        // Mapping is over the whole rank list: block over 2 node servers.
        assert_eq!(job.rank_node, [0, 0, 0, 1, 1]);

        // Without --app: one app running the whole command, as before.
        let one = mpmd(&["--", "prog", "a"]).unwrap();
        let apps = one.app_commands().unwrap();
        assert_eq!(apps.len(), 1);
        assert_eq!(apps[0].command, ["prog", "a"]);
        assert_eq!(one.job().unwrap().app_sizes, [5]);
    }

    #[test]
    fn application_contexts_and_psets_that_do_not_fit_are_refused() {
        let err = |extra: &[&str]| mpmd(extra).unwrap_err();
        let e = err(&["--app", "2:1", "--app", "2:1", "--", "a", "b"]);
        assert!(e.contains("4 rank(s)"), "{e}");
        let e = err(&["--app", "2:1", "--app", "3:2", "--", "a", "b"]);
        assert!(e.contains("3 word(s)"), "{e}");
        let e = err(&["--app", "5:1", "--app-export", "1:A=1", "--", "a"]);
        assert!(e.contains("application context 1"), "{e}");
        let e = err(&["--app", "5:1", "--app-wdir", "1:/tmp", "--", "a"]);
        assert!(e.contains("application context 1"), "{e}");
        for bad in ["1:", "x:/tmp", "/tmp"] {
            assert!(
                err(&["--app-wdir", bad, "--", "a"]).contains("K:DIR"),
                "{bad}"
            );
        }
        for bad in ["0:1", "1:0", "x", "1"] {
            assert!(err(&["--app", bad, "--", "a"]).contains("NP:ARGC"), "{bad}");
        }
        let e = err(&["--pset", "far=3-5", "--", "a"]);
        assert!(e.contains("rank 5"), "{e}");
        let e = err(&["--pset", "a=0", "--pset", "a=1", "--", "a"]);
        assert!(e.contains("twice"), "{e}");
        let e = err(&["--pset", "cohort.9.ab=0", "--", "a"]);
        assert!(e.contains("namespace"), "{e}");
        let e = err(&["--pset", "=0", "--", "a"]);
        assert!(e.contains("empty"), "{e}");
        assert!(err(&["--pset", "noranks", "--", "a"]).contains("NAME=RANKLIST"));
    }

    /// `--pmix-libdir`: a directory without cohort's library on this host stops the
    /// node server with what to do; one with it (or none given) passes.
    #[test]
    fn the_pmix_library_must_be_where_the_launcher_says() {
        let parse = |extra: &[&str]| {
            let mut argv = vec![
                "cohortd",
                "--node",
                "0",
                "--nodes",
                "1",
                "--node-name",
                "n1",
                "--listen",
                "10.0.0.1:0",
                "--control",
                "10.0.0.9:4000",
                "--job-dir",
                "/tmp/j",
                "--nspace",
                "ns",
                "--np",
                "1",
            ];
            argv.extend_from_slice(extra);
            argv.extend_from_slice(&["--", "prog"]);
            DaemonArgs::try_parse_from(argv).unwrap()
        };
        assert_eq!(parse(&[]).check_pmix_libdir("h"), Ok(()));
        let dir = std::env::temp_dir().join(format!("cohortd-pmix-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let a = parse(&["--pmix-libdir", dir.to_str().unwrap()]);
        let err = a.check_pmix_libdir("vm").unwrap_err();
        assert!(
            err.starts_with("n1: --pmix: cohort's libpmix.so.2 is not in "),
            "{err}"
        );
        assert!(
            err.contains("on this host (vm)") && err.contains("--prefix"),
            "{err}"
        );
        std::fs::write(dir.join("libpmix.so.2"), b"").unwrap();
        assert_eq!(a.check_pmix_libdir("vm"), Ok(()));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
