//! Switch-aware collective trees end to end: `cohort run --topology FILE` hands a
//! Slurm `topology.conf` to every node server, which then builds its fence and group
//! trees switch leaders first; a topology.conf next to `$SLURM_CONF` is picked up
//! without the flag; a malformed file stops `cohort run` before anything starts.

use std::path::Path;
use std::process::Output;

use cohort_cluster_tests::{
    cohort_command, describe, example, run_cohort, server_warnings, survivors_agree, text,
    CohortRun, TempDir, DEADLINE,
};

/// node0..node5 on two leaf switches under one top switch.
const TOPOLOGY: &str = "\
# two racks of three
SwitchName=s1  Nodes=node[0-2]
SwitchName=s2  Nodes=node[3-5]  LinkSpeed=100
SwitchName=top Switches=s[1-2]
";

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
    for (allgather, job) in survivors_agree(8, "lost-interior", &[]) {
        assert!(
            job.stderr.contains("its ranks") && job.stderr.contains("--enable-recovery"),
            "{allgather}: the launcher reports the lost node server:\n{}",
            job.stderr
        );
    }
}

/// A construct started after a node server's loss (real servers, SIGKILL): the
/// survivors get partial success without the lost rank, all the same group, well
/// inside their 60 s timeout, with both gathering algorithms. Engine test:
/// `a_construct_started_after_a_servers_loss_completes_without_it`.
#[test]
fn a_construct_started_after_a_node_servers_loss_completes() {
    for (allgather, job) in survivors_agree(4, "construct-after-loss", &[]) {
        // The launcher says it once; the servers that saw it log at info only.
        assert!(
            job.stderr.contains("its ranks") && server_warnings(&job.stderr).is_empty(),
            "{allgather}: one loss, reported once, by the launcher:\n{}",
            job.stderr
        );
    }
}

/// A construct started after the loss of its group id's rendezvous node server (its
/// root; real servers, SIGKILL) meets at the id's next one: the survivors get partial
/// success without the lost rank, all the same group, with both gathering algorithms.
/// Engine tests: `an_id_whose_rendezvous_is_lost_meets_at_the_next_one` and the
/// schedule explorer.
#[test]
fn a_construct_whose_rendezvous_server_was_lost_meets_at_the_next_one() {
    for (allgather, job) in survivors_agree(4, "construct-after-rendezvous-loss", &[]) {
        assert!(
            server_warnings(&job.stderr).is_empty(),
            "{allgather}: one loss, reported once, by the launcher:\n{}",
            job.stderr
        );
    }
}

/// The job's published data is the launcher's: losing node server 0 (SIGKILL)
/// keeps what its rank published and the survivors' lookups, which wait without a
/// timeout and are answered by a publish made after the loss. Engine test:
/// `a_node_servers_loss_keeps_the_data_and_the_others_lookups`.
#[test]
fn published_data_and_waiting_lookups_outlive_a_node_server() {
    survivors_agree(3, "publish-after-loss", &[]);
}
