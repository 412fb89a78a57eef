//! The bootstrap (§6.4.3.2) and invite/join (§6.4.3.3) construction methods and the
//! failure paths of every method, on real node servers: each `testprog` scenario runs
//! under `cohort run` on one node server and on three. The ranks assert the documented
//! outcome themselves and exit non-zero on a violation; here we check that every rank
//! that should report did, and that the values that must agree across ranks
//! (membership, context id, status) do.
//!
//! Scenarios that kill a rank run with `--enable-recovery`; their job status is the
//! dying rank's (SIGABRT → 134), so the survivors' RESULT lines are what we check.

use cohort_cluster_tests::run_testprog;

/// Runs `scenario`, requires the exit status `status`, no failing rank, and
/// `expect_results` RESULT lines, which must all be equal when `agree`.
fn check(
    nodes: u32,
    n: u32,
    scenario: &str,
    recovery: bool,
    status: i32,
    expect: usize,
    agree: bool,
) {
    let job = run_testprog(nodes, n, scenario, recovery);
    let context = format!(
        "{scenario} on {nodes} node(s)\n--- stdout:\n{}\n--- stderr:\n{}",
        job.stdout, job.stderr
    );
    assert_eq!(job.status, Some(status), "exit status of {context}");
    assert!(
        !job.stderr.contains("FAIL rank"),
        "a rank failed: {context}"
    );
    let r = job.results();
    assert_eq!(r.len(), expect, "RESULT lines of {context}");
    if agree {
        assert!(
            r.windows(2).all(|w| w[0] == w[1]),
            "ranks disagree: {r:?}\n{context}"
        );
    }
}

/// Exit status of a job whose dying rank called abort().
const SIGABRT_STATUS: i32 = 134;

macro_rules! on_1_and_3_nodes {
    ($($name:ident: $scenario:literal, $n:literal, recovery: $rec:literal, status: $status:expr, results: $results:expr, agree: $agree:literal;)*) => {$(
        mod $name {
            use super::*;
            #[test]
            fn one_node() {
                check(1, $n, $scenario, $rec, $status, $results, $agree);
            }
            #[test]
            fn three_nodes() {
                check(3, $n, $scenario, $rec, $status, $results, $agree);
            }
        }
    )*};
}

on_1_and_3_nodes! {
    // §6.4.3.2: two leaders (rank 0 and rank 5: different nodes on 3 node servers)
    // knowing only the leader count, add-members split between them; one canonical
    // membership and context id everywhere.
    bootstrap: "bootstrap", 6, recovery: false, status: 0, results: 6, agree: true;
    // Leaders saying 2 and 3: both, the add-member already waiting and the one calling
    // after the failure fail at once with LeaderCountMismatch naming both claims.
    bootstrap_leader_count_mismatch: "bootstrap-count-mismatch", 6,
        recovery: false, status: 0, results: 4, agree: true;
    // A leader that never calls cannot be named: only the timeout ends the construct.
    bootstrap_leader_missing_times_out: "bootstrap-leader-missing", 6,
        recovery: false, status: 0, results: 5, agree: true;
    // A named add-member ends before calling, optional participation: partial success.
    bootstrap_add_member_dies_optional: "bootstrap-member-dies", 6,
        recovery: false, status: 0, results: 5, agree: true;
    // The same without optional participation: ProcTerminated naming it, for everyone.
    bootstrap_add_member_dies_required: "bootstrap-member-dies-required", 6,
        recovery: false, status: 0, results: 5, agree: true;
    // §6.4.3.3: accept from the INVITED handler with the non-blocking join (futures
    // kept and dropped), one handler registered late (cached invitation).
    invite_join_from_handler: "invite", 6, recovery: false, status: 0, results: 6, agree: true;
    // The blocking join from the application thread after the handler hands over.
    invite_blocking_join_from_app_thread: "invite-blocking-join", 6,
        recovery: false, status: 0, results: 6, agree: true;
    // A decline: DECLINED event at the leader, dropped from the membership.
    invite_decline_dropped: "invite-decline-drop", 6,
        recovery: false, status: 0, results: 5, agree: true;
    // decide_declines: the leader replaces the decliner by inviting rank 5.
    invite_decline_replaced: "invite-decline-replace", 6,
        recovery: false, status: 0, results: 5, agree: true;
    // decide_declines: completion waits for the leader's Continue.
    invite_decline_continue: "invite-decline-continue", 6,
        recovery: false, status: 0, results: 5, agree: true;
    // An invitee that never answers: Timeout naming it, for the leader and the joiners.
    invite_timeout_names_the_silent: "invite-timeout", 6,
        recovery: false, status: 0, results: 6, agree: true;
    // The leader aborts after the first accept: ConstructAborted + CONSTRUCT_ABORT.
    invite_abort_by_leader: "invite-abort", 6, recovery: false, status: 0, results: 6, agree: true;
    // An invitee ends before answering: INVITE_FAILED at the leader, group without it.
    invite_member_dies_before_answering: "invite-member-dies", 6,
        recovery: false, status: 0, results: 5, agree: true;
    // The invite leader dies: LEADER_FAILED, one claim wins (NotLeader for the next),
    // LEADER_SELECTED, and the survivors complete the group.
    invite_leader_dies_reelection: "invite-leader-dies", 6,
        recovery: true, status: SIGABRT_STATUS, results: 5, agree: true;
    // A designated collective leader dies: LEADER_FAILED, Abort → ConstructAborted.
    collective_leader_dies_abort: "construct-leader-dies-abort", 6,
        recovery: true, status: SIGABRT_STATUS, results: 4, agree: true;
    // notify-termination + designated leader: MEMBER_FAILED to the leader only, a
    // non-leader's decision is refused, Continue → PartialSuccess listing the failed.
    collective_member_dies_notify_continue: "collective-member-dies-notify", 6,
        recovery: false, status: 0, results: 5, agree: true;
    // notify-termination without a designated leader: MEMBER_FAILED to every caller,
    // any of them decides Continue.
    collective_member_dies_notify_anyone_decides: "collective-member-dies-notify-anyone", 6,
        recovery: false, status: 0, results: 5, agree: true;
}

/// Bootstrap and invite/join on 8 node servers (deeper trees, more servers between
/// the leaders, the rendezvous and the members).
mod deep_trees {
    use super::*;

    fn ok8(scenario: &str) {
        let job = run_testprog(8, 8, scenario, false);
        assert_eq!(
            job.status,
            Some(0),
            "{scenario}\n{}\n{}",
            job.stdout,
            job.stderr
        );
        let r = job.results();
        assert!(!r.is_empty(), "{scenario}: no RESULT lines\n{}", job.stderr);
        assert!(
            r.windows(2).all(|w| w[0] == w[1]) || scenario == "invite",
            "{scenario}: {r:?}"
        );
    }

    #[test]
    fn bootstrap() {
        ok8("bootstrap");
    }
    #[test]
    fn invite() {
        ok8("invite");
    }
    #[test]
    fn collective_member_dies_notify() {
        ok8("collective-member-dies-notify");
    }
}
