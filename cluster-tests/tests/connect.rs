//! PMIx_Connect / PMIx_Disconnect (../shared/spec/rfc0003-connect-disconnect.md) on real
//! node servers: every scenario of the `connectprog` rank program runs under
//! `cohort run -n 6` on one node server and on three. The ranks assert the documented
//! behaviour themselves and exit non-zero on a violation; here we check that every rank
//! succeeded (or, where a rank is killed, every survivor) and that what must agree
//! across ranks — the new nspace, the ranks in it — does. Deadlines only catch hangs;
//! nothing here asserts a duration.

use std::collections::BTreeSet;

use cohort_cluster_tests::{run_example, Job};

fn run(nodes: u32, scenario: &str, recovery: bool) -> Job {
    run_example("connectprog", nodes, 6, scenario, recovery, &[])
}

/// Runs `scenario`, requires success and `expect` RESULT lines, all equal.
fn agreed(nodes: u32, scenario: &str, expect: usize) -> Vec<String> {
    let r = run(nodes, scenario, false)
        .succeeded_with(&format!("{scenario} on {nodes} node(s)"), expect);
    assert!(
        r.windows(2).all(|w| w[0] == w[1]),
        "{scenario} on {nodes} node(s): ranks disagree: {r:?}"
    );
    r
}

/// The value of `key=` in a line.
fn field<'a>(line: &'a str, key: &str) -> &'a str {
    line.split_whitespace()
        .find_map(|w| w.strip_prefix(key).and_then(|w| w.strip_prefix('=')))
        .unwrap_or_else(|| panic!("no {key}= in {line:?}"))
}

macro_rules! on_1_and_3_nodes {
    ($($name:ident($nodes:ident) $body:block)*) => {$(
        mod $name {
            use super::*;
            #[test]
            fn one_node() {
                let $nodes = 1;
                $body
            }
            #[test]
            fn three_nodes() {
                let $nodes = 3;
                $body
            }
        }
    )*};
}

on_1_and_3_nodes! {
    // rfc0003 PMIx_Connect over ranks 1, 2, 4, 5 (listed in different orders, with a
    // duplicate): every member reports the same new nspace, and its rank in it is its
    // index in the canonical membership; fence, get and notify through the nspace
    // work, and after disconnect it addresses nothing (checked inside the ranks).
    subset_agrees_on_nspace_and_ranks(nodes) {
        let job = run(nodes, "subset", false);
        assert_eq!(job.status, Some(0), "{}\n{}", job.stdout, job.stderr);
        let members = [1u32, 2, 4, 5];
        let all = job.results();
        assert_eq!(all.len(), 6, "{all:?}");
        let (outsiders, r): (Vec<String>, Vec<String>) =
            all.into_iter().partition(|l| l == "outsider");
        assert_eq!(outsiders.len(), 2, "{r:?}");
        assert!(r.windows(2).all(|w| w[0] == w[1]), "{r:?}");
        assert_eq!(field(&r[0], "members"), "1,2,4,5");
        let ranks = job.lines("RANK ");
        assert_eq!(ranks.len(), 4, "{ranks:?}");
        let nspaces: BTreeSet<&str> = ranks.iter().map(|l| field(l, "ns")).collect();
        assert_eq!(nspaces.len(), 1, "one nspace: {ranks:?}");
        assert_eq!(nspaces.first().copied(), Some(field(&r[0], "ns")));
        let mut seen = BTreeSet::new();
        for l in &ranks {
            let job_rank: u32 = field(l, "job").parse().unwrap();
            let rank: usize = field(l, "rank").parse().unwrap();
            assert_eq!(members[rank], job_rank, "rank in the nspace is the index: {l}");
            assert!(seen.insert(rank), "rank {rank} twice: {ranks:?}");
        }
    }

    // Two connects of the same processes one after the other (no connect id, the
    // first still connected), then a third after disconnecting both: three nspaces.
    sequential_connects_get_their_own_nspaces(nodes) {
        let r = agreed(nodes, "sequential", 6);
        let ns: BTreeSet<&str> = field(&r[0], "ns").split(',').collect();
        assert_eq!(ns.len(), 3, "{r:?}");
    }

    // rfc0003 PMIX_CONNECT_ID: two connects of the same processes in flight together.
    parallel_connects_told_apart_by_connect_id(nodes) {
        let r = agreed(nodes, "parallel", 6);
        assert_ne!(field(&r[0], "x"), field(&r[0], "y"), "{r:?}");
    }

    // PMIX_TIMEOUT: a Timeout naming the rank that never called, at every other rank.
    timeout_names_who_never_called(nodes) {
        agreed(nodes, "timeout", 5);
    }

    // Default: a listed rank ending without connecting fails the connect (naming it);
    // PMIX_CONNECT_OPTIONAL: partial success without it.
    optional_participation_gives_a_partial_connection(nodes) {
        let r = agreed(nodes, "optional", 5);
        assert_eq!(field(&r[0], "members"), "0,1,2,3,4");
    }

    // PMIX_CONNECT_XCHG_ONLY: data exchanged, no nspace or rank.
    exchange_only_assigns_no_nspace(nodes) {
        agreed(nodes, "xchg", 6);
    }

    // PMIX_CONNECT_NOTIFY_EACH: PROC_HAS_CONNECTED / PROC_HAS_DISCONNECTED from
    // every other participant.
    notify_each_raises_connect_and_disconnect_events(nodes) {
        agreed(nodes, "notify-each", 6);
    }

    // Empty list, unknown proc, unknown nspace, caller not listed, unknown nspace on
    // disconnect, a plain group on disconnect, leave of a connection: typed errors.
    bad_input_gets_typed_errors(nodes) {
        agreed(nodes, "badinput", 6);
    }

    // A member killed while connected, on a strict connection and on one with
    // PMIX_CONNECT_EARLY_TERM_ALLOWED. rfc0003 PMIx_Disconnect: "Processes that
    // terminate while connected to other processes will generate a termination error
    // event that will be reported to any process in the connected group that has
    // registered for such events"; PMIx_Connect: "All processes are required to
    // disconnect from the nspace prior to terminating unless the
    // PMIX_CONNECT_EARLY_TERM_ALLOWED directive is provided", and disconnect is
    // collective (sets-and-groups §Destruct procedure: "members remain a part of the
    // assemblage until all members have called PMIx_Disconnect_nb"). So every
    // survivor gets PROC_TERMINATED for the strict nspace and none for the other, its
    // disconnect of the strict connection fails with ProcTerminated naming the dead
    // rank, and its disconnect of the early-term one completes.
    member_killed_while_connected(nodes) {
        let job = run(nodes, "killed", true);
        assert_eq!(
            job.status,
            Some(134),
            "SIGABRT of the killed rank is the job status\n{}\n{}",
            job.stdout,
            job.stderr
        );
        let r = job.results();
        assert_eq!(r.len(), 5, "every survivor reports\n{}\n{}", job.stdout, job.stderr);
        assert!(r.windows(2).all(|w| w[0] == w[1]), "survivors disagree: {r:?}");
    }
}
