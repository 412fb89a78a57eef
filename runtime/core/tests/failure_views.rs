//! The local and global failure views of a group, on in-memory clusters.
//!
//! `spec/mpi3-ft-validate-local-global.txt`: "L" is the set of failed processes that
//! one process knows of (a local call; members may differ), "G" the set every active
//! process agrees on ("G = union of all L at logical time T", obtained by a collective),
//! after which each process's L is G.

use std::collections::BTreeSet;
use std::time::Duration;

use cohort_core::cluster::Cluster;
use cohort_proto::msg::{ConstructOpts, Request, Response};
use cohort_proto::{CohortError, ProcId};
use cohort_topology::{rendezvous, Tree, TreeShape};

fn local(c: &mut Cluster, rank: u32, id: &str) -> Result<Response, CohortError> {
    let q = c.request(rank, Request::FailedLocal { id: id.into() });
    c.reply(rank, q)
        .expect("the local view is answered at once")
}

fn global(c: &mut Cluster, rank: u32, id: &str, timeout_ms: Option<u64>) -> u64 {
    c.request(
        rank,
        Request::FailedGlobal {
            id: id.into(),
            timeout_ms,
        },
    )
}

fn procs(c: &Cluster, ranks: &[u32]) -> Response {
    Response::Procs(ranks.iter().map(|&r| c.proc(r)).collect())
}

/// 6 ranks on 3 servers (ranks 0-1, 2-3, 4-5), all in group `id`.
fn group_of_six(id: &str) -> Cluster {
    group_on(3, id)
}

/// Two ranks on each of `servers` servers (ranks 2n and 2n+1 on server n), all in
/// group `id`.
fn group_on(servers: u32, id: &str) -> Cluster {
    let ranks = servers * 2;
    let mut c = Cluster::new(ranks, servers, TreeShape::KAry(2));
    c.connect_all();
    let opts = ConstructOpts {
        notify_termination: true,
        ..Default::default()
    };
    let all: Vec<u32> = (0..ranks).collect();
    let reqs: Vec<u64> = (0..ranks)
        .map(|r| c.construct(r, id, &all, opts.clone()))
        .collect();
    for (r, q) in reqs.into_iter().enumerate() {
        c.group(r as u32, q);
    }
    c
}

#[test]
fn the_local_view_names_the_failed_members_known_here_and_not_those_that_left() {
    let mut c = group_of_six("g");
    assert_eq!(local(&mut c, 0, "g"), Ok(procs(&c, &[])));
    let q = c.request(5, Request::Leave { id: "g".into() });
    assert_eq!(c.reply(5, q), Some(Ok(Response::Done)));
    c.exit(3);
    c.exit(5);
    for r in [0, 1, 2, 4] {
        assert_eq!(local(&mut c, r, "g"), Ok(procs(&c, &[3])), "rank {r}");
    }
    // A lost server's processes are failed too.
    c.kill_node(2);
    assert_eq!(local(&mut c, 0, "g"), Ok(procs(&c, &[3, 4])));
}

/// A member that finalized and then ended did not fail: no view names it, on its own
/// server or another, and a global view does not wait for it (MPI's view: a process
/// past MPI_Finalize is not failed). One that ended without finalizing did fail.
#[test]
fn a_member_that_finalized_before_ending_is_in_no_view() {
    let mut c = group_of_six("g");
    for r in [2, 4] {
        let q = c.request(r, Request::Finalize);
        assert_eq!(c.reply(r, q), Some(Ok(Response::Done)));
        c.exit(r);
    }
    c.exit(5);
    for r in [0, 1, 3] {
        assert_eq!(local(&mut c, r, "g"), Ok(procs(&c, &[5])), "rank {r}");
    }
    let qs: Vec<(u32, u64)> = [0, 1, 3]
        .iter()
        .map(|&r| (r, global(&mut c, r, "g", None)))
        .collect();
    for (r, q) in qs {
        assert_eq!(c.reply(r, q), Some(Ok(procs(&c, &[5]))), "rank {r}");
    }
}

#[test]
fn a_view_of_a_group_the_caller_is_not_in_is_an_error_naming_it() {
    let mut c = Cluster::new(4, 2, TreeShape::KAry(2));
    c.connect_all();
    let reqs: Vec<u64> = (0..3)
        .map(|r| c.construct(r, "three", &[0, 1, 2], ConstructOpts::default()))
        .collect();
    c.group(0, reqs[0]);
    let proc3 = c.proc(3);
    match local(&mut c, 3, "three") {
        Err(CohortError::NotAMember { id, proc }) => {
            assert_eq!((id, proc), ("three".into(), proc3))
        }
        other => panic!("{other:?}"),
    }
    let q = global(&mut c, 3, "three", None);
    assert!(
        matches!(c.error(3, q), CohortError::NotAMember { ref id, .. } if id == "three"),
        "{:?}",
        c.reply(3, q)
    );
    assert!(matches!(
        local(&mut c, 0, "nope"),
        Err(CohortError::GroupNotFound { ref id }) if id == "nope"
    ));
}

#[test]
fn every_survivor_gets_the_same_global_view_once_all_of_them_called() {
    let mut c = group_of_six("g");
    // Rank 1 leaves, then ends: it is no member, failed or not.
    let q = c.request(1, Request::Leave { id: "g".into() });
    assert_eq!(c.reply(1, q), Some(Ok(Response::Done)));
    c.exit(1);
    c.exit(2);
    c.kill_node(2); // ranks 4 and 5
    let survivors = [0, 3];
    let q0 = global(&mut c, 0, "g", None);
    assert_eq!(c.reply(0, q0), None, "rank 3 has not called yet");
    let q3 = global(&mut c, 3, "g", None);
    for (r, q) in [(0, q0), (3, q3)] {
        assert_eq!(c.reply(r, q), Some(Ok(procs(&c, &[2, 4, 5]))), "rank {r}");
    }
    // A second agreement is a new collective: with nothing new, the same answer.
    let qs: Vec<(u32, u64)> = survivors
        .iter()
        .map(|&r| (r, global(&mut c, r, "g", None)))
        .collect();
    for (r, q) in qs {
        assert_eq!(c.reply(r, q), Some(Ok(procs(&c, &[2, 4, 5]))), "rank {r}");
    }
}

#[test]
fn a_member_dying_before_it_calls_is_not_waited_for_and_is_in_the_view() {
    let mut c = group_of_six("g");
    let qs: Vec<(u32, u64)> = [0, 1, 2, 3, 4]
        .iter()
        .map(|&r| (r, global(&mut c, r, "g", None)))
        .collect();
    assert_eq!(
        c.reply(0, qs[0].1),
        None,
        "rank 5 is alive and has not called"
    );
    c.exit(5);
    for (r, q) in qs {
        assert_eq!(c.reply(r, q), Some(Ok(procs(&c, &[5]))), "rank {r}");
    }
}

/// A member that took part and then died, whose death the deciding server has not
/// heard of when it decides, is still in every view: another member's server knew of
/// it, and G is the union of the local views.
#[test]
fn a_failure_the_deciding_server_has_not_heard_of_reaches_every_view() {
    let mut c = group_of_six("g");
    let root = rendezvous("g#0", 3) as u32;
    let (x, y) = ((root + 1) % 3, (root + 2) % 3);
    let ranks = |n: u32| [n * 2, n * 2 + 1];
    let mut qs: Vec<(u32, u64)> = ranks(x)
        .iter()
        .map(|&r| (r, global(&mut c, r, "g", None)))
        .collect();
    // x's contributions reached the root; the death of x's first rank will not.
    c.hold(x, root);
    let dead = ranks(x)[0];
    c.exit(dead);
    qs.retain(|&(r, _)| r != dead);
    for r in ranks(y) {
        assert_eq!(local(&mut c, r, "g"), Ok(procs(&c, &[dead])), "rank {r}");
    }
    for r in ranks(root) {
        assert_eq!(
            local(&mut c, r, "g"),
            Ok(procs(&c, &[])),
            "rank {r}: held back"
        );
    }
    for r in ranks(y).into_iter().chain(ranks(root)) {
        qs.push((r, global(&mut c, r, "g", None)));
    }
    for &(r, q) in &qs {
        assert_eq!(c.reply(r, q), Some(Ok(procs(&c, &[dead]))), "rank {r}");
    }
    c.release(x, root);
    // Once the held news arrives, the root's members see it locally too.
    for r in ranks(root) {
        assert_eq!(local(&mut c, r, "g"), Ok(procs(&c, &[dead])), "rank {r}");
    }
}

#[test]
fn a_live_member_that_never_calls_times_the_agreement_out_naming_it() {
    let mut c = group_of_six("g");
    let qs: Vec<(u32, u64)> = (0..5)
        .map(|r| (r, global(&mut c, r, "g", Some(500))))
        .collect();
    c.advance(Duration::from_millis(600));
    let five: ProcId = c.proc(5);
    for (r, q) in qs {
        match c.error(r, q) {
            CohortError::Timeout { missing, .. } => {
                assert_eq!(missing, vec![five.clone()], "rank {r}")
            }
            other => panic!("rank {r}: {other:?}"),
        }
    }
}

/// The server deciding an agreement is lost before it answered: every caller gets
/// `PeerLost` naming it, and calling again completes (elsewhere) with its members in
/// the view.
#[test]
fn losing_the_deciding_server_fails_the_agreement_and_a_new_call_completes() {
    let mut c = group_of_six("g");
    let root = rendezvous("g#0", 3) as u32;
    let callers: Vec<u32> = (0..6).filter(|r| r / 2 != root).collect();
    let qs: Vec<(u32, u64)> = callers
        .iter()
        .map(|&r| (r, global(&mut c, r, "g", None)))
        .collect();
    c.kill_node(root);
    for (r, q) in qs {
        match c.error(r, q) {
            CohortError::PeerLost { node, .. } => assert_eq!(node, root, "rank {r}"),
            other => panic!("rank {r}: {other:?}"),
        }
    }
    // Every survivor knows of the loss now: the next call is decided by a live server.
    let qs: Vec<(u32, u64)> = callers
        .iter()
        .map(|&r| (r, global(&mut c, r, "g", None)))
        .collect();
    for (r, q) in qs {
        assert_eq!(
            c.reply(r, q),
            Some(Ok(procs(&c, &[root * 2, root * 2 + 1]))),
            "rank {r}"
        );
    }
}

/// A call that a lost server would decide is skipped by every server that knows of the
/// loss; one that does not know yet fails it with `PeerLost` (its fabric reports the
/// loss when it sends there), and its members' next call joins the others'.
#[test]
fn a_call_the_lost_server_would_decide_is_skipped_and_the_unaware_catch_up() {
    let mut c = group_of_six("g");
    let lost = rendezvous("g#0", 3) as u32;
    let (aware, unaware) = ((lost + 1) % 3, (lost + 2) % 3);
    // Nor does the aware server's word reach it yet.
    c.hold(aware, unaware);
    c.kill_node_unnoticed_by(lost, &[unaware]);
    let ranks = |n: u32| [n * 2, n * 2 + 1];
    let view = procs(&c, &ranks(lost));
    // The unaware call first (else the others' messages would tell them).
    let failing: Vec<(u32, u64)> = ranks(unaware)
        .iter()
        .map(|&r| (r, global(&mut c, r, "g", None)))
        .collect();
    // It asks the aware server whether that completed the call (no: it skipped it).
    for &(r, q) in &failing {
        assert_eq!(c.reply(r, q), None, "rank {r}: the answer is held back");
    }
    c.release(aware, unaware);
    for (r, q) in failing {
        match c.error(r, q) {
            CohortError::PeerLost { node, .. } => assert_eq!(node, lost, "rank {r}"),
            other => panic!("rank {r}: {other:?}"),
        }
    }
    // The aware skip the first call: theirs is the unaware's second.
    let qs: Vec<(u32, u64)> = ranks(aware)
        .into_iter()
        .chain(ranks(unaware))
        .map(|r| (r, global(&mut c, r, "g", None)))
        .collect();
    for (r, q) in qs {
        assert_eq!(c.reply(r, q), Some(Ok(view.clone())), "rank {r}");
    }
}

/// The deciding server is lost after its answer reached one server but not another:
/// the other asks the live servers of the view whether they completed it, and applies
/// the view one of them got. Every member that gets an answer gets the same, and no
/// live member is left with `PeerLost` to call again alone (uniform agreement).
#[test]
fn a_view_that_reached_some_servers_before_its_root_was_lost_reaches_all() {
    let mut c = group_of_six("g");
    let root = rendezvous("g#0", 3) as u32;
    let (got, missed) = ((root + 1) % 3, (root + 2) % 3);
    c.hold(root, missed);
    let qs: Vec<(u32, u64)> = (0..6).map(|r| (r, global(&mut c, r, "g", None))).collect();
    let ranks = |n: u32| [n * 2, n * 2 + 1];
    for r in ranks(got) {
        let q = qs[r as usize].1;
        assert_eq!(c.reply(r, q), Some(Ok(procs(&c, &[]))), "rank {r}");
    }
    for r in ranks(missed) {
        assert_eq!(c.reply(r, qs[r as usize].1), None, "rank {r}: held back");
    }
    // The root is lost with its answer to `missed` still on the way.
    c.kill_node(root);
    for r in ranks(missed) {
        let q = qs[r as usize].1;
        assert_eq!(c.reply(r, q), Some(Ok(procs(&c, &[]))), "rank {r}");
    }
}

/// The deciding server and the server that passed its answer on to part of the tree are
/// both lost, the answer still on its way from the second to one of its children while
/// the others ask about it. Whatever the order, the live members all get the same: the
/// view, or `PeerLost` — never the view here and `PeerLost` there. (A single live
/// server decides: the first of the view's servers not lost; the servers that told it
/// they lack the view drop it if it still arrives.) Group ids are picked so that the
/// decider is the server that passed the answer on for one (the view wins) and another
/// server for the other (the late answer is dropped and nobody has the view).
#[test]
fn a_view_passed_on_by_a_server_lost_with_the_root_ends_alike_for_every_survivor() {
    let mut deciders = BTreeSet::new();
    for id in ["g", "h", "i", "j", "k", "l"] {
        let (decided_by_relay, outcome) = root_and_relay_lost(id);
        deciders.insert(decided_by_relay);
        assert!(
            outcome == "view" || !decided_by_relay,
            "group {id}: the decider had the view, yet: {outcome}"
        );
    }
    assert_eq!(deciders.len(), 2, "the ids cover both kinds of decider");
}

/// The scenario above for group `id` on 5 servers: whether the decider was the relay,
/// and what every survivor got ("view" or "PeerLost").
fn root_and_relay_lost(id: &str) -> (bool, &'static str) {
    let servers = 5;
    let mut c = group_on(servers, id);
    let nodes: Vec<u32> = (0..servers).collect();
    let root = rendezvous(&format!("{id}#0"), servers as usize) as u32;
    let tree = Tree::new(&nodes, root, TreeShape::KAry(2));
    let relay = tree
        .children(root)
        .into_iter()
        .find(|&n| tree.children(n).len() == 2)
        .expect("a binary tree of 5 servers has a child of the root with two children");
    let below = tree.children(relay);
    let decider = nodes.iter().copied().find(|&n| n != root).unwrap();
    // The root's answer reaches only the relay; everything the relay sends after its
    // contribution (the answer passed on, answers about it) is held back.
    for n in tree.children(root).into_iter().filter(|&n| n != relay) {
        c.hold(root, n);
    }
    for n in nodes.iter().copied().filter(|&n| n != root) {
        c.hold(relay, n);
    }
    let qs: Vec<(u32, u64)> = (0..servers * 2)
        .map(|r| (r, global(&mut c, r, id, None)))
        .collect();
    for r in [relay * 2, relay * 2 + 1] {
        let q = qs[r as usize].1;
        assert_eq!(c.reply(r, q), Some(Ok(procs(&c, &[]))), "{id}: rank {r}");
    }
    c.kill_node(root);
    // The answer the relay passed on reaches one of its children, late; then the relay
    // is lost with everything else it sent.
    c.release(relay, below[0]);
    c.kill_node(relay);
    let survivors: Vec<u32> = (0..servers * 2)
        .filter(|r| r / 2 != root && r / 2 != relay)
        .collect();
    let first = c.reply(survivors[0], qs[survivors[0] as usize].1);
    let outcome = match &first {
        Some(Ok(view)) if *view == procs(&c, &[]) => "view",
        Some(Err(CohortError::PeerLost { node, .. })) if *node == root => "PeerLost",
        other => panic!("{id}: rank {}: {other:?}", survivors[0]),
    };
    for &r in &survivors {
        assert_eq!(
            format!("{:?}", c.reply(r, qs[r as usize].1)),
            format!("{first:?}"),
            "{id}: rank {r} (server {}) and rank {} (server {}) ended differently",
            r / 2,
            survivors[0],
            survivors[0] / 2
        );
    }
    (decider == relay, outcome)
}

/// The root is lost before it decided, and so is the server that was to decide for
/// everyone after it (the first of the view's servers), before anything it sent
/// arrived: the next server decides. Every survivor gets `PeerLost` naming the root —
/// nobody had the view — and calling again gives them all the same view.
#[test]
fn the_next_server_decides_when_the_deciding_one_is_lost_too() {
    let servers = 4;
    let mut c = group_on(servers, "g");
    let root = rendezvous("g#0", servers as usize) as u32;
    let decider = (0..servers).find(|&n| n != root).unwrap();
    for n in (0..servers).filter(|&n| n != decider) {
        c.hold(decider, n);
    }
    // The root's members do not call: it cannot decide before it is lost.
    let callers: Vec<u32> = (0..servers * 2).filter(|r| r / 2 != root).collect();
    let qs: Vec<(u32, u64)> = callers
        .iter()
        .map(|&r| (r, global(&mut c, r, "g", None)))
        .collect();
    c.kill_node(root);
    for &(r, q) in &qs {
        assert_eq!(
            c.reply(r, q),
            None,
            "rank {r}: the decider's answer is held"
        );
    }
    c.kill_node(decider);
    let survivors: Vec<(u32, u64)> = qs.into_iter().filter(|(r, _)| r / 2 != decider).collect();
    for &(r, q) in &survivors {
        match c.error(r, q) {
            CohortError::PeerLost { node, .. } => assert_eq!(node, root, "rank {r}"),
            other => panic!("rank {r}: {other:?}"),
        }
    }
    let mut gone = vec![root * 2, root * 2 + 1, decider * 2, decider * 2 + 1];
    gone.sort_unstable();
    let again: Vec<(u32, u64)> = survivors
        .iter()
        .map(|&(r, _)| (r, global(&mut c, r, "g", None)))
        .collect();
    for (r, q) in again {
        assert_eq!(c.reply(r, q), Some(Ok(procs(&c, &gone))), "rank {r}");
    }
}
