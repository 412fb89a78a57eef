//! The collective suite (`suite/collectives.rs`, see `collectives.rs`) with fences and
//! collective-method constructs gathering by the dissemination (Bruck) allgather, and
//! the behaviour particular to it: same results as the tree, at most ⌈log2 n⌉ + 2
//! messages per server, a lean outcome that waits for the data it leaves out, and a
//! server lost mid-allgather ending in one outcome for every survivor.

const ALLGATHER: Allgather = Allgather::Dissemination;
include!("suite/collectives.rs");

fn ceil_log2(n: u32) -> u64 {
    u64::from(u32::BITS - (n - 1).leading_zeros())
}

/// Every rank posts data and group info, constructs `id` with a context id (all ranks
/// leaders), then fences with collect. Returns each rank's group result and the
/// messages each server sent for each of the two collectives.
fn construct_then_fence(c: &mut Cluster, id: &str) -> (Vec<GroupResult>, Vec<u64>, Vec<u64>) {
    let n = c.job.size();
    for r in 0..n {
        commit(c, r, "ep", Value::U32(1000 + r));
    }
    let all: Vec<u32> = (0..n).collect();
    let before = c.sent.clone();
    let reqs: Vec<u64> = (0..n)
        .map(|r| {
            let mut opts = ctx_opts();
            opts.group_info = vec![("color".into(), Value::U32(r % 3))];
            construct(c, r, id, &all, opts)
        })
        .collect();
    let groups: Vec<GroupResult> = (0..n).map(|r| group(c, r, reqs[r as usize])).collect();
    let construct_msgs: Vec<u64> = c.sent.iter().zip(&before).map(|(a, b)| a - b).collect();
    let before = c.sent.clone();
    let reqs = c.fence_all(true);
    for r in 0..n {
        assert_eq!(c.reply(r, reqs[r as usize]), Some(Ok(Response::Done)));
    }
    let fence_msgs: Vec<u64> = c.sent.iter().zip(&before).map(|(a, b)| a - b).collect();
    (groups, construct_msgs, fence_msgs)
}

/// group-construction-methods §6.4.3.1: every member gets the same membership, context
/// id, group info and data however the servers gather them.
#[test]
fn dissemination_gives_the_trees_results_in_at_most_log2n_plus_2_messages_per_server() {
    for (servers, per) in [(2, 1), (3, 2), (5, 1), (7, 1), (8, 2), (13, 1), (17, 1)] {
        let ranks = servers * per;
        let mut tree = Cluster::new(ranks, servers, TreeShape::KAry(3));
        let mut dis = new_cluster(ranks, servers, TreeShape::KAry(3));
        tree.connect_all();
        dis.connect_all();
        let (want, _, _) = construct_then_fence(&mut tree, "same");
        let (got, construct_msgs, fence_msgs) = construct_then_fence(&mut dis, "same");
        assert_eq!(got, want, "{servers} servers × {per}");
        let bound = ceil_log2(servers) + 2;
        for (what, msgs) in [("construct", construct_msgs), ("fence", fence_msgs)] {
            assert!(
                msgs.iter().all(|&m| m <= bound),
                "{what} over {servers} servers: messages per server {msgs:?}, bound {bound}"
            );
        }
        // Every member's posted data is here after the fence, without a fetch.
        let sent = dis.sent.clone();
        let last = dis.proc(ranks - 1);
        let g = get(&mut dis, 0, last, "ep");
        assert_eq!(
            dis.reply(0, g),
            Some(Ok(Response::Value(Value::U32(1000 + ranks - 1))))
        );
        assert_eq!(
            dis.sent, sent,
            "{servers} servers: the get was served locally"
        );
    }
}

/// Five servers constructing `id`, every rank a leader with group info of its own,
/// with server `b`'s last round held back: `b` gets its round 2 (step 4) from
/// `b + 4 ≡ b − 1 = a`, and its own rounds need only rounds 0 and 1, so every other
/// server completes the allgather. Returns the cluster, `a`, `b`, the requests and the
/// root's result (the root decided).
fn lean_race(id: &str) -> (Cluster, u32, u32, Vec<u64>, GroupResult) {
    let servers = 5u32;
    let mut c = new_cluster(servers, servers, TreeShape::KAry(2));
    c.connect_all();
    let root = cohort_topology::rendezvous(id, servers as usize) as u32;
    let b = (root + 2) % servers;
    let a = (b + servers - 1) % servers;
    c.hold(a, b);
    let all: Vec<u32> = (0..servers).collect();
    let reqs: Vec<u64> = (0..servers)
        .map(|r| {
            let mut opts = ctx_opts();
            opts.group_info = vec![("who".into(), Value::U32(r))];
            construct(&mut c, r, id, &all, opts)
        })
        .collect();
    let first = group(&c, root, reqs[root as usize]);
    assert_eq!(first.members.len(), servers as usize);
    assert!(
        c.reply(b, reqs[b as usize]).is_none(),
        "server {b} has the lean outcome but not yet {a}'s group info"
    );
    (c, a, b, reqs, first)
}

/// The root can hold every contribution, decide and send its lean outcome before a
/// server's last round is in. That server applies the outcome only once the round
/// brings the data the outcome leaves out.
#[test]
fn a_lean_outcome_waits_for_the_servers_last_round() {
    let (mut c, a, b, reqs, first) = lean_race("lean");
    c.release(a, b);
    for r in 0..5 {
        assert_eq!(group(&c, r, reqs[r as usize]), first, "rank {r}");
    }
}

/// The same, but the server that owes the last round is lost: the waiting server asks
/// the root, which sends the whole outcome it kept.
#[test]
fn a_lean_outcome_missing_data_from_a_lost_server_is_fetched_whole_from_the_root() {
    let (mut c, a, _, reqs, first) = lean_race("lean-lost");
    // a's rank joined before its server was lost: still a member.
    c.kill_node(a);
    let servers = 5;
    for r in (0..servers).filter(|&r| r != a) {
        assert_eq!(group(&c, r, reqs[r as usize]), first, "rank {r}");
    }
}

/// A server lost after sending only its first round: its contribution reached one
/// server, and the blocks it should have passed on reached nobody. The survivors send
/// what they hold to the root, which decides once for everyone: every survivor gets
/// the same outcome, nobody hangs.
#[test]
fn a_server_lost_mid_allgather_ends_in_one_outcome_for_every_survivor() {
    let servers = 8u32;
    for x in 0..servers {
        let id = "lost-mid";
        let root = cohort_topology::rendezvous(id, servers as usize) as u32;
        if x == root {
            continue;
        }
        let mut c = new_cluster(servers, servers, TreeShape::KAry(2));
        c.connect_all();
        // x's rounds 1 and 2 (to x − 2 and x − 4) never leave it.
        for step in [2, 4] {
            c.hold(x, (x + servers - step) % servers);
        }
        let reqs = every_rank_constructs(&mut c, id, servers, true);
        c.kill_node(x);
        let first_survivor = (0..servers).find(|&r| r != x).expect("survivors");
        let first = group(&c, first_survivor, reqs[first_survivor as usize]);
        for r in (0..servers).filter(|&r| r != x) {
            assert_eq!(
                group(&c, r, reqs[r as usize]),
                first,
                "x = {x}: rank {r} got what rank {first_survivor} got"
            );
        }
        let expect_failed = if first.members.contains(&c.proc(x)) {
            vec![]
        } else {
            vec![c.proc(x)]
        };
        assert_eq!(first.failed, expect_failed, "x = {x}");
    }
}

/// An id is reusable once its destruct completes (group-construction-methods §6.4.3):
/// servers that finished the destruct start the next construct while the destruct's
/// outcome is still on its way to another server. Their rounds reach it first and
/// must be kept, not taken for leftovers of the construct it completed before.
#[test]
fn rounds_of_a_reused_id_that_overtake_the_destruct_are_kept() {
    let id = "again";
    let servers = 8u32;
    let mut c = new_cluster(servers, servers, TreeShape::KAry(2));
    c.connect_all();
    let first = every_rank_constructs(&mut c, id, servers, true);
    let first_ctx = group(&c, 0, first[0]).context_id;
    // The destruct goes down the 2-ary tree from the id's rendezvous server: hold its
    // outcome on the way to z.
    let nodes: Vec<u32> = (0..servers).collect();
    let root = cohort_topology::rendezvous(id, servers as usize) as u32;
    let tree = cohort_topology::Tree::new(&nodes, root, TreeShape::KAry(2));
    let z = *tree.children(root).first().expect("the root has children");
    let z_parent = tree.parent(z).expect("z is below the root");
    c.hold(z_parent, z);
    let destructs: Vec<u64> = (0..servers)
        .map(|r| {
            c.request(
                r,
                Request::Destruct {
                    id: id.into(),
                    timeout_ms: None,
                },
            )
        })
        .collect();
    assert!(
        c.reply(z, destructs[z as usize]).is_none(),
        "z waits for the destruct"
    );
    let all: Vec<u32> = (0..servers).collect();
    let mut second: Vec<Option<u64>> = vec![None; servers as usize];
    // Ranks outside z's subtree have their destruct outcome and construct again.
    let below_z = tree.subtree(z);
    for r in (0..servers).filter(|r| !below_z.contains(r)) {
        assert!(matches!(c.reply(r, destructs[r as usize]), Some(Ok(_))));
        second[r as usize] = Some(construct(&mut c, r, id, &all, ctx_opts()));
    }
    c.release(z_parent, z);
    for &r in &below_z {
        assert!(matches!(c.reply(r, destructs[r as usize]), Some(Ok(_))));
        second[r as usize] = Some(construct(&mut c, r, id, &all, ctx_opts()));
    }
    let again = group(&c, 0, second[0].expect("called"));
    assert_eq!(again.members.len(), servers as usize);
    assert_ne!(again.context_id, first_ctx, "a new context id");
    for r in 0..servers {
        let req = second[r as usize].expect("called");
        assert_eq!(group(&c, r, req), again, "rank {r}");
    }
}
