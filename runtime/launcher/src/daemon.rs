//! Starting node servers: where `cohortd` is found, which loopback address each node
//! gets, and the exact command line and environment it is started with.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsString;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};

use cohort_core::DetectorConfig;
use cohort_proto::env::{self, to_hex};
use cohort_proto::job::Pset;
use cohort_proto::NodeId;
use cohort_topology::{BindTo, MapBy};

use cohort_os::parent_death_signal;

/// Environment variable naming the `cohortd` binary to start.
pub const DAEMON_ENV: &str = "COHORT_DAEMON";
const DAEMON_NAME: &str = "cohortd";

/// Where `--pmix` finds cohort's `libpmix.so.2`: `COHORT_PMIX_LIBDIR`, else
/// [`pmix_libdirs`] of this executable.
pub const PMIX_LIBDIR_ENV: &str = "COHORT_PMIX_LIBDIR";

/// Where `--pmix` looks for cohort's `libpmix.so.2` when `COHORT_PMIX_LIBDIR` is not
/// set, in order, for the executable `exe`: `cohort-pmix/` next to it (the build tree,
/// `target/<profile>/cohort-pmix/`), then `../lib/cohort/pmix/` from its directory
/// (an installed tree, `PREFIX/bin/cohort` and `PREFIX/lib/cohort/pmix/`; see
/// scripts/install.sh).
pub fn pmix_libdirs(exe: &Path) -> Vec<PathBuf> {
    let Some(dir) = exe.parent() else {
        return Vec::new();
    };
    let mut dirs = vec![dir.join("cohort-pmix")];
    if let Some(prefix) = dir.parent() {
        dirs.push(installed_pmix_libdir(prefix));
    }
    dirs
}

/// The directory holding cohort's `libpmix.so.2`, for `--pmix`: `COHORT_PMIX_LIBDIR`
/// when set (and only there), else the first of [`pmix_libdirs`] that has it. The
/// error names every place looked at.
pub fn find_pmix_libdir() -> Result<PathBuf, String> {
    let lib = "libpmix.so.2";
    let dirs = match std::env::var_os(PMIX_LIBDIR_ENV).filter(|d| !d.is_empty()) {
        Some(d) => vec![PathBuf::from(d)],
        None => pmix_libdirs(&std::env::current_exe().map_err(|e| {
            format!("--pmix: cannot tell where this executable is ({e}); set {PMIX_LIBDIR_ENV}")
        })?),
    };
    if let Some(dir) = dirs.iter().find(|d| d.join(lib).exists()) {
        return Ok(dir.clone());
    }
    let looked: Vec<String> = dirs.iter().map(|d| d.display().to_string()).collect();
    Err(format!(
        "--pmix: cohort's {lib} is not in {} (build it with `make pmix` or \
         `cargo build -p cohort-pmix`, install it with `make install`, or set \
         {PMIX_LIBDIR_ENV} to its directory)",
        looked.join(" nor in ")
    ))
}

#[cfg(test)]
mod pmix_libdir_tests {
    use super::*;

    /// The build tree's `cohort-pmix/` first, then an installed tree's private
    /// directory, `PREFIX/lib/cohort/pmix` (never `PREFIX/lib`, where it would shadow
    /// the system's OpenPMIx).
    #[test]
    fn pmix_is_looked_for_in_the_build_tree_then_the_installed_tree() {
        assert_eq!(
            pmix_libdirs(Path::new("/w/target/release/cohort")),
            vec![
                PathBuf::from("/w/target/release/cohort-pmix"),
                PathBuf::from("/w/target/lib/cohort/pmix"),
            ]
        );
        assert_eq!(
            pmix_libdirs(Path::new("/opt/cohort/bin/cohort"))[1],
            Path::new("/opt/cohort/lib/cohort/pmix")
        );
        assert_eq!(
            pmix_libdirs(Path::new("/cohort")),
            vec![PathBuf::from("/cohort-pmix")]
        );
    }
}

/// Where an installed cohort keeps `libpmix.so.2` under its prefix (`make install`:
/// `PREFIX/lib/cohort/pmix/libpmix.so.2`, beside `PREFIX/bin/cohortd`): the hosts' lib
/// dir for `--pmix` over ssh with `--prefix`.
pub fn installed_pmix_libdir(prefix: &Path) -> PathBuf {
    prefix.join("lib").join("cohort").join("pmix")
}

/// The ranks' exports with `--pmix`: `libdir` first on `LD_LIBRARY_PATH` (before what
/// `-x` gave, else cohort's own), and `OMPI_MCA_schizo=^orte` unless `-x` or cohort's
/// environment (`env`) sets it. Open MPI's transports are chosen later, once every node
/// server registered ([`open_mpi_transports`]).
pub fn pmix_exports(
    mut exports: Vec<(String, OsString)>,
    libdir: &Path,
    env: impl Fn(&str) -> Option<OsString>,
) -> Vec<(String, OsString)> {
    const LIBPATH: &str = "LD_LIBRARY_PATH";
    const SCHIZO: &str = "OMPI_MCA_schizo";
    let given = exports.iter().position(|(k, _)| k == LIBPATH);
    let rest = match given {
        Some(i) => Some(exports.remove(i).1),
        None => env(LIBPATH),
    };
    let mut path = libdir.as_os_str().to_os_string();
    if let Some(rest) = rest.filter(|r| !r.is_empty()) {
        path.push(":");
        path.push(rest);
    }
    exports.push((LIBPATH.into(), path));
    if !exports.iter().any(|(k, _)| k == SCHIZO) {
        let schizo = env(SCHIZO).unwrap_or_else(|| "^orte".into());
        exports.push((SCHIZO.into(), schizo));
    }
    exports
}

/// One node server as it registered: its host name (`gethostname` there) and its
/// fabric address (`IP:PORT`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeHost {
    pub host: String,
    pub fabric_addr: String,
    /// The cores of its host.
    pub cores: u32,
    /// The cores its live processes need: each a core, a launched rank
    /// `--cpus-per-rank`.
    pub ranks: u32,
}

/// Open MPI's transports for `--pmix`, chosen once every node server registered: the
/// `(VAR, VAL)` pairs every rank gets on top of the job's exports (`exports`: the
/// job's `-x` variables; `env`: this launcher's environment).
///
/// Why, and from what. Inside a node Open MPI 4.1 uses its shared-memory transport
/// (`btl/vader`), whose segment is `/dev/shm/vader_segment.<host name>.<job id>.<local
/// rank>`: the job id comes from the namespace, the same for the whole job, and local
/// ranks restart at 0 on every node server. Ranks of two node servers that see the
/// same host name (and one `/dev/shm`) therefore create the same segments and crash in
/// `MPI_Init`. The launcher cannot see whether the hosts share `/dev/shm`, but it knows
/// each node server's host name (reported at registration, as the ranks see it) and
/// fabric address, so:
///
/// * **Every node server on a host name of its own** — a real cluster, or nodes in
///   namespaces or containers with their own names (the Slurm CI's `n1`…`n3`):
///   nothing is set. Open MPI keeps its defaults: shared memory inside a node, its
///   own choice of interfaces between nodes.
/// * **Two or more share a host name** — several node servers on one machine
///   (`--nodes N` here; ssh or Slurm into network namespaces without a host name of
///   their own, like the ssh CI's): `OMPI_MCA_btl=self,tcp`, no shared memory, and
///   TCP pinned (`OMPI_MCA_btl_tcp_if_include`) to the network of the node servers'
///   fabric addresses, which cohort's own fabric uses between them. All loopback
///   (node servers emulated on this host): `lo`, which Open MPI leaves out by
///   default and which is then the only route. Otherwise the smallest IPv4 network
///   holding every fabric address (10.79.0.0/30 for 10.79.0.1-3): one entry that
///   matches an interface on every node (an entry per address would make Open MPI
///   warn on each node without that address), never `lo` (peers are not behind
///   it). Interfaces are left to Open MPI when that network would reach into
///   127.0.0.0/8, or the addresses are IPv6 or unparsable.
/// * **The user chose**: `-x` or the environment setting `OMPI_MCA_btl` leaves
///   transports alone; setting `OMPI_MCA_btl_tcp_if_include` or `_if_exclude` keeps
///   only the interface choice theirs (Open MPI refuses both lists at once).
///
/// Host names are compared as Open MPI names its segments: without the domain (the
/// part from the first dot), unless the name is an IP address.
pub fn open_mpi_transports(
    nodes: &[NodeHost],
    exports: &[(String, OsString)],
    env: impl Fn(&str) -> Option<OsString>,
) -> Vec<(String, String)> {
    const BTL: &str = "OMPI_MCA_btl";
    const TCP_IF: &str = "OMPI_MCA_btl_tcp_if_include";
    const TCP_IF_EXCLUDE: &str = "OMPI_MCA_btl_tcp_if_exclude";
    let chosen = |k: &str| user_set(exports, &env, k);
    let mut names: Vec<&str> = nodes.iter().map(|n| open_mpi_host_name(&n.host)).collect();
    names.sort_unstable();
    let shared = names.windows(2).any(|w| w[0] == w[1]);
    if !shared || chosen(BTL) {
        return Vec::new();
    }
    let mut out = vec![(BTL.to_string(), "self,tcp".to_string())];
    if !chosen(TCP_IF) && !chosen(TCP_IF_EXCLUDE) {
        if let Some(net) = tcp_network(nodes) {
            out.push((TCP_IF.to_string(), net));
        }
    }
    out
}

/// `--pmix`: which node servers' ranks Open MPI must tell to yield the CPU when idle
/// (`OMPI_MCA_mpi_yield_when_idle=1`), one flag per node server in `nodes`' order.
///
/// Why. An Open MPI process waiting in MPI (a collective, an accept, a lookup) polls
/// without ever yielding unless told to; where a host runs more of the job's ranks
/// than it has cores, each poller then holds its core for a whole scheduler time slice
/// while the rank it waits for cannot run, and every step of a collective takes
/// milliseconds (measured here: `MPI_Comm_split` of 4 ranks on 2 cores 48 ms instead
/// of 0.3 ms, an accept/connect 130 ms instead of 1.5 ms). Open MPI's own mpirun sets
/// this variable on an oversubscribed node; so does this, per host: node servers
/// with the same host name (compared as Open MPI does, [`open_mpi_host_name`]) share
/// its cores, so their ranks count together. Nothing is set where the user chose (`-x`
/// or the environment sets the variable).
pub fn open_mpi_yield(
    nodes: &[NodeHost],
    exports: &[(String, OsString)],
    env: impl Fn(&str) -> Option<OsString>,
) -> Vec<bool> {
    if user_set(exports, &env, OMPI_YIELD) {
        return vec![false; nodes.len()];
    }
    let hosts = per_host(nodes);
    nodes
        .iter()
        .map(|n| {
            let (ranks, cores) = hosts[open_mpi_host_name(&n.host)];
            cores > 0 && ranks > u64::from(cores)
        })
        .collect()
}

/// The node servers' hosts (named as Open MPI names them, so that one host is one
/// entry however its node servers spell it): their ranks and the host's cores.
fn per_host(nodes: &[NodeHost]) -> std::collections::BTreeMap<&str, (u64, u32)> {
    let mut hosts: std::collections::BTreeMap<&str, (u64, u32)> = Default::default();
    for n in nodes {
        let h = hosts.entry(open_mpi_host_name(&n.host)).or_default();
        h.0 += u64::from(n.ranks);
        h.1 = h.1.max(n.cores);
    }
    hosts
}

/// Open MPI's setting that makes a rank yield the CPU when idle.
const OMPI_YIELD: &str = "OMPI_MCA_mpi_yield_when_idle";

/// `--pmix`: every node server's ranks' Open MPI settings, in `nodes`' order: the
/// transports ([`open_mpi_transports`], the same for all) and yielding when idle where
/// their host is oversubscribed ([`open_mpi_yield`]).
pub fn open_mpi_env(
    nodes: &[NodeHost],
    exports: &[(String, OsString)],
    env: impl Fn(&str) -> Option<OsString>,
) -> Vec<Vec<(String, String)>> {
    let transports = open_mpi_transports(nodes, exports, &env);
    open_mpi_yield(nodes, exports, &env)
        .into_iter()
        .map(|yields| {
            let mut settings = transports.clone();
            if yields {
                settings.push((OMPI_YIELD.into(), "1".into()));
            }
            settings
        })
        .collect()
}

/// The key by which node servers share a host (its name as Open MPI uses it).
pub fn host_key(host: &str) -> &str {
    open_mpi_host_name(host)
}

/// Where a spawned job's processes are bound, per node server: the slots of its host
/// they take, `per_proc` for each process in turn, the lowest ones free
/// (`taken[host]`: the slots of the live processes bound there, by [`host_key`]; this
/// job's on the host's earlier node servers come first), or none: unbound, because the
/// launched job is not (`bound` false), the node server gets none of the job, its
/// host's core count is unknown, or the host would then need more cores for its live
/// processes (`nodes[n].ranks`, the cores they need) than it has, as a launch does not
/// bind when oversubscribed. Slots of processes that ended are taken again.
pub fn spawn_slots(
    nodes: &[NodeHost],
    taken: &BTreeMap<String, BTreeSet<u32>>,
    new: &[u32],
    bound: bool,
    per_proc: u32,
) -> Vec<Vec<u32>> {
    let hosts = per_host(nodes);
    let per_proc = u64::from(per_proc.max(1));
    let mut added: BTreeMap<&str, u64> = BTreeMap::new();
    for (n, &k) in nodes.iter().zip(new) {
        *added.entry(open_mpi_host_name(&n.host)).or_default() += u64::from(k) * per_proc;
    }
    let mut claimed: BTreeMap<&str, BTreeSet<u32>> = BTreeMap::new();
    nodes
        .iter()
        .zip(new)
        .map(|(n, &k)| {
            let host = open_mpi_host_name(&n.host);
            let (live, cores) = hosts[host];
            let fits = cores > 0 && live + added[host] <= u64::from(cores);
            if !(bound && k > 0 && fits) {
                return Vec::new();
            }
            let mine = claimed.entry(host).or_default();
            let held = taken.get(host);
            let want = u64::from(k) * per_proc;
            let free: Vec<u32> = (0..cores)
                .filter(|s| !mine.contains(s) && !held.is_some_and(|h| h.contains(s)))
                .take(want as usize)
                .collect();
            if (free.len() as u64) < want {
                // More slots held than live processes counted: do not guess.
                return Vec::new();
            }
            mine.extend(&free);
            free
        })
        .collect()
}

/// The session's universe size (PMIX_UNIV_SIZE, what MPI_UNIVERSE_SIZE reports): the
/// cores of the node servers' hosts, each host counted once (as [`open_mpi_yield`]
/// counts them), as PRRTE counts a host's slots by default; at least `job_size`.
pub fn universe_size(nodes: &[NodeHost], job_size: u32) -> u32 {
    per_host(nodes)
        .values()
        .fold(0u32, |sum, &(_, cores)| sum.saturating_add(cores))
        .max(job_size)
}

/// Whether the user set variable `k` for the ranks: a `-x` export, or this launcher's
/// environment as the ranks inherit it (`env`).
fn user_set(
    exports: &[(String, OsString)],
    env: impl Fn(&str) -> Option<OsString>,
    k: &str,
) -> bool {
    exports.iter().any(|(n, _)| n == k) || env(k).is_some()
}

/// A host name as Open MPI 4.1 uses it in its segment names: without the domain,
/// unless it is an IP address.
fn open_mpi_host_name(host: &str) -> &str {
    if host.parse::<IpAddr>().is_ok() {
        return host;
    }
    host.split('.').next().unwrap_or(host)
}

/// `lo` when every fabric address is loopback, else the smallest IPv4 network (CIDR)
/// holding them all, if that stays clear of 127.0.0.0/8; `None` otherwise.
fn tcp_network(nodes: &[NodeHost]) -> Option<String> {
    let addrs: Vec<Ipv4Addr> = nodes
        .iter()
        .map(|n| match n.fabric_addr.parse::<SocketAddr>().ok()?.ip() {
            IpAddr::V4(ip) => Some(ip),
            IpAddr::V6(_) => None,
        })
        .collect::<Option<_>>()?;
    let first = u32::from(*addrs.first()?);
    if addrs.iter().all(Ipv4Addr::is_loopback) {
        return Some("lo".into());
    }
    let differ = addrs.iter().fold(0u32, |d, a| d | (u32::from(*a) ^ first));
    let prefix = differ.leading_zeros();
    let mask = u32::MAX.checked_shl(32 - prefix).unwrap_or(0);
    let net = Ipv4Addr::from(first & mask);
    // Does the network overlap 127.0.0.0/8? (Both are prefixes: one holds the other.)
    let lo_net = u32::from(Ipv4Addr::new(127, 0, 0, 0));
    let shorter = prefix.min(8);
    let shorter_mask = u32::MAX.checked_shl(32 - shorter).unwrap_or(0);
    if first & shorter_mask == lo_net & shorter_mask {
        return None;
    }
    Some(format!("{net}/{prefix}"))
}

/// Finds `cohortd`: `$COHORT_DAEMON`, else next to the running executable, else PATH.
pub fn find_cohortd() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os(DAEMON_ENV).filter(|p| !p.is_empty()) {
        let p = PathBuf::from(p);
        return if is_executable(&p) {
            Ok(p)
        } else {
            Err(format!(
                "{DAEMON_ENV}={} is not an executable file",
                p.display()
            ))
        };
    }
    let beside = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(|d| d.join(DAEMON_NAME)));
    if let Some(p) = beside.filter(|p| is_executable(p)) {
        return Ok(p);
    }
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|d| d.join(DAEMON_NAME))
        .find(|p| is_executable(p))
        .ok_or_else(|| {
            format!(
                "cannot find {DAEMON_NAME}: not next to this executable nor in PATH \
                 (set {DAEMON_ENV} to its path)"
            )
        })
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Loopback address of node `i`: 127.0.1.1 … 127.0.1.254, then 127.0.2.1 … and so on,
/// so every node server has an address of its own (as on a real cluster).
pub fn node_address(i: NodeId) -> Option<Ipv4Addr> {
    let block = i / 254;
    let host = (i % 254) + 1;
    let third = u8::try_from(block + 1).ok()?;
    Some(Ipv4Addr::new(127, 0, third, host as u8))
}

/// Most nodes [`node_address`] can place.
pub const MAX_NODES: u32 = 255 * 254;

/// Everything that differs between the node servers of one job.
#[derive(Clone, Debug)]
pub struct DaemonLaunch<'a> {
    pub node: NodeId,
    pub nodes: u32,
    pub node_name: &'a str,
    pub listen: SocketAddr,
    pub control: SocketAddr,
    pub job_dir: &'a Path,
    pub nspace: &'a str,
    pub np: u32,
    pub map_by: MapBy,
    /// `--rank-by`, passed on as given.
    pub rank_by: Option<MapBy>,
    /// `None`: each node server decides (under Slurm, where hosts differ).
    pub bind_to: Option<BindTo>,
    /// This node server's first placement slot on its host (see `topo::plan_job`).
    pub first_slot: u32,
    /// `--cpus-per-rank` (1: the default, not passed).
    pub cpus_per_rank: u32,
    /// `--use-hwthread-cpus`.
    pub use_hwthread_cpus: bool,
    /// `--cpu-set`.
    pub cpu_set: Option<&'a cohort_topology::CpuSet>,
    /// `-q` / `--quiet`.
    pub quiet: bool,
    pub tag_output: bool,
    /// `--timestamp-output`.
    pub timestamp_output: bool,
    /// `--merge-stderr-to-stdout`.
    pub merge_stderr_to_stdout: bool,
    /// `--output-filename`, absolute.
    pub output_dir: Option<&'a Path>,
    /// `--report-bindings`.
    pub report_bindings: bool,
    /// Which ranks take the launcher's stdin (`--stdin`; none: every rank reads
    /// /dev/null).
    pub stdin: cohort_proto::control::StdinTarget,
    /// Switch map file (`--topology`), already checked by the launcher.
    pub topology: Option<&'a Path>,
    /// `--ib-device` / `--ib-gid-index`, passed on as given (cohortd checks them).
    pub ib_device: Option<&'a str>,
    pub ib_gid_index: Option<u32>,
    /// `--spin-us`, passed on as given.
    pub spin_us: Option<u64>,
    pub no_shm_fence: bool,
    /// `--allgather`, passed on as given.
    pub allgather: Option<cohort_topology::Allgather>,
    /// The failure detector's timings (`None`: off).
    pub detector: Option<DetectorConfig>,
    /// `VAR=VAL` pairs, already resolved.
    pub exports: &'a [(String, OsString)],
    /// `--pmix`: the directory that must hold cohort's `libpmix.so.2` on the node
    /// server's host (the node server checks it before registering).
    pub pmix_libdir: Option<&'a Path>,
    /// MPMD application contexts: (ranks, words of `command`) each, in order; empty
    /// when every rank runs all of `command` (one app context).
    pub apps: &'a [(u32, usize)],
    /// `VAR=VAL` for one application context's ranks: (app, VAR, VAL), resolved.
    pub app_exports: &'a [(u32, String, OsString)],
    /// Where one application context's ranks start: (app, absolute directory).
    pub app_wdirs: &'a [(u32, PathBuf)],
    /// The job's process sets.
    pub psets: &'a [Pset],
    /// The program and arguments of every application context, one after another.
    pub command: &'a [OsString],
    /// Under Slurm: every node's fabric address and name, in node order. One command
    /// line then serves every node server of the srun step: each takes its node index
    /// and name from the step's environment (`cohortd --slurm`), and `node`,
    /// `node_name` and `listen` are not passed.
    pub slurm_addrs: Option<(&'a [IpAddr], &'a [String])>,
    /// Over ssh: every node's name, in node order (`--node-names`), and the node
    /// server reads its secrets from stdin (`--ssh`).
    pub ssh_names: Option<&'a [String]>,
    /// Ranks of each node server when slots decided them (`--node-ranks`); empty for
    /// the even split `--map-by` makes alone.
    pub node_ranks: &'a [u32],
    /// `--rankfile`: every rank's node and slot, as `--rank-map` takes them
    /// ([`cohort_topology::rankfile::RankMap`]'s text).
    pub rank_map: Option<&'a str>,
}

impl DaemonLaunch<'_> {
    /// cohortd's arguments. Never contains a secret: those travel in the environment.
    pub fn args(&self) -> Vec<OsString> {
        let mut a: Vec<OsString> = match self.slurm_addrs {
            None => {
                let mut a: Vec<OsString> = vec![
                    "--node".into(),
                    self.node.to_string().into(),
                    "--nodes".into(),
                    self.nodes.to_string().into(),
                    "--node-name".into(),
                    self.node_name.into(),
                    "--listen".into(),
                    self.listen.to_string().into(),
                ];
                if let Some(names) = self.ssh_names {
                    a.insert(0, "--ssh".into());
                    a.push("--node-names".into());
                    a.push(names.join(",").into());
                }
                a
            }
            Some((addrs, names)) => {
                let list: Vec<String> = addrs.iter().map(IpAddr::to_string).collect();
                vec![
                    "--slurm".into(),
                    "--nodes".into(),
                    self.nodes.to_string().into(),
                    "--node-addrs".into(),
                    list.join(",").into(),
                    // Every node server's job map names every node alike (switch maps).
                    "--node-names".into(),
                    names.join(",").into(),
                ]
            }
        };
        a.extend::<[OsString; 10]>([
            "--control".into(),
            self.control.to_string().into(),
            "--job-dir".into(),
            self.job_dir.as_os_str().to_owned(),
            "--nspace".into(),
            self.nspace.into(),
            "--np".into(),
            self.np.to_string().into(),
            "--map-by".into(),
            self.map_by.as_str().into(),
        ]);
        if let Some(order) = self.rank_by {
            a.push("--rank-by".into());
            a.push(order.as_str().into());
        }
        if let Some(bind) = self.bind_to {
            a.push("--bind-to".into());
            a.push(bind.as_str().into());
        }
        a.push("--first-slot".into());
        a.push(self.first_slot.to_string().into());
        if self.cpus_per_rank > 1 {
            a.push("--cpus-per-rank".into());
            a.push(self.cpus_per_rank.to_string().into());
        }
        if self.use_hwthread_cpus {
            a.push("--use-hwthread-cpus".into());
        }
        if self.quiet {
            a.push("--quiet".into());
        }
        if let Some(set) = self.cpu_set {
            a.push("--cpu-set".into());
            a.push(set.to_string().into());
        }
        if !self.node_ranks.is_empty() {
            let counts: Vec<String> = self.node_ranks.iter().map(u32::to_string).collect();
            a.push("--node-ranks".into());
            a.push(counts.join(",").into());
        }
        if let Some(map) = self.rank_map {
            a.push("--rank-map".into());
            a.push(map.into());
        }
        if self.tag_output {
            a.push("--tag-output".into());
        }
        if self.timestamp_output {
            a.push("--timestamp-output".into());
        }
        if self.merge_stderr_to_stdout {
            a.push("--merge-stderr-to-stdout".into());
        }
        if let Some(dir) = self.output_dir {
            a.push("--output-dir".into());
            a.push(dir.as_os_str().to_owned());
        }
        if self.report_bindings {
            a.push("--report-bindings".into());
        }
        if let Some(path) = self.topology {
            a.push("--topology".into());
            a.push(path.as_os_str().to_owned());
        }
        if let Some(dev) = self.ib_device {
            a.push("--ib-device".into());
            a.push(dev.into());
        }
        if let Some(gid) = self.ib_gid_index {
            a.push("--ib-gid-index".into());
            a.push(gid.to_string().into());
        }
        if let Some(us) = self.spin_us {
            a.push("--spin-us".into());
            a.push(us.to_string().into());
        }
        if self.stdin != cohort_proto::control::StdinTarget::None {
            a.push("--stdin".into());
            a.push(self.stdin.to_string().into());
        }
        if self.no_shm_fence {
            a.push("--no-shm-fence".into());
        }
        if let Some(alg) = self.allgather {
            a.push("--allgather".into());
            a.push(alg.to_string().into());
        }
        let (period, timeout) = match self.detector {
            Some(d) => (d.period.as_millis(), d.timeout.as_millis()),
            None => (DetectorConfig::DEFAULT.period.as_millis(), 0),
        };
        a.push("--heartbeat-ms".into());
        a.push(period.to_string().into());
        a.push("--peer-timeout-ms".into());
        a.push(timeout.to_string().into());
        if let Some(dir) = self.pmix_libdir {
            a.push("--pmix-libdir".into());
            a.push(dir.as_os_str().to_owned());
        }
        for (var, val) in self.exports {
            let mut kv = OsString::from(var);
            kv.push("=");
            kv.push(val);
            a.push("-x".into());
            a.push(kv);
        }
        for (np, argc) in self.apps {
            a.push(format!("--app={np}:{argc}").into());
        }
        // Attached (`--opt=value`): a value may start with '-'.
        for (app, var, val) in self.app_exports {
            let mut kv = OsString::from(format!("--app-export={app}:{var}="));
            kv.push(val);
            a.push(kv);
        }
        for (app, dir) in self.app_wdirs {
            let mut kv = OsString::from(format!("--app-wdir={app}:"));
            kv.push(dir);
            a.push(kv);
        }
        for set in self.psets {
            a.push(format!("--pset={}={}", set.name, set.members).into());
        }
        a.push("--".into());
        a.extend(self.command.iter().cloned());
        a
    }

    /// Starts the node server in its own process group, with the job secret and client
    /// token in its environment only, and SIGTERM as its parent-death signal.
    pub fn spawn(
        &self,
        program: &Path,
        job_secret: &[u8],
        client_token: &[u8],
    ) -> std::io::Result<tokio::process::Child> {
        // cohortd raises its own limit, and must know the user's for the ranks.
        let mut cmd = launch_command(program, job_secret, client_token);
        cmd.args(self.args());
        cmd.spawn()
    }
}

impl DaemonLaunch<'_> {
    /// Starts every node server of the job as one srun step (`srun_args`, then
    /// cohortd and [`DaemonLaunch::args`], which must have `slurm_addrs`): srun runs
    /// in its own process group, with the job secret and client token in its
    /// environment only (srun exports it to the tasks), SIGTERM as its parent-death
    /// signal (srun then ends the step), and its stderr piped (to be relayed).
    pub fn spawn_srun(
        &self,
        srun: &Path,
        srun_args: &[OsString],
        program: &Path,
        job_secret: &[u8],
        client_token: &[u8],
    ) -> std::io::Result<tokio::process::Child> {
        debug_assert!(self.slurm_addrs.is_some());
        // srun passes its limits on to the tasks: the user's, not ours.
        let mut cmd = launch_command(srun, job_secret, client_token);
        cmd.args(srun_args)
            .arg(program)
            .args(self.args())
            // Relayed by the launcher, which reads srun's reports of tasks that ended.
            .stderr(std::process::Stdio::piped());
        cmd.spawn()
    }
}

impl DaemonLaunch<'_> {
    /// Starts the node server over ssh: `agent` (the launch agent's words, its options
    /// and `[user@]host`) runs `remote` (the shell command starting cohortd there) in
    /// its own process group, SIGTERM as its parent-death signal, with stdin piped (the
    /// secrets are written there, never in its environment or on a command line; it
    /// stays open while the job runs: cohortd stops when it closes), stderr piped (to
    /// be relayed, and quoted when the host fails), stdout shared (ranks' output).
    pub fn spawn_agent(
        &self,
        agent: &[OsString],
        remote: &std::ffi::OsStr,
    ) -> std::io::Result<tokio::process::Child> {
        debug_assert!(self.ssh_names.is_some());
        let (program, options) = agent.split_first().ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::InvalidInput, "empty launch agent")
        })?;
        let mut cmd = tokio::process::Command::new(program);
        cmd.args(options)
            .arg(remote)
            .env_remove(env::JOB_SECRET)
            .env_remove(env::CLIENT_TOKEN)
            .stdin(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .process_group(0)
            .kill_on_drop(false);
        // SAFETY: the hooks only make async-signal-safe syscalls.
        unsafe {
            cmd.pre_exec(parent_death_signal(libc::SIGTERM, "the launcher"));
            cmd.pre_exec(cohort_os::restore_fd_limit());
        }
        cmd.spawn()
    }
}

/// `program` (cohortd, or srun starting cohortds) in its own process group, with the
/// job secret and client token in its environment only, no stdin, SIGTERM as its
/// parent-death signal, and the user's open-file limit restored.
fn launch_command(
    program: &Path,
    job_secret: &[u8],
    client_token: &[u8],
) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new(program);
    cmd.env(env::JOB_SECRET, to_hex(job_secret))
        .env(env::CLIENT_TOKEN, to_hex(client_token))
        .stdin(std::process::Stdio::null())
        .process_group(0)
        .kill_on_drop(false);
    // SAFETY: the hooks only make async-signal-safe syscalls.
    unsafe {
        cmd.pre_exec(parent_death_signal(libc::SIGTERM, "the launcher"));
        cmd.pre_exec(cohort_os::restore_fd_limit());
    }
    cmd
}

/// `--mca KEY VALUE` pairs (flattened, as clap gives them) as the variables Open MPI
/// reads them from: `OMPI_MCA_KEY=VALUE`. A key is letters, digits and `_`.
pub fn mca_exports(pairs: &[String]) -> Result<Vec<(String, OsString)>, String> {
    pairs
        .chunks(2)
        .map(|kv| {
            let (key, value) = match kv {
                [k, v] => (k, v),
                _ => return Err("--mca needs a KEY and a VALUE".to_string()),
            };
            let ok = |c: char| c.is_ascii_alphanumeric() || c == '_';
            if key.is_empty() || !key.chars().all(ok) {
                return Err(format!(
                    "--mca {key:?}: an MCA parameter name is letters, digits and _"
                ));
            }
            if value.contains('\0') {
                return Err(format!("--mca {key}: the value holds a NUL byte"));
            }
            Ok((format!("OMPI_MCA_{key}"), OsString::from(value)))
        })
        .collect()
}

/// Resolves `-x VAR` / `-x VAR=VAL` against the launcher's environment. Unset `VAR`s
/// are skipped with a warning, as mpirun does.
pub fn resolve_exports(specs: &[String]) -> Result<Vec<(String, OsString)>, String> {
    const RESERVED: &[&str] = &[
        env::SERVER_URI,
        env::CLIENT_TOKEN,
        env::NSPACE,
        env::RANK,
        env::SIZE,
        env::LOCAL_RANK,
        env::NODE_ID,
        env::NODE_NAME,
        env::JOB_SECRET,
        env::BINDING,
        env::APPNUM,
        "PMIX_NAMESPACE",
        "PMIX_RANK",
        "PMIX_SERVER_URI",
    ];
    let mut out = Vec::new();
    for spec in specs {
        let (name, value) = match spec.split_once('=') {
            Some((n, v)) => (n, Some(OsString::from(v))),
            None => (spec.as_str(), None),
        };
        if name.is_empty() || name.contains('\0') {
            return Err(format!("-x {spec:?}: not a variable name"));
        }
        if RESERVED.contains(&name) {
            return Err(format!(
                "-x {name}: cohort sets this variable itself for every rank"
            ));
        }
        let value = match value.or_else(|| std::env::var_os(name)) {
            Some(v) => v,
            None => {
                crate::say(format_args!(
                    "warning: -x {name}: not set in the environment; not exported"
                ));
                continue;
            }
        };
        out.retain(|(n, _): &(String, OsString)| n != name);
        out.push((name.to_string(), value));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_universe_counts_each_hosts_cores_once_and_at_least_the_job() {
        let hosts = loaded(&[("a", 4, 1), ("a", 4, 1), ("b", 8, 1), ("c", 0, 1)]);
        assert_eq!(universe_size(&hosts, 3), 12);
        assert_eq!(universe_size(&hosts, 20), 20);
        assert_eq!(universe_size(&[], 2), 2);
    }

    #[test]
    fn pmix_puts_the_library_first_and_tells_open_mpi_who_started_it() {
        let dir = Path::new("/opt/cohort/lib/cohort-pmix");
        let none = |_: &str| None;
        let got = pmix_exports(vec![("A".into(), "1".into())], dir, none);
        assert_eq!(
            got,
            vec![
                ("A".into(), "1".into()),
                ("LD_LIBRARY_PATH".into(), dir.as_os_str().to_os_string()),
                ("OMPI_MCA_schizo".into(), "^orte".into()),
            ]
        );
        // Before the path cohort runs with, or the one -x gives (which wins), and
        // never over a schizo choice of the user's.
        let env = |k: &str| match k {
            "LD_LIBRARY_PATH" => Some("/usr/local/lib".into()),
            "OMPI_MCA_schizo" => Some("ompi".into()),
            _ => None,
        };
        let got = pmix_exports(Vec::new(), dir, env);
        assert_eq!(got[0].1, "/opt/cohort/lib/cohort-pmix:/usr/local/lib");
        assert_eq!(got[1], ("OMPI_MCA_schizo".into(), "ompi".into()));
        let given = vec![
            ("LD_LIBRARY_PATH".into(), "/x".into()),
            ("OMPI_MCA_schizo".into(), "^foo".into()),
        ];
        let got = pmix_exports(given, dir, env);
        assert_eq!(
            got,
            vec![
                ("OMPI_MCA_schizo".into(), "^foo".into()),
                (
                    "LD_LIBRARY_PATH".into(),
                    "/opt/cohort/lib/cohort-pmix:/x".into()
                ),
            ]
        );
        // --prefix over ssh: the installed layout (`make install`).
        assert_eq!(
            installed_pmix_libdir(Path::new("/opt/cohort")),
            Path::new("/opt/cohort/lib/cohort/pmix")
        );
    }

    /// Node servers as they registered: (host name, fabric address) each.
    fn registered(nodes: &[(&str, &str)]) -> Vec<NodeHost> {
        nodes
            .iter()
            .map(|(h, a)| NodeHost {
                host: h.to_string(),
                fabric_addr: a.to_string(),
                cores: 2,
                ranks: 1,
            })
            .collect()
    }

    fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
        v.iter()
            .map(|(k, x)| (k.to_string(), x.to_string()))
            .collect()
    }

    /// Node servers on (host, cores, ranks).
    fn loaded(nodes: &[(&str, u32, u32)]) -> Vec<NodeHost> {
        nodes
            .iter()
            .map(|&(h, cores, ranks)| NodeHost {
                host: h.to_string(),
                fabric_addr: "10.0.0.1:4000".into(),
                cores,
                ranks,
            })
            .collect()
    }

    /// Open MPI yields when idle on hosts with more of the job's ranks than cores,
    /// counting every node server of a host (as mpirun does per node), unless the user
    /// chose.
    /// A spawned job is bound on the free slots of each host, where its processes
    /// fit among the live ones; unbound where they would not, or when the launched job
    /// is not bound. Slots of processes that ended are taken again.
    #[test]
    fn spawned_jobs_are_bound_on_the_free_slots_of_their_hosts() {
        let held = |hosts: &[(&str, &[u32])]| -> BTreeMap<String, BTreeSet<u32>> {
            hosts
                .iter()
                .map(|(h, s)| (h.to_string(), s.iter().copied().collect()))
                .collect()
        };
        // One host of 4 cores, one node server with 1 rank (slot 0): 2 more take 1, 2.
        let one = loaded(&[("vm", 4, 1)]);
        assert_eq!(
            spawn_slots(&one, &held(&[("vm", &[0])]), &[2], true, 1),
            [vec![1, 2]]
        );
        // Not bound at launch: not bound now.
        assert_eq!(
            spawn_slots(&one, &held(&[("vm", &[0])]), &[2], false, 1),
            [Vec::<u32>::new()]
        );
        // 4 more would be 5 live processes on 4 cores.
        assert_eq!(
            spawn_slots(&one, &held(&[("vm", &[0])]), &[4], true, 1),
            [Vec::<u32>::new()]
        );
        // 3 live (slots 0, 2, 3: the process of slot 1 ended): 1 more takes slot 1.
        let three = loaded(&[("vm", 4, 3)]);
        assert_eq!(
            spawn_slots(&three, &held(&[("vm", &[0, 2, 3])]), &[1], true, 1),
            [vec![1]]
        );
        // Three node servers on one host of 8 cores (1, 2 and 1 ranks in slots 0-3):
        // this job's 1, 1 and 0 processes take slots 4 and 5; the third server gets
        // none.
        let emulated = loaded(&[("vm", 8, 1), ("vm.local", 8, 2), ("vm", 8, 1)]);
        assert_eq!(
            spawn_slots(
                &emulated,
                &held(&[("vm", &[0, 1, 2, 3])]),
                &[1, 1, 0],
                true,
                1
            ),
            [vec![4], vec![5], vec![]]
        );
        // A cluster: each host on its own; the full one and the unknown one unbound.
        let cluster = loaded(&[("n1", 4, 2), ("n2", 2, 2), ("n3", 0, 0)]);
        let taken = held(&[("n1", &[0, 1]), ("n2", &[0, 1])]);
        assert_eq!(
            spawn_slots(&cluster, &taken, &[2, 1, 1], true, 1),
            [vec![2, 3], vec![], vec![]]
        );
    }

    /// PMIX_CPUS_PER_PROC / `PE=n` of a spawn: each process takes n free slots.
    #[test]
    fn spawned_processes_with_several_cores_each_take_that_many_free_slots() {
        let held = |slots: &[u32]| -> BTreeMap<String, BTreeSet<u32>> {
            [("vm".to_string(), slots.iter().copied().collect())].into()
        };
        // 8 cores, 1 rank in slot 0: 2 processes of 3 cores each take slots 1-6, in
        // turn (the first 1-3, the second 4-6).
        let one = loaded(&[("vm", 8, 1)]);
        assert_eq!(
            spawn_slots(&one, &held(&[0]), &[2], true, 3),
            [vec![1, 2, 3, 4, 5, 6]]
        );
        // The lowest free ones, also when not consecutive (slot 2 held).
        assert_eq!(
            spawn_slots(&one, &held(&[0, 2]), &[1], true, 2),
            [vec![1, 3]]
        );
        // 3 processes of 3 cores next to 1 live rank: 10 cores needed on 8, unbound.
        assert_eq!(
            spawn_slots(&one, &held(&[0]), &[3], true, 3),
            [Vec::<u32>::new()]
        );
        // A process of 2 cores next to 1 rank on a host of 2 cores: unbound.
        let small = loaded(&[("vm", 2, 1)]);
        assert_eq!(
            spawn_slots(&small, &held(&[0]), &[1], true, 2),
            [Vec::<u32>::new()]
        );
        // Two node servers on the host: the second's processes come after the
        // first's, per_proc each; 0 is 1.
        let two = loaded(&[("vm", 8, 1), ("vm", 8, 0)]);
        assert_eq!(
            spawn_slots(&two, &held(&[0]), &[1, 1], true, 2),
            [vec![1, 2], vec![3, 4]]
        );
        assert_eq!(
            spawn_slots(&two, &held(&[0]), &[1, 1], true, 0),
            [vec![1], vec![2]]
        );
    }

    #[test]
    fn open_mpi_yields_where_a_host_has_more_ranks_than_cores() {
        let none = |_: &str| None;
        // One host of 2 cores: 2 ranks fit, 3 do not.
        assert_eq!(open_mpi_yield(&loaded(&[("vm", 2, 2)]), &[], none), [false]);
        assert_eq!(open_mpi_yield(&loaded(&[("vm", 2, 3)]), &[], none), [true]);
        // Three node servers emulated on that host, 2 ranks each: 6 on 2 cores.
        let emulated = loaded(&[("vm", 2, 2), ("vm.local", 2, 2), ("vm", 2, 2)]);
        assert_eq!(open_mpi_yield(&emulated, &[], none), [true, true, true]);
        // A cluster: only the host with too many ranks.
        let cluster = loaded(&[("n1", 4, 4), ("n2", 2, 4), ("n3", 8, 1)]);
        assert_eq!(open_mpi_yield(&cluster, &[], none), [false, true, false]);
        // No core count known (0): nothing.
        assert_eq!(open_mpi_yield(&loaded(&[("vm", 0, 9)]), &[], none), [false]);
        // The user's word.
        let given = vec![("OMPI_MCA_mpi_yield_when_idle".into(), "0".into())];
        assert_eq!(
            open_mpi_yield(&cluster, &given, none),
            [false, false, false]
        );
        let env = |k: &str| (k == "OMPI_MCA_mpi_yield_when_idle").then(|| "0".into());
        assert_eq!(open_mpi_yield(&cluster, &[], env), [false, false, false]);
    }

    /// Open MPI's defaults where every node server has a host name of its own; TCP
    /// on the fabric's network where some share one; the user's choices kept.
    #[test]
    fn open_mpi_keeps_shared_memory_unless_node_servers_share_a_host_name() {
        let none = |_: &str| None;
        // A real cluster, or the Slurm CI's namespaces (own UTS names n1..n3).
        let cluster = registered(&[
            ("n1", "10.77.0.11:4000"),
            ("n2", "10.77.0.12:4000"),
            ("n3", "10.77.0.13:4000"),
        ]);
        assert_eq!(open_mpi_transports(&cluster, &[], none), vec![]);
        // One node server: nothing to collide with.
        let one = registered(&[("vm", "127.0.1.1:4000")]);
        assert_eq!(open_mpi_transports(&one, &[], none), vec![]);
        // --nodes 3 on this host: loopback.
        let emulated = registered(&[
            ("vm", "127.0.1.1:4000"),
            ("vm", "127.0.1.2:4001"),
            ("vm", "127.0.1.3:4002"),
        ]);
        assert_eq!(
            open_mpi_transports(&emulated, &[], none),
            pairs(&[
                ("OMPI_MCA_btl", "self,tcp"),
                ("OMPI_MCA_btl_tcp_if_include", "lo")
            ])
        );
        // ssh into network namespaces that keep this host's name: the smallest
        // network holding 10.79.0.1-3, never lo.
        let ssh = registered(&[
            ("vm", "10.79.0.1:4000"),
            ("vm", "10.79.0.2:4000"),
            ("vm", "10.79.0.3:4000"),
        ]);
        assert_eq!(
            open_mpi_transports(&ssh, &[], none),
            pairs(&[
                ("OMPI_MCA_btl", "self,tcp"),
                ("OMPI_MCA_btl_tcp_if_include", "10.79.0.0/30")
            ])
        );
        // Two of three share a name (compared without the domain, as Open MPI does).
        let two = registered(&[
            ("a.example.org", "10.77.0.11:1"),
            ("a.other.org", "10.77.0.12:1"),
            ("b", "10.77.0.13:1"),
        ]);
        assert_eq!(
            open_mpi_transports(&two, &[], none),
            pairs(&[
                ("OMPI_MCA_btl", "self,tcp"),
                ("OMPI_MCA_btl_tcp_if_include", "10.77.0.8/29")
            ])
        );
        // IP addresses as host names are not cut at their dots.
        let ips = registered(&[("10.0.0.1", "10.0.0.1:1"), ("10.0.0.2", "10.0.0.2:1")]);
        assert_eq!(open_mpi_transports(&ips, &[], none), vec![]);
        // No pinning where the network would reach into loopback, or for IPv6.
        let mixed = registered(&[("vm", "127.0.1.1:1"), ("vm", "10.0.0.1:1")]);
        assert_eq!(
            open_mpi_transports(&mixed, &[], none),
            pairs(&[("OMPI_MCA_btl", "self,tcp")])
        );
        let v6 = registered(&[("vm", "[fd00::1]:1"), ("vm", "[fd00::2]:1")]);
        assert_eq!(
            open_mpi_transports(&v6, &[], none),
            pairs(&[("OMPI_MCA_btl", "self,tcp")])
        );
        // The same address twice: a /32.
        let same = registered(&[("vm", "10.0.0.5:1"), ("vm", "10.0.0.5:2")]);
        assert_eq!(open_mpi_transports(&same, &[], none)[1].1, "10.0.0.5/32");
    }

    #[test]
    fn open_mpi_transports_chosen_by_the_user_are_kept() {
        let ssh = registered(&[("vm", "10.79.0.1:1"), ("vm", "10.79.0.2:1")]);
        let none = |_: &str| None;
        // -x OMPI_MCA_btl: hands off entirely.
        let btl = vec![("OMPI_MCA_btl".into(), "self,vader".into())];
        assert_eq!(open_mpi_transports(&ssh, &btl, none), vec![]);
        // The environment's btl alike.
        let env = |k: &str| (k == "OMPI_MCA_btl").then(|| "self,tcp".into());
        assert_eq!(open_mpi_transports(&ssh, &[], env), vec![]);
        // An interface choice (include or exclude, -x or environment): only btl set.
        let only_btl = pairs(&[("OMPI_MCA_btl", "self,tcp")]);
        let inc = vec![("OMPI_MCA_btl_tcp_if_include".into(), "eth0".into())];
        assert_eq!(open_mpi_transports(&ssh, &inc, none), only_btl);
        let env = |k: &str| (k == "OMPI_MCA_btl_tcp_if_exclude").then(|| "lo".into());
        assert_eq!(open_mpi_transports(&ssh, &[], env), only_btl);
    }

    #[test]
    fn the_pmix_variables_are_cohorts_to_set() {
        let err = resolve_exports(&["PMIX_RANK=3".into()]).unwrap_err();
        assert!(err.contains("PMIX_RANK"), "{err}");
    }

    /// cohortd's arguments for `l`, joined by spaces.
    fn arg_text(l: &DaemonLaunch<'_>) -> String {
        let args: Vec<String> = l
            .args()
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect();
        args.join(" ")
    }

    /// A node server's launch with nothing beyond what is required; tests set the rest.
    fn launch(command: &[OsString]) -> DaemonLaunch<'_> {
        DaemonLaunch {
            node: 0,
            nodes: 1,
            node_name: "node0",
            listen: "127.0.1.1:0".parse().unwrap(),
            control: "127.0.0.1:999".parse().unwrap(),
            job_dir: Path::new("/tmp/j"),
            nspace: "ns",
            np: 1,
            map_by: MapBy::Slot,
            rank_by: None,
            bind_to: None,
            first_slot: 0,
            cpus_per_rank: 1,
            use_hwthread_cpus: false,
            cpu_set: None,
            quiet: false,
            tag_output: false,
            timestamp_output: false,
            merge_stderr_to_stdout: false,
            output_dir: None,
            report_bindings: false,
            stdin: Default::default(),
            topology: None,
            ib_device: None,
            ib_gid_index: None,
            spin_us: None,
            no_shm_fence: false,
            allgather: None,
            detector: None,
            exports: &[],
            pmix_libdir: None,
            apps: &[],
            app_exports: &[],
            app_wdirs: &[],
            psets: &[],
            command,
            slurm_addrs: None,
            ssh_names: None,
            node_ranks: &[],
            rank_map: None,
        }
    }

    #[test]
    fn ssh_command_line_names_every_node_and_counts() {
        let names = vec!["h1".to_string(), "10.0.0.2".to_string()];
        let prog = [OsString::from("prog")];
        let l = DaemonLaunch {
            node: 1,
            nodes: 2,
            node_name: "10.0.0.2",
            listen: "10.0.0.2:0".parse().unwrap(),
            control: "10.0.0.9:999".parse().unwrap(),
            np: 3,
            ssh_names: Some(&names),
            node_ranks: &[1, 2],
            rank_map: None,
            ..launch(&prog)
        };
        let joined = arg_text(&l);
        assert_eq!(
            joined,
            "--ssh --node 1 --nodes 2 --node-name 10.0.0.2 --listen 10.0.0.2:0 --node-names \
             h1,10.0.0.2 --control 10.0.0.9:999 --job-dir /tmp/j --nspace ns --np 3 \
             --map-by slot --first-slot 0 --node-ranks 1,2 --heartbeat-ms 1000 \
             --peer-timeout-ms 0 -- prog"
        );
    }

    #[test]
    fn node_addresses_are_distinct_loopback_addresses() {
        assert_eq!(node_address(0), Some(Ipv4Addr::new(127, 0, 1, 1)));
        assert_eq!(node_address(253), Some(Ipv4Addr::new(127, 0, 1, 254)));
        assert_eq!(node_address(254), Some(Ipv4Addr::new(127, 0, 2, 1)));
        assert_eq!(
            node_address(MAX_NODES - 1),
            Some(Ipv4Addr::new(127, 0, 255, 254))
        );
        assert_eq!(node_address(MAX_NODES), None);
        let all: std::collections::HashSet<_> = (0..600).map(node_address).collect();
        assert_eq!(all.len(), 600);
    }

    #[test]
    fn command_line_carries_no_secret() {
        let exports = vec![("A".to_string(), OsString::from("1 2"))];
        let cmd = vec![OsString::from("sh"), OsString::from("-c")];
        let l = DaemonLaunch {
            node: 2,
            nodes: 3,
            node_name: "node2",
            listen: "127.0.1.3:0".parse().unwrap(),
            nspace: "cohort.1.abcd",
            np: 7,
            map_by: MapBy::Node,
            rank_by: None,
            bind_to: Some(BindTo::Core),
            first_slot: 4,
            cpus_per_rank: 1,
            use_hwthread_cpus: false,
            cpu_set: None,
            quiet: false,
            tag_output: true,
            timestamp_output: false,
            merge_stderr_to_stdout: false,
            report_bindings: true,
            detector: Some(DetectorConfig::DEFAULT),
            exports: &exports,
            pmix_libdir: Some(Path::new("/opt/c/lib")),
            ..launch(&cmd)
        };
        let joined = arg_text(&l);
        assert!(joined.starts_with("--node 2 --nodes 3 --node-name node2 --listen 127.0.1.3:0"));
        assert!(
            joined.ends_with(
                "--np 7 --map-by node --bind-to core --first-slot 4 --tag-output --report-bindings \
                 --heartbeat-ms 1000 --peer-timeout-ms 10000 --pmix-libdir /opt/c/lib -x A=1 2 -- sh -c"
            ),
            "{joined}"
        );
        assert!(!joined.to_lowercase().contains("secret"));
    }

    #[test]
    fn one_command_line_for_every_node_server_under_slurm() {
        let addrs: Vec<IpAddr> = vec!["10.77.0.11".parse().unwrap(), "10.77.0.12".parse().unwrap()];
        let names = vec!["n1".to_string(), "n2".to_string()];
        let prog = [OsString::from("prog")];
        let l = DaemonLaunch {
            nodes: 2,
            node_name: "",
            listen: "10.77.0.11:0".parse().unwrap(),
            control: "10.77.0.1:999".parse().unwrap(),
            np: 4,
            slurm_addrs: Some((&addrs, &names)),
            ..launch(&prog)
        };
        let joined = arg_text(&l);
        assert_eq!(
            joined,
            "--slurm --nodes 2 --node-addrs 10.77.0.11,10.77.0.12 --node-names n1,n2 \
             --control 10.77.0.1:999 --job-dir /tmp/j --nspace ns --np 4 --map-by slot \
             --first-slot 0 --heartbeat-ms 1000 --peer-timeout-ms 0 -- prog"
        );
    }

    #[test]
    fn topology_file_is_passed_on() {
        let prog = [OsString::from("prog")];
        let l = DaemonLaunch {
            nodes: 2,
            np: 2,
            bind_to: Some(BindTo::None),
            topology: Some(Path::new("/etc/slurm/topology.conf")),
            ib_device: Some("mlx5_0:1"),
            ib_gid_index: Some(3),
            spin_us: Some(0),
            no_shm_fence: true,
            ..launch(&prog)
        };
        let joined = arg_text(&l);
        assert!(
            joined.ends_with(
                "--topology /etc/slurm/topology.conf --ib-device mlx5_0:1 --ib-gid-index 3 \
                 --spin-us 0 --no-shm-fence --heartbeat-ms 1000 --peer-timeout-ms 0 -- prog"
            ),
            "{joined}"
        );
    }

    #[test]
    fn exports_resolve_and_refuse_reserved_names() {
        let ok = resolve_exports(&["X=1".into(), "PATH".into(), "X=2".into()]).unwrap();
        assert_eq!(ok[0].0, "PATH");
        assert_eq!(ok[1], ("X".to_string(), OsString::from("2")));
        assert!(resolve_exports(&["COHORT_RANK=3".into()]).is_err());
        assert!(resolve_exports(&["=3".into()]).is_err());
        let skipped = resolve_exports(&["COHORT_SURELY_UNSET_VARIABLE_FOR_TEST".into()]).unwrap();
        assert!(skipped.is_empty());
    }
    #[test]
    fn mpmd_apps_and_psets_are_passed_on() {
        use cohort_proto::RankSet;
        let cmd: Vec<OsString> = ["./ocean", "-v", "./ice"].map(OsString::from).into();
        let psets = [
            Pset {
                name: "ocean".into(),
                members: RankSet::range(0..2),
            },
            Pset {
                name: "-odd name".into(),
                members: RankSet::parse("1,3-4").unwrap(),
            },
        ];
        let app_exports = [(1, "ICE".to_string(), OsString::from("-cold"))];
        let l = DaemonLaunch {
            np: 5,
            bind_to: Some(BindTo::None),
            apps: &[(2, 2), (3, 1)],
            app_exports: &app_exports,
            app_wdirs: &[(1, PathBuf::from("/tmp/ice dir"))],
            psets: &psets,
            ..launch(&cmd)
        };
        let joined = arg_text(&l);
        assert!(
            joined.ends_with(
                "--app=2:2 --app=3:1 --app-export=1:ICE=-cold --app-wdir=1:/tmp/ice dir \
                 --pset=ocean=0-1 --pset=-odd name=1,3-4 -- ./ocean -v ./ice"
            ),
            "{joined}"
        );
    }
}
