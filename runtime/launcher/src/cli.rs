//! The `cohort` command line: what a user types, parsed with clap, plus the small
//! mpirun-compatibility rewrites (`-np N`) clap cannot express.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::builder::TypedValueParser as _;
use clap::{Args, Parser, Subcommand};
use cohort_core::DetectorConfig;
use cohort_topology::{BindTo, MapBy};

const ABOUT: &str = "cohort — launcher of the cohort PMIx process-group runtime";

const LONG_VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (cohort PMIx process-group runtime)\n\n",
    "Starts one cohortd node server per node and the ranks of a parallel job under them."
);

const TOP_EXAMPLES: &str = "\
EXAMPLES
  Run 4 ranks of ./app on one node server:
      cohort run -n 4 ./app

  Run 8 ranks over 2 node servers, prefixing every output line with [nspace,rank]:
      cohort run --nodes 2 -n 8 --tag-output ./app

  Show this host's packages, NUMA nodes, cores and network devices:
      cohort topo

  See every option of `run`:
      cohort run --help";

const RUN_LONG_ABOUT: &str = "\
Launch a parallel job of N ranks under cohort node servers (like mpirun).

cohort starts M cohortd node servers on this host (node0 … node<M-1>, each on its own
loopback address), maps the N ranks onto them (block-wise, or round-robin with
--map-by node), binds each rank to a core unless that would oversubscribe the cores
(see --bind-to), forwards every rank's stdout and stderr, and exits with the job's
status. When a rank fails (non-zero status or a signal) or a node server dies, the
whole job is terminated unless --enable-recovery is given. Ctrl-C, SIGTERM and SIGHUP terminate the job; a
second one kills the node servers at once.";

const RUN_EXAMPLES: &str = "\
EXAMPLES
  Run 4 ranks of ./hello on one node server:
      cohort run -n 4 ./hello

  Run 8 ranks over 2 node servers (block mapping: ranks 0-3 on node0, 4-7 on node1),
  prefixing every output line with [nspace,rank]<stdout>: or <stderr>:
      cohort run --nodes 2 -n 8 --tag-output ./ring

  Deal 8 ranks round-robin over 2 node servers (0,2,4,6 on node0) and bind each to
  the CPUs of a NUMA domain, alternating domains:
      cohort run --nodes 2 -n 8 --map-by node --bind-to numa ./app

  Export variables to every rank and stop the job after 10 minutes:
      cohort run -n 16 -x OMP_NUM_THREADS=4 -x LD_LIBRARY_PATH --timeout 600 ./solver in.dat

  Keep the job running when a rank fails (the job still exits with the first failure):
      cohort run -n 4 --enable-recovery ./resilient

  Build the node servers' collective trees switch by switch from a Slurm topology file:
      cohort run --nodes 8 -n 32 --topology /etc/slurm/topology.conf ./app

ENVIRONMENT
  COHORT_LOG, RUST_LOG   log filter of the launcher and node servers (default: warn)
  COHORT_DAEMON          path of the cohortd binary (default: next to cohort, then PATH)
  TMPDIR                 where the private job directory is created (default: /tmp)
  COHORT_STARTUP_TIMEOUT seconds the node servers get to start and register (default: 60)
  SLURM_CONF             without --topology, a topology.conf in the same directory as
                         this file is used when it exists

  Every rank sees COHORT_RANK, COHORT_SIZE, COHORT_LOCAL_RANK, COHORT_NODE_ID,
  COHORT_NODE_NAME, COHORT_NSPACE, COHORT_SERVER_URI, COHORT_TOKEN and
  COHORT_BINDING (the CPUs it is bound to, like 0-1, or none).

EXIT STATUS
  0 when every rank exits 0, else the status of the first rank that failed (128+N for
  a rank killed by signal N); 124 when --timeout expires; 129/130/143 when cohort
  receives SIGHUP/SIGINT/SIGTERM; 1 when a node server fails or cohort cannot start.";

/// `cohort [--help | --version | run ...]`.
#[derive(Debug, Parser)]
#[command(
    name = "cohort",
    version,
    long_version = LONG_VERSION,
    about = ABOUT,
    after_help = TOP_EXAMPLES,
    subcommand_required = true,
    arg_required_else_help = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Launch a parallel job (like mpirun / prterun)
    #[command(
        about = "Launch a parallel job of N ranks under cohort node servers (like mpirun)",
        long_about = RUN_LONG_ABOUT,
        override_usage = "cohort run [OPTIONS] -n <N> <PROGRAM> [ARGS]...",
        after_help = RUN_EXAMPLES
    )]
    Run(Box<RunArgs>),

    /// Show this host's topology: packages, NUMA nodes, cores, PUs, network devices
    #[command(
        about = "Show this host's topology: packages, NUMA nodes, cores, PUs and network / OpenFabrics devices",
        long_about = TOPO_LONG_ABOUT
    )]
    Topo(TopoArgs),
}

const TOPO_LONG_ABOUT: &str = "\
Show this host's topology as cohort sees it (through hwloc): the machine, processor
packages, NUMA nodes with their memory, cores with their PUs (hardware threads, by OS
CPU number), and network / OpenFabrics (InfiniBand, RoCE) devices with the NUMA node
and CPUs each is near. The device marked (preferred) is the one a node server uses
and binds its progress thread near. Only CPUs this process may use are shown.";

/// Options of `cohort topo`.
#[derive(Clone, Debug, Args)]
pub struct TopoArgs {
    /// Print JSON instead of a table
    #[arg(long)]
    pub json: bool,
}

/// Options of `cohort run`.
#[derive(Clone, Debug, Args)]
pub struct RunArgs {
    /// Number of ranks to start (also --np; mpirun's -np is accepted too)
    #[arg(
        short = 'n',
        long = "np",
        value_name = "N",
        help_heading = "Mapping options",
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    pub np: u32,

    /// Number of node servers (cohortd) to start; ranks are mapped block-wise unless
    /// --map-by node
    #[arg(
        long,
        value_name = "M",
        default_value_t = 1,
        help_heading = "Mapping options",
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    pub nodes: u32,

    /// Place ranks: slot = block over node servers; node = round-robin over node
    /// servers; numa / core = block, and within a node spread over NUMA domains / cores
    #[arg(
        long,
        value_name = "POLICY",
        default_value_t = MapBy::Slot,
        value_parser = clap::builder::PossibleValuesParser::new(MapBy::NAMES)
            .map(|s| s.parse::<MapBy>().expect("a listed name")),
        help_heading = "Mapping options"
    )]
    pub map_by: MapBy,

    /// Bind each rank to a core, to a NUMA domain's CPUs, or not at all [default: core,
    /// or none when ranks outnumber cores]
    #[arg(
        long,
        value_name = "WHAT",
        value_parser = clap::builder::PossibleValuesParser::new(BindTo::NAMES)
            .map(|s| s.parse::<BindTo>().expect("a listed name")),
        help_heading = "Mapping options"
    )]
    pub bind_to: Option<BindTo>,

    #[arg(
        long,
        help_heading = "Output options",
        help = "Prefix every output line with [NSPACE,RANK]<stdout>: or <stderr>:"
    )]
    pub tag_output: bool,

    /// Export VAR from cohort's environment to every rank, or set it to VAL (repeatable)
    #[arg(
        short = 'x',
        value_name = "VAR[=VAL]",
        action = clap::ArgAction::Append,
        help_heading = "Environment options"
    )]
    pub export: Vec<String>,

    /// Slurm topology.conf (SwitchName=… Switches=… Nodes=…) describing the network's
    /// switches: node servers build their collective trees switch leaders first. Without
    /// it, a topology.conf next to $SLURM_CONF is used if there is one
    #[arg(long, value_name = "FILE", help_heading = "Mapping options")]
    pub topology: Option<PathBuf>,

    /// RDMA device (and port) the node servers' verbs fabric uses, e.g. mlx5_0 or
    /// mlx5_0:2 (default: COHORT_IB_DEVICE, else the active device nearest each node
    /// server, else the first active one). COHORT_FABRIC=tcp|verbs|auto picks the fabric
    #[arg(long, value_name = "NAME[:PORT]", help_heading = "Fabric options")]
    pub ib_device: Option<String>,

    /// GID index for RoCE (default: COHORT_IB_GID_INDEX, else the GID of each node
    /// server's address)
    #[arg(long, value_name = "N", help_heading = "Fabric options")]
    pub ib_gid_index: Option<u32>,

    /// Microseconds a rank blocked in a cohort call, and a node server after handling a
    /// message, poll (yielding the CPU) before they sleep in the kernel; 0 never polls.
    /// Polling saves a process wake-up per hop, tens of microseconds on virtual
    /// machines (default: 150)
    #[arg(long, value_name = "US", help_heading = "Tuning options")]
    pub spin_us: Option<u64>,

    /// On one node, fences over the whole job normally meet in shared memory; this
    /// sends them through the node server like every other fence
    #[arg(long, help_heading = "Tuning options")]
    pub no_shm_fence: bool,

    /// How the node servers gather fence and group-construct contributions: tree (up a
    /// tree to its root and back), dissemination (a Bruck allgather among the node
    /// servers, then a lean outcome down a binary tree) or auto (per operation, from
    /// the cost model of separate hosts). Default: tree, because `cohort run` starts
    /// every node server on this host, where each message costs the shared cores and
    /// the tree sends the fewest (2(n−1) against n·⌈log2 n⌉)
    #[arg(long, value_name = "ALGORITHM", help_heading = "Tuning options")]
    pub allgather: Option<cohort_topology::Allgather>,

    /// Listen address of each node server's fabric, in node order (default: node i on
    /// its own loopback address 127.0.1.(i+1)). Needed where the fabric is bound to
    /// real interfaces, e.g. RoCE GIDs on a soft-RoCE device
    #[arg(
        long,
        value_name = "IP,IP,…",
        value_delimiter = ',',
        help_heading = "Mapping options"
    )]
    pub node_addrs: Vec<std::net::IpAddr>,

    /// Keep the job running when a rank exits abnormally (non-zero status or signal)
    /// or a node server dies (its ranks die with it; the other node servers route
    /// their collectives around it)
    #[arg(long, help_heading = "Fault-tolerance options")]
    pub enable_recovery: bool,

    /// Seconds between a node server's heartbeats to the next node server (they form a
    /// ring, each watching the one before it); fractions allowed (default: 1)
    #[arg(long, value_name = "SECS", value_parser = parse_secs, help_heading = "Fault-tolerance options")]
    pub heartbeat: Option<Duration>,

    /// Seconds a node server may send nothing before the one watching it declares it
    /// lost: its host died, it froze, or the network cut it off. It is then treated as
    /// crashed (killed, and its ranks with it). Also how long a fabric connection's data
    /// may go unanswered (then one of its two ends is ended, if both still run), and how
    /// long a node server waits for a word from this launcher before it stops. 0 turns
    /// all this off (only node servers whose connections break are lost, each server
    /// deciding alone). At least 3 heartbeats (default: 10)
    #[arg(long, value_name = "SECS", value_parser = parse_secs, help_heading = "Fault-tolerance options")]
    pub peer_timeout: Option<Duration>,

    /// Terminate the job SECS seconds after launch (exit status 124)
    #[arg(
        long,
        value_name = "SECS",
        help_heading = "Fault-tolerance options",
        value_parser = clap::value_parser!(u64).range(1..)
    )]
    pub timeout: Option<u64>,

    /// The program every rank runs, then its arguments (everything after PROGRAM is
    /// passed to it untouched)
    #[arg(
        value_names = ["PROGRAM", "ARGS"],
        required = true,
        num_args = 1..,
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    pub command: Vec<OsString>,
}

impl RunArgs {
    /// The node servers' failure detector (`None`: off), from `--heartbeat` and
    /// `--peer-timeout`, in the whole milliseconds cohortd takes.
    pub fn detector(&self) -> Result<Option<DetectorConfig>, String> {
        let ms = |d: Duration| Duration::from_millis(d.as_millis() as u64);
        let timeout = ms(self.peer_timeout.unwrap_or(DetectorConfig::DEFAULT.timeout));
        if timeout.is_zero() {
            return Ok(None);
        }
        let period = ms(self.heartbeat.unwrap_or(DetectorConfig::DEFAULT.period));
        let cfg = DetectorConfig { period, timeout };
        cfg.validate()
            .map_err(|e| format!("--heartbeat / --peer-timeout (whole milliseconds): {e}"))?;
        Ok(Some(cfg))
    }
}

/// Seconds, fractions allowed.
fn parse_secs(s: &str) -> Result<Duration, String> {
    s.trim()
        .parse::<f64>()
        .ok()
        .filter(|v| v.is_finite() && (0.0..=1e6).contains(v))
        .map(Duration::from_secs_f64)
        .ok_or_else(|| format!("{s:?} is not a number of seconds (0 to 1000000)"))
}

/// Options of `cohort run` that take a separate value (for [`normalize_args`]).
const VALUE_OPTIONS: &[&str] = &[
    "-n",
    "--np",
    "--nodes",
    "-x",
    "--timeout",
    "--heartbeat",
    "--peer-timeout",
    "--map-by",
    "--bind-to",
    "--topology",
];

/// Rewrites mpirun's single-dash `-np N` into `--np N`, but only among cohort's own
/// options: an `-np` after PROGRAM belongs to the program.
pub fn normalize_args(args: impl IntoIterator<Item = OsString>) -> Vec<OsString> {
    let mut out: Vec<OsString> = args.into_iter().collect();
    let Some(run_at) = out.iter().position(|a| a == "run") else {
        return out;
    };
    let mut i = run_at + 1;
    while i < out.len() {
        let arg = out[i].to_string_lossy().into_owned();
        if arg == "--" || !arg.starts_with('-') || arg == "-" {
            break;
        }
        if arg == "-np" {
            out[i] = OsString::from("--np");
        }
        if VALUE_OPTIONS.contains(&arg.as_str()) || arg == "-np" {
            i += 1;
        }
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn parse(args: &[&str]) -> Result<RunArgs, clap::Error> {
        let argv = normalize_args(args.iter().map(OsString::from));
        Cli::try_parse_from(argv).map(|c| match c.command {
            Command::Run(r) => *r,
            Command::Topo(_) => panic!("not a run command"),
        })
    }

    #[test]
    fn cli_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn program_arguments_are_not_ours() {
        let r = parse(&[
            "cohort",
            "run",
            "-n",
            "3",
            "--tag-output",
            "sh",
            "-c",
            "echo -n --np 2",
            "--help",
        ])
        .unwrap();
        assert_eq!(r.np, 3);
        assert!(r.tag_output);
        assert_eq!(r.command, ["sh", "-c", "echo -n --np 2", "--help"]);
    }

    #[test]
    fn mpirun_style_np_and_exports() {
        let r = parse(&[
            "cohort", "run", "-np", "4", "--nodes", "2", "-x", "A=1", "-x", "B", "prog", "-np",
        ])
        .unwrap();
        assert_eq!((r.np, r.nodes), (4, 2));
        assert_eq!(r.export, ["A=1", "B"]);
        assert_eq!(r.command, ["prog", "-np"]);
    }

    #[test]
    fn mapping_and_binding_options() {
        let r = parse(&["cohort", "run", "-n", "2", "prog"]).unwrap();
        assert_eq!((r.map_by, r.bind_to), (MapBy::Slot, None));
        let r = parse(&[
            "cohort",
            "run",
            "-np",
            "4",
            "--map-by",
            "node",
            "--bind-to",
            "numa",
            "prog",
            "--bind-to",
        ])
        .unwrap();
        assert_eq!((r.map_by, r.bind_to), (MapBy::Node, Some(BindTo::Numa)));
        assert_eq!(r.command, ["prog", "--bind-to"]);
        assert!(parse(&["cohort", "run", "-n", "2", "--map-by", "socket", "prog"]).is_err());
        assert!(parse(&["cohort", "run", "-n", "2", "--bind-to", "pu", "prog"]).is_err());
    }

    #[test]
    fn topology_file_option() {
        let r = parse(&["cohort", "run", "-n", "2", "prog"]).unwrap();
        assert_eq!(r.topology, None);
        let r = parse(&[
            "cohort",
            "run",
            "--topology",
            "/etc/slurm/topology.conf",
            "-np",
            "4",
            "prog",
            "--topology",
        ])
        .unwrap();
        assert_eq!(r.topology, Some(PathBuf::from("/etc/slurm/topology.conf")));
        assert_eq!(r.np, 4);
        assert_eq!(r.command, ["prog", "--topology"]);
    }

    #[test]
    fn topo_takes_json() {
        let c = Cli::try_parse_from(["cohort", "topo", "--json"]).unwrap();
        assert!(matches!(c.command, Command::Topo(TopoArgs { json: true })));
    }

    #[test]
    fn double_dash_separates_the_program() {
        let r = parse(&["cohort", "run", "--np", "1", "--", "--weird-name", "x"]).unwrap();
        assert_eq!(r.command, ["--weird-name", "x"]);
    }

    #[test]
    fn bad_values_are_refused() {
        assert!(parse(&["cohort", "run", "-n", "0", "prog"]).is_err());
        assert!(parse(&["cohort", "run", "-n", "2", "--nodes", "0", "prog"]).is_err());
        assert!(parse(&["cohort", "run", "-n", "2", "--timeout", "0", "prog"]).is_err());
        assert!(parse(&["cohort", "run", "-n", "2"]).is_err());
        assert!(parse(&["cohort", "run", "prog"]).is_err());
        assert!(parse(&["cohort", "run", "-n", "2", "--heartbeat", "-1", "prog"]).is_err());
        assert!(parse(&["cohort", "run", "-n", "2", "--peer-timeout", "x", "prog"]).is_err());
    }

    #[test]
    fn detector_timings() {
        let d = |args: &[&str]| {
            let mut argv = vec!["cohort", "run", "-n", "2"];
            argv.extend_from_slice(args);
            argv.push("prog");
            parse(&argv).unwrap().detector()
        };
        assert_eq!(d(&[]), Ok(Some(DetectorConfig::DEFAULT)));
        let period = Duration::from_millis(250);
        let timeout = Duration::from_millis(1500);
        let cfg = DetectorConfig { period, timeout };
        assert_eq!(
            d(&["--heartbeat", "0.25", "--peer-timeout", "1.5"]),
            Ok(Some(cfg))
        );
        assert_eq!(d(&["--peer-timeout", "0"]), Ok(None));
        let e = d(&["--heartbeat", "2", "--peer-timeout", "5"]).unwrap_err();
        assert!(e.contains("three heartbeat periods"), "{e}");
        let e = d(&["--heartbeat", "0.0001"]).unwrap_err();
        assert!(e.contains("positive"), "{e}");
    }
}
