//! `cohort run` inside a Slurm allocation: finding the allocation in the environment,
//! its nodes and their addresses, the address the node servers reach the launcher on,
//! and the one `srun` job step that starts a `cohortd` on each node.
//!
//! Everything that decides is a plain function of what it is given (environment,
//! `scontrol` output, …), so it is tested without Slurm; [`resolve_nodes`] and the
//! step itself run the real `scontrol` and `srun`.

use std::ffi::OsString;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs, UdpSocket};
use std::path::Path;
use std::process::Command;

/// Where the node servers run (`cohort run --launcher`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, clap::ValueEnum)]
pub enum LauncherKind {
    /// Slurm inside an allocation (SLURM_JOB_ID and SLURM_JOB_NODELIST set, srun in
    /// PATH), else local
    #[default]
    Auto,
    /// Every node server on this host, each on its own loopback address
    Local,
    /// One node server per node of the Slurm allocation, started by one srun step
    Slurm,
    /// One node server per host of --host / --hostfile, each started over ssh (or
    /// --launch-agent)
    Ssh,
}

/// The allocation `cohort run` runs in, as its environment describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Allocation {
    pub job_id: String,
    /// `SLURM_JOB_NODELIST`, a hostlist expression such as `n[1-3]`.
    pub nodelist: String,
    /// `SLURM_JOB_NUM_NODES` (or `SLURM_NNODES`), when set.
    pub num_nodes: Option<u32>,
    /// The tasks the allocation was made for: `SLURM_NTASKS` (or `SLURM_NPROCS`), else
    /// the sum of `SLURM_TASKS_PER_NODE` (`2(x3),1`); what `cohort run` without `-n`
    /// starts, as mpirun does.
    pub tasks: Option<u32>,
    /// `SLURM_TASKS_PER_NODE` expanded, one entry per node of the allocation in
    /// `nodelist` order; empty when unset or malformed.
    pub tasks_per_node: Vec<u32>,
    /// `SLURM_JOB_CPUS_PER_NODE` expanded the same way; empty when unset or malformed.
    pub cpus_per_node: Vec<u32>,
}

/// The most entries a per-node value expands to (`1(x4000000000)` is refused rather
/// than allocated).
const MAX_PER_NODE: u64 = 1 << 20;

/// A per-node count list as Slurm writes `SLURM_TASKS_PER_NODE` and
/// `SLURM_JOB_CPUS_PER_NODE`: counts, each optionally repeated (`2(x3),1` is
/// 2,2,2,1), one per node in the node list's order; `None` when malformed.
pub fn expand_per_node(v: &str) -> Option<Vec<u32>> {
    let mut out = Vec::new();
    for part in v.trim().split(',') {
        let (count, times) = match part.split_once("(x") {
            Some((c, rest)) => (c, rest.strip_suffix(')')?.parse::<u32>().ok()?),
            None => (part, 1),
        };
        let count: u32 = count.trim().parse().ok()?;
        if times == 0 || out.len() as u64 + u64::from(times) > MAX_PER_NODE {
            return None;
        }
        out.extend(std::iter::repeat_n(count, times as usize));
    }
    Some(out)
}

/// The sum of a `SLURM_TASKS_PER_NODE` value (`2(x3),1` is 2+2+2+1); `None` when
/// malformed or zero.
pub fn sum_tasks_per_node(v: &str) -> Option<u32> {
    let counts = expand_per_node(v)?;
    let total = counts.iter().try_fold(0u32, |t, &c| t.checked_add(c))?;
    (total > 0).then_some(total)
}

impl Allocation {
    /// The allocation described by `env` (a variable lookup), if any.
    pub fn from_env(env: impl Fn(&str) -> Option<String>) -> Option<Allocation> {
        let set = |name: &str| env(name).filter(|v| !v.trim().is_empty());
        let job_id = set("SLURM_JOB_ID").or_else(|| set("SLURM_JOBID"))?;
        let nodelist = set("SLURM_JOB_NODELIST").or_else(|| set("SLURM_NODELIST"))?;
        let num_nodes = set("SLURM_JOB_NUM_NODES")
            .or_else(|| set("SLURM_NNODES"))
            .and_then(|n| n.trim().parse().ok());
        let tasks = set("SLURM_NTASKS")
            .or_else(|| set("SLURM_NPROCS"))
            .and_then(|n| n.trim().parse().ok())
            .filter(|&n: &u32| n > 0)
            .or_else(|| set("SLURM_TASKS_PER_NODE").and_then(|v| sum_tasks_per_node(&v)));
        Some(Allocation {
            job_id: job_id.trim().to_string(),
            nodelist: nodelist.trim().to_string(),
            num_nodes,
            tasks,
            tasks_per_node: set("SLURM_TASKS_PER_NODE")
                .and_then(|v| expand_per_node(&v))
                .unwrap_or_default(),
            cpus_per_node: set("SLURM_JOB_CPUS_PER_NODE")
                .and_then(|v| expand_per_node(&v))
                .unwrap_or_default(),
        })
    }
}

/// Whether this job's node servers go through Slurm: `Ok(Some)` with the allocation
/// when they do, `Ok(None)` for local ones, `Err` when `--launcher slurm` cannot be
/// honoured. `srun`: where srun was found, if it was.
pub fn choose(
    kind: LauncherKind,
    alloc: Option<Allocation>,
    srun: Option<&Path>,
) -> Result<Option<Allocation>, String> {
    match kind {
        LauncherKind::Local | LauncherKind::Ssh => Ok(None),
        LauncherKind::Auto => Ok(alloc.filter(|_| srun.is_some())),
        LauncherKind::Slurm => {
            let alloc = alloc.ok_or(
                "--launcher slurm: not inside a Slurm allocation (SLURM_JOB_ID and \
                 SLURM_JOB_NODELIST are not set); run under salloc or sbatch",
            )?;
            if srun.is_none() {
                return Err("--launcher slurm: srun is not in PATH".into());
            }
            Ok(Some(alloc))
        }
    }
}

/// Finds `srun` in `path` (a PATH value).
pub fn find_srun(path: Option<&std::ffi::OsStr>) -> Option<std::path::PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    path.iter()
        .flat_map(std::env::split_paths)
        .map(|d| d.join("srun"))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

/// How many node servers: `--nodes` if given (at most the allocation's node count),
/// else one per node of the allocation.
pub fn node_count(requested: Option<u32>, allocated: usize) -> Result<u32, String> {
    let allocated_u32 = u32::try_from(allocated).unwrap_or(u32::MAX);
    match requested {
        None => Ok(allocated_u32),
        Some(m) if m as usize <= allocated => Ok(m),
        Some(m) => Err(format!(
            "--nodes {m}: the Slurm allocation has only {allocated} node(s) (one node \
             server per node); ask salloc/sbatch for more nodes, or give --nodes {allocated} \
             or less"
        )),
    }
}

/// `NodeName → NodeAddr` pairs from `scontrol show node …` output (one record per
/// node, `Key=Value` words, records separated by blank lines or a new `NodeName=`).
pub fn parse_node_addrs(scontrol: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut name: Option<String> = None;
    for word in scontrol.split_whitespace() {
        if let Some(n) = word.strip_prefix("NodeName=") {
            name = Some(n.to_string());
        } else if let Some(a) = word.strip_prefix("NodeAddr=") {
            if let Some(n) = name.take() {
                out.push((n, a.to_string()));
            }
        }
    }
    out
}

/// An address: an IP as is, else a host name resolved (`getaddrinfo`, like `getent
/// hosts`), IPv4 first.
pub fn resolve_host(host: &str) -> Result<IpAddr, String> {
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(ip);
    }
    let addrs: Vec<IpAddr> = (host, 0)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {host}: {e}"))?
        .map(|a| a.ip())
        .collect();
    addrs
        .iter()
        .find(|a| a.is_ipv4())
        .or(addrs.first())
        .copied()
        .ok_or_else(|| format!("cannot resolve {host}: no address"))
}

/// The allocation's node names, in Slurm's order, and each one's address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Nodes {
    pub names: Vec<String>,
    pub addrs: Vec<IpAddr>,
}

/// Expands the allocation's node list (`scontrol show hostnames`, else cohort's own
/// hostlist parser) and finds the first `count` nodes' addresses (their `NodeAddr`,
/// else their names resolved), unless `given` (`--node-addrs`) says them.
pub fn resolve_nodes(
    alloc: &Allocation,
    requested: Option<u32>,
    given: &[IpAddr],
) -> Result<Nodes, String> {
    let names = match run_scontrol(&["show", "hostnames", &alloc.nodelist]) {
        Ok(out) => out.split_whitespace().map(str::to_string).collect(),
        Err(e) => {
            tracing::debug!("scontrol show hostnames: {e}; expanding the node list here");
            cohort_topology::hostlist::expand(&alloc.nodelist)
                .map_err(|e| format!("SLURM_JOB_NODELIST={}: {e}", alloc.nodelist))?
        }
    };
    let names: Vec<String> = names;
    if names.is_empty() {
        return Err(format!(
            "SLURM_JOB_NODELIST={} names no node",
            alloc.nodelist
        ));
    }
    let count = node_count(requested, names.len())?;
    let names: Vec<String> = names.into_iter().take(count as usize).collect();
    if !given.is_empty() {
        return Ok(Nodes {
            names,
            addrs: given.to_vec(),
        });
    }
    let known = match run_scontrol(&["show", "node", &names.join(",")]) {
        Ok(out) => parse_node_addrs(&out),
        Err(e) => {
            tracing::debug!("scontrol show node: {e}; resolving the node names instead");
            Vec::new()
        }
    };
    let mut addrs = Vec::with_capacity(names.len());
    for name in &names {
        let host = known
            .iter()
            .find(|(n, _)| n == name)
            .map_or(name.as_str(), |(_, a)| a.as_str());
        let ip = resolve_host(host)
            .or_else(|e| {
                if host == name {
                    Err(e)
                } else {
                    resolve_host(name)
                }
            })
            .map_err(|e| format!("address of Slurm node {name}: {e} (give --node-addrs)"))?;
        addrs.push(ip);
    }
    Ok(Nodes { names, addrs })
}

fn run_scontrol(args: &[&str]) -> Result<String, String> {
    let out = Command::new("scontrol")
        .args(args)
        .stdin(std::process::Stdio::null())
        .output()
        .map_err(|e| format!("cannot run scontrol: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "scontrol {} failed ({}): {}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The address of this host that the node servers reach the launcher on: `given`
/// (`--control-addr`), else the local address the kernel would send from to `first`
/// (the first node's address), found by connecting a UDP socket (nothing is sent).
pub fn control_ip(given: Option<IpAddr>, first: IpAddr) -> Result<IpAddr, String> {
    if let Some(ip) = given {
        return Ok(ip);
    }
    let unspecified: IpAddr = match first {
        IpAddr::V4(_) => std::net::Ipv4Addr::UNSPECIFIED.into(),
        IpAddr::V6(_) => std::net::Ipv6Addr::UNSPECIFIED.into(),
    };
    let sock = UdpSocket::bind(SocketAddr::new(unspecified, 0))
        .map_err(|e| format!("cannot pick the control address: {e}"))?;
    sock.connect(SocketAddr::new(first, 9))
        .map_err(|e| format!("no route to the first node ({first}): {e} (give --control-addr)"))?;
    let ip = sock
        .local_addr()
        .map_err(|e| format!("cannot pick the control address: {e}"))?
        .ip();
    if ip.is_unspecified() {
        return Err(format!(
            "no local address routes to the first node ({first}); give --control-addr"
        ));
    }
    Ok(ip)
}

/// srun's options for the node servers' step over `names` (one task per node; the
/// program and its arguments follow). The step:
/// * gets no stdin (`--input=none`), and everything cohort run's environment has
///   (`--export=ALL`: the job secret travels there, never on a command line);
/// * keeps running when one node server exits badly (`--kill-on-bad-exit=0`): the
///   launcher decides, as it does for local node servers;
/// * may use every CPU and all the memory the job has on each node (`--whole`,
///   `--mem=0`), unbound (`--cpu-bind=none`, where the cluster binds tasks at all:
///   `cpu_bind`), and shares them with other steps (`--overlap`): the node server's
///   ranks are its children and inherit its CPUs;
/// * is quiet (`--quiet`: no informational messages; errors still show).
pub fn srun_args(names: &[String], job_name: &str, cpu_bind: bool) -> Vec<OsString> {
    let m = names.len();
    let mut args: Vec<OsString> = [
        // First: srun warns about what it parses after it (--cpu-bind on a cluster
        // without CPU binding) unless it is quiet by then.
        "--quiet".into(),
        format!("--job-name={job_name}"),
        format!("--nodes={m}"),
        format!("--ntasks={m}"),
        "--ntasks-per-node=1".into(),
        format!("--nodelist={}", names.join(",")),
        "--kill-on-bad-exit=0".into(),
        "--input=none".into(),
        "--export=ALL".into(),
        "--whole".into(),
        "--overlap".into(),
        "--mem=0".into(),
    ]
    .into_iter()
    .map(OsString::from)
    .collect();
    if cpu_bind {
        args.push("--cpu-bind=none".into());
    }
    args
}

/// Whether the cluster binds tasks to CPUs, from `scontrol show config` output: its
/// TaskPlugin is not task/none. (srun warns about `--cpu-bind` where it does not.)
/// Unknown (no such line) counts as binding.
pub fn binds_tasks(config: &str) -> bool {
    config
        .lines()
        .filter_map(|l| l.split_once('='))
        .find(|(k, _)| k.trim() == "TaskPlugin")
        .is_none_or(|(_, v)| {
            v.split(',')
                .any(|p| !matches!(p.trim(), "task/none" | "none" | "" | "(null)"))
        })
}

/// [`binds_tasks`] of the running cluster (`scontrol show config`).
pub fn cluster_binds_tasks() -> bool {
    run_scontrol(&["show", "config"]).map_or(true, |c| binds_tasks(&c))
}

/// srun's arguments for a step of one task on node `name` that SIGKILLs process `pid`
/// there (a node server declared lost: frozen, or cut off from the others). It shares
/// the node's resources with the node servers' step (`--overlap`).
pub fn kill_args(name: &str, pid: u32) -> Vec<OsString> {
    [
        "--quiet",
        "--overlap",
        "--nodes=1",
        "--ntasks=1",
        &format!("--nodelist={name}"),
        "--input=none",
        "--job-name=cohort-kill",
        "kill",
        "-KILL",
        &pid.to_string(),
    ]
    .into_iter()
    .map(OsString::from)
    .collect()
}

/// The step's id among the allocation's steps from `squeue --steps --noheader
/// --format=%i|%j` output: the one named `job_name`, if exactly one is.
pub fn step_id(squeue: &str, job_name: &str) -> Option<String> {
    let mut found = squeue.lines().filter_map(|l| {
        let (id, name) = l.trim().split_once('|')?;
        (name.trim() == job_name).then(|| id.trim().to_string())
    });
    let id = found.next()?;
    found.next().is_none().then_some(id)
}

/// Cancels the step named `job_name` of `job_id` (`scancel`), if squeue finds it.
/// Returns whether a step was cancelled.
pub fn cancel_step(job_id: &str, job_name: &str) -> bool {
    let out = Command::new("squeue")
        .args(["--steps", "--noheader", "--format=%i|%j", "--jobs", job_id])
        .stdin(std::process::Stdio::null())
        .output();
    let Ok(out) = out else { return false };
    let Some(step) = step_id(&String::from_utf8_lossy(&out.stdout), job_name) else {
        return false;
    };
    tracing::warn!(step = %step, "cancelling the node servers' srun step");
    Command::new("scancel")
        .args(["--signal=KILL", "--full", &step])
        .stdin(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// A task of the step that srun reports ended (`srun: error: NODE: task N: WHAT`, as
/// srun writes when a task exits non-zero or is killed): (task, WHAT).
pub fn task_exit(line: &str) -> Option<(u32, String)> {
    let rest = line.trim_end().strip_prefix("srun: error: ")?;
    let (_node, rest) = rest.split_once(": task ")?;
    let (task, what) = rest.split_once(": ")?;
    let task = task.trim().parse().ok()?;
    Some((task, what.trim().to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn allocation_is_found_in_the_environment() {
        let a = Allocation::from_env(env(&[
            ("SLURM_JOB_ID", "42"),
            ("SLURM_JOB_NODELIST", "n[1-3]"),
            ("SLURM_JOB_NUM_NODES", "3"),
        ]))
        .unwrap();
        assert_eq!(a.job_id, "42");
        assert_eq!(a.nodelist, "n[1-3]");
        assert_eq!(a.num_nodes, Some(3));
        // Older names.
        let a =
            Allocation::from_env(env(&[("SLURM_JOBID", "7"), ("SLURM_NODELIST", "c1")])).unwrap();
        assert_eq!((a.job_id.as_str(), a.num_nodes), ("7", None));
        assert_eq!(Allocation::from_env(env(&[("SLURM_JOB_ID", "42")])), None);
        assert_eq!(
            Allocation::from_env(env(&[("SLURM_JOB_ID", ""), ("SLURM_JOB_NODELIST", "n1")])),
            None
        );
        assert_eq!(Allocation::from_env(env(&[])), None);
    }

    /// `cohort run` without -n starts the allocation's tasks, as mpirun does.
    #[test]
    fn the_allocations_task_count() {
        let base = [("SLURM_JOB_ID", "42"), ("SLURM_JOB_NODELIST", "n[1-3]")];
        let tasks = |more: &[(&str, &str)]| {
            let all: Vec<(&str, &str)> = base.iter().chain(more).copied().collect();
            Allocation::from_env(env(&all)).unwrap().tasks
        };
        assert_eq!(tasks(&[]), None);
        assert_eq!(tasks(&[("SLURM_NTASKS", "6")]), Some(6));
        assert_eq!(tasks(&[("SLURM_NPROCS", "5")]), Some(5));
        assert_eq!(tasks(&[("SLURM_TASKS_PER_NODE", "2(x3),1")]), Some(7));
        assert_eq!(
            tasks(&[("SLURM_NTASKS", "4"), ("SLURM_TASKS_PER_NODE", "2(x3)")]),
            Some(4),
            "SLURM_NTASKS first"
        );
        assert_eq!(sum_tasks_per_node("3"), Some(3));
        assert_eq!(sum_tasks_per_node("1(x2),4"), Some(6));
        for bad in [
            "",
            "x",
            "2(x",
            "2(3)",
            "0",
            "2(x3",
            "1(x0)",
            "1(x4000000000)",
        ] {
            assert_eq!(sum_tasks_per_node(bad), None, "{bad}");
        }
    }

    /// `--display-allocation` shows each node's tasks and CPUs as Slurm lists them.
    #[test]
    fn per_node_counts_expand_in_node_list_order() {
        assert_eq!(expand_per_node("2(x3),1"), Some(vec![2, 2, 2, 1]));
        assert_eq!(expand_per_node(" 4 "), Some(vec![4]));
        assert_eq!(expand_per_node("1,8(x2)"), Some(vec![1, 8, 8]));
        assert_eq!(expand_per_node("1(x2000000)"), None, "too many nodes");
        let alloc = Allocation::from_env(env(&[
            ("SLURM_JOB_ID", "42"),
            ("SLURM_JOB_NODELIST", "n[1-3]"),
            ("SLURM_TASKS_PER_NODE", "2(x2),1"),
            ("SLURM_JOB_CPUS_PER_NODE", "4(x3)"),
        ]))
        .unwrap();
        assert_eq!(alloc.tasks_per_node, [2, 2, 1]);
        assert_eq!(alloc.cpus_per_node, [4, 4, 4]);
        let alloc = Allocation::from_env(env(&[
            ("SLURM_JOB_ID", "42"),
            ("SLURM_JOB_NODELIST", "n[1-3]"),
            ("SLURM_JOB_CPUS_PER_NODE", "4(x"),
        ]))
        .unwrap();
        assert!(alloc.tasks_per_node.is_empty() && alloc.cpus_per_node.is_empty());
    }

    #[test]
    fn launcher_choice() {
        let alloc = Allocation::from_env(env(&[
            ("SLURM_JOB_ID", "42"),
            ("SLURM_JOB_NODELIST", "n[1-3]"),
        ]));
        let srun = Some(Path::new("/usr/bin/srun"));
        use LauncherKind::*;
        assert_eq!(choose(Auto, alloc.clone(), srun).unwrap(), alloc);
        assert_eq!(choose(Auto, alloc.clone(), None).unwrap(), None);
        assert_eq!(choose(Auto, None, srun).unwrap(), None);
        assert_eq!(choose(Local, alloc.clone(), srun).unwrap(), None);
        assert_eq!(choose(Slurm, alloc.clone(), srun).unwrap(), alloc);
        assert!(choose(Slurm, None, srun)
            .unwrap_err()
            .contains("not inside a Slurm allocation"));
        assert!(choose(Slurm, alloc, None).unwrap_err().contains("srun"));
    }

    #[test]
    fn node_count_defaults_to_the_allocation_and_may_not_exceed_it() {
        assert_eq!(node_count(None, 3), Ok(3));
        assert_eq!(node_count(Some(2), 3), Ok(2));
        assert_eq!(node_count(Some(3), 3), Ok(3));
        let e = node_count(Some(4), 3).unwrap_err();
        assert!(e.contains("--nodes 4") && e.contains("only 3 node"), "{e}");
    }

    #[test]
    fn node_addresses_from_scontrol() {
        let out = "NodeName=n1 Arch=x86_64 CoresPerSocket=1\n   CPUAlloc=0 CPUTot=4\n   \
                   NodeAddr=10.77.0.11 NodeHostName=n1 Version=22.05.8\n\n\
                   NodeName=n2 Arch=x86_64\n   NodeAddr=n2.cluster NodeHostName=n2\n";
        assert_eq!(
            parse_node_addrs(out),
            [
                ("n1".to_string(), "10.77.0.11".to_string()),
                ("n2".to_string(), "n2.cluster".to_string())
            ]
        );
        assert_eq!(resolve_host("10.0.0.5"), Ok("10.0.0.5".parse().unwrap()));
        assert_eq!(resolve_host("localhost").map(|a| a.is_loopback()), Ok(true));
    }

    #[test]
    fn control_address_routes_to_the_first_node() {
        let given: IpAddr = "192.0.2.7".parse().unwrap();
        assert_eq!(
            control_ip(Some(given), "10.0.0.1".parse().unwrap()),
            Ok(given)
        );
        // Loopback routes from loopback.
        let ip = control_ip(None, "127.0.1.2".parse().unwrap()).unwrap();
        assert!(ip.is_loopback(), "{ip}");
    }

    #[test]
    fn srun_command_line() {
        let names = ["n1".to_string(), "n3".to_string()];
        let words = |bind| {
            let args: Vec<String> = srun_args(&names, "cohortd.x", bind)
                .into_iter()
                .map(|a| a.into_string().unwrap())
                .collect();
            args.join(" ")
        };
        let base = "--quiet --job-name=cohortd.x --nodes=2 --ntasks=2 --ntasks-per-node=1 \
                    --nodelist=n1,n3 --kill-on-bad-exit=0 --input=none --export=ALL --whole \
                    --overlap --mem=0";
        assert_eq!(words(false), base);
        assert_eq!(words(true), format!("{base} --cpu-bind=none"));
    }

    #[test]
    fn task_binding_from_the_cluster_config() {
        let cfg = |plugin: &str| {
            format!("SwitchType = x\nTaskPlugin              = {plugin}\nTaskPluginParam = (null type)\n")
        };
        assert!(!binds_tasks(&cfg("task/none")));
        assert!(binds_tasks(&cfg("task/affinity,task/cgroup")));
        assert!(binds_tasks(&cfg("task/cgroup")));
        assert!(binds_tasks("nothing here"));
    }

    #[test]
    fn kill_step_command_line() {
        let args: Vec<String> = kill_args("n2", 4242)
            .into_iter()
            .map(|a| a.into_string().unwrap())
            .collect();
        assert_eq!(
            args.join(" "),
            "--quiet --overlap --nodes=1 --ntasks=1 --nodelist=n2 --input=none \
             --job-name=cohort-kill kill -KILL 4242"
        );
    }

    #[test]
    fn task_exits_reported_by_srun() {
        assert_eq!(
            task_exit("srun: error: n2: task 1: Exited with exit code 1\n"),
            Some((1, "Exited with exit code 1".into()))
        );
        assert_eq!(
            task_exit("srun: error: n1: task 0: Killed"),
            Some((0, "Killed".into()))
        );
        assert_eq!(task_exit("srun: error: Unable to create step"), None);
        assert_eq!(task_exit("n2: cannot start the node service"), None);
        assert_eq!(task_exit("srun: error: n2: task x: Killed"), None);
    }

    #[test]
    fn step_is_found_by_name() {
        let out = "42.0|cohortd.cohort.1.ab\n42.1|other\n42.batch|batch\n";
        assert_eq!(step_id(out, "cohortd.cohort.1.ab"), Some("42.0".into()));
        assert_eq!(step_id(out, "missing"), None);
        assert_eq!(step_id("42.0|x\n42.1|x\n", "x"), None);
    }
}
