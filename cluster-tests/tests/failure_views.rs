//! The failure views of a group on real node servers
//! (`spec/mpi3-ft-validate-local-global.txt`): the local view "L" is what one member's
//! node server knows, the global view "G" what every surviving member agrees on, by a
//! collective. `testprog failure-views` asserts each member's views itself (a member
//! that left is not failed; a rank ended by abort, then a whole node server killed,
//! are); here every survivor must report, all reports must be equal, and nothing may
//! hang (the harness's deadline).

use cohort_cluster_tests::run_testprog;

/// Exit status of a job whose first failing rank called abort().
const SIGABRT_STATUS: i32 = 134;

fn survivors_agree(nodes: u32, expect: &str, reports: usize) {
    let job = run_testprog(nodes, 6, "failure-views", true);
    let context = format!(
        "on {nodes} node server(s)\n--- stdout:\n{}\n--- stderr:\n{}",
        job.stdout, job.stderr
    );
    assert_eq!(job.status, Some(SIGABRT_STATUS), "exit status {context}");
    assert!(!job.stderr.contains("FAIL rank"), "a rank failed {context}");
    let r = job.results();
    assert_eq!(r.len(), reports, "RESULT lines {context}");
    assert!(
        r.iter().all(|l| l == expect),
        "expected every survivor to report {expect:?}: {r:?} {context}"
    );
}

/// One node server: rank 5 aborted, rank 3 left; ranks 0, 1, 2 and 4 agree on {5}.
#[test]
fn one_node_server() {
    survivors_agree(1, "view1=5", 4);
}

/// Three node servers: then rank 4's server (node 2) is killed; ranks 0, 1 and 2
/// agree on {4, 5}.
#[test]
fn three_node_servers_and_one_lost() {
    survivors_agree(3, "view1=5 view2=4,5", 3);
}
