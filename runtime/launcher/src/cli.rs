//! The `cohort` command line: what a user types, parsed with clap, plus the small
//! mpirun-compatibility rewrites (`-np N`) clap cannot express.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, CommandFactory, Parser, Subcommand};
use cohort_core::DetectorConfig;
use cohort_proto::RankSet;
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

  Run an MPMD job: 4 ranks of ./ocean in process set ocean, 2 of ./ice in set ice:
      cohort run -n 4 --pset ocean ./ocean : -n 2 --pset ice ./ice

  Show this host's packages, NUMA nodes, cores and network devices:
      cohort topo

  See every option of `run`:
      cohort run --help";

const RUN_LONG_ABOUT: &str = "\
Launch a parallel job of N ranks under cohort node servers (like mpirun).

cohort starts M cohortd node servers on this host (node0 … node<M-1>, each on its own
loopback address), maps the N ranks onto them (block-wise, round-robin with
--map-by node, or K per node server with -N K), binds each rank to a core unless that would oversubscribe the cores
(see --bind-to), forwards every rank's stdout and stderr, and exits with the job's
status. When a rank fails (non-zero status or a signal) or a node server dies, the
whole job is terminated unless --enable-recovery is given. Ctrl-C, SIGTERM and SIGHUP
terminate the job; a second one kills the node servers at once.

Under Slurm (inside salloc or sbatch, or with --launcher slurm) the node servers run
on the allocation's nodes instead, one per node (--nodes defaults to the allocation's
node count), started by one srun step; each listens on its node's address.

Over ssh (--host or --hostfile outside a Slurm allocation, or --launcher ssh) one node
server runs on each host, started by the launch agent (default ssh, see
--launch-agent) as the same absolute cohortd path as here (or --prefix DIR/bin/cohortd);
node names are the hosts as given. Each listens on its host's address as resolved here
(--node-addrs overrides) and connects back to --control-addr. The job secret goes over
the agent's stdin, never on a command line; a node server stops when that stdin closes.
Hostfile slots cap how many ranks a host gets (see --hostfile). An unreachable host or
a missing cohortd fails the job with what ssh said, naming the host.

MPMD: several programs form one job when their app contexts are separated by a
standalone ':' argument, as with mpirun/prterun. Global options (--nodes, --map-by,
--bind-to, --tag-output, --timeout, ...) come before the first app context's program;
every app context has its own -n, and may have --pset NAME, -x VAR[=VAL] and
--wdir DIR:

  cohort run [GLOBAL OPTIONS] -n N1 [APP OPTIONS] PROG1 [ARGS] : -n N2 [APP OPTIONS] PROG2 [ARGS] ...

Ranks are numbered consecutively across app contexts (the first app's ranks come
first), and the mapping and binding policies apply to the whole list of ranks. Each
rank learns its app context as PMIX_APPNUM (COHORT_APPNUM; counted from 0). -x given
before the first program applies to every rank; -x in a later app context to its
ranks only. --wdir before the first program is the directory of every app context
that gives none. A ':' is always a separator, never an argument of a program.
With --app FILE (Open MPI's appfile), FILE holds the app contexts, one per line.

Process sets (psets): --pset NAME in an app context labels that app's ranks;
--pset NAME=RANKLIST among the global options defines a set over any ranks of the
job (RANKLIST: ranks and ranges, like 0,2,4 or 0-3,8). A rank may be in several
sets. These sets live as long as the session; a spawn may add sets that live while
its job runs (PMIX_PSET_NAME; processes are told with PMIX_PROCESS_SET_DEFINE and
_DELETE). Ranks query them with PMIX_QUERY_PSET_NAMES, PMIX_QUERY_PSET_MEMBERSHIP
and PMIX_PSET_NAMES. Names are 1 to 255 bytes, unique, and must not look like a job
namespace (cohort.PID.HEX).";

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

  Run 2 ranks on each of 3 node servers, 6 in all (mpirun's -N 2, --map-by ppr:2:node):
      cohort run --nodes 3 -N 2 ./app

  Hybrid MPI+OpenMP: 4 ranks bound to 2 consecutive cores each, 2 threads apiece:
      cohort run -n 4 --map-by slot:PE=2 -x OMP_NUM_THREADS=2 ./hybrid

  Export variables to every rank and stop the job after 10 minutes:
      cohort run -n 16 -x OMP_NUM_THREADS=4 -x LD_LIBRARY_PATH --timeout 600 ./solver in.dat

  MPMD: 4 ranks of ./ocean (ranks 0-3, pset ocean) and 2 of ./ice (ranks 4-5, pset
  ice), one more set io of ranks 0 and 4, ICE_STEPS set for the ice ranks only:
      cohort run --nodes 2 --pset io=0,4 -n 4 --pset ocean ./ocean in.nc : \
          -n 2 --pset ice -x ICE_STEPS=100 ./ice

  An Open MPI program, on cohort's PMIx library (`make pmix` or `make install`):
      cohort run --pmix -n 4 ./mpi_app

  Keep the job running when a rank fails (the job still exits with the first failure):
      cohort run -n 4 --enable-recovery ./resilient

  Inside a Slurm allocation of 3 nodes: one node server per node, 2 ranks each:
      salloc -N 3 cohort run -n 6 ./app

  Over ssh, one node server on each of 3 hosts (Open MPI's -H / --hostfile):
      cohort run --host n1,n2,n3 -n 6 ./app
      cohort run --hostfile hosts.txt --launch-agent 'ssh -F ~/.ssh/cluster.conf' -n 6 ./app
  where hosts.txt has lines like `n1 slots=4`, `admin@10.0.0.7 slots=2`, `# comment`.

  Build the node servers' collective trees switch by switch from a Slurm topology file:
      cohort run --nodes 8 -n 32 --topology /etc/slurm/topology.conf ./app

ENVIRONMENT
  COHORT_LOG, RUST_LOG   log filter of the launcher and node servers (default: warn)
  COHORT_DAEMON          path of the cohortd binary (default: next to cohort, then PATH)
  TMPDIR                 where the private job directory is created (default: /tmp)
  COHORT_STARTUP_TIMEOUT seconds the node servers get to start and register (default: 60)
  COHORT_LAUNCH_AGENT    the launch agent when --launch-agent is not given (default: ssh)
  COHORT_PREFIX          --prefix when it is not given (over ssh)
  SLURM_CONF             without --topology, a topology.conf in the same directory as
                         this file is used when it exists
  SLURM_JOB_ID, SLURM_JOB_NODELIST
                         with srun in PATH, the node servers run on the allocation's
                         nodes (--launcher auto)

  COHORT_PMIX_LIBDIR     the directory holding cohort's libpmix.so.2 (--pmix; default:
                         cohort-pmix/ next to cohort, then ../lib/cohort/pmix/ from
                         cohort's directory, as `make install` lays it out)

  Every rank sees COHORT_RANK, COHORT_SIZE, COHORT_LOCAL_RANK, COHORT_NODE_ID,
  COHORT_NODE_NAME, COHORT_NSPACE, COHORT_SERVER_URI, COHORT_TOKEN, COHORT_APPNUM
  (its app context) and COHORT_BINDING (the CPUs it is bound to, like 0-1, or none),
  and, for PMIx programs, PMIX_NAMESPACE, PMIX_RANK and PMIX_SERVER_URI. With --pmix,
  also Open MPI's OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE and _NODE_RANK.

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
        override_usage = "cohort run [OPTIONS] [-n <N>] <PROGRAM> [ARGS]...\n       \
            cohort run [OPTIONS] -n <N> [--pset NAME] [-x VAR[=VAL]] <PROGRAM> [ARGS]... \
            : -n <N> [--pset NAME] [-x VAR[=VAL]] <PROGRAM> [ARGS]... [: ...]",
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
    /// Number of ranks to start (also --np; mpirun's -np is accepted too); with
    /// several app contexts, of the first one (each one after a ':' has its own -n).
    /// Without it, as mpirun: K per node server with -N K, else the allocation's tasks
    /// under Slurm, the hosts' slots over ssh, this host's cores otherwise
    #[arg(
        short = 'n',
        long = "np",
        visible_short_alias = 'c',
        alias = "n",
        value_name = "N",
        help_heading = "Application context options",
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    pub np: Option<u32>,

    /// Number of node servers (cohortd) to start; ranks are mapped block-wise unless
    /// --map-by node [default: 1; under Slurm, one per node of the allocation]
    #[arg(
        long,
        value_name = "M",
        help_heading = "Mapping options",
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    pub nodes: Option<u32>,

    /// Where the node servers run: slurm = one per node of the Slurm allocation cohort
    /// runs in (salloc, sbatch), started by one srun step; ssh = one per host of
    /// --host/--hostfile, each started over ssh (see --launch-agent); local = all on
    /// this host, each on its own loopback address; auto = slurm when SLURM_JOB_ID and
    /// SLURM_JOB_NODELIST are set and srun is in PATH, else ssh when --host or
    /// --hostfile is given (as Open MPI's rsh launcher), else local
    #[arg(
        long,
        value_name = "KIND",
        value_enum,
        default_value_t = crate::slurm::LauncherKind::Auto,
        help_heading = "Mapping options"
    )]
    pub launcher: crate::slurm::LauncherKind,

    /// Address of this host the node servers connect to (default: 127.0.0.1 for local
    /// node servers; under Slurm or over ssh, the address this host sends from to the
    /// first node)
    #[arg(long, value_name = "IP", help_heading = "Mapping options")]
    pub control_addr: Option<std::net::IpAddr>,

    /// Hosts to run one node server each on, over ssh: [USER@]HOST[:SLOTS], comma
    /// separated (repeatable). HOST is a name or an IP address and becomes the node's
    /// name; a host named twice is one node server, its slots added up. SLOTS caps the
    /// ranks on that host (see --hostfile)
    #[arg(
        short = 'H',
        long = "host",
        value_name = "HOST,…",
        action = clap::ArgAction::Append,
        help_heading = "Host options"
    )]
    pub host: Vec<String>,

    /// Open MPI hostfile: one host per line, [USER@]NAME [slots=N] [max_slots=N]; '#'
    /// comments and blank lines are skipped. One node server per host, in file order
    /// (before any --host ones). slots=N (or max_slots=N; the smaller of the two) caps
    /// that host's ranks: the ranks are split as evenly as
    /// the caps allow (--map-by slot/numa/core: in blocks, node: round-robin over the
    /// hosts with room left), hosts without slots taking what is left; more ranks than
    /// all capped hosts hold is an error. Without any slots, --map-by alone decides
    #[arg(
        long,
        alias = "machinefile",
        value_name = "FILE",
        help_heading = "Host options"
    )]
    pub hostfile: Option<PathBuf>,

    /// Command that starts a node server on a host (Open MPI's plm_rsh_agent): called
    /// as AGENT [OPTIONS] [USER@]HOST COMMAND, COMMAND one POSIX shell command line.
    /// Split into words like a shell would. When its program is ssh, cohort adds
    /// -o BatchMode=yes -o ConnectTimeout=10 -x -T (never a prompt, never a terminal);
    /// other agents get nothing added [default: $COHORT_LAUNCH_AGENT, else ssh]
    #[arg(long, value_name = "CMD", help_heading = "Host options")]
    pub launch_agent: Option<String>,

    /// Over ssh, the hosts run DIR/bin/cohortd (mpirun's --prefix; DIR is the PREFIX
    /// of a `make install`) [default: $COHORT_PREFIX, else the same absolute path as
    /// this host's cohortd]
    #[arg(long, value_name = "DIR", help_heading = "Host options")]
    pub prefix: Option<PathBuf>,

    /// Place ranks: slot = block over node servers; node = round-robin over node
    /// servers; numa / package (socket) / core = block, and within a node spread over
    /// NUMA domains / packages / cores;
    /// ppr:K:node = K ranks on each node server in turn (as -N K). A :PE=n modifier
    /// (slot:PE=4, numa:PE=2) gives each rank n consecutive cores (as
    /// --cpus-per-rank n) [possible values: slot, node, numa, core, ppr:K:node, each
    /// with an optional :PE=n; socket = package]
    #[arg(
        long = "map-by",
        value_name = "POLICY",
        default_value = "slot",
        value_parser = parse_map_by,
        help_heading = "Mapping options"
    )]
    pub map_spec: MapSpec,

    /// Number ranks over the node servers by slot (in blocks) or by node (round-robin),
    /// whatever --map-by placed on each [default: as --map-by: node round-robin, else
    /// slot]
    #[arg(
        long,
        value_name = "ORDER",
        value_parser = cohort_topology::placement::parse_rank_by,
        help_heading = "Mapping options"
    )]
    pub rank_by: Option<MapBy>,

    /// Place each rank as FILE says (Open MPI's rankfile, mpirun's --rankfile / -rf):
    /// lines `rank N=HOST [slot=LIST]`, HOST a node server's name (--host's, Slurm's,
    /// or node0, node1, … here) or +nK, LIST logical cores (0-2,5) or PACKAGE:CORES
    /// (1:0-1, 0:*;1:0) the rank is bound to, none: not bound. Every rank is placed;
    /// without -n, the file's ranks are the job. Not with --map-by, -N, --rank-by,
    /// --cpus-per-rank, --bind-to or --cpu-set
    #[arg(
        long,
        alias = "rf",
        value_name = "FILE",
        help_heading = "Mapping options"
    )]
    pub rankfile: Option<PathBuf>,

    /// K ranks on each node server (mpirun's -N and --npernode, --map-by ppr:K:node):
    /// node 0 gets ranks 0 to K-1, node 1 the next K, and so on. Without -n, K times
    /// the node servers; with it, at most that many (the last node servers may get
    /// fewer). Not to be mixed up with --nodes (the node server count, srun's -N)
    #[arg(
        short = 'N',
        long = "npernode",
        value_name = "K",
        help_heading = "Mapping options",
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    pub npernode: Option<u32>,

    /// The mapping policy (from --map-by; slot with ppr:K:node or -N), set by
    /// [`parse_cli`].
    #[arg(skip)]
    pub map_by: MapBy,

    /// Ranks per node server (-N, --npernode or --map-by ppr:K:node), set by
    /// [`parse_cli`].
    #[arg(skip)]
    pub per_node: Option<u32>,

    /// N cores for each rank (Open MPI's --cpus-per-rank and --map-by …:PE=N), for
    /// ranks running N threads: a rank is bound to N consecutive cores (in --map-by
    /// order; with numa, in one NUMA domain), and the cores are oversubscribed (so not
    /// bound, unless --bind-to says) when the ranks of a host need more than it has
    #[arg(
        long = "cpus-per-rank",
        alias = "cpus-per-proc",
        value_name = "N",
        help_heading = "Mapping options",
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    pub cpus_per_rank_arg: Option<u32>,

    /// Cores per rank (--cpus-per-rank or :PE=n; 1 without either), set by
    /// [`parse_cli`].
    #[arg(skip)]
    pub cpus_per_rank: u32,

    /// Place more ranks on a host than its slots (--host H:N, a hostfile's slots=N),
    /// as mpirun's: the slots are filled, the ranks left over spread evenly on top.
    /// (Node servers on this host and under Slurm take more ranks than cores anyway;
    /// such ranks are not bound unless --bind-to says.)
    #[arg(long, help_heading = "Mapping options")]
    pub oversubscribe: bool,

    /// Place and bind ranks on these CPUs only (mpirun's --cpu-set; OS CPU numbers,
    /// as 0-3,8, the same on every host): cores outside are not slots, unbound ranks
    /// run on these CPUs
    #[arg(
        long,
        alias = "cpu-list",
        value_name = "LIST",
        value_parser = cohort_topology::placement::parse_cpu_set,
        help_heading = "Mapping options"
    )]
    pub cpu_set: Option<cohort_topology::CpuSet>,

    /// Placement slots are hardware threads, not cores (mpirun's --use-hwthread-cpus):
    /// a host holds as many ranks as it has hardware threads before it is
    /// oversubscribed, and each rank is bound to one thread unless --bind-to says
    #[arg(long, help_heading = "Mapping options")]
    pub use_hwthread_cpus: bool,

    /// Accepted so mpirun command lines carry over; cohort runs as root without it
    #[arg(long, help_heading = "Mapping options")]
    pub allow_run_as_root: bool,

    /// Bind each rank to a core, to one hardware thread (its core's first, or its own
    /// with --use-hwthread-cpus), to a NUMA domain's or a package's (socket's) CPUs, or
    /// not at all [default: core (hwthread with --use-hwthread-cpus), or none when
    /// ranks outnumber them] [possible values: none, core, hwthread, numa, package (or
    /// socket)]
    #[arg(
        long,
        value_name = "WHAT",
        value_parser = parse_bind_to,
        help_heading = "Mapping options"
    )]
    pub bind_to: Option<BindTo>,

    #[arg(
        long,
        help_heading = "Output options",
        help = "Prefix every output line with [NSPACE,RANK]<stdout>: or <stderr>:"
    )]
    pub tag_output: bool,

    /// Leave out cohort's notes (such as "oversubscribed, not binding"), as mpirun's
    /// -q; warnings and errors still show
    #[arg(short = 'q', long, help_heading = "Output options")]
    pub quiet: bool,

    /// Start every output line with the UTC time it is forwarded, in brackets
    /// ([2026-11-28T16:01:02.123456Z]), then the tag or <stdout>: / <stderr>:
    #[arg(long, help_heading = "Output options")]
    pub timestamp_output: bool,

    /// Send the ranks' stderr to stdout (with --output-filename, into each rank's
    /// stdout file)
    #[arg(long, help_heading = "Output options")]
    pub merge_stderr_to_stdout: bool,

    /// Write each rank's stdout and stderr to DIR/1/rank.N/stdout and stderr (spawned
    /// jobs: DIR/2, DIR/3, ...) instead of this terminal, as mpirun's
    /// --output-filename; each node server writes its ranks' files on its host
    /// (relative: to where cohort runs)
    #[arg(long, value_name = "DIR", help_heading = "Output options")]
    pub output_filename: Option<PathBuf>,

    /// PRRTE's output directives, comma-separated, any unique prefix: tag (or
    /// tag-fullname), timestamp, merge-stderr-to-stdout, dir=DIR (the options above)
    #[arg(long = "output", value_name = "LIST", help_heading = "Output options")]
    pub output_directives: Option<String>,

    /// Report each rank's binding on stderr as its node server starts it (and each
    /// spawned process's), as mpirun's --report-bindings: the cores and CPUs, and a
    /// map of the host with B for the CPUs bound to
    #[arg(long, help_heading = "Output options")]
    pub report_bindings: bool,

    /// Print the job's map before it starts (as mpirun's --display-map): each node
    /// server and the ranks it runs (with several app contexts, each range's app)
    #[arg(long, help_heading = "Output options")]
    pub display_map: bool,

    /// Print the nodes the job was given before mapping (as mpirun's
    /// --display-allocation): this host's slots shared by its node servers, each Slurm
    /// node's tasks (slots) and CPUs, or each --host/--hostfile host's slots
    #[arg(long, help_heading = "Output options")]
    pub display_allocation: bool,

    /// PRRTE's display directives, comma-separated, any unique prefix: allocation, map,
    /// bind (--display-allocation, --display-map, --report-bindings)
    #[arg(long = "display", value_name = "LIST", help_heading = "Output options")]
    pub display_directives: Option<String>,

    /// Which ranks get cohort run's stdin (as Open MPI's --stdin): a rank, `all` or
    /// `none`; the others read /dev/null. Not read when cohort run is in the
    /// background of a terminal
    #[arg(
        long,
        value_name = "RANK|all|none",
        default_value = "0",
        help_heading = "Output options"
    )]
    pub stdin: cohort_proto::control::StdinTarget,

    /// Export VAR from cohort's environment to every rank, or set it to VAL (repeatable;
    /// in an app context after a ':', to that app's ranks only)
    #[arg(
        short = 'x',
        value_name = "VAR[=VAL]",
        action = clap::ArgAction::Append,
        help_heading = "Environment options"
    )]
    pub export: Vec<String>,

    /// Open MPI's appfile: the job's app contexts, one per line (`-n N [--pset NAME] [-x
    /// VAR[=VAL]] [--wdir DIR] PROGRAM [ARGS]`, words split as a shell would; '#' starts
    /// a comment line), in place of any on the command line: `cohort run [GLOBAL
    /// OPTIONS] --app FILE`
    #[arg(
        long = "app",
        value_name = "FILE",
        help_heading = "Application context options"
    )]
    pub appfile: Option<PathBuf>,

    /// Set Open MPI's MCA parameter KEY to VALUE in every rank (as mpirun's --mca, also
    /// -mca; the ranks get OMPI_MCA_KEY=VALUE, which -x may override); repeatable
    #[arg(
        long = "mca",
        num_args = 2,
        value_names = ["KEY", "VALUE"],
        action = clap::ArgAction::Append,
        help_heading = "Environment options"
    )]
    pub mca: Vec<String>,

    /// Run PMIx programs and Open MPI on cohort's libpmix.so.2 (like srun --mpi=pmix):
    /// its directory goes first on the ranks' LD_LIBRARY_PATH, and Open MPI is told
    /// that cohort started its processes (OMPI_MCA_schizo=^orte, unless set); where
    /// node servers share a host name (several on one machine), Open MPI uses TCP on
    /// their network instead of shared memory (unless its transports are set), and
    /// on a host with more ranks than cores it yields when idle (unless set). The
    /// library is found in COHORT_PMIX_LIBDIR, else cohort-pmix/ next to cohort (a
    /// build tree), else ../lib/cohort/pmix/ from cohort's directory (an installed
    /// tree), and must be at the same path on every host (over ssh with --prefix:
    /// PREFIX/lib/cohort/pmix)
    #[arg(long, help_heading = "Environment options")]
    pub pmix: bool,

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
    /// its own loopback address 127.0.1.(i+1); under Slurm, each node's NodeAddr; over
    /// ssh, each host's name resolved here, IPv4 first).
    /// Needed where the fabric is bound to real interfaces, e.g. RoCE GIDs on a
    /// soft-RoCE device
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

    /// Terminate the job SECS seconds after launch (exit status 124), naming the ranks
    /// still running
    #[arg(
        long,
        value_name = "SECS",
        help_heading = "Fault-tolerance options",
        value_parser = clap::value_parser!(u64).range(1..)
    )]
    pub timeout: Option<u64>,

    /// With --timeout: print every running rank's stack (gdb, on its host) before
    /// terminating the job, as mpirun's
    #[arg(long, requires = "timeout", help_heading = "Fault-tolerance options")]
    pub get_stack_traces: bool,

    /// Accepted as mpirun's: a --timeout always names the ranks still running
    #[arg(long, help_heading = "Fault-tolerance options")]
    pub report_state_on_timeout: bool,

    /// Process set: NAME labels this app context's ranks (PMIX_PSET_NAMES; give it in
    /// each app context, PRRTE-style); NAME=RANKLIST, among the global options, defines
    /// a set over any ranks of the job, e.g. evens=0,2,4 or io=0-3,8 (repeatable)
    #[arg(
        long = "pset",
        value_name = "NAME[=RANKLIST]",
        action = clap::ArgAction::Append,
        help_heading = "Application context options"
    )]
    pub pset: Vec<String>,

    /// Start the ranks in DIR (relative: to where cohort runs); among the global
    /// options, for every app context that gives none (default: cohort's directory)
    #[arg(
        long = "wdir",
        visible_alias = "wd",
        value_name = "DIR",
        help_heading = "Application context options"
    )]
    pub wdir: Option<PathBuf>,

    /// The program the ranks of the (first) app context run, then its arguments
    /// (everything after PROGRAM up to a standalone `:` is passed to it untouched)
    #[arg(
        value_names = ["PROGRAM", "ARGS"],
        required = true,
        num_args = 1..,
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    pub command: Vec<OsString>,

    /// The app contexts after the first one, one per `:` (see [`parse_cli`]).
    #[arg(skip)]
    pub more_apps: Vec<AppContext>,
}

/// An app context after a `:` (MPMD): its rank count, process sets, environment and
/// program. The first app context's are in [`RunArgs`], among the global options.
#[derive(Clone, Debug, Parser)]
#[command(
    name = "app context",
    no_binary_name = true,
    disable_help_flag = true,
    disable_version_flag = true
)]
pub struct AppContext {
    /// Number of ranks of this app context
    #[arg(
        short = 'n',
        long = "np",
        visible_short_alias = 'c',
        alias = "n",
        value_name = "N",
        value_parser = clap::value_parser!(u32).range(1..)
    )]
    pub np: u32,

    /// Process set labelling this app context's ranks (repeatable)
    #[arg(long = "pset", value_name = "NAME", action = clap::ArgAction::Append)]
    pub pset: Vec<String>,

    /// Export VAR, or set it to VAL, for this app context's ranks only (repeatable)
    #[arg(short = 'x', value_name = "VAR[=VAL]", action = clap::ArgAction::Append)]
    pub export: Vec<String>,

    /// Start this app context's ranks in DIR (over the global --wdir)
    #[arg(long = "wdir", visible_alias = "wd", value_name = "DIR")]
    pub wdir: Option<PathBuf>,

    /// The program this app context's ranks run, then its arguments
    #[arg(
        value_names = ["PROGRAM", "ARGS"],
        required = true,
        num_args = 1..,
        trailing_var_arg = true,
        allow_hyphen_values = true
    )]
    pub command: Vec<OsString>,
}

/// One application context of a job, as the node servers start it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedApp {
    pub np: u32,
    pub command: Vec<OsString>,
    /// `-x` specs for this app's ranks only (the first app's `-x` are the job's).
    pub export: Vec<String>,
    /// Where its ranks start (absolute), if not in cohort's directory (`--wdir`).
    pub wdir: Option<PathBuf>,
}

/// The job the command line asks for: its application contexts in order (ranks
/// numbered consecutively across them) and its process sets in the order given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobPlan {
    pub np: u32,
    pub apps: Vec<PlannedApp>,
    pub psets: Vec<(String, RankSet)>,
}

/// Whether `name` has the form of the namespaces `cohort run` gives jobs
/// (`cohort.PID.HEX`), so a set of that name could collide with a job's namespace.
fn looks_like_a_job_namespace(name: &str) -> bool {
    let mut parts = name.split('.');
    let (Some("cohort"), Some(pid), Some(hex), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return false;
    };
    !pid.is_empty()
        && pid.bytes().all(|b| b.is_ascii_digit())
        && !hex.is_empty()
        && hex.bytes().all(|b| b.is_ascii_hexdigit())
}

/// The one name of `names` that `item` is (any case) or begins (PRRTE's
/// abbreviations); an error naming `option` and the names (and `more`) otherwise.
fn directive<'a>(
    option: &str,
    item: &str,
    names: &[&'a str],
    more: &str,
) -> Result<&'a str, String> {
    let lower = item.to_ascii_lowercase();
    if let Some(exact) = names.iter().find(|n| **n == lower) {
        return Ok(exact);
    }
    let matches: Vec<&str> = names
        .iter()
        .copied()
        .filter(|n| n.starts_with(&lower))
        .collect();
    match matches.as_slice() {
        [one] => Ok(one),
        [] => Err(format!(
            "{option} {item:?}: not a directive cohort has ({}{more})",
            names.join(", ")
        )),
        many => Err(format!(
            "{option} {item:?} is ambiguous: {}",
            many.join(", ")
        )),
    }
}

/// `--map-by` as given.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MapSpec {
    pub policy: MapPolicy,
    /// `:PE=n`: cores per rank.
    pub pe: Option<u32>,
    /// `:OVERSUBSCRIBE` (as `--oversubscribe`).
    pub oversubscribe: bool,
    /// `:DISPLAY` (as `--display-map`).
    pub display: bool,
    /// `:DISPLAYALLOC` (as `--display-allocation`).
    pub display_alloc: bool,
    /// PRRTE's `rankfile:file=PATH` (as `--rankfile PATH`).
    pub rankfile: Option<PathBuf>,
}

/// The policy part of `--map-by`: a policy, or `ppr:K:node`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MapPolicy {
    Policy(MapBy),
    /// `ppr:K:node`: K ranks on each node server.
    PerNode(u32),
}

fn parse_map_by(s: &str) -> Result<MapSpec, String> {
    // PRRTE's `rankfile:file=PATH` (the path may hold ':' or ','), as --rankfile.
    if s.get(..8)
        .is_some_and(|p| p.eq_ignore_ascii_case("rankfile"))
    {
        let path = s
            .get(8..14)
            .filter(|f| f.eq_ignore_ascii_case(":file="))
            .map(|_| &s[14..])
            .filter(|p| !p.is_empty())
            .ok_or_else(|| format!("{s}: the rankfile policy is rankfile:file=PATH"))?;
        return Ok(MapSpec {
            policy: MapPolicy::Policy(MapBy::Slot),
            pe: None,
            oversubscribe: false,
            display: false,
            display_alloc: false,
            rankfile: Some(PathBuf::from(path)),
        });
    }
    // Trailing modifiers (any case), as Open MPI's, after ':' or ',': PE=n,
    // OVERSUBSCRIBE, NOOVERSUBSCRIBE, DISPLAY, DISPLAYALLOC; SPAN is refused by name.
    let (mut policy, mut pe, mut oversubscribe, mut display) = (s, None, false, false);
    let mut display_alloc = false;
    while let Some(at) = policy.rfind([':', ',']) {
        let m = policy[at + 1..].to_ascii_lowercase();
        match m.as_str() {
            "oversubscribe" => oversubscribe = true,
            "nooversubscribe" => {}
            "display" => display = true,
            "displayalloc" => display_alloc = true,
            "span" => {
                return Err(format!(
                    "{s}: the SPAN modifier (the node servers as one) is not supported"
                ))
            }
            m if m.len() > 3 && m.starts_with("pe=") => match m[3..].parse::<u32>() {
                Ok(n) if n > 0 && pe.is_none() => pe = Some(n),
                _ => return Err(format!("{s}: n in :PE=n is a core count of 1 or more")),
            },
            _ => break,
        }
        policy = &policy[..at];
    }
    let modified = policy.len() < s.len();
    let policy = parse_map_policy(policy).map_err(|e| match modified {
        true => format!("{s}: {e}"),
        false => e,
    })?;
    Ok(MapSpec {
        policy,
        pe,
        oversubscribe,
        display,
        display_alloc,
        rankfile: None,
    })
}

/// `--bind-to`: a [`BindTo`] name, or `socket` (Open MPI's word for a package), with
/// Open MPI's qualifiers `:overload-allowed` (cohort binds when asked even if
/// oversubscribed) and `:if-supported` accepted.
pub(crate) fn parse_bind_to(s: &str) -> Result<BindTo, String> {
    let mut base = s;
    while let Some((head, q)) = base.rsplit_once([':', ',']) {
        match q.to_ascii_lowercase().as_str() {
            "overload-allowed" | "if-supported" => base = head,
            _ => {
                return Err(format!(
                    "{s:?}: {q:?} is not a binding qualifier (overload-allowed, if-supported)"
                ))
            }
        }
    }
    match base {
        "socket" => Ok(BindTo::Package),
        _ => base.parse::<BindTo>().map_err(|_| {
            format!(
                "{s:?} is not a binding: give one of {}, or socket",
                BindTo::NAMES.join(", ")
            )
        }),
    }
}

fn parse_map_policy(s: &str) -> Result<MapPolicy, String> {
    if s == "socket" {
        return Ok(MapPolicy::Policy(MapBy::Package));
    }
    if let Ok(by) = s.parse::<MapBy>() {
        return Ok(MapPolicy::Policy(by));
    }
    let Some(ppr) = s.strip_prefix("ppr:") else {
        return Err(format!(
            "{s:?} is not a mapping policy: give one of {}, or ppr:K:node (optionally \
             with :PE=n)",
            MapBy::NAMES.join(", ")
        ));
    };
    let (k, what) = ppr.split_once(':').unwrap_or((ppr, ""));
    let k: u32 = match k.parse() {
        Ok(k) if k > 0 => k,
        _ => return Err(format!("{s}: K in ppr:K:node is a rank count of 1 or more")),
    };
    match what {
        "node" => Ok(MapPolicy::PerNode(k)),
        _ => Err(format!(
            "{s}: only ppr:K:node (K ranks per node server) is supported, not per {what:?}"
        )),
    }
}

impl RunArgs {
    /// How ranks are numbered over the node servers (`--rank-by`, else as `--map-by`).
    pub fn rank_order(&self) -> MapBy {
        cohort_topology::placement::rank_order(self.map_by, self.rank_by)
    }

    /// What a placement slot is (`--use-hwthread-cpus`: a hardware thread).
    pub fn slot_unit(&self) -> cohort_topology::SlotUnit {
        cohort_topology::SlotUnit::of(self.use_hwthread_cpus)
    }

    /// Applies PRRTE's `--output LIST` to the output options it stands for.
    fn resolve_output(&mut self) -> Result<(), String> {
        let Some(list) = self.output_directives.clone() else {
            return Ok(());
        };
        const NAMES: [&str; 4] = ["tag", "tag-fullname", "timestamp", "merge-stderr-to-stdout"];
        for item in list.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let lower = item.to_ascii_lowercase();
            if let Some(dir) = lower.strip_prefix("dir=").map(|_| &item[4..]) {
                if self.output_filename.is_some() {
                    return Err(format!(
                        "--output {item:?} and --output-filename both name a directory: give one"
                    ));
                }
                self.output_filename = Some(PathBuf::from(dir));
                continue;
            }
            match directive("--output", item, &NAMES, ", dir=DIR")? {
                "tag" | "tag-fullname" => self.tag_output = true,
                "timestamp" => self.timestamp_output = true,
                _ => self.merge_stderr_to_stdout = true,
            }
        }
        Ok(())
    }

    /// Applies PRRTE's `--display LIST` to the options it stands for: `allocation`
    /// (`--display-allocation`), `map` (`--display-map`), `bind` (`--report-bindings`).
    fn resolve_display(&mut self) -> Result<(), String> {
        let Some(list) = self.display_directives.clone() else {
            return Ok(());
        };
        const NAMES: [&str; 3] = ["allocation", "map", "bind"];
        for item in list.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            match directive("--display", item, &NAMES, "")? {
                "allocation" => self.display_allocation = true,
                "map" => self.display_map = true,
                _ => self.report_bindings = true,
            }
        }
        Ok(())
    }

    /// Sets [`map_by`](Self::map_by), [`per_node`](Self::per_node) and
    /// [`cpus_per_rank`](Self::cpus_per_rank) from `--map-by`, `-N` / `--npernode` and
    /// `--cpus-per-rank`, which may not disagree.
    fn resolve_mapping(&mut self) -> Result<(), String> {
        let (by, ppr) = match self.map_spec.policy {
            MapPolicy::Policy(by) => (by, None),
            MapPolicy::PerNode(k) => (MapBy::Slot, Some(k)),
        };
        self.cpus_per_rank = match (self.map_spec.pe, self.cpus_per_rank_arg) {
            (Some(a), Some(b)) if a != b => {
                return Err(format!(
                    "--map-by …:PE={a} and --cpus-per-rank {b} disagree: give one"
                ))
            }
            (a, b) => a.or(b).unwrap_or(1),
        };
        self.per_node = match (ppr, self.npernode) {
            (Some(a), Some(b)) if a != b => {
                return Err(format!(
                    "--map-by ppr:{a}:node and -N/--npernode {b} disagree: give one"
                ))
            }
            (a, b) => a.or(b),
        };
        if self.per_node.is_some() && by != MapBy::Slot {
            return Err(format!(
                "-N/--npernode places ranks per node server by itself; it does not go \
                 with --map-by {by}"
            ));
        }
        if let Some(file) = self.map_spec.rankfile.clone() {
            if self.rankfile.as_ref().is_some_and(|f| *f != file) {
                return Err(format!(
                    "--map-by rankfile:file={} and --rankfile {} disagree: give one",
                    file.display(),
                    self.rankfile.as_deref().unwrap_or(&file).display()
                ));
            }
            self.rankfile = Some(file);
        }
        if let Some(file) = &self.rankfile {
            let mapping = [
                (by != MapBy::Slot, "--map-by"),
                (self.per_node.is_some(), "-N/--npernode"),
                (self.rank_by.is_some(), "--rank-by"),
                (self.cpus_per_rank > 1, "--cpus-per-rank (or :PE=n)"),
                (self.bind_to.is_some(), "--bind-to"),
                (self.cpu_set.is_some(), "--cpu-set"),
            ];
            if let Some((_, other)) = mapping.iter().find(|(given, _)| *given) {
                return Err(format!(
                    "--rankfile {} places and binds every rank itself; it does not go \
                     with {other}",
                    file.display()
                ));
            }
        }
        self.map_by = by;
        self.oversubscribe |= self.map_spec.oversubscribe;
        self.display_map |= self.map_spec.display;
        self.display_allocation |= self.map_spec.display_alloc;
        Ok(())
    }

    /// The job's application contexts and process sets, checked: rank counts add up
    /// (at most `u32::MAX - 1` ranks), set names are valid and given once, rank lists
    /// name ranks of the job, and `NAME=RANKLIST` sets are among the global options.
    pub fn plan(&self) -> Result<JobPlan, String> {
        let wdir = |dir: Option<&PathBuf>| -> Result<Option<PathBuf>, String> {
            let Some(dir) = dir.or(self.wdir.as_ref()) else {
                return Ok(None);
            };
            if dir.as_os_str().is_empty() {
                return Err("--wdir: the directory is empty".into());
            }
            let here =
                std::env::current_dir().map_err(|e| format!("--wdir {}: {e}", dir.display()))?;
            Ok(Some(here.join(dir)))
        };
        let Some(np) = self.np else {
            return Err(match self.more_apps.is_empty() {
                true => "-n: how many ranks to start is not known; give -n N".into(),
                false => "-n: every app context gives its number of ranks (-n N); the \
                          first one has none"
                    .into(),
            });
        };
        let mut apps = vec![PlannedApp {
            np,
            command: self.command.clone(),
            export: Vec::new(),
            wdir: wdir(None)?,
        }];
        // Every --pset in command-line order, with the app context a plain NAME labels
        // (`None`: NAME=RANKLIST, a set over ranks of the whole job).
        let mut sets: Vec<(&str, Option<usize>)> = self
            .pset
            .iter()
            .map(|s| (s.as_str(), (!s.contains('=')).then_some(0)))
            .collect();
        for (k, app) in self.more_apps.iter().enumerate() {
            apps.push(PlannedApp {
                np: app.np,
                command: app.command.clone(),
                export: app.export.clone(),
                wdir: wdir(app.wdir.as_ref())?,
            });
            for s in &app.pset {
                if s.contains('=') {
                    return Err(format!(
                        "--pset {s}: a set over a rank list names ranks of the whole job; \
                         give it with the global options, before the first ':' (in app \
                         context {}, --pset takes just a NAME)",
                        k + 1
                    ));
                }
                sets.push((s.as_str(), Some(k + 1)));
            }
        }
        let mut np: u32 = 0;
        let mut firsts = Vec::with_capacity(apps.len());
        for app in &apps {
            firsts.push(np);
            np = np
                .checked_add(app.np)
                .filter(|&n| n < cohort_proto::RANK_WILDCARD)
                .ok_or_else(|| {
                    format!(
                        "the app contexts add up to more than {} ranks",
                        cohort_proto::RANK_WILDCARD - 1
                    )
                })?;
        }
        let mut psets: Vec<(String, RankSet)> = Vec::new();
        for (spec, app) in sets {
            let (name, members) = match app {
                Some(a) => {
                    let first = firsts[a];
                    (spec, RankSet::range(first..first + apps[a].np))
                }
                None => {
                    let (name, list) = spec.split_once('=').unwrap_or((spec, ""));
                    let members =
                        RankSet::parse(list).map_err(|e| format!("--pset {spec}: {e}"))?;
                    if let Some(last) = members.last().filter(|&r| r >= np) {
                        return Err(format!(
                            "--pset {spec}: rank {last} is not in the job (ranks 0-{})",
                            np - 1
                        ));
                    }
                    (name, members)
                }
            };
            // The job's namespace is not known yet: checked against it once it is.
            cohort_proto::validate_pset_name(name, "").map_err(|e| format!("--pset: {e}"))?;
            if looks_like_a_job_namespace(name) {
                return Err(format!(
                    "--pset {name}: the name has the form of a cohort job namespace \
                     (cohort.PID.HEX) and could collide with one"
                ));
            }
            if psets.iter().any(|(n, _)| n == name) {
                return Err(format!(
                    "--pset {name} is given twice: process set names must be unique"
                ));
            }
            psets.push((name.to_string(), members));
        }
        Ok(JobPlan { np, apps, psets })
    }

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

/// Every option of `cohort run` and of an app context, by every spelling (`--long`,
/// aliases, `-s`), with how many separate values it takes (0 for a flag), read from
/// their clap definitions so no option is missed. See [`read_option`].
fn known_options() -> &'static std::collections::HashMap<String, usize> {
    static TABLE: std::sync::OnceLock<std::collections::HashMap<String, usize>> =
        std::sync::OnceLock::new();
    TABLE.get_or_init(|| {
        let mut table = std::collections::HashMap::new();
        let mut cli = Cli::command();
        let run = cli
            .find_subcommand_mut("run")
            .expect("`run` is a subcommand")
            .clone();
        for cmd in [run, AppContext::command()] {
            for arg in cmd.get_arguments() {
                if arg.is_positional() {
                    continue;
                }
                let n = match arg.get_action().takes_values() {
                    true => arg.get_num_args().map_or(1, |r| r.min_values().max(1)),
                    false => 0,
                };
                for long in arg.get_long_and_visible_aliases().into_iter().flatten() {
                    table.insert(format!("--{long}"), n);
                }
                for long in arg.get_aliases().into_iter().flatten() {
                    table.insert(format!("--{long}"), n);
                }
                for short in arg.get_short_and_visible_aliases().into_iter().flatten() {
                    table.insert(format!("-{short}"), n);
                }
            }
        }
        for help in ["--help", "-h"] {
            table.insert(help.into(), 0);
        }
        table
    })
}

/// The standalone argument that separates app contexts (MPMD), as with mpirun.
pub const APP_SEPARATOR: &str = ":";

/// Parses cohort's command line: splits `run`'s arguments into app contexts at each
/// standalone `:` (everything before the first one is the global options and the first
/// app context), rewrites mpirun's `-np` in each, parses them, and checks the job they
/// describe ([`RunArgs::plan`]). Errors are usage errors (exit status 2).
pub fn parse_cli(args: impl IntoIterator<Item = OsString>) -> Result<Cli, clap::Error> {
    let usage_error = |msg: String| {
        let mut cli = Cli::command();
        let run = cli
            .find_subcommand_mut("run")
            .expect("`run` is a subcommand");
        run.error(clap::error::ErrorKind::ValueValidation, msg)
    };
    let argv = expand_appfile(args.into_iter().collect()).map_err(usage_error)?;
    let run_at = argv.iter().position(|a| a == "run");
    let (first, rest) = match run_at {
        Some(at) if argv[at + 1..].iter().any(|a| a == APP_SEPARATOR) => {
            let mut segments = argv[at + 1..].split(|a| a == APP_SEPARATOR);
            let mut first = argv[..=at].to_vec();
            first.extend(segments.next().unwrap_or_default().iter().cloned());
            let rest: Vec<Vec<OsString>> = segments.map(<[OsString]>::to_vec).collect();
            (first, rest)
        }
        _ => (argv, Vec::new()),
    };
    if !rest.is_empty() && run_at.is_some_and(|at| first.len() == at + 1) {
        return Err(usage_error(
            "nothing before the first ':': the global options and the first app context \
             (-n N PROGRAM) come first"
                .into(),
        ));
    }
    if let Some(at) = run_at {
        if let Some(arg) = first.get(at + 1..).and_then(unknown_option) {
            return Err(usage_error(unknown_option_message(&arg, "")));
        }
    }
    let mut cli = Cli::try_parse_from(normalize_args(first))?;
    let Command::Run(run) = &mut cli.command else {
        return Ok(cli);
    };
    run.resolve_mapping().map_err(usage_error)?;
    run.resolve_output().map_err(usage_error)?;
    run.resolve_display().map_err(usage_error)?;
    let last = rest.len();
    for (k, segment) in rest.into_iter().enumerate() {
        let k = k + 1;
        if segment.is_empty() {
            return Err(usage_error(if k == last {
                "':' at the end of the command line: an app context (-n N PROGRAM) must \
                 follow it"
                    .into()
            } else {
                format!("app context {k} is empty: nothing between two ':'")
            }));
        }
        if let Some(arg) = unknown_option(&segment) {
            let context = format!("app context {k} (after ':' number {k}): ");
            return Err(usage_error(unknown_option_message(&arg, &context)));
        }
        let app = AppContext::try_parse_from(normalize_options(segment)).map_err(|e| {
            // clap's message, without its usage (not this one's) and tips.
            let text = e.to_string();
            let msg: Vec<&str> = text
                .lines()
                .take_while(|l| !l.trim().is_empty() && !l.starts_with("Usage:"))
                .map(str::trim)
                .collect();
            let msg = msg.join(" ");
            let msg = msg.trim_start_matches("error: ");
            usage_error(format!("app context {k} (after ':' number {k}): {msg}"))
        })?;
        run.more_apps.push(app);
    }
    // Without -n (one app context), the rank count comes from where the job runs: the
    // launcher checks the plan once it knows it.
    if run.np.is_some() || !run.more_apps.is_empty() {
        run.plan().map_err(usage_error)?;
    }
    Ok(cli)
}

/// Rewrites mpirun's single-dash `-np N` and `-mca KEY VALUE` into `--np N` and `--mca
/// KEY VALUE`, but only among cohort's own options: an `-np` after PROGRAM belongs to
/// the program.
pub fn normalize_args(args: impl IntoIterator<Item = OsString>) -> Vec<OsString> {
    let out: Vec<OsString> = args.into_iter().collect();
    let Some(run_at) = out.iter().position(|a| a == "run") else {
        return out;
    };
    let (head, options) = out.split_at(run_at + 1);
    let mut out = head.to_vec();
    out.extend(normalize_options(options.to_vec()));
    out
}

/// `cohort run [OPTIONS] --app FILE`: the command line with FILE's app contexts in
/// place of `--app FILE` (after the options, separated by `:`), as Open MPI reads an
/// appfile. Unchanged without `--app`.
fn expand_appfile(argv: Vec<OsString>) -> Result<Vec<OsString>, String> {
    let Some(run_at) = argv.iter().position(|a| a == "run") else {
        return Ok(argv);
    };
    let mut options: Vec<OsString> = argv[..=run_at].to_vec();
    let mut file: Option<PathBuf> = None;
    let args = &argv[run_at + 1..];
    let spans = option_spans(args);
    let program_at = spans.last().map_or(0, |s| s.end);
    for span in spans {
        let opt = &args[span];
        let raw = opt[0].to_string_lossy();
        let name = read_option(&raw).map_or(raw.to_string(), |(words, _)| words[0].clone());
        if let Some(f) = name.strip_prefix("--app=") {
            file = Some(f.into());
        } else if name == "--app" {
            file = Some(opt.get(1).ok_or("--app needs a FILE")?.into());
        } else {
            options.extend(opt.iter().cloned());
        }
    }
    let Some(file) = file else {
        return Ok(argv);
    };
    if let Some(extra) = args.get(program_at) {
        return Err(format!(
            "--app {}: the appfile gives the app contexts; {:?} may not follow the options",
            file.display(),
            extra
        ));
    }
    let text = std::fs::read_to_string(&file)
        .map_err(|e| format!("--app {}: cannot read it: {e}", file.display()))?;
    let mut apps = 0;
    for (n, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let words = crate::ssh::split_words(line)
            .map_err(|e| format!("--app {}:{}: {e}", file.display(), n + 1))?;
        if apps > 0 {
            options.push(APP_SEPARATOR.into());
        }
        options.extend(words.into_iter().map(OsString::from));
        apps += 1;
    }
    if apps == 0 {
        return Err(format!("--app {}: no app context in it", file.display()));
    }
    Ok(options)
}

/// [`normalize_args`] on the arguments after `run` (or of an app context): each of
/// cohort's options in the spelling clap reads ([`read_option`]).
fn normalize_options(args: Vec<OsString>) -> Vec<OsString> {
    let spans = option_spans(&args);
    let program_at = spans.last().map_or(0, |s| s.end);
    let mut out = Vec::with_capacity(args.len() + 1);
    for span in spans {
        match read_option(&args[span.start].to_string_lossy()) {
            Some((words, _)) => out.extend(words.into_iter().map(OsString::from)),
            None => out.push(args[span.start].clone()),
        }
        out.extend(args[span.start + 1..span.end].iter().cloned());
    }
    out.extend(args[program_at..].iter().cloned());
    out
}

/// How cohort reads option word `arg` (one before PROGRAM): the words clap is given
/// for it and how many separate values follow it; `None` when it is not one of
/// cohort's options. mpirun's spellings are read too: a single dash before a long
/// option (`-np 4`, `-mca btl tcp`, `-hostfile F`, `-bind-to core`), and a short
/// option's value attached (`-n4`, `-xFOO=1`).
fn read_option(arg: &str) -> Option<(Vec<String>, usize)> {
    let table = known_options();
    let (name, attached) = match arg.split_once('=') {
        Some((n, _)) => (n, true),
        None => (arg, false),
    };
    let separate = |n: usize| if attached { 0 } else { n };
    if let Some(&n) = table.get(name) {
        return Some((vec![arg.to_string()], separate(n)));
    }
    let single = name.strip_prefix('-').filter(|n| !n.starts_with('-'))?;
    if let Some(&n) = table.get(&format!("--{single}")) {
        return Some((vec![format!("-{arg}")], separate(n)));
    }
    let short = arg.get(..2)?;
    match table.get(short) {
        Some(&n) if n >= 1 => Some((vec![short.to_string(), arg[2..].to_string()], n - 1)),
        _ => None,
    }
}

/// Where cohort's own options lie in `args` (the arguments after `run`, or an app
/// context's): each option with its separate values ([`known_options`]), in order, up
/// to PROGRAM (the first argument that is not an option, or `--`), where the last span
/// ends.
fn option_spans(args: &[OsString]) -> Vec<std::ops::Range<usize>> {
    let mut spans = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let arg = args[i].to_string_lossy();
        if arg == "--" || !arg.starts_with('-') || arg == "-" {
            break;
        }
        let values = read_option(&arg).map_or(0, |(_, n)| n);
        let end = (i + 1 + values).min(args.len());
        spans.push(i..end);
        i = end;
    }
    spans
}

/// The first of `args`' options (the arguments after `run`, or an app context's, up to
/// PROGRAM) that is not one of cohort's: without this check clap would take it for
/// PROGRAM (which may start with `-` after `--`), and `cohort run --xml f -n 4 app`
/// would try to run `--xml`.
fn unknown_option(args: &[OsString]) -> Option<String> {
    option_spans(args).into_iter().find_map(|span| {
        let arg = args[span.start].to_string_lossy().into_owned();
        read_option(&arg).is_none().then_some(arg)
    })
}

/// The usage error for option `arg`, which cohort does not have.
fn unknown_option_message(arg: &str, context: &str) -> String {
    format!(
        "{context}unknown option {arg:?}: cohort run has no such option (see cohort run \
         --help); its options come before PROGRAM, and a program whose name starts with \
         '-' goes after --"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    fn parse(args: &[&str]) -> Result<RunArgs, clap::Error> {
        parse_cli(args.iter().map(OsString::from)).map(|c| match c.command {
            Command::Run(r) => *r,
            Command::Topo(_) => panic!("not a run command"),
        })
    }

    /// The job `cohort run ARGS` describes, or the usage error's message.
    fn plan(args: &[&str]) -> Result<JobPlan, String> {
        let mut argv = vec!["cohort", "run"];
        argv.extend_from_slice(args);
        match parse(&argv) {
            Ok(r) => Ok(r.plan().expect("parse_cli checked the plan")),
            Err(e) => {
                assert_eq!(e.exit_code(), 2, "a usage error: {e}");
                Err(e.to_string())
            }
        }
    }

    fn words(v: &[OsString]) -> Vec<&str> {
        v.iter().map(|w| w.to_str().unwrap()).collect()
    }

    #[test]
    fn app_contexts_split_at_standalone_colons() {
        let p = plan(&[
            "--nodes",
            "3",
            "--tag-output",
            "-n",
            "2",
            "--pset",
            "ocean",
            "-x",
            "A=1",
            "./a",
            "-n",
            "x:y",
            ":",
            "-np",
            "3",
            "--pset",
            "ice",
            "-x",
            "B=2",
            "./b",
            "--pset",
            ":",
            "-n",
            "1",
            "sh",
            "-c",
            "echo :",
        ])
        .unwrap();
        assert_eq!(p.np, 6);
        assert_eq!(p.apps.len(), 3);
        assert_eq!(p.apps[0].np, 2);
        assert_eq!(words(&p.apps[0].command), ["./a", "-n", "x:y"]);
        assert!(
            p.apps[0].export.is_empty(),
            "the first app's -x is the job's"
        );
        assert_eq!(p.apps[1].np, 3);
        assert_eq!(words(&p.apps[1].command), ["./b", "--pset"]);
        assert_eq!(p.apps[1].export, ["B=2"]);
        assert_eq!(words(&p.apps[2].command), ["sh", "-c", "echo :"]);
        let sets: Vec<(&str, String)> = p
            .psets
            .iter()
            .map(|(n, r)| (n.as_str(), r.to_string()))
            .collect();
        assert_eq!(sets, [("ocean", "0-1".into()), ("ice", "2-4".into())]);
        let r = parse(&[
            "cohort", "run", "--nodes", "3", "-n", "2", "-x", "A=1", "./a", ":", "-n", "1", "b",
        ])
        .unwrap();
        assert_eq!((r.nodes, r.np), (Some(3), Some(2)));
        assert_eq!(r.export, ["A=1"]);
    }

    #[test]
    fn rank_list_psets_and_app_psets_keep_command_line_order() {
        let p = plan(&[
            "--pset",
            "evens=0,2,4",
            "-n",
            "2",
            "--pset",
            "ocean",
            "--pset",
            "io=0-1,5",
            "./a",
            ":",
            "-n",
            "4",
            "--pset",
            "ice",
            "--pset",
            "frozen",
            "./b",
        ])
        .unwrap();
        let sets: Vec<String> = p.psets.iter().map(|(n, r)| format!("{n}={r}")).collect();
        assert_eq!(
            sets,
            [
                "evens=0,2,4",
                "ocean=0-1",
                "io=0-1,5",
                "ice=2-5",
                "frozen=2-5"
            ]
        );
        // One app: as before, with or without sets.
        let p = plan(&["-n", "3", "--pset", "all", "prog", "x"]).unwrap();
        assert_eq!((p.np, p.apps.len()), (3, 1));
        assert_eq!(p.psets, [("all".to_string(), RankSet::range(0..3))]);
        assert!(plan(&["-n", "3", "prog"]).unwrap().psets.is_empty());
    }

    #[test]
    fn bad_app_contexts_and_psets_are_usage_errors_naming_the_problem() {
        let err = |args: &[&str]| plan(args).unwrap_err();
        let e = err(&["-n", "2", "./a", ":"]);
        assert!(e.contains("':' at the end"), "{e}");
        let e = err(&["-n", "2", "./a", ":", ":", "-n", "1", "./b"]);
        assert!(e.contains("app context 1 is empty"), "{e}");
        let e = err(&[":", "-n", "1", "./b"]);
        assert!(e.contains("nothing before the first ':'"), "{e}");
        let e = err(&["-n", "2", "./a", ":", "-n", "0", "./b"]);
        assert!(e.contains("app context 1") && e.contains("'0'"), "{e}");
        let e = err(&["-n", "2", "./a", ":", "./b"]);
        assert!(e.contains("app context 1") && e.contains("--np"), "{e}");
        let e = err(&["-n", "2", "./a", ":", "-n", "1"]);
        assert!(e.contains("app context 1") && e.contains("PROGRAM"), "{e}");
        let e = err(&["-n", "0", "./a", ":", "-n", "1", "./b"]);
        assert!(e.contains("'0'"), "{e}");
        let e = err(&["-n", "2", "./a", ":", "-n", "two", "./b"]);
        assert!(e.contains("app context 1") && e.contains("'two'"), "{e}");

        let e = err(&[
            "-n", "2", "--pset", "x", "./a", ":", "-n", "1", "--pset", "x", "./b",
        ]);
        assert!(e.contains("--pset x is given twice"), "{e}");
        let e = err(&["--pset", "x=0", "-n", "2", "--pset", "x", "./a"]);
        assert!(e.contains("given twice"), "{e}");
        let e = err(&["-n", "2", "--pset", "", "./a"]);
        assert!(e.contains("empty"), "{e}");
        let long = "p".repeat(256);
        let e = err(&["-n", "2", "--pset", &long, "./a"]);
        assert!(e.contains("256 bytes") && e.contains("255"), "{e}");
        assert!(plan(&["-n", "2", "--pset", &long[..255], "./a"]).is_ok());
        let e = err(&["-n", "2", "--pset", "cohort.4242.beef", "./a"]);
        assert!(e.contains("namespace"), "{e}");
        assert!(plan(&["-n", "2", "--pset", "cohort.ocean", "./a"]).is_ok());
        let e = err(&["--pset", "io=0-3", "-n", "2", "./a", ":", "-n", "1", "./b"]);
        assert!(
            e.contains("--pset io=0-3: rank 3 is not in the job (ranks 0-2)"),
            "{e}"
        );
        let e = err(&["-n", "2", "./a", ":", "-n", "1", "--pset", "io=0", "./b"]);
        assert!(e.contains("global options"), "{e}");
        let e = err(&["--pset", "io=", "-n", "2", "./a"]);
        assert!(e.contains("--pset io="), "{e}");
        let e = err(&["--pset", "io=1-0", "-n", "2", "./a"]);
        assert!(e.contains("backwards"), "{e}");
        let e = err(&["-n", "4294967294", "./a", ":", "-n", "1", "./b"]);
        assert!(e.contains("more than"), "{e}");
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
        assert_eq!(r.np, Some(3));
        assert!(r.tag_output);
        assert_eq!(r.command, ["sh", "-c", "echo -n --np 2", "--help"]);
    }

    #[test]
    fn launcher_options() {
        use crate::slurm::LauncherKind;
        let r = parse(&["cohort", "run", "-n", "2", "prog"]).unwrap();
        assert_eq!(
            (r.launcher, r.nodes, r.control_addr),
            (LauncherKind::Auto, None, None)
        );
        // Options with a value before mpirun's -np: -np is still cohort's.
        let r = parse(&[
            "cohort",
            "run",
            "--launcher",
            "slurm",
            "--control-addr",
            "10.0.0.1",
            "--node-addrs",
            "10.0.0.2,10.0.0.3",
            "--spin-us",
            "0",
            "-np",
            "4",
            "prog",
        ])
        .unwrap();
        assert_eq!(r.launcher, LauncherKind::Slurm);
        assert_eq!(r.control_addr, Some("10.0.0.1".parse().unwrap()));
        assert_eq!(r.node_addrs.len(), 2);
        assert_eq!((r.np, r.command.len()), (Some(4), 1));
        let r = parse(&["cohort", "run", "--launcher", "local", "-n", "1", "p"]).unwrap();
        assert_eq!(r.launcher, LauncherKind::Local);
        let r = parse(&["cohort", "run", "--launcher", "ssh", "-n", "1", "p"]).unwrap();
        assert_eq!(r.launcher, LauncherKind::Ssh);
        let r = parse(&[
            "cohort",
            "run",
            "-H",
            "a,b",
            "--host",
            "root@c:2",
            "--hostfile",
            "hf",
            "--launch-agent",
            "ssh -F x",
            "--prefix",
            "/opt/c",
            "-np",
            "4",
            "prog",
            "--host",
        ])
        .unwrap();
        assert_eq!(r.host, ["a,b", "root@c:2"]);
        assert_eq!(r.hostfile, Some(PathBuf::from("hf")));
        assert_eq!(r.launch_agent.as_deref(), Some("ssh -F x"));
        assert_eq!(r.prefix, Some(PathBuf::from("/opt/c")));
        assert_eq!((r.np, r.command.len()), (Some(4), 2));
        assert!(parse(&["cohort", "run", "--launcher", "rsh", "-n", "1", "p"]).is_err());
        assert!(parse(&["cohort", "run", "--control-addr", "vm", "-n", "1", "p"]).is_err());
    }

    #[test]
    fn mpirun_style_np_and_exports() {
        let r = parse(&[
            "cohort", "run", "-np", "4", "--nodes", "2", "-x", "A=1", "-x", "B", "prog", "-np",
        ])
        .unwrap();
        assert_eq!((r.np, r.nodes), (Some(4), Some(2)));
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
        assert!(parse(&["cohort", "run", "-n", "2", "--map-by", "board", "prog"]).is_err());
        // socket is Open MPI's word for a package
        let r = parse(&["cohort", "run", "-n", "2", "--map-by", "socket", "prog"]).unwrap();
        assert_eq!(r.map_by, MapBy::Package);
        let r = parse(&["cohort", "run", "-n", "2", "--bind-to", "socket", "prog"]).unwrap();
        assert_eq!(r.bind_to, Some(BindTo::Package));
        let r = parse(&[
            "cohort",
            "run",
            "-n",
            "1",
            "--map-by",
            "socket:PE=2",
            "prog",
        ])
        .unwrap();
        assert_eq!((r.map_by, r.cpus_per_rank), (MapBy::Package, 2));
        assert!(parse(&["cohort", "run", "-n", "2", "--bind-to", "pu", "prog"]).is_err());
    }

    #[test]
    fn ranks_per_node_server() {
        let run = |extra: &[&str]| {
            let mut a = vec!["cohort", "run", "--nodes", "3"];
            a.extend_from_slice(extra);
            a.push("prog");
            parse(&a).map(|r| (r.map_by, r.per_node, r.np))
        };
        assert_eq!(run(&["-N", "2"]).unwrap(), (MapBy::Slot, Some(2), None));
        assert_eq!(
            run(&["--npernode", "4"]).unwrap(),
            (MapBy::Slot, Some(4), None)
        );
        assert_eq!(
            run(&["--map-by", "ppr:2:node", "-n", "5"]).unwrap(),
            (MapBy::Slot, Some(2), Some(5))
        );
        // the same count twice is fine, two counts are not
        assert_eq!(
            run(&["--map-by", "ppr:3:node", "-N", "3"]).unwrap().1,
            Some(3)
        );
        let e = run(&["--map-by", "ppr:3:node", "-N", "2"]).unwrap_err();
        assert!(e.to_string().contains("disagree"), "{e}");
        let e = run(&["--map-by", "node", "-N", "2"]).unwrap_err();
        assert!(e.to_string().contains("--map-by node"), "{e}");
        for bad in [
            "ppr:0:node",
            "ppr:x:node",
            "ppr:2",
            "ppr:2:socket",
            "pp:2:node",
        ] {
            assert!(run(&["--map-by", bad]).is_err(), "{bad} accepted");
        }
        assert!(run(&["-N", "0"]).is_err());
        // after the program, -N is the program's
        let r = parse(&["cohort", "run", "-n", "1", "prog", "-N", "2"]).unwrap();
        assert_eq!((r.per_node, r.command.len()), (None, 3));
    }

    /// mpirun's `-np` is found after any option that takes a value, whichever: each
    /// one used to need listing by hand, and `--wdir DIR -np 4 prog` ran `-np`.
    #[test]
    fn single_dash_np_after_any_option_with_a_value() {
        for (opt, val) in [
            ("--wdir", "/tmp"),
            ("--wd", "/tmp"),
            ("--output-filename", "out"),
            ("--stdin", "none"),
            ("--prefix", "/opt/c"),
            ("--mca", "btl"),
            ("--map-by", "node"),
            ("--hostfile", "h"),
        ] {
            let mut a = vec!["cohort", "run", opt, val];
            if opt == "--mca" {
                a.push("self");
            }
            a.extend_from_slice(&["-np", "3", "prog", "-np", "9"]);
            let r = parse(&a).unwrap_or_else(|e| panic!("{opt}: {e}"));
            assert_eq!(r.np, Some(3), "{opt}");
            assert_eq!(r.command, ["prog", "-np", "9"], "{opt}");
        }
        // in a later app context too
        let r = parse(&[
            "cohort", "run", "-np", "1", "a", ":", "--wdir", "/tmp", "-np", "2", "b",
        ])
        .unwrap();
        assert_eq!((r.more_apps[0].np, r.more_apps[0].command.len()), (2, 1));
    }

    /// Open MPI's modifiers and aliases: `--map-by …:OVERSUBSCRIBE` / `,DISPLAY` (as
    /// `--oversubscribe`, `--display-map`; `NOOVERSUBSCRIBE` the default), with `PE=n`
    /// in any order; `SPAN` refused by name; `--bind-to core:overload-allowed` /
    /// `:if-supported`; `-c N` and `--n N` for `-n N`.
    #[test]
    fn open_mpi_modifiers_and_aliases() {
        let r = parse(&[
            "cohort",
            "run",
            "--map-by",
            "node:OVERSUBSCRIBE,pe=2,display",
            "-c",
            "2",
            "p",
        ])
        .unwrap();
        assert_eq!((r.map_by, r.cpus_per_rank, r.np), (MapBy::Node, 2, Some(2)));
        assert!(r.oversubscribe && r.display_map);
        let r = parse(&[
            "cohort",
            "run",
            "--map-by",
            "ppr:2:node:nooversubscribe",
            "p",
        ])
        .unwrap();
        assert_eq!(r.per_node, Some(2));
        assert!(!r.oversubscribe && !r.display_map);
        let e = parse(&["cohort", "run", "--map-by", "node:SPAN", "-n", "1", "p"])
            .map(|_| ())
            .unwrap_err()
            .to_string();
        assert!(e.contains("SPAN"), "{e}");
        let e = parse(&["cohort", "run", "--map-by", "node:weird", "-n", "1", "p"])
            .map(|_| ())
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a mapping policy"), "{e}");
        for b in [
            "core:overload-allowed",
            "core:if-supported,overload-allowed",
        ] {
            let r = parse(&["cohort", "run", "--bind-to", b, "-n", "1", "p"]).unwrap();
            assert_eq!(r.bind_to, Some(BindTo::Core), "{b}");
        }
        let e = parse(&["cohort", "run", "--bind-to", "core:odd", "-n", "1", "p"])
            .map(|_| ())
            .unwrap_err()
            .to_string();
        assert!(e.contains("not a binding qualifier"), "{e}");
        let r = parse(&["cohort", "run", "--n", "3", "p", ":", "-c", "2", "q"]).unwrap();
        assert_eq!((r.np, r.more_apps[0].np), (Some(3), 2));
    }

    /// `--get-stack-traces` needs `--timeout`; `--report-state-on-timeout` is
    /// accepted alone.
    #[test]
    fn stack_traces_need_a_timeout() {
        let e = parse(&["cohort", "run", "--get-stack-traces", "-n", "1", "prog"])
            .map(|_| ())
            .unwrap_err()
            .to_string();
        assert!(e.contains("--timeout"), "{e}");
        let r = parse(&[
            "cohort",
            "run",
            "--timeout",
            "5",
            "--get-stack-traces",
            "--report-state-on-timeout",
            "-n",
            "1",
            "prog",
        ])
        .unwrap();
        assert!(r.get_stack_traces && r.report_state_on_timeout);
    }

    /// PRRTE's `--output LIST` sets the output options it names (any unique prefix;
    /// an exact name wins); other directives, ambiguous ones and two directories are
    /// refused, named.
    #[test]
    fn prrte_output_directives() {
        let r = parse(&["cohort", "run", "-n", "1", "prog"]).unwrap();
        assert!(!r.tag_output && !r.timestamp_output && !r.merge_stderr_to_stdout);
        let r = parse(&[
            "cohort",
            "run",
            "--output",
            "TAG,time,Merge,dir=/tmp/O",
            "-n",
            "1",
            "prog",
        ])
        .unwrap();
        assert!(r.tag_output && r.timestamp_output && r.merge_stderr_to_stdout);
        assert_eq!(
            r.output_filename.as_deref(),
            Some(std::path::Path::new("/tmp/O"))
        );
        let r = parse(&["cohort", "run", "--output=tag-f", "-n", "1", "prog"]).unwrap();
        assert!(r.tag_output && !r.timestamp_output);
        for (list, says) in [
            ("xml", "not a directive"),
            ("ta", "ambiguous"),
            ("dir=/a", "both name a directory"),
        ] {
            let e = parse(&[
                "cohort",
                "run",
                "--output-filename",
                "/b",
                "--output",
                list,
                "-n",
                "1",
                "prog",
            ]);
            let e = e.map(|_| ()).expect_err(list).to_string();
            assert!(e.contains(says) && e.contains(list), "{list}: {e}");
        }
    }

    /// PRRTE's `--display LIST` (allocation, map, bind; any case, unique prefixes),
    /// mpirun's `--display-allocation` (single-dash too) and `--map-by …:DISPLAYALLOC`;
    /// other directives refused, named.
    #[test]
    fn display_directives_and_display_allocation() {
        let r = parse(&["cohort", "run", "-n", "1", "prog"]).unwrap();
        assert!(!r.display_allocation && !r.display_map && !r.report_bindings);
        let r = parse(&["cohort", "run", "--display", "ALLOC,m", "-n", "1", "prog"]).unwrap();
        assert!(r.display_allocation && r.display_map && !r.report_bindings);
        let r = parse(&["cohort", "run", "--display=bind", "-n", "1", "prog"]).unwrap();
        assert!(!r.display_allocation && !r.display_map && r.report_bindings);
        let r = parse(&["cohort", "run", "-display-allocation", "-n", "1", "prog"]).unwrap();
        assert!(r.display_allocation && !r.display_map);
        assert_eq!(r.command, ["prog"]);
        let r = parse(&[
            "cohort",
            "run",
            "--map-by",
            "node:DISPLAYALLOC",
            "-n",
            "1",
            "p",
        ])
        .unwrap();
        assert!(r.display_allocation && !r.display_map && r.map_by == MapBy::Node);
        for (list, says) in [("topo", "not a directive"), ("", "")] {
            let got = parse(&["cohort", "run", "--display", list, "-n", "1", "prog"]);
            match says.is_empty() {
                true => assert!(got.is_ok(), "an empty list displays nothing"),
                false => {
                    let e = got.map(|_| ()).expect_err(list).to_string();
                    assert!(
                        e.contains(says) && e.contains(list) && e.contains("allocation"),
                        "{e}"
                    );
                }
            }
        }
    }

    /// `--rankfile FILE` (mpirun's `-rf FILE` too) places and binds by itself: every
    /// mapping or binding option with it is a usage error naming that option.
    #[test]
    fn a_rankfile_goes_with_no_other_mapping() {
        let r = parse(&["cohort", "run", "-rf", "f", "prog"]).unwrap();
        assert_eq!(r.rankfile.as_deref(), Some(std::path::Path::new("f")));
        assert_eq!((r.np, r.command.len()), (None, 1));
        // PRRTE's spelling; the path may hold ':' and ','
        let r = parse(&["cohort", "run", "--map-by", "RANKFILE:file=/a:b,c", "p"]).unwrap();
        assert_eq!(r.rankfile.as_deref(), Some(std::path::Path::new("/a:b,c")));
        assert_eq!(r.map_by, MapBy::Slot);
        for bad in ["rankfile", "rankfile:file=", "rankfile:f=x"] {
            let e = parse(&["cohort", "run", "--map-by", bad, "p"])
                .map(|_| ())
                .expect_err(bad);
            assert!(e.to_string().contains("rankfile:file=PATH"), "{bad}: {e}");
        }
        let e = parse(&[
            "cohort",
            "run",
            "--map-by",
            "rankfile:file=a",
            "-rf",
            "b",
            "p",
        ])
        .map(|_| ())
        .unwrap_err();
        assert!(e.to_string().contains("disagree"), "{e}");
        assert!(parse(&["cohort", "run", "--rankfile", "f", "--map-by", "slot", "p"]).is_ok());
        for (opt, val, named) in [
            ("--map-by", "node", "--map-by"),
            ("-N", "2", "-N/--npernode"),
            ("--rank-by", "node", "--rank-by"),
            ("--cpus-per-rank", "2", "--cpus-per-rank"),
            ("--bind-to", "core", "--bind-to"),
            ("--cpu-set", "0", "--cpu-set"),
        ] {
            let e = parse(&["cohort", "run", "--rankfile", "f", opt, val, "p"])
                .map(|_| ())
                .expect_err(opt)
                .to_string();
            assert!(
                e.contains(&format!("it does not go with {named}")),
                "{opt}: {e}"
            );
        }
    }

    /// mpirun's `--oversubscribe` and `--allow-run-as-root` (as CI scripts write
    /// them, single-dash too) are cohort's options.
    #[test]
    fn oversubscribe_and_allow_run_as_root() {
        let r = parse(&["cohort", "run", "-np", "2", "prog"]).unwrap();
        assert!(!r.oversubscribe && !r.allow_run_as_root);
        for a in [
            ["--oversubscribe", "--allow-run-as-root"],
            ["-oversubscribe", "-allow-run-as-root"],
        ] {
            let mut argv = vec!["cohort", "run"];
            argv.extend_from_slice(&a);
            argv.extend_from_slice(&["-np", "2", "prog"]);
            let r = parse(&argv).unwrap();
            assert!(r.oversubscribe && r.allow_run_as_root, "{a:?}");
            assert_eq!((r.np, r.command.len()), (Some(2), 1), "{a:?}");
        }
    }

    /// An option cohort does not have, before PROGRAM, is a usage error naming it:
    /// clap used to take it for the program (`cohort run --xml f -n 4 app` ran
    /// `--xml` on every core, with `-n 4` as its arguments). After PROGRAM, or after
    /// `--`, words are the program's.
    #[test]
    fn an_unknown_option_is_refused_naming_it() {
        for (args, bad) in [
            (vec!["--xml", "f", "-n", "4", "app"], "--xml"),
            (vec!["-n", "2", "--no-such=1", "app"], "--no-such=1"),
            (vec!["-Q", "app"], "-Q"),
            (vec!["-hostfilex", "h", "app"], "-hostfilex"),
            (
                vec!["-n", "1", "a", ":", "-n", "1", "--bogus", "b"],
                "--bogus",
            ),
        ] {
            let mut a = vec!["cohort", "run"];
            a.extend_from_slice(&args);
            let e = parse(&a).expect_err(bad).to_string();
            assert!(
                e.contains(&format!("unknown option {bad:?}")),
                "{args:?}: {e}"
            );
        }
        let e = parse(&["cohort", "run", "-n", "1", "a", ":", "--bogus", "b"])
            .unwrap_err()
            .to_string();
        assert!(e.contains("app context 1"), "{e}");
        let r = parse(&["cohort", "run", "-n", "1", "app", "--rankfile", "f"]).unwrap();
        assert_eq!(r.command, ["app", "--rankfile", "f"]);
        let r = parse(&["cohort", "run", "-n", "1", "--", "-Q", "x"]).unwrap();
        assert_eq!(r.command, ["-Q", "x"]);
    }

    /// mpirun's spellings carry over: a single dash before any long option (Open MPI
    /// reads `-hostfile`, `-bind-to`, `-tag-output`, …), and a short option's value
    /// attached (`-n4`, `-xFOO=1`); the program's own words stay untouched.
    #[test]
    fn mpirun_single_dash_long_options_and_attached_values() {
        let r = parse(&[
            "cohort",
            "run",
            "-bind-to",
            "none",
            "-tag-output",
            "-map-by=node",
            "-x",
            "A=1",
            "-xB=2",
            "-wdir",
            "/tmp",
            "-n4",
            "prog",
            "-tag-output",
            "-n4",
        ])
        .unwrap();
        assert_eq!(r.np, Some(4));
        assert!(r.tag_output);
        assert_eq!(r.export, ["A=1", "B=2"]);
        assert_eq!(r.wdir.as_deref(), Some(std::path::Path::new("/tmp")));
        assert_eq!(r.command, ["prog", "-tag-output", "-n4"]);
        assert_eq!(r.bind_to, Some(BindTo::None));
        let r = parse(&[
            "cohort", "run", "-n", "1", "a", ":", "-np", "2", "-xC=3", "b",
        ])
        .unwrap();
        assert_eq!(r.more_apps[0].np, 2);
        assert_eq!(r.more_apps[0].export, ["C=3"]);
    }

    #[test]
    fn an_appfile_gives_the_app_contexts() {
        let dir = std::env::temp_dir().join(format!("cohort-appfile-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("apps");
        std::fs::write(
            &file,
            "# ocean and ice\n-np 2 --pset ocean prog1 x\n\n  -n 1 -x V=1 'prog 2' \"y z\"\n",
        )
        .unwrap();
        let f = file.to_str().unwrap();
        let eq = format!("--app={f}");
        for spelling in [vec!["--app", f], vec![eq.as_str()]] {
            let mut a = vec!["cohort", "run", "--nodes", "2"];
            a.extend(spelling);
            let r = parse(&a).unwrap();
            assert_eq!((r.np, r.nodes), (Some(2), Some(2)));
            assert_eq!(r.command, ["prog1", "x"]);
            assert_eq!(r.pset, ["ocean"]);
            assert_eq!(r.more_apps.len(), 1);
            assert_eq!(r.more_apps[0].np, 1);
            assert_eq!(r.more_apps[0].export, ["V=1"]);
            assert_eq!(r.more_apps[0].command, ["prog 2", "y z"]);
        }
        let e = parse(&["cohort", "run", "--app", f, "prog"]).unwrap_err();
        assert!(e.to_string().contains("may not follow"), "{e}");
        std::fs::write(&file, "# nothing\n\n").unwrap();
        let e = parse(&["cohort", "run", "--app", f]).unwrap_err();
        assert!(e.to_string().contains("no app context"), "{e}");
        let e = parse(&["cohort", "run", "--app", "/nonexistent/apps"]).unwrap_err();
        assert!(
            e.to_string().contains("/nonexistent/apps: cannot read it"),
            "{e}"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn mca_parameters() {
        let r = parse(&[
            "cohort", "run", "-mca", "btl", "tcp,self", "-n", "2", "--mca", "pml", "ob1", "prog",
            "-mca", "x", "y",
        ])
        .unwrap();
        assert_eq!(r.mca, ["btl", "tcp,self", "pml", "ob1"]);
        assert_eq!(r.command, ["prog", "-mca", "x", "y"]);
        assert!(parse(&["cohort", "run", "-n", "1", "--mca", "btl"]).is_err());
        let e = crate::daemon::mca_exports(&["a-b".into(), "1".into()]).unwrap_err();
        assert!(e.contains("a-b"), "{e}");
        assert_eq!(
            crate::daemon::mca_exports(&r.mca).unwrap(),
            [
                ("OMPI_MCA_btl".to_string(), OsString::from("tcp,self")),
                ("OMPI_MCA_pml".to_string(), OsString::from("ob1"))
            ]
        );
    }

    #[test]
    fn cores_per_rank() {
        let pe = |extra: &[&str]| {
            let mut a = vec!["cohort", "run", "-n", "2"];
            a.extend_from_slice(extra);
            a.push("prog");
            parse(&a).map(|r| (r.map_by, r.per_node, r.cpus_per_rank))
        };
        assert_eq!(pe(&[]).unwrap(), (MapBy::Slot, None, 1));
        assert_eq!(
            pe(&["--map-by", "numa:PE=4"]).unwrap(),
            (MapBy::Numa, None, 4)
        );
        assert_eq!(
            pe(&["--map-by", "core:pe=2"]).unwrap(),
            (MapBy::Core, None, 2)
        );
        assert_eq!(
            pe(&["--map-by", "ppr:2:node:PE=3"]).unwrap(),
            (MapBy::Slot, Some(2), 3)
        );
        assert_eq!(pe(&["--cpus-per-rank", "2"]).unwrap().2, 2);
        assert_eq!(pe(&["--cpus-per-proc", "3"]).unwrap().2, 3);
        assert_eq!(
            pe(&["--map-by", "slot:PE=2", "--cpus-per-rank", "2"])
                .unwrap()
                .2,
            2
        );
        let e = pe(&["--map-by", "slot:PE=2", "--cpus-per-rank", "3"]).unwrap_err();
        assert!(e.to_string().contains("disagree"), "{e}");
        for bad in ["slot:PE=0", "slot:PE=x", "board:PE=2", "slot:SPAN", "PE=2"] {
            assert!(pe(&["--map-by", bad]).is_err(), "{bad} accepted");
        }
        assert!(pe(&["--cpus-per-rank", "0"]).is_err());
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
        assert_eq!(r.np, Some(4));
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
        // No -n: the launcher decides (as mpirun), except for an MPMD job's first app.
        assert_eq!(parse(&["cohort", "run", "prog"]).unwrap().np, None);
        assert!(parse(&["cohort", "run", "prog", ":", "-n", "1", "b"]).is_err());
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
