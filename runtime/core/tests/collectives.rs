//! Engine behaviour on in-memory clusters: the same state machines the node servers run,
//! with every message delivered and every timer fired deterministically.
//! Spec references are to ../shared/spec/.
//!
//! The suite (`suite/collectives.rs`) runs here with the tree collective, and again in
//! `collectives_dissemination.rs` with the dissemination allgather.

const ALLGATHER: Allgather = Allgather::Tree;
include!("suite/collectives.rs");

/// A server passes an outcome (which holds every member's data) to all its tree
/// children as one message object: the node server encodes it once and sends the same
/// bytes to each child, instead of cloning and encoding it per child.
#[test]
fn an_outcome_goes_to_all_children_as_one_message() {
    // 7 servers in a 2-ary tree: 6 contributions go up, and the 3 servers with
    // children (whichever the root) send the outcome down to 2 children each.
    let mut c = Cluster::new(7, 7, TreeShape::KAry(2));
    c.connect_all();
    let reqs = c.fence_all(true);
    for r in 0..7 {
        assert_eq!(c.reply(r, reqs[r as usize]), Some(Ok(Response::Done)));
    }
    assert_eq!(c.sent.iter().sum::<u64>(), 6 + 6, "messages: {:?}", c.sent);
    assert_eq!(
        c.peer_actions.iter().sum::<u64>(),
        6 + 3,
        "one outcome message per server with children: {:?}",
        c.peer_actions
    );
}

/// "A dead peer turns into an error or an event, never a hang" (DESIGN.md). The root
/// fails a construct (a required participant terminated) and passes the failure down to
/// an interior server x, which is lost before passing it on to its children. The
/// children's contributions (re-sent to the root past x) and their aborts reach the
/// root after the failure: messages of an attempt the root already failed. The root
/// tells them the failure directly, since it did not tell them itself; it used to drop
/// them, and the children's ranks (no timeout) waited for ever.
#[test]
fn children_of_a_server_lost_with_a_failure_get_it_from_the_root() {
    let id = "lost-failure";
    let (root, x, kids) = interior(id);
    let mut c = Cluster::new(7, 7, TreeShape::KAry(2));
    c.connect_all();
    let y = (0..7)
        .find(|n| *n != root && *n != x && !kids.contains(n))
        .expect("7 servers");
    for &k in &kids {
        c.hold(x, k);
        c.hold(k, root);
    }
    let all: Vec<u32> = (0..7).collect();
    let reqs: Vec<(u32, u64)> = (0..7)
        .filter(|&r| r != y)
        .map(|r| (r, c.construct(r, id, &all, ConstructOpts::default())))
        .collect();
    // y's rank terminates without joining: the root fails the construct; x has the
    // failure, its children do not.
    c.exit(y);
    for &(r, req) in &reqs {
        if kids.contains(&r) {
            assert!(c.reply(r, req).is_none(), "rank {r} waits for x");
        }
    }
    c.kill_node(x);
    for &k in &kids {
        c.release(k, root);
    }
    for &(r, req) in reqs.iter().filter(|(r, _)| *r != x) {
        match c.error(r, req) {
            CohortError::ProcTerminated { procs, .. } => {
                assert_eq!(procs, vec![c.proc(y)], "rank {r}")
            }
            e => panic!("rank {r}: expected ProcTerminated, got {e}"),
        }
    }
    for e in c.engines.iter().filter(|e| !c.is_dead(e.node())) {
        assert_eq!(e.collectives_in_progress(), 0, "server {}", e.node());
    }
}

/// A process that exits after a node server's loss is announced to the live servers
/// only: a message to the lost one reaches nobody, and only makes the fabric try to
/// reach that server again (a connect attempt that may take its whole timeout where
/// the network dropped the server).
#[test]
fn a_process_exit_is_not_announced_to_a_lost_server() {
    let mut c = Cluster::new(6, 3, TreeShape::KAry(2));
    c.connect_all();
    let nspace = c.job.nspace.clone();
    let now = Duration::from_secs(1);
    let e = &mut c.engines[0];
    e.on_peer_lost(2, now);
    let told: Vec<u32> = peers_sent_to(e.take_actions());
    assert_eq!(told, [1], "the loss goes to the other live server");
    e.on_proc_exited(ProcId::new(nspace, 0), now);
    assert_eq!(
        peers_sent_to(e.take_actions()),
        [1],
        "the exit goes to live servers only"
    );
}

fn peers_sent_to(actions: impl IntoIterator<Item = cohort_core::Action>) -> Vec<u32> {
    use cohort_core::Action;
    let mut to: Vec<u32> = actions
        .into_iter()
        .flat_map(|a| match a {
            Action::ToPeer { node, .. } => vec![node],
            Action::ToPeers { nodes, .. } => nodes,
            Action::ToClient { .. } | Action::Data { .. } | Action::DataProcGone { .. } => {
                vec![]
            }
        })
        .collect();
    to.sort_unstable();
    to
}

/// A server learns of another's loss from a third before its own connection delivered
/// everything the lost one sent: what arrives from it after that does not count, so
/// every decision taken on the loss stands (a crashed process's kernel still sends what
/// it wrote). Here an event it passed on is dropped; before the loss the same route
/// delivers it.
#[test]
fn what_a_server_sent_is_dropped_once_it_is_known_lost() {
    let mut c = Cluster::new(6, 3, TreeShape::KAry(2));
    c.connect_all();
    // Every server talks to every other: each is told of a loss by its fabric.
    let fence = c.fence_all(false);
    for (r, q) in fence.into_iter().enumerate() {
        assert_eq!(c.reply(r as u32, q), Some(Ok(Response::Done)), "rank {r}");
    }
    let notify = |c: &mut Cluster, code: i32| {
        let to = vec![c.proc(4)];
        c.request(
            0,
            Request::Notify {
                code,
                range: Range::Procs(to),
                info: vec![],
            },
        );
    };
    let codes_at_4 = |c: &Cluster| -> Vec<i32> { c.events(4).iter().map(|e| e.code).collect() };
    notify(&mut c, -7001);
    assert_eq!(codes_at_4(&c), [-7001], "the route delivers");
    c.hold(0, 2);
    notify(&mut c, -7002);
    assert_eq!(c.held_messages(), 1, "the event is on its way to server 2");
    c.kill_node_flushed(0);
    c.release(0, 2);
    assert_eq!(codes_at_4(&c), [-7001], "the late event from a lost server");
}

/// A process that ends cleanly (it finalized, in no collective in progress): its
/// server tells the servers of its groups' members at once (a global failure view must
/// not wait for it), the other servers after `CLEAN_END_NOTICE_DELAY`, and none of
/// those once the launcher announced the job's end (`Engine::job_ending`): at a job's
/// end every process ends cleanly, and telling every server of each one cost one
/// message per process and server. A process that ends without finalizing is told to
/// every server at once.
#[test]
fn a_clean_end_is_told_to_its_groups_at_once_and_to_the_rest_later_or_never() {
    use cohort_core::engine::CLEAN_END_NOTICE_DELAY;
    // Ranks 0-1 on server 0, 2-3 on server 1, 4-5 on server 2.
    let mut c = Cluster::new(6, 3, TreeShape::KAry(2));
    c.connect_all();
    let q0 = c.construct(0, "pair", &[0, 2], ConstructOpts::default());
    let q2 = c.construct(2, "pair", &[0, 2], ConstructOpts::default());
    c.group(0, q0);
    c.group(2, q2);
    let knows =
        |c: &Cluster, server: usize, rank: u32| c.engines[server].is_terminated(&c.proc(rank));

    let q = c.request(0, Request::Finalize);
    assert_eq!(c.reply(0, q), Some(Ok(Response::Done)));
    c.exit(0);
    assert!(
        knows(&c, 1, 0),
        "server 1 hosts rank 2, in a group with rank 0"
    );
    assert!(
        !knows(&c, 2, 0),
        "server 2 hosts no member of rank 0's groups"
    );
    c.advance(CLEAN_END_NOTICE_DELAY / 2);
    assert!(!knows(&c, 2, 0));
    c.advance(CLEAN_END_NOTICE_DELAY);
    assert!(knows(&c, 2, 0), "told after the delay");

    // A failure is told to every server at once.
    c.exit(5);
    assert!(knows(&c, 0, 5) && knows(&c, 1, 5));

    // Announced job end: clean ends not yet told are never told.
    let q = c.request(1, Request::Finalize);
    assert_eq!(c.reply(1, q), Some(Ok(Response::Done)));
    c.exit(1);
    assert!(knows(&c, 0, 1));
    c.engines[0].job_ending();
    c.advance(CLEAN_END_NOTICE_DELAY * 2);
    assert!(!knows(&c, 1, 1) && !knows(&c, 2, 1));
}
