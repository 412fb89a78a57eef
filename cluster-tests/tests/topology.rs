//! Topology end to end: `cohort topo`, and `cohort run --map-by / --bind-to` with real
//! node servers — what each rank's kernel affinity (`Cpus_allowed_list`) and its
//! `COHORT_BINDING` say, and which node server hosts which rank.

use std::collections::BTreeSet;
use std::process::Output;

use cohort_cluster_tests::*;
use cohort_topology::CpuSet;

fn run_ok(args: &[&str]) -> Output {
    let out = run_cohort(args, DEADLINE);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    out
}

/// `cohort topo --json`, parsed.
fn topo_json() -> serde_json::Value {
    let out = run_ok(&["topo", "--json"]);
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}\n{}", describe(&out)))
}

/// The CPU sets of this host's cores, as `cohort topo` reports them.
fn core_sets() -> Vec<CpuSet> {
    topo_json()["cores"]
        .as_array()
        .expect("cores is an array")
        .iter()
        .map(|c| c["cpuset"].as_str().unwrap().parse().unwrap())
        .collect()
}

/// CPUs this test process may run on: what unbound ranks must get.
fn own_cpus() -> CpuSet {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    allowed_list(&status)
}

fn allowed_list(status: &str) -> CpuSet {
    status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .expect("Cpus_allowed_list in /proc status")
        .trim()
        .parse()
        .unwrap()
}

/// What one rank reported.
#[derive(Debug)]
struct RankReport {
    rank: u32,
    node: String,
    /// The kernel's view of the rank's affinity.
    allowed: CpuSet,
    /// `COHORT_BINDING` as the rank saw it.
    binding: String,
}

/// Each rank prints `rank|node|Cpus_allowed_list|COHORT_BINDING` on one line.
const REPORT: &str = "echo \"$COHORT_RANK|$COHORT_NODE_NAME|$(grep Cpus_allowed_list /proc/self/status | cut -f2)|$COHORT_BINDING\"";

fn run_reports(args: &[&str], np: u32) -> (Vec<RankReport>, String) {
    run_reports_with(&[], args, np)
}

/// [`run_reports`] with `env` set for `cohort run` (and so its node servers).
fn run_reports_with(env: &[(&str, &str)], args: &[&str], np: u32) -> (Vec<RankReport>, String) {
    let mut argv: Vec<&str> = vec!["run"];
    argv.extend_from_slice(args);
    argv.extend_from_slice(&["sh", "-c", REPORT]);
    let mut cmd = cohort_command(&argv);
    cmd.envs(env.iter().copied());
    let out = CohortRun::spawn(cmd).wait(DEADLINE);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let mut reports: Vec<RankReport> = text(&out.stdout)
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split('|').collect();
            assert_eq!(f.len(), 4, "bad report line {l:?}\n{}", describe(&out));
            RankReport {
                rank: f[0].parse().unwrap(),
                node: f[1].to_string(),
                allowed: f[2].parse().unwrap(),
                binding: f[3].to_string(),
            }
        })
        .collect();
    reports.sort_by_key(|r| r.rank);
    let ranks: Vec<u32> = reports.iter().map(|r| r.rank).collect();
    assert_eq!(
        ranks,
        (0..np).collect::<Vec<_>>(),
        "one report per rank\n{}",
        describe(&out)
    );
    (reports, text(&out.stderr))
}

fn assert_one_distinct_core_each(reports: &[RankReport], cores: &[CpuSet]) {
    let mut seen = BTreeSet::new();
    for r in reports {
        assert!(
            cores.contains(&r.allowed),
            "rank {} runs on {} which is not one core ({cores:?})",
            r.rank,
            r.allowed
        );
        assert_eq!(r.binding, r.allowed.to_string(), "COHORT_BINDING of {r:?}");
        assert!(
            seen.insert(r.allowed.clone()),
            "two ranks on one core: {reports:?}"
        );
    }
}

fn assert_unbound(reports: &[RankReport]) {
    let all = own_cpus();
    for r in reports {
        assert_eq!(r.allowed, all, "rank {} should be unbound: {r:?}", r.rank);
        assert_eq!(r.binding, "none", "{r:?}");
    }
}

#[test]
fn topo_reports_cores_and_pus() {
    let j = topo_json();
    assert!(!j["cores"].as_array().unwrap().is_empty(), "{j}");
    assert!(!j["pus"].as_array().unwrap().is_empty(), "{j}");
    assert!(!j["numa_nodes"].as_array().unwrap().is_empty(), "{j}");
    assert!(j["nics"].is_array(), "{j}");
    assert_eq!(
        j["machine"]["source"], "hwloc",
        "the shipped binaries use hwloc"
    );

    let table = text(&run_ok(&["topo"]).stdout);
    for heading in ["PACKAGE", "NUMA", "CORE", "NIC"] {
        assert!(table.contains(heading), "{table}");
    }
}

#[test]
fn bind_to_core_gives_each_rank_its_own_core() {
    let cores = core_sets();
    if cores.len() < 2 {
        eprintln!("skipped: this host has {} core(s)", cores.len());
        return;
    }
    let (reports, stderr) = run_reports(&["-n", "2", "--bind-to", "core"], 2);
    assert_one_distinct_core_each(&reports, &cores);
    assert!(!stderr.contains("oversubscribed"), "{stderr}");

    // The default when the cores suffice.
    let (reports, _) = run_reports(&["-n", "2"], 2);
    assert_one_distinct_core_each(&reports, &cores);

    // Node servers sharing this host hand out distinct cores too.
    let (reports, _) = run_reports(&["--nodes", "2", "-n", "2", "--bind-to", "core"], 2);
    assert_one_distinct_core_each(&reports, &cores);
}

/// `--report-bindings`: each node server says, for each rank it starts, what the rank
/// is bound to, as the rank itself sees it (CPUs, and a map of the host with one `B`
/// per bound CPU); unbound ranks are reported as such.
#[test]
fn report_bindings_says_what_each_rank_is_bound_to() {
    let cores = core_sets();
    let reported = |stderr: &str, r: &RankReport| -> String {
        let prefix = format!("cohortd: {} (", r.node);
        let tail = format!("): rank {} of ", r.rank);
        let lines: Vec<&str> = stderr
            .lines()
            .filter(|l| l.starts_with(&prefix) && l.contains(&tail))
            .collect();
        assert_eq!(lines.len(), 1, "one report of rank {}: {stderr}", r.rank);
        lines[0].to_string()
    };
    if cores.len() >= 2 {
        let (reports, stderr) = run_reports(
            &[
                "--nodes",
                "2",
                "-n",
                "2",
                "--bind-to",
                "core",
                "--report-bindings",
            ],
            2,
        );
        for r in &reports {
            let line = reported(&stderr, r);
            let (_, what) = line
                .split_once(" bound to core ")
                .unwrap_or_else(|| panic!("{line}"));
            let map = what.rsplit_once(": ").map_or("", |(_, m)| m);
            assert!(
                what.contains(&format!("(CPUs {})", r.allowed))
                    && map.matches('B').count() == r.allowed.len()
                    && map.starts_with('['),
                "rank {} bound to {}: {line}",
                r.rank,
                r.allowed
            );
        }
    }
    let (reports, stderr) = run_reports(&["-n", "2", "--bind-to", "none", "--report-bindings"], 2);
    for r in &reports {
        let line = reported(&stderr, r);
        assert!(
            line.ends_with(&format!("not bound (CPUs {})", r.allowed)),
            "{line}"
        );
    }
    // Without the option, nothing is said.
    let (_, stderr) = run_reports(&["-n", "2", "--bind-to", "none"], 2);
    assert!(!stderr.contains("bound"), "{stderr}");
}

/// Hardware threads, packages and NUMA domains bound for real on a host of one package
/// and one NUMA domain without SMT: hwloc's `HWLOC_SYNTHETIC` makes CPUs 0-1 one core
/// of two hardware threads, two packages or two NUMA domains of one core each, for
/// `cohort run`, its node servers and what they bind.
#[test]
fn smt_and_package_bindings_on_a_synthetic_host() {
    let own = own_cpus();
    if !(own.contains(0) && own.contains(1)) {
        eprintln!("SKIPPED: needs CPUs 0 and 1 (this process may use {own})");
        return;
    }
    let ranks = |env, args: &[&str], np| -> Vec<(String, String)> {
        let (reports, _) = run_reports_with(&[("HWLOC_SYNTHETIC", env)], args, np);
        reports
            .iter()
            .map(|r| (r.allowed.to_string(), r.binding.clone()))
            .collect()
    };
    let pair = |a: &str, b: &str| (a.to_string(), b.to_string());
    let smt = "pack:1 core:1 pu:2";
    // A slot is a hardware thread: each rank gets its own.
    assert_eq!(
        ranks(smt, &["-n", "2", "--use-hwthread-cpus"], 2),
        [pair("0", "0"), pair("1", "1")]
    );
    // A core's first hardware thread.
    assert_eq!(
        ranks(smt, &["-n", "1", "--bind-to", "hwthread"], 1),
        [pair("0", "0")]
    );
    // A rank bound to the core runs on both of its threads; two ranks on the one core
    // oversubscribe it and are not bound.
    assert_eq!(ranks(smt, &["-n", "1"], 1), [pair("0-1", "0-1")]);
    assert_eq!(
        ranks(smt, &["-n", "2"], 2),
        [pair("0-1", "none"), pair("0-1", "none")]
    );
    let (_, stderr) = run_reports_with(
        &[("HWLOC_SYNTHETIC", smt)],
        &["-n", "2", "--use-hwthread-cpus", "--report-bindings"],
        2,
    );
    assert!(
        stderr.contains("(CPUs 0): [B.]") && stderr.contains("(CPUs 1): [.B]"),
        "{stderr}"
    );
    let packages = "pack:2 core:1 pu:1";
    // --map-by package alternates the packages; --bind-to package binds to one.
    assert_eq!(
        ranks(
            packages,
            &["-n", "2", "--map-by", "package", "--bind-to", "package"],
            2
        ),
        [pair("0", "0"), pair("1", "1")]
    );
    // Two NUMA domains of one CPU each: --bind-to numa binds to one domain's CPUs.
    assert_eq!(
        ranks(
            "pack:1 numa:2 core:1 pu:1",
            &["-n", "2", "--map-by", "numa", "--bind-to", "numa"],
            2
        ),
        [pair("0", "0"), pair("1", "1")]
    );
    // A rankfile's PACKAGE:CORES counts cores within the package.
    let dir = TempDir::new("synthetic-rankfile");
    let file = dir.path().join("ranks");
    std::fs::write(&file, "rank 0=node0 slot=1:0\nrank 1=node0 slot=0:*;1:*\n").unwrap();
    assert_eq!(
        ranks(packages, &["--rankfile", file.to_str().unwrap()], 2),
        [pair("1", "1"), pair("0-1", "0-1")]
    );
}

#[test]
fn bind_to_none_leaves_ranks_unbound() {
    let (reports, stderr) = run_reports(&["-n", "2", "--bind-to", "none"], 2);
    assert_unbound(&reports);
    assert!(!stderr.contains("oversubscribed"), "{stderr}");
}

#[test]
fn oversubscribed_jobs_are_not_bound_and_say_so() {
    let cores = core_sets().len() as u32;
    let np = cores + 2;
    let (reports, stderr) = run_reports(&["-n", &np.to_string()], np);
    assert_unbound(&reports);
    let said: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("oversubscribed"))
        .collect();
    assert_eq!(said.len(), 1, "said once: {stderr}");
    assert!(
        said[0].contains(&format!("{np} ranks on node0 with {cores} cores")),
        "{stderr}"
    );
}

#[test]
fn map_by_node_deals_ranks_round_robin() {
    let (reports, _) = run_reports(&["--map-by", "node", "--nodes", "2", "-n", "4"], 4);
    let nodes: Vec<&str> = reports.iter().map(|r| r.node.as_str()).collect();
    assert_eq!(nodes, ["node0", "node1", "node0", "node1"], "{reports:?}");

    let (reports, _) = run_reports(&["--map-by", "slot", "--nodes", "2", "-n", "4"], 4);
    let nodes: Vec<&str> = reports.iter().map(|r| r.node.as_str()).collect();
    assert_eq!(nodes, ["node0", "node0", "node1", "node1"], "{reports:?}");
}

#[test]
fn round_robin_jobs_construct_groups_across_nodes() {
    // Launcher, node servers and clients must agree on the round-robin map for a
    // cross-node group construct (and reading a member's data) to complete.
    let demo = example("demo");
    let demo = demo.to_string_lossy();
    let out = run_cohort(
        [
            "run",
            "--map-by",
            "node",
            "--nodes",
            "2",
            "-n",
            "4",
            demo.as_ref(),
        ],
        DEADLINE,
    );
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let stdout = text(&out.stdout);
    for (rank, node) in [(0, "node0"), (1, "node1"), (2, "node0"), (3, "node1")] {
        let prefix = format!("rank {rank} on {node} (cpus ");
        let line = stdout.lines().find(|l| l.starts_with(&prefix));
        assert!(
            line.is_some_and(|l| l.contains("group \"demo-group\" members [0,1,2,3]")),
            "{prefix}\n{}",
            describe(&out)
        );
    }
}
