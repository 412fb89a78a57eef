//! The failure detector end to end: node servers that fall silent without closing a
//! connection — frozen, or cut off by the network — are declared lost by the server
//! watching them, judged by the launcher, killed, and routed around by the others.
//! Real `cohortd` processes; the detector's state machine is `cohort_core::detector`.

use std::process::{Command, Stdio};

use cohort_cluster_tests::{
    cohort_bin, cohortd_bin, example, run_testprog_with, server_warnings, survivors_agree,
    survivors_agree_by, text, CohortRun, Job, DEADLINE,
};

/// The failure detector's timings for these tests: short, so that a test takes
/// seconds, and still twelve heartbeats per timeout on a loaded machine.
const DETECTOR: [&str; 4] = ["--heartbeat", "0.25", "--peer-timeout", "3"];

/// A node server that freezes (SIGSTOP: it closes no connection, as when its host
/// dies) is declared lost by the server watching it; it does not answer the launcher's
/// question, and the launcher kills it: the
/// survivors' construct, which has no timeout, ends with partial success without its
/// rank instead of waiting for ever. Four real node servers, `--enable-recovery`, both
/// gathering algorithms. Without the detector (`--peer-timeout 0`) the construct hangs
/// until the harness's deadline.
#[test]
fn a_frozen_node_server_is_declared_lost_and_the_job_goes_on() {
    for (allgather, job) in survivors_agree(4, "frozen-server", &DETECTOR) {
        assert!(
            job.stderr.contains("sent nothing for")
                && job
                    .stderr
                    .contains("declared it lost and it did not answer (frozen")
                && job.stderr.contains("--enable-recovery"),
            "{allgather}: the launcher says which node server fell silent and why:\n{}",
            job.stderr
        );
        assert_eq!(
            server_warnings(&job.stderr),
            Vec::<&str>::new(),
            "{allgather}: the launcher's verdict is the one report"
        );
    }
}

/// Two neighbouring node servers frozen at once (five servers; their rack lost power):
/// the outer one's watcher reports it, and it does not answer the launcher. The inner
/// one's watcher is the outer one, so the ring would find it a timeout later; instead
/// the launcher, having found one server that does not answer, asks every other, and
/// the inner one goes too for not answering. Nobody else does, and the three others
/// agree on a group without their ranks.
#[test]
fn two_neighbouring_frozen_node_servers_are_found_together() {
    let inner = silenced("two-frozen", 5);
    let outer = (inner + 1) % 5;
    let jobs = survivors_agree_by(5, 2, |alg| {
        let mut options = vec!["--allgather", alg];
        options.extend_from_slice(&DETECTOR);
        run_testprog_with(5, 5, "two-frozen", true, &options)
    });
    for (allgather, job) in jobs {
        let lost = killed(&job);
        let says = |x: usize, what: &str| {
            lost.iter()
                .any(|l| l.contains(&format!("node server node{x} (pid ")) && l.contains(what))
        };
        assert!(
            lost.len() == 2
                && says(outer, "declared it lost and it did not answer (frozen")
                && says(
                    inner,
                    &format!("when asked after node{outer} was found silent"),
                ),
            "{allgather}: node{outer} is reported and node{inner} found by the sweep:\n{}",
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
    let job = run_testprog_with(3, 3, "frozen-server", false, &options);
    assert_eq!(job.status, Some(1), "{}", job.stderr);
    let says = format!("node server node{} (pid ", silenced("frozen", 3));
    assert!(
        job.stderr.contains(&says) && job.stderr.contains("sent nothing for"),
        "the launcher names the silent node server:\n{}",
        job.stderr
    );
}

/// A node server cut off by the network (every packet to and from its fabric address
/// dropped; its process runs on): its connections stall without breaking, and it
/// hears from nobody, so it reports the server it watches as silent at about the time
/// its own watcher reports it. The launcher asks both accused servers: the one cut off
/// answers that it heard from nobody, the other that it heard from its neighbour a
/// moment ago. So the one cut off alone is killed, and the three others agree on a
/// group without its rank. Run in a network namespace of its own (`unshare --net`,
/// root only), where the construct's root rank cuts the server off with
/// `ip rule … blackhole`.
#[test]
fn a_node_server_cut_off_by_the_network_is_the_only_one_lost() {
    if !root() {
        return;
    }
    let cut = silenced("cut-off", 4);
    for (allgather, job) in survivors_agree_by(4, 1, |alg| in_own_netns(4, "cut-off", alg)) {
        let lost = killed(&job);
        assert!(
            lost.len() == 1
                && lost[0].contains(&format!("node server node{cut} (pid "))
                && (lost[0].contains("(cut off); killed")
                    || lost[0].contains("and it reached 0 other node server(s)")),
            "{allgather}: node{cut} alone is lost:\n{}",
            job.stderr
        );
    }
}

/// Two neighbouring node servers cut off at once (five servers): each hears nobody and
/// reports the server it watches, the outer one reporting the inner one. The outer one
/// answers the launcher that it heard from nobody and is killed; then its watcher
/// watches the inner one, which is killed as cut off too (also when a survivor's
/// connection attempt to it failed first and the survivors route around it already:
/// the watch goes on until the launcher's verdict); no other is. The three others
/// agree on a group without their ranks. Root only, as above.
#[test]
fn two_neighbouring_node_servers_cut_off_are_lost_and_nobody_else() {
    if !root() {
        return;
    }
    let first = silenced("two-cut-off", 5);
    let cut = [first, (first + 1) % 5];
    for (allgather, job) in survivors_agree_by(5, 2, |alg| in_own_netns(5, "two-cut-off", alg)) {
        let lost = killed(&job);
        let named = |x: usize| {
            lost.iter()
                .any(|l| l.contains(&format!("node server node{x} (pid ")))
        };
        assert!(
            lost.len() == 2 && cut.iter().all(|&x| named(x)),
            "{allgather}: node{} and node{} alone are lost:\n{}",
            cut[0],
            cut[1],
            job.stderr
        );
    }
}

/// A partial partition: the construct's root server and the next one cut apart, each
/// still reaching every other server (and the latter's watcher still hearing it).
/// Their fabric connections stall and break after the peer timeout (TCP_USER_TIMEOUT):
/// reported to the launcher, not acted upon (either may be the one cut off). The
/// launcher surveys both; each reaches the two others, so the one with the higher node
/// id goes, and nobody else: the three others agree on a group without its rank.
/// Without this, the construct waited for ever for the stalled link. Root only, as
/// above.
#[test]
fn of_two_node_servers_cut_apart_one_is_lost_and_nobody_else() {
    if !root() {
        return;
    }
    let cut = silenced("cut-apart", 4);
    let root_server = (cut + 3) % 4;
    for (allgather, job) in survivors_agree_by(4, 1, |alg| in_own_netns(4, "cut-apart", alg)) {
        let lost = killed(&job);
        assert!(
            lost.len() == 1
                && lost[0].contains(&format!("node server node{cut} (pid "))
                && lost[0].contains(&format!("cannot use both it and node{root_server}"))
                && lost[0].contains("each reached 2 other node server(s)"),
            "{allgather}: node{cut} alone is lost, cut apart from node{root_server}:\n{}",
            job.stderr
        );
    }
}

/// The launcher's lines about node servers it killed.
fn killed(job: &Job) -> Vec<&str> {
    job.stderr
        .lines()
        .filter(|l| l.contains("; killed"))
        .collect()
}

/// Whether this test runs as root (a network namespace of its own needs it); says so
/// when not.
fn root() -> bool {
    // SAFETY: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    if !root {
        eprintln!("SKIPPED: a network namespace of its own needs root");
    }
    root
}

/// The first node whose server testprog's `silent_servers` silences: the one after the
/// construct's root.
fn silenced(gid: &str, servers: u32) -> usize {
    (cohort_topology::rendezvous(gid, servers as usize) + 1) % servers as usize
}

/// testprog `scenario` on `servers` node servers (one rank each, recovery,
/// [`DETECTOR`]) inside a new network namespace whose loopback is up and whose `local`
/// routing table is looked up after preference 11, so that the blackhole rules win.
fn in_own_netns(servers: u32, scenario: &str, allgather: &str) -> Job {
    const SETUP: &str = "ip link set lo up && ip rule add pref 100 lookup local \
                         && ip rule del pref 0 && exec \"$0\" \"$@\"";
    let n = servers.to_string();
    let mut cmd = Command::new("unshare");
    cmd.args(["--net", "--", "sh", "-c", SETUP])
        .arg(cohort_bin())
        .args(["run", "--nodes", &n, "-n", &n, "--enable-recovery"])
        .args(["--allgather", allgather])
        .args(DETECTOR)
        .arg(example("testprog"))
        .arg(scenario)
        .env("COHORT_DAEMON", cohortd_bin())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let out = CohortRun::spawn(cmd).wait(DEADLINE);
    Job {
        status: out.status.code(),
        stdout: text(&out.stdout),
        stderr: text(&out.stderr),
    }
}
