//! Switch-aware collective trees end to end: `cohort run --topology FILE` hands a
//! Slurm `topology.conf` to every node server, which then builds its fence and group
//! trees switch leaders first; a topology.conf next to `$SLURM_CONF` is picked up
//! without the flag; a malformed file stops `cohort run` before anything starts.

use std::path::Path;
use std::process::Output;

use cohort_cluster_tests::{
    cohort_command, example, run_cohort, text, CohortRun, TempDir, DEADLINE,
};

/// node0..node5 on two leaf switches under one top switch.
const TOPOLOGY: &str = "\
# two racks of three
SwitchName=s1  Nodes=node[0-2]
SwitchName=s2  Nodes=node[3-5]  LinkSpeed=100
SwitchName=top Switches=s[1-2]
";

fn describe(out: &Output) -> String {
    format!(
        "status {:?}\n--- stdout:\n{}\n--- stderr:\n{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    )
}

fn results(out: &Output) -> Vec<String> {
    text(&out.stdout)
        .lines()
        .filter_map(|l| l.split_once("RESULT ").map(|(_, r)| r.to_string()))
        .collect()
}

/// `cohort run --nodes 6 -n 6 --topology FILE testprog SCENARIO`, which must succeed
/// with every rank reporting the same result.
fn run_scenario(topology: &Path, scenario: &str) {
    let prog = example("testprog");
    let out = run_cohort(
        [
            "run".as_ref(),
            "--nodes".as_ref(),
            "6".as_ref(),
            "-n".as_ref(),
            "6".as_ref(),
            "--topology".as_ref(),
            topology.as_os_str(),
            prog.as_os_str(),
            scenario.as_ref(),
        ],
        DEADLINE,
    );
    assert_eq!(out.status.code(), Some(0), "{scenario}: {}", describe(&out));
    let r = results(&out);
    assert_eq!(r.len(), 6, "{scenario}: {}", describe(&out));
    assert!(
        r.windows(2).all(|w| w[0] == w[1]),
        "{scenario}: ranks disagree: {r:?}"
    );
}

fn write_topology(dir: &TempDir, text: &str) -> std::path::PathBuf {
    let path = dir.path().join("topology.conf");
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn construct_over_switch_trees() {
    let dir = TempDir::new("trees-construct");
    run_scenario(&write_topology(&dir, TOPOLOGY), "construct");
}

#[test]
fn fence_over_switch_trees() {
    let dir = TempDir::new("trees-fence");
    run_scenario(&write_topology(&dir, TOPOLOGY), "fence");
}

#[test]
fn node_servers_read_the_switch_map() {
    let dir = TempDir::new("trees-log");
    let topology = write_topology(&dir, TOPOLOGY);
    let mut cmd = cohort_command([
        "run".as_ref(),
        "--nodes".as_ref(),
        "2".as_ref(),
        "-n".as_ref(),
        "2".as_ref(),
        "--topology".as_ref(),
        topology.as_os_str(),
        example("testprog").as_os_str(),
        "fence".as_ref(),
    ]);
    cmd.env("COHORT_LOG", "info");
    let out = CohortRun::spawn(cmd).wait(DEADLINE);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let err = text(&out.stderr);
    let hierarchical = err
        .lines()
        .filter(|l| l.contains("switch leaders first"))
        .count();
    assert_eq!(hierarchical, 2, "each node server says so:\n{err}");
    assert!(
        err.contains("collective trees follow the switch map"),
        "{err}"
    );
}

#[test]
fn topology_conf_next_to_slurm_conf_is_used() {
    let dir = TempDir::new("trees-slurm");
    write_topology(&dir, TOPOLOGY);
    let mut cmd = cohort_command([
        "run".as_ref(),
        "--nodes".as_ref(),
        "3".as_ref(),
        "-n".as_ref(),
        "3".as_ref(),
        example("testprog").as_os_str(),
        "fence".as_ref(),
    ]);
    cmd.env("COHORT_LOG", "info")
        .env("SLURM_CONF", dir.path().join("slurm.conf"));
    let out = CohortRun::spawn(cmd).wait(DEADLINE);
    assert_eq!(out.status.code(), Some(0), "{}", describe(&out));
    let err = text(&out.stderr);
    let file = dir.path().join("topology.conf");
    assert!(
        err.lines()
            .any(|l| l.contains("collective trees follow the switch map")
                && l.contains(&file.display().to_string())),
        "the launcher names the file it uses:\n{err}"
    );
}

#[test]
fn malformed_topology_fails_fast_naming_file_and_line() {
    let dir = TempDir::new("trees-bad");
    let topology = write_topology(
        &dir,
        "SwitchName=s1 Nodes=node[0-2]\n# fine so far\nSwitchName=s2 Nodes=node[3-\n",
    );
    let out = run_cohort(
        [
            "run".as_ref(),
            "--nodes".as_ref(),
            "6".as_ref(),
            "-n".as_ref(),
            "6".as_ref(),
            "--topology".as_ref(),
            topology.as_os_str(),
            "true".as_ref(),
        ],
        DEADLINE,
    );
    assert_ne!(out.status.code(), Some(0), "{}", describe(&out));
    let err = text(&out.stderr);
    let at = format!("{}:3:", topology.display());
    assert!(err.contains(&at), "names {at}:\n{err}");
    assert!(
        !err.contains("node server"),
        "fails before starting node servers:\n{err}"
    );

    // A file that does not exist is refused the same way.
    let missing = dir.path().join("absent.conf");
    let out = run_cohort(
        [
            "run".as_ref(),
            "-n".as_ref(),
            "1".as_ref(),
            "--topology".as_ref(),
            missing.as_os_str(),
            "true".as_ref(),
        ],
        DEADLINE,
    );
    assert_ne!(out.status.code(), Some(0), "{}", describe(&out));
    assert!(
        text(&out.stderr).contains(&missing.display().to_string()),
        "{}",
        describe(&out)
    );
}

/// Issue 4: "Failure of an interior node server must not strand its subtree". Eight
/// real node servers; the rank on an interior server below the root of the binomial
/// tree SIGKILLs its server while the others wait in an optional construct. With
/// `--enable-recovery` the job goes on: the server's children route their
/// contributions around it (with the dissemination allgather: every survivor sends
/// what it gathered to the root), every survivor gets partial success without the
/// lost rank (the ranks check that themselves), and `cohort run` reports the loss and
/// exits with the lost rank's status.
#[test]
fn a_lost_interior_node_server_does_not_strand_its_subtree() {
    for (allgather, job) in survivors_agree(8, "lost-interior") {
        assert!(
            job.stderr.contains("its ranks") && job.stderr.contains("--enable-recovery"),
            "{allgather}: the launcher reports the lost node server:\n{}",
            job.stderr
        );
    }
}

/// Runs testprog `scenario` on `servers` node servers (one rank each,
/// `--enable-recovery`) with both gathering algorithms. One rank's server is killed:
/// every survivor reports the same result, and the job ends with the lost rank's
/// status.
fn survivors_agree(servers: u32, scenario: &str) -> Vec<(&'static str, cohort_cluster_tests::Job)> {
    survivors_agree_with(servers, scenario, &[])
}

/// [`survivors_agree`] with more `cohort run` options.
fn survivors_agree_with(
    servers: u32,
    scenario: &str,
    options: &[&str],
) -> Vec<(&'static str, cohort_cluster_tests::Job)> {
    ["tree", "dissemination"]
        .into_iter()
        .map(|allgather| {
            let mut all = vec!["--allgather", allgather];
            all.extend_from_slice(options);
            let job =
                cohort_cluster_tests::run_testprog_with(servers, servers, scenario, true, &all);
            let r = job.results();
            assert_eq!(
                r.len(),
                servers as usize - 1,
                "{allgather}: every survivor reports\nstdout:\n{}\nstderr:\n{}",
                job.stdout,
                job.stderr
            );
            assert!(
                r.windows(2).all(|w| w[0] == w[1]),
                "{allgather}: survivors disagree: {r:?}"
            );
            assert_eq!(
                job.status,
                Some(137),
                "{allgather}: the lost rank was killed:\n{}",
                job.stderr
            );
            (allgather, job)
        })
        .collect()
}

/// A construct started after a node server's loss (real servers, SIGKILL): the
/// survivors get partial success without the lost rank, all the same group, well
/// inside their 60 s timeout, with both gathering algorithms. Engine test:
/// `a_construct_started_after_a_servers_loss_completes_without_it`.
#[test]
fn a_construct_started_after_a_node_servers_loss_completes() {
    survivors_agree(4, "construct-after-loss");
}

/// The failure detector's timings for the frozen-server tests: short, so that a test
/// takes seconds, and still many heartbeats per timeout on a loaded machine.
const DETECTOR: [&str; 4] = ["--heartbeat", "0.25", "--peer-timeout", "3"];

/// A node server that freezes (SIGSTOP: it closes no connection, as when its host
/// dies or the network cuts it off) is declared lost by the server watching it, and
/// the launcher kills it: the survivors' construct, which has no timeout, ends with
/// partial success without its rank instead of waiting for ever. Four real node
/// servers, `--enable-recovery`, both gathering algorithms. Without the detector
/// (`--peer-timeout 0`) the construct hangs until the harness's deadline.
#[test]
fn a_frozen_node_server_is_declared_lost_and_the_job_goes_on() {
    for (allgather, job) in survivors_agree_with(4, "frozen-server", &DETECTOR) {
        assert!(
            job.stderr.contains("sent nothing for")
                && job.stderr.contains("declared it lost, and it was killed")
                && job.stderr.contains("--enable-recovery"),
            "{allgather}: the launcher says which node server fell silent and why:\n{}",
            job.stderr
        );
    }
}

/// Without `--enable-recovery`, a node server declared lost for its silence ends the
/// job like one that crashed: status 1, and the launcher names it.
#[test]
fn a_frozen_node_server_ends_the_job_without_recovery() {
    let mut options = vec!["--allgather", "tree"];
    options.extend_from_slice(&DETECTOR);
    let job = cohort_cluster_tests::run_testprog_with(3, 3, "frozen-server", false, &options);
    assert_eq!(job.status, Some(1), "{}", job.stderr);
    // The frozen rank is on the server after the construct's root (see the scenario).
    let frozen = (cohort_topology::rendezvous("frozen", 3) + 1) % 3;
    let says = format!("node server node{frozen} (pid ");
    assert!(
        job.stderr.contains(&says) && job.stderr.contains("sent nothing for"),
        "the launcher names the silent node server:\n{}",
        job.stderr
    );
}
