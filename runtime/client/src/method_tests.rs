//! Client side of the bootstrap and invite/join methods against a scripted in-test
//! server: the requests each call sends, how replies map to results, and that a join
//! started from an event handler neither blocks the handler nor is cancelled when its
//! future is dropped.

use std::sync::{Arc, Mutex};

use std::time::Duration;

use cohort_proto::msg::{Request, Response, ServerFrame};

use crate::*;

use crate::tests::{block_on, client_with, TEST_DEADLINE};

fn p(r: u32) -> ProcId {
    ProcId::new("job", r)
}

fn group(id: &str, members: Vec<ProcId>) -> GroupResult {
    GroupResult {
        id: id.into(),
        status: ConstructStatus::Success,
        members,
        context_id: Some(3 << 16),
        group_info: Vec::new(),
        failed: Vec::new(),
    }
}

fn invited(id: &str, leader: ProcId, invitees: Vec<ProcId>) -> ServerFrame {
    ServerFrame::Event(Event {
        code: codes::GROUP_INVITED,
        source: leader.clone(),
        affected: Vec::new(),
        info: vec![
            (keys::GROUP_ID.into(), Value::Str(id.into())),
            (keys::GROUP_LEADER.into(), Value::Procs(vec![leader])),
            (keys::GROUP_MEMBERSHIP.into(), Value::Procs(invitees)),
        ],
    })
}

#[test]
fn invite_join_and_decide_send_their_requests_and_map_the_replies() {
    let (frames_tx, frames) = crossbeam_channel::unbounded();
    let not_leader = CohortError::NotLeader {
        id: "inv".into(),
        proc: p(1),
        reason: "job:0 leads".into(),
    };
    let refused = not_leader.clone();
    let (client, server) = client_with(move |s| {
        while let Some(f) = s.recv() {
            let reply = match &f.req {
                Request::Commit { .. } => None,
                Request::Invite { id, procs, .. } => {
                    let mut members = procs.clone();
                    members.insert(0, p(1));
                    Some(Ok(Response::Group(group(id, members).into())))
                }
                Request::Join {
                    id, accept: true, ..
                } if id == "wrong" => Some(Ok(Response::Done)),
                Request::Join {
                    id, accept: true, ..
                } => Some(Ok(Response::Group(group(id, vec![p(0), p(1)]).into()))),
                Request::Join { accept: false, .. } => Some(Ok(Response::Done)),
                Request::Decide {
                    decision: ConstructDecision::ClaimLeadership,
                    ..
                } => Some(Err(refused.clone())),
                Request::Decide { .. } => Some(Ok(Response::Done)),
                other => panic!("unexpected {other:?}"),
            };
            if let Some(r) = reply {
                s.reply(f.id, r);
            }
            let _ = frames_tx.send(f);
        }
    });

    // Invite carries the options verbatim and, like construct, the pending puts.
    client.put(Scope::Remote, "ep", "leader-ep").expect("put");
    let opts = InviteOpts {
        timeout_ms: Some(1500),
        assign_context_id: true,
        notify_termination: false,
        group_info: vec![("color".into(), Value::U32(4))],
        decide_declines: true,
    };
    let g = client
        .group_invite("inv", &[p(2), p(3)], opts.clone())
        .expect("invite");
    assert_eq!(g.members, vec![p(1), p(2), p(3)]);
    let f = frames.recv_timeout(TEST_DEADLINE).expect("auto commit");
    assert!(matches!(f.req, Request::Commit { .. }), "{f:?}");
    let f = frames.recv_timeout(TEST_DEADLINE).expect("invite frame");
    assert_eq!(
        f.req,
        Request::Invite {
            id: "inv".into(),
            procs: vec![p(2), p(3)],
            opts: opts.clone()
        }
    );

    // Accept → the group; decline → nothing, at once.
    let info = vec![("color".to_string(), Value::U32(9))];
    let got = client.group_join(
        "joined",
        &p(0),
        true,
        Some(Duration::from_millis(2500)),
        info.clone(),
    );
    assert_eq!(got, Ok(Some(group("joined", vec![p(0), p(1)]))));
    let f = frames.recv_timeout(TEST_DEADLINE).expect("join frame");
    assert_eq!(
        f.req,
        Request::Join {
            id: "joined".into(),
            leader: p(0),
            accept: true,
            timeout_ms: Some(2500),
            group_info: info,
        }
    );
    assert_eq!(
        client.group_join("declined", &p(0), false, None, vec![]),
        Ok(None)
    );
    let f = frames.recv_timeout(TEST_DEADLINE).expect("decline frame");
    assert!(
        matches!(
            f.req,
            Request::Join {
                accept: false,
                timeout_ms: None,
                ..
            }
        ),
        "{f:?}"
    );
    // An accept answered like a decline is a protocol error, not a silent None.
    let got = client.group_join("wrong", &p(0), true, None, vec![]);
    assert!(matches!(got, Err(CohortError::Protocol(_))), "{got:?}");
    frames.recv_timeout(TEST_DEADLINE).expect("wrong frame");

    // Decisions: Done → Ok; the server's refusal reaches the caller unchanged.
    for d in [
        ConstructDecision::Continue,
        ConstructDecision::Abort,
        ConstructDecision::Invite(vec![p(3)]),
    ] {
        client
            .group_construct_decide("inv", d.clone())
            .expect("decide");
        let f = frames.recv_timeout(TEST_DEADLINE).expect("decide frame");
        assert_eq!(
            f.req,
            Request::Decide {
                id: "inv".into(),
                decision: d
            }
        );
    }
    assert_eq!(
        client.group_construct_decide("inv", ConstructDecision::ClaimLeadership),
        Err(not_leader.clone())
    );

    // The async forms, under tokio.
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let invite = client.group_invite_async("inv2", &[p(0)], InviteOpts::default());
        let join = client.group_join_async("j2", &p(0), true, None, vec![]);
        let decline = client.group_join_async("j3", &p(0), false, None, vec![]);
        let decide = client.group_construct_decide_async("inv2", ConstructDecision::Continue);
        let claim = client.group_construct_decide_async("inv2", ConstructDecision::ClaimLeadership);
        assert_eq!(invite.await.expect("invite").members, vec![p(1), p(0)]);
        assert_eq!(join.await, Ok(Some(group("j2", vec![p(0), p(1)]))));
        assert_eq!(decline.await, Ok(None));
        assert_eq!(decide.await, Ok(()));
        assert_eq!(claim.await, Err(not_leader));
    });
    drop(client);
    server.join().expect("server");
}

#[test]
fn join_from_a_handler_returns_at_once_and_survives_a_dropped_future() {
    // The handler joins "dropped" and drops the future, and joins "kept" and stores
    // it. The server answers neither until both handler calls have returned, which
    // proves the async join does not wait for the reply.
    let (returned_tx, returned) = crossbeam_channel::unbounded::<String>();
    let (joins_tx, joins) = crossbeam_channel::unbounded();
    let (client, server) = client_with(move |s| {
        s.send(&invited("dropped", p(0), vec![p(1), p(2)]));
        s.send(&invited("kept", p(0), vec![p(1)]));
        let a = s.expect();
        let b = s.expect();
        for f in [&a, &b] {
            let _ = joins_tx.send(f.req.clone());
        }
        for _ in 0..2 {
            returned
                .recv_timeout(TEST_DEADLINE)
                .expect("the handler did not return before the join was answered");
        }
        for f in [a, b] {
            let Request::Join { id, .. } = f.req else {
                panic!("expected a join, got {:?}", f.req)
            };
            let members = vec![p(0), p(1)];
            s.reply(f.id, Ok(Response::Group(group(&id, members).into())));
        }
        // The client keeps working after a reply nobody awaits any more.
        let f = s.expect();
        assert_eq!(f.req, Request::QueryGroupNames);
        s.reply(f.id, Ok(Response::GroupNames(vec!["dropped".into()])));
        assert!(s.recv().is_none());
    });
    type Kept = std::pin::Pin<Box<dyn Future<Output = Result<Option<GroupResult>>> + Send>>;
    let kept: Arc<Mutex<Option<Kept>>> = Arc::default();
    let slot = Arc::clone(&kept);
    let (seen_tx, seen) = crossbeam_channel::unbounded();
    client.register_event_handler(Some(&[codes::GROUP_INVITED]), move |c, ev| {
        let inv = GroupEventInfo::of(ev);
        let (Some(id), Some(leader)) = (inv.id.clone(), inv.leader.clone()) else {
            return;
        };
        let fut = c.group_join_async(&id, &leader, true, Some(Duration::from_secs(5)), vec![]);
        if id == "kept" {
            *slot.lock().expect("slot") = Some(Box::pin(fut));
        } else {
            drop(fut);
        }
        let _ = returned_tx.send(id);
        let _ = seen_tx.send(inv);
    });
    let first = seen.recv_timeout(TEST_DEADLINE).expect("invitation");
    assert_eq!(
        first,
        GroupEventInfo {
            id: Some("dropped".into()),
            leader: Some(p(0)),
            membership: Some(vec![p(1), p(2)]),
            context_id: None,
        }
    );
    seen.recv_timeout(TEST_DEADLINE).expect("second invitation");
    for id in ["dropped", "kept"] {
        let req = joins.recv_timeout(TEST_DEADLINE).expect("join sent");
        assert!(
            matches!(req, Request::Join { id: ref got, accept: true, ref leader, timeout_ms: Some(5000), .. } if got == id && *leader == p(0)),
            "{req:?}"
        );
    }
    let fut = kept.lock().expect("slot").take().expect("stored future");
    let got = block_on(fut);
    assert_eq!(got, Ok(Some(group("kept", vec![p(0), p(1)]))));
    assert_eq!(client.group_names(), Ok(vec!["dropped".to_string()]));
    drop(client);
    server.join().expect("server");
}

#[test]
fn invalid_group_ids_never_reach_the_server_for_the_new_calls() {
    let (client, server) = client_with(|s| {
        let f = s.expect();
        assert_eq!(f.req, Request::QueryGroupNames);
        s.reply(f.id, Ok(Response::GroupNames(vec![])));
        assert!(s.recv().is_none());
    });
    let long = "x".repeat(256);
    let invalid = |r: Result<()>| matches!(r, Err(CohortError::InvalidGroupId { .. }));
    assert!(invalid(
        client
            .group_invite("", &[p(0)], InviteOpts::default())
            .map(|_| ())
    ));
    assert!(invalid(
        client
            .group_join(&long, &p(0), true, None, vec![])
            .map(|_| ())
    ));
    assert!(invalid(
        client.group_construct_decide("a\0b", ConstructDecision::Abort)
    ));
    assert!(invalid(
        block_on(client.group_invite_async(&long, &[p(0)], InviteOpts::default())).map(|_| ())
    ));
    assert!(invalid(
        block_on(client.group_join_async("", &p(0), false, None, vec![])).map(|_| ())
    ));
    assert!(invalid(block_on(
        client.group_construct_decide_async("", ConstructDecision::Continue)
    )));
    // Bootstrap needs nothing new: a leader passes itself and the count.
    let boot = ConstructOpts {
        bootstrap: Some(2),
        ..Default::default()
    };
    assert!(invalid(
        client.group_construct("", &[p(1)], boot).map(|_| ())
    ));
    assert_eq!(client.group_names(), Ok(vec![]));
    drop(client);
    server.join().expect("server");
}

#[test]
fn bootstrap_leader_and_add_member_requests() {
    let (frames_tx, frames) = crossbeam_channel::unbounded();
    let (client, server) = client_with(move |s| {
        while let Some(f) = s.recv() {
            if let Request::Construct { id, .. } = &f.req {
                s.reply(
                    f.id,
                    Ok(Response::Group(group(id, vec![p(0), p(1)]).into())),
                );
            }
            let _ = frames_tx.send(f);
        }
    });
    let leader = ConstructOpts {
        bootstrap: Some(2),
        add_members: vec![p(3)],
        assign_context_id: true,
        ..Default::default()
    };
    client
        .group_construct("boot", &[p(1)], leader.clone())
        .expect("leader");
    let f = frames.recv_timeout(TEST_DEADLINE).expect("frame");
    assert_eq!(
        f.req,
        Request::Construct {
            id: "boot".into(),
            procs: vec![p(1)].into(),
            opts: leader
        }
    );
    block_on(client.group_construct_async("boot2", &[], ConstructOpts::default()))
        .expect("add-member");
    let f = frames.recv_timeout(TEST_DEADLINE).expect("frame");
    assert!(
        matches!(f.req, Request::Construct { ref procs, ref opts, .. } if procs.is_empty() && opts.bootstrap.is_none()),
        "{f:?}"
    );
    drop(client);
    server.join().expect("server");
}
