
use std::time::Duration;

use cohort_core::cluster::Cluster;
use cohort_proto::event::{codes, keys};
use cohort_proto::msg::{
    ConstructDecision, ConstructOpts, ConstructStatus, InviteOpts, Request, Response,
};
use cohort_proto::value::info_get;
use cohort_proto::{CohortError, Event, ProcId, Value};
use cohort_topology::{Allgather, TreeShape};

fn cluster() -> Cluster {
    let mut c = new_cluster(6, 3, TreeShape::KAry(2));
    c.connect_all();
    c
}



fn events(c: &Cluster, rank: u32, code: i32) -> Vec<Event> {
    c.events(rank)
        .into_iter()
        .filter(|e| e.code == code)
        .collect()
}

fn bootstrap(c: &mut Cluster, rank: u32, id: &str, leaders: u32, adds: &[u32]) -> u64 {
    let opts = ConstructOpts {
        bootstrap: Some(leaders),
        assign_context_id: true,
        add_members: adds.iter().map(|&r| c.proc(r)).collect(),
        ..Default::default()
    };
    c.construct(rank, id, &[rank], opts)
}

fn add_member(c: &mut Cluster, rank: u32, id: &str) -> u64 {
    c.construct(rank, id, &[], Default::default())
}

fn invite(c: &mut Cluster, leader: u32, id: &str, invitees: &[u32], opts: InviteOpts) -> u64 {
    let procs = invitees.iter().map(|&r| c.proc(r)).collect();
    c.request(
        leader,
        Request::Invite {
            id: id.into(),
            procs,
            opts,
        },
    )
}

fn join(c: &mut Cluster, rank: u32, id: &str, leader: u32, accept: bool) -> u64 {
    let leader = c.proc(leader);
    c.request(
        rank,
        Request::Join {
            id: id.into(),
            leader,
            accept,
            timeout_ms: Some(10_000),
            group_info: vec![],
        },
    )
}

fn decide(c: &mut Cluster, rank: u32, id: &str, d: ConstructDecision) -> u64 {
    c.request(
        rank,
        Request::Decide {
            id: id.into(),
            decision: d,
        },
    )
}

fn ranks(procs: &[ProcId]) -> Vec<u32> {
    procs.iter().map(|p| p.rank).collect()
}

/// §6.4.3.2: leaders pass only themselves plus the leader count; add-members named by
/// any leader call with no procs; completion needs every leader and add-member.
#[test]
fn bootstrap_two_leaders_each_adding_members() {
    let mut c = cluster();
    let l0 = bootstrap(&mut c, 0, "bs", 2, &[1, 2]);
    let a1 = add_member(&mut c, 1, "bs");
    let a3 = add_member(&mut c, 3, "bs");
    let a2 = add_member(&mut c, 2, "bs");
    assert!(c.reply(0, l0).is_none(), "second leader missing");
    let a4 = add_member(&mut c, 4, "bs");
    let l5 = bootstrap(&mut c, 5, "bs", 2, &[3, 4]);
    let g = c.group(0, l0);
    assert_eq!(ranks(&g.members), vec![0, 1, 2, 3, 4, 5]);
    assert!(g.context_id.is_some());
    for (r, q) in [(1, a1), (2, a2), (3, a3), (4, a4), (5, l5)] {
        assert_eq!(c.group(r, q), g, "rank {r}");
    }
}

#[test]
fn bootstrap_leaders_with_different_counts_get_a_clear_error() {
    let mut c = cluster();
    let early = add_member(&mut c, 1, "bad");
    let a = bootstrap(&mut c, 0, "bad", 2, &[1, 3]);
    let b = bootstrap(&mut c, 5, "bad", 3, &[]);
    // rank 3 was named by leader 0 but calls only after the failure
    let late = add_member(&mut c, 3, "bad");
    for (r, q) in [(0, a), (5, b), (1, early), (3, late)] {
        match c.error(r, q) {
            CohortError::LeaderCountMismatch { id, a, b } => {
                assert_eq!(id, "bad");
                assert_eq!((a.1, b.1), (2, 3));
            }
            e => panic!("rank {r}: {e}"),
        }
    }
}

#[test]
fn bootstrap_add_member_dying_first_fails_or_partially_succeeds() {
    let mut c = cluster();
    c.exit(4);
    let l0 = bootstrap(&mut c, 0, "x", 1, &[2, 4]);
    let _ = add_member(&mut c, 2, "x");
    assert!(
        matches!(c.error(0, l0), CohortError::ProcTerminated { ref procs, .. } if ranks(procs) == vec![4])
    );

    let opts = ConstructOpts {
        bootstrap: Some(1),
        optional: true,
        add_members: vec![c.proc(2), c.proc(4)],
        ..Default::default()
    };
    let l0 = c.construct(0, "y", &[0], opts);
    let a2 = add_member(&mut c, 2, "y");
    let g = c.group(0, l0);
    assert_eq!(g.status, ConstructStatus::PartialSuccess);
    assert_eq!(ranks(&g.members), vec![0, 2]);
    assert_eq!(c.group(2, a2), g);
}

/// A bootstrap leader that dies before calling cannot be identified; the timeout ends
/// the construct for the others.
#[test]
fn bootstrap_missing_leader_ends_by_timeout() {
    let mut c = cluster();
    let opts = ConstructOpts {
        bootstrap: Some(2),
        timeout_ms: Some(300),
        ..Default::default()
    };
    let l0 = c.construct(0, "t", &[0], opts);
    c.exit(5);
    c.advance(Duration::from_millis(400));
    assert!(matches!(c.error(0, l0), CohortError::Timeout { .. }));
}

/// §6.4.3.3: invitations arrive as events (cached if no handler yet), the leader hears
/// each answer, returns when all answered; every member gets CONSTRUCT_COMPLETE.
/// Invite and bootstrap constructs refuse a job's namespace as a group id, as the
/// collective method does.
#[test]
fn invite_and_bootstrap_refuse_a_job_namespace_as_group_id() {
    let mut c = cluster();
    let nspace = c.job.nspace.to_string();
    let r = invite(&mut c, 0, &nspace, &[1, 2], InviteOpts::default());
    assert!(
        matches!(c.error(0, r), CohortError::InvalidGroupId { ref id, .. } if *id == nspace)
    );
    let spawned = format!("{nspace}@3");
    let r = bootstrap(&mut c, 1, &spawned, 1, &[]);
    assert!(
        matches!(c.error(1, r), CohortError::InvalidGroupId { ref id, .. } if *id == spawned)
    );
}

#[test]
fn invite_join_happy_path() {
    let mut c = cluster();
    let opts = InviteOpts {
        assign_context_id: true,
        ..Default::default()
    };
    let inv = invite(&mut c, 0, "iv", &[1, 2, 3, 4, 5], opts);
    for r in 1..6 {
        let e = events(&c, r, codes::GROUP_INVITED);
        assert_eq!(e.len(), 1, "rank {r}");
        assert_eq!(e[0].source, c.proc(0));
        assert_eq!(
            info_get(&e[0].info, keys::GROUP_ID),
            Some(&Value::Str("iv".into()))
        );
    }
    let joins: Vec<(u32, u64)> = (1..6)
        .map(|r| (r, join(&mut c, r, "iv", 0, true)))
        .collect();
    let g = c.group(0, inv);
    assert_eq!(ranks(&g.members), vec![0, 1, 2, 3, 4, 5]);
    assert_eq!(events(&c, 0, codes::GROUP_INVITE_ACCEPTED).len(), 5);
    for (r, q) in joins {
        assert_eq!(c.group(r, q), g, "rank {r}");
    }
    for r in 0..6 {
        let done = events(&c, r, codes::GROUP_CONSTRUCT_COMPLETE);
        assert_eq!(done.len(), 1, "rank {r}");
        assert_eq!(
            info_get(&done[0].info, keys::GROUP_CONTEXT_ID),
            Some(&Value::U64(g.context_id.unwrap()))
        );
    }
    // the group is usable at every member's server
    let q = c.request(3, Request::QueryGroup { id: "iv".into() });
    assert_eq!(c.group(3, q).members, g.members);
}

#[test]
fn invite_decline_is_dropped_or_replaced_by_the_leader() {
    let mut c = cluster();
    let inv = invite(&mut c, 0, "d", &[1, 2], InviteOpts::default());
    let _ = join(&mut c, 1, "d", 0, false);
    let j2 = join(&mut c, 2, "d", 0, true);
    assert_eq!(
        events(&c, 0, codes::GROUP_INVITE_DECLINED)[0].affected,
        vec![c.proc(1)]
    );
    assert_eq!(ranks(&c.group(0, inv).members), vec![0, 2]);
    assert_eq!(ranks(&c.group(2, j2).members), vec![0, 2]);

    let opts = InviteOpts {
        decide_declines: true,
        ..Default::default()
    };
    let inv = invite(&mut c, 0, "r", &[1, 2], opts);
    let d1 = join(&mut c, 1, "r", 0, false);
    assert_eq!(
        c.reply(1, d1),
        Some(Ok(Response::Done)),
        "a decline returns at once"
    );
    let j2 = join(&mut c, 2, "r", 0, true);
    assert!(c.reply(0, inv).is_none(), "waits for the leader's decision");
    let bad = decide(&mut c, 2, "r", ConstructDecision::Continue);
    assert!(matches!(c.error(2, bad), CohortError::NotLeader { .. }));
    let p5 = c.proc(5);
    let ok = decide(&mut c, 0, "r", ConstructDecision::Invite(vec![p5]));
    assert_eq!(c.reply(0, ok), Some(Ok(Response::Done)));
    assert_eq!(events(&c, 5, codes::GROUP_INVITED).len(), 1);
    let j5 = join(&mut c, 5, "r", 0, true);
    let g = c.group(0, inv);
    assert_eq!(ranks(&g.members), vec![0, 2, 5]);
    assert_eq!(c.group(2, j2), g);
    assert_eq!(c.group(5, j5), g);
}

#[test]
fn leader_abort_ends_the_invite_for_everyone() {
    let mut c = cluster();
    let inv = invite(&mut c, 0, "ab", &[1, 2, 3], InviteOpts::default());
    let j1 = join(&mut c, 1, "ab", 0, true);
    let a = decide(&mut c, 0, "ab", ConstructDecision::Abort);
    assert_eq!(c.reply(0, a), Some(Ok(Response::Done)));
    assert!(matches!(
        c.error(0, inv),
        CohortError::ConstructAborted { .. }
    ));
    assert!(matches!(
        c.error(1, j1),
        CohortError::ConstructAborted { .. }
    ));
    for r in 1..4 {
        assert_eq!(
            events(&c, r, codes::GROUP_CONSTRUCT_ABORT).len(),
            1,
            "rank {r}"
        );
    }
    // a late join after the abort is refused, not left hanging
    let late = join(&mut c, 2, "ab", 0, true);
    assert!(c.reply(2, late).is_some_and(|r| r.is_err()));
}

#[test]
fn invitee_dying_before_answering_is_reported_and_dropped() {
    let mut c = cluster();
    let inv = invite(&mut c, 0, "f", &[1, 4], InviteOpts::default());
    let j1 = join(&mut c, 1, "f", 0, true);
    c.exit(4);
    let failed = events(&c, 0, codes::GROUP_INVITE_FAILED);
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].affected, vec![c.proc(4)]);
    let g = c.group(0, inv);
    assert_eq!(ranks(&g.members), vec![0, 1]);
    assert_eq!(g.status, ConstructStatus::PartialSuccess);
    assert_eq!(c.group(1, j1), g);
}

/// Leader failure: every participant hears it; the first claim wins; LEADER_SELECTED
/// to all; the construct completes under the new leader.
#[test]
fn invite_leader_failure_and_reelection() {
    let mut c = cluster();
    let _inv = invite(&mut c, 0, "lf", &[1, 2, 3], InviteOpts::default());
    let j1 = join(&mut c, 1, "lf", 0, true);
    let j2 = join(&mut c, 2, "lf", 0, true);
    c.exit(0);
    for r in 1..4 {
        assert_eq!(
            events(&c, r, codes::GROUP_LEADER_FAILED).len(),
            1,
            "rank {r}"
        );
    }
    let early = decide(&mut c, 3, "lf", ConstructDecision::ClaimLeadership);
    assert!(
        matches!(c.error(3, early), CohortError::NotLeader { .. }),
        "must accept first"
    );
    let claim = decide(&mut c, 2, "lf", ConstructDecision::ClaimLeadership);
    assert_eq!(c.reply(2, claim), Some(Ok(Response::Done)));
    let second = decide(&mut c, 1, "lf", ConstructDecision::ClaimLeadership);
    assert!(matches!(c.error(1, second), CohortError::NotLeader { .. }));
    for r in 1..4 {
        let sel = events(&c, r, codes::GROUP_LEADER_SELECTED);
        assert_eq!(sel.len(), 1, "rank {r}");
        assert_eq!(sel[0].source, c.proc(2));
    }
    let j3 = join(&mut c, 3, "lf", 0, true);
    let g = c.group(2, j2);
    assert_eq!(ranks(&g.members), vec![1, 2, 3]);
    assert_eq!(c.group(1, j1), g);
    assert_eq!(c.group(3, j3), g);
}

#[test]
fn invite_timeout_names_the_invitees_that_never_answered() {
    let mut c = cluster();
    let opts = InviteOpts {
        timeout_ms: Some(500),
        ..Default::default()
    };
    let inv = invite(&mut c, 0, "to", &[1, 2, 3], opts);
    let j1 = join(&mut c, 1, "to", 0, true);
    c.advance(Duration::from_millis(600));
    match c.error(0, inv) {
        CohortError::Timeout { missing, .. } => assert_eq!(ranks(&missing), vec![2, 3]),
        e => panic!("{e}"),
    }
    assert!(matches!(c.error(1, j1), CohortError::Timeout { .. }));
}

/// Collective method with a designated leader and notify-termination: a member that
/// dies before calling pauses the construct; only the leader hears of it and decides.
#[test]
fn designated_leader_decides_to_continue_after_a_member_failure() {
    let mut c = cluster();
    c.exit(4);
    let all: Vec<u32> = (0..6).collect();
    let reqs: Vec<(u32, u64)> = [0, 1, 2, 3, 5]
        .iter()
        .map(|&r| {
            let opts = ConstructOpts {
                notify_termination: true,
                leader: r == 2,
                timeout_ms: Some(60_000),
                ..Default::default()
            };
            (
                r,
                c.construct(r, "nt", &all, opts),
            )
        })
        .collect();
    for r in [0, 1, 3, 5] {
        assert!(
            events(&c, r, codes::GROUP_MEMBER_FAILED).is_empty(),
            "rank {r}"
        );
    }
    let ev = events(&c, 2, codes::GROUP_MEMBER_FAILED);
    assert_eq!(ev.len(), 1);
    assert_eq!(ev[0].affected, vec![c.proc(4)]);
    assert!(c.reply(0, reqs[0].1).is_none(), "paused for the decision");
    let bad = decide(&mut c, 0, "nt", ConstructDecision::Continue);
    assert!(matches!(c.error(0, bad), CohortError::NotLeader { .. }));
    let ok = decide(&mut c, 2, "nt", ConstructDecision::Continue);
    assert_eq!(c.reply(2, ok), Some(Ok(Response::Done)));
    let g = c.group(0, reqs[0].1);
    assert_eq!(g.status, ConstructStatus::PartialSuccess);
    assert_eq!(ranks(&g.failed), vec![4]);
    for (r, q) in reqs {
        assert_eq!(c.group(r, q), g, "rank {r}");
    }
}

/// Collective method: the designated leader dies after calling; every participant
/// hears it; any participant may abort → CONSTRUCT_ABORT for the blocking callers.
#[test]
fn designated_leader_failure_then_abort() {
    let mut c = cluster();
    let all: Vec<u32> = (0..6).collect();
    let mk = |leader: bool| ConstructOpts {
        notify_termination: true,
        leader,
        timeout_ms: Some(60_000),
        ..Default::default()
    };
    let l = c.construct(0, "la", &all, mk(true));
    let _ = l;
    let reqs: Vec<(u32, u64)> = [1, 2, 3]
        .iter()
        .map(|&r| {
            (
                r,
                c.construct(r, "la", &all, mk(false)),
            )
        })
        .collect();
    c.exit(0);
    for r in 1..6 {
        assert_eq!(
            events(&c, r, codes::GROUP_LEADER_FAILED).len(),
            1,
            "rank {r}"
        );
    }
    let a = decide(&mut c, 3, "la", ConstructDecision::Abort);
    assert_eq!(c.reply(3, a), Some(Ok(Response::Done)));
    for (r, q) in reqs {
        assert!(
            matches!(c.error(r, q), CohortError::ConstructAborted { .. }),
            "rank {r}"
        );
    }
    for r in 1..6 {
        assert_eq!(
            events(&c, r, codes::GROUP_CONSTRUCT_ABORT).len(),
            1,
            "rank {r}"
        );
    }
    // ranks that had not called yet get the same outcome when they do
    let late = c.construct(4, "la", &all, mk(false));
    assert!(matches!(
        c.error(4, late),
        CohortError::ConstructAborted { .. }
    ));
}

#[test]
fn join_without_an_invitation_is_refused() {
    let mut c = cluster();
    let j = join(&mut c, 3, "nobody", 0, true);
    assert!(c.reply(3, j).is_some_and(|r| r.is_err()));
    let inv = invite(&mut c, 0, "only1", &[1], InviteOpts::default());
    let j = join(&mut c, 3, "only1", 0, true);
    assert!(matches!(c.error(3, j), CohortError::NotAMember { .. }));
    let j1 = join(&mut c, 1, "only1", 0, true);
    assert_eq!(ranks(&c.group(0, inv).members), vec![0, 1]);
    assert_eq!(ranks(&c.group(1, j1).members), vec![0, 1]);
}

/// A decision or a join whose answering server is already known lost is answered at
/// once, not left waiting: found by the schedule exploration (`schedules.rs`). A
/// decision goes to the construct's root, the group id's rendezvous server: when that
/// is known lost, to the id's next one, which has no such construct in progress (it
/// failed with `PeerLost` at its participants) and says so.
#[test]
fn requests_to_a_server_already_lost_fail_at_once() {
    // Server 2 is lost, and it is the first pick of some of these ids.
    let mut root_lost = 0;
    for id in ["d0", "d1", "d2", "d3", "d4", "d5", "d6", "d7"] {
        let mut c = cluster();
        let all: Vec<u32> = (0..6).collect();
        let mut reqs = Vec::new();
        for r in [2, 3] {
            let opts = ConstructOpts {
                leader: r == 2,
                timeout_ms: Some(60_000),
                ..Default::default()
            };
            reqs.push(c.construct(r, id, &all, opts));
        }
        c.kill_node(2);
        let d = decide(&mut c, 2, id, ConstructDecision::Continue);
        let first_pick_lost = cohort_topology::rendezvous(id, 3) == 2;
        match c.reply(2, d) {
            // Sent to the next one (this server knew of the loss), or to server 2 (it
            // did not yet: the loss fails it).
            Some(Err(e @ (CohortError::BadRequest(_) | CohortError::PeerLost { node: 2, .. })))
                if first_pick_lost =>
            {
                if let CohortError::BadRequest(why) = &e {
                    assert!(why.contains(id), "{id}: {why}");
                }
                for (r, q) in [2, 3].into_iter().zip(reqs) {
                    assert!(
                        matches!(c.error(r, q), CohortError::PeerLost { node: 2, .. }),
                        "{id}: rank {r}"
                    );
                }
                root_lost += 1;
            }
            Some(other) => assert!(!first_pick_lost, "{id}: {other:?}"), // a live root answered
            None => panic!("{id}: the decision was not answered"),
        }
    }
    assert!(root_lost > 0, "server 2 was the first pick of none of the ids");
    // The join goes to the leader's server.
    let mut c = cluster();
    invite(&mut c, 0, "iv", &[3], InviteOpts::default());
    c.kill_node(0);
    let j = join(&mut c, 3, "iv", 0, true);
    assert!(
        matches!(c.error(3, j), CohortError::PeerLost { node: 0, .. }),
        "{:?}",
        c.reply(3, j)
    );
    for e in &c.engines[1..] {
        assert_eq!(e.invite_bookkeeping(), 0, "node {}", e.node());
    }
}

/// An invitee's server forgets the invite when the leader's server is lost before the
/// outcome (the outcome, which would have cleared it, cannot come): its accepting
/// joiner fails naming the lost server. (A decline keeps nothing to forget.)
#[test]
fn a_lost_leader_servers_invites_are_forgotten() {
    let mut c = cluster();
    invite(&mut c, 0, "iv", &[3, 5], InviteOpts::default());
    // Rank 5 has not answered yet: the invite is still open.
    let j = join(&mut c, 3, "iv", 0, true);
    assert_eq!(c.reply(3, j), None, "waits for the invite's outcome");
    c.kill_node(0);
    assert!(
        matches!(c.error(3, j), CohortError::PeerLost { node: 0, .. }),
        "{:?}",
        c.reply(3, j)
    );
    for e in &c.engines[1..] {
        assert_eq!(e.invite_bookkeeping(), 0, "node {}", e.node());
        assert_eq!(e.collectives_in_progress(), 0, "node {}", e.node());
    }
}

/// Add-members of a construct whose root is lost end at their own timeout, with
/// nothing left behind (they sent their aborts to the lost root and kept their
/// trackers, answering only after the abort grace): found by the schedule exploration.
/// Group "bs"'s rendezvous server is server 2 in this cluster.
#[test]
fn add_members_of_a_lost_root_end_at_their_timeout() {
    let mut c = cluster();
    c.kill_node(2);
    let l0 = bootstrap(&mut c, 0, "bs", 2, &[1, 2, 3]);
    assert!(
        matches!(c.error(0, l0), CohortError::PeerLost { node: 2, .. }),
        "the root of \"bs\" is server 2 here: {:?}",
        c.reply(0, l0)
    );
    let opts = || ConstructOpts {
        timeout_ms: Some(1_000),
        ..Default::default()
    };
    let joins: Vec<(u32, u64)> = [1, 2, 3]
        .iter()
        .map(|&r| (r, c.construct(r, "bs", &[], opts())))
        .collect();
    c.advance(Duration::from_millis(1_200));
    for (r, j) in joins {
        assert!(matches!(c.reply(r, j), Some(Err(_))), "rank {r}: {:?}", c.reply(r, j));
    }
    for e in &c.engines[..2] {
        assert_eq!(e.collectives_in_progress(), 0, "node {}", e.node());
    }
}

/// A notify-termination construct paused for a decision about failed participants ends
/// when every participant is gone (nobody is left to decide), instead of staying at its
/// root for ever: found by the schedule exploration.
#[test]
fn a_construct_whose_participants_are_all_gone_ends() {
    for id in ["n0", "n1", "n2", "n3", "n4", "n5", "n6", "n7"] {
        let mut c = cluster();
        let leaders = [0u32, 1, 4, 5];
        for r in [0u32, 1] {
            let opts = ConstructOpts {
                notify_termination: true,
                ..Default::default()
            };
            c.construct(r, id, &leaders, opts);
        }
        c.kill_node(2);
        c.kill_node(0);
        c.advance(Duration::from_secs(1));
        assert_eq!(c.engines[1].collectives_in_progress(), 0, "{id}");
    }
}

/// Nothing is left behind on any server once an invite completes or fails.
#[test]
fn invites_leave_no_state_behind() {
    let mut c = cluster();
    let inv = invite(&mut c, 0, "clean", &[1, 3, 5], InviteOpts::default());
    for r in [1, 3, 5] {
        join(&mut c, r, "clean", 0, true);
    }
    c.group(0, inv);
    let inv = invite(
        &mut c,
        0,
        "gone",
        &[2, 4],
        InviteOpts {
            timeout_ms: Some(100),
            ..Default::default()
        },
    );
    join(&mut c, 2, "gone", 0, true);
    c.advance(Duration::from_millis(200));
    assert!(matches!(c.error(0, inv), CohortError::Timeout { .. }));
    // Refused joins, at another server than the leader's: to an invite that does not
    // exist, and to one that named others.
    let j = join(&mut c, 3, "nobody", 0, true);
    assert!(matches!(c.error(3, j), CohortError::BadRequest(_)));
    let inv = invite(&mut c, 0, "only1", &[1], InviteOpts::default());
    let j = join(&mut c, 5, "only1", 0, true);
    assert!(matches!(c.error(5, j), CohortError::NotAMember { .. }));
    join(&mut c, 1, "only1", 0, true);
    c.group(0, inv);
    // A decline, at another server, of an invite that does not exist: answered at
    // once, nothing kept (its server used to keep the invite's home).
    let j = join(&mut c, 3, "nobody", 0, false);
    assert_eq!(c.reply(3, j), Some(Ok(Response::Done)));
    // An invitee that accepted and then terminated: the outcome still goes to its
    // server, which forgets the invite (it used to keep its home and tracker, as only
    // live participants' servers got the outcome).
    let inv = invite(&mut c, 0, "left", &[2, 4], InviteOpts::default());
    join(&mut c, 2, "left", 0, true);
    c.exit(2);
    join(&mut c, 4, "left", 0, true);
    assert_eq!(c.group(0, inv).members, vec![c.proc(0), c.proc(2), c.proc(4)]);
    for e in &c.engines {
        assert_eq!(e.collectives_in_progress(), 0, "node {}", e.node());
        assert_eq!(e.invite_bookkeeping(), 0, "node {}", e.node());
    }
}

/// group-construction-methods §6.4.3.3: the invite's timeout bounds the whole
/// construct. The leader dies, nobody claims leadership or aborts, and no invitee waits
/// (none has answered): the invite still ends at its timeout, and an invitee answering
/// after that is refused. It used to stay at the leader's server for ever (the timeout
/// was the leader's own wait, gone with it).
#[test]
fn an_invite_whose_leader_died_ends_at_its_timeout() {
    let mut c = cluster();
    invite(
        &mut c,
        0,
        "orphan",
        &[2, 4],
        InviteOpts {
            timeout_ms: Some(1_000),
            ..Default::default()
        },
    );
    c.exit(0);
    assert_eq!(c.engines[0].invite_bookkeeping(), 1, "waiting for a claim");
    c.advance(Duration::from_millis(1_500));
    for e in &c.engines {
        assert_eq!(e.collectives_in_progress(), 0, "node {}", e.node());
        assert_eq!(e.invite_bookkeeping(), 0, "node {}", e.node());
    }
    let j = join(&mut c, 2, "orphan", 0, true);
    assert!(matches!(c.error(2, j), CohortError::BadRequest(_)));
}

/// A cluster whose engines gather by the including test file's `ALLGATHER`.
fn new_cluster(n: u32, m: u32, shape: TreeShape) -> Cluster {
    // `COHORT_TEST_LOG=cohort_core=debug` prints the engines' logs, each line under
    // its server (`server{n=…}`): for one test, or one schedule seed, at a time.
    if let Ok(filter) = std::env::var("COHORT_TEST_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_test_writer()
            .try_init();
    }
    Cluster::with_allgather(n, m, shape, ALLGATHER)
}
