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
            c.construct(r, id, &all, opts)
        })
        .collect();
    let groups: Vec<GroupResult> = (0..n).map(|r| c.group(r, reqs[r as usize])).collect();
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
            c.construct(r, id, &all, opts)
        })
        .collect();
    let first = c.group(root, reqs[root as usize]);
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
        assert_eq!(c.group(r, reqs[r as usize]), first, "rank {r}");
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
        assert_eq!(c.group(r, reqs[r as usize]), first, "rank {r}");
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
        let first = c.group(first_survivor, reqs[first_survivor as usize]);
        for r in (0..servers).filter(|&r| r != x) {
            assert_eq!(
                c.group(r, reqs[r as usize]),
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
    let first_ctx = c.group(0, first[0]).context_id;
    // The destruct goes down the 2-ary tree from the id's rendezvous server: hold its
    // outcome on the way to z.
    let nodes: Vec<u32> = (0..servers).collect();
    let root = cohort_topology::rendezvous(id, servers as usize) as u32;
    let tree = cohort_topology::Tree::new(&nodes, root, TreeShape::KAry(2));
    let z = *tree.children(root).first().expect("the root has children");
    let z_parent = tree.parent(z).expect("z is below the root");
    c.hold(z_parent, z);
    let destructs: Vec<u64> = (0..servers)
        .map(|r| destruct(&mut c, r, id, None))
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
        second[r as usize] = Some(c.construct(r, id, &all, ctx_opts()));
    }
    c.release(z_parent, z);
    for &r in &below_z {
        assert!(matches!(c.reply(r, destructs[r as usize]), Some(Ok(_))));
        second[r as usize] = Some(c.construct(r, id, &all, ctx_opts()));
    }
    let again = c.group(0, second[0].expect("called"));
    assert_eq!(again.members.len(), servers as usize);
    assert_ne!(again.context_id, first_ctx, "a new context id");
    for r in 0..servers {
        let req = second[r as usize].expect("called");
        assert_eq!(c.group(r, req), again, "rank {r}");
    }
}

/// After a fallback a server can complete before a round reaches it; that round stays
/// owed. If the id is reused at once, the next construct's round from the same
/// server, with the same round number, queues behind the owed one on the same link.
/// The owed round must be dropped and the new one kept. Taking the old round for the
/// new one would mix the old construct's group info into the new result.
#[test]
fn a_round_owed_from_a_fallback_is_not_taken_for_the_next_constructs() {
    use cohort_topology::{rendezvous, Tree};
    let id = "owed";
    let n = 8u32;
    let root = rendezvous(id, n as usize) as u32;
    let nodes: Vec<u32> = (0..n).collect();
    // Ring positions are node ids among the servers taking part; z gets round r from
    // y when z = y − 2^r (mod the ring size).
    let edge = |ring: &[u32], y: u32, z: u32, r: u32| {
        let m = ring.len();
        let (py, pz) = (
            ring.iter().position(|&v| v == y),
            ring.iter().position(|&v| v == z),
        );
        matches!((py, pz), (Some(py), Some(pz)) if pz == (py + m - (1 << r) % m) % m)
    };
    let adjacent = |t: &Tree, a: u32, b: u32| t.parent(a) == Some(b) || t.parent(b) == Some(a);
    let mut chosen = None;
    'search: for x in (0..n).filter(|&x| x != root) {
        let survivors: Vec<u32> = nodes.iter().copied().filter(|&v| v != x).collect();
        let lean1 = Tree::new(&nodes, root, TreeShape::KAry(2));
        let tree2 = Tree::new(&survivors, root, TreeShape::KAry(2));
        for r in 0..3 {
            for &y in &survivors {
                for &z in survivors.iter().filter(|&&z| z != y && z != root) {
                    if edge(&nodes, y, z, r)
                        && edge(&survivors, y, z, r)
                        && !adjacent(&lean1, y, z)
                        && !adjacent(&tree2, y, z)
                    {
                        chosen = Some((x, y, z, survivors));
                        break 'search;
                    }
                }
            }
        }
    }
    let (x, y, z, survivors) = chosen.expect("8 servers have such a pair");
    let mut c = new_cluster(n, n, TreeShape::KAry(2));
    c.connect_all();
    // x's contribution never leaves it; y's round to z is held back.
    for step in [1, 2, 4] {
        c.hold(x, (x + n - step) % n);
    }
    c.hold(y, z);
    let construct_gen = |c: &mut Cluster, ranks: &[u32], gen: u32| -> Vec<(u32, u64)> {
        ranks
            .iter()
            .map(|&r| {
                let mut opts = ctx_opts();
                opts.optional = true;
                opts.group_info = vec![("gen".into(), Value::U32(gen))];
                (r, c.construct(r, id, ranks, opts))
            })
            .collect()
    };
    let first = construct_gen(&mut c, &nodes, 1);
    c.kill_node(x);
    let g1 = c.group(root, first[root as usize].1);
    assert_eq!(g1.failed, vec![c.proc(x)]);
    for &(r, req) in first.iter().filter(|(r, _)| *r != x) {
        assert_eq!(c.group(r, req), g1, "rank {r}, first construct");
    }
    let destructs: Vec<(u32, u64)> = survivors
        .iter()
        .map(|&r| {
            let req = destruct(&mut c, r, id, None);
            (r, req)
        })
        .collect();
    for &(r, req) in &destructs {
        assert!(matches!(c.reply(r, req), Some(Ok(_))), "rank {r}: destruct");
    }
    let second = construct_gen(&mut c, &survivors, 2);
    c.release(y, z);
    let g2 = c.group(
        root,
        second.iter().find(|(r, _)| *r == root).expect("root").1,
    );
    assert_eq!(g2.members.len(), survivors.len());
    for (p, info) in &g2.group_info {
        assert_eq!(info, &vec![("gen".to_string(), Value::U32(2))], "{p}");
    }
    for &(r, req) in &second {
        assert_eq!(
            c.group(r, req),
            g2,
            "rank {r}, second construct (x={x} y={y} z={z})"
        );
    }
}

/// Four servers construct `id` with a 1 s timeout; w's rank never calls, and the
/// verdict (a timeout) is held on its way to z. `z_timeout`: whether z's own rank
/// has that timeout too. After `advance` seconds, the others retry without w; then z
/// gets the verdict and retries. Every retry must succeed, with the same group.
fn retry_after_a_late_verdict(z_timeout: bool, advance: &[u64]) {
    use cohort_topology::{rendezvous, Tree};
    let id = "early";
    let n = 4u32;
    let nodes: Vec<u32> = (0..n).collect();
    let root = rendezvous(id, n as usize) as u32;
    let lean = Tree::new(&nodes, root, TreeShape::KAry(2));
    let others: Vec<u32> = nodes.iter().copied().filter(|&v| v != root).collect();
    let (z, w, v) = (others[0], others[1], others[2]);
    let p = lean.parent(z).expect("z is below the root");
    let mut c = new_cluster(n, n, TreeShape::KAry(2));
    c.connect_all();
    let first: Vec<(u32, u64)> = [root, z, v]
        .iter()
        .map(|&r| {
            let opts = ConstructOpts {
                timeout_ms: (z_timeout || r != z).then_some(1_000),
                ..Default::default()
            };
            (r, c.construct(r, id, &nodes, opts))
        })
        .collect();
    c.hold(p, z);
    for &s in advance {
        c.advance(Duration::from_secs(s));
    }
    for &(r, req) in first.iter().filter(|(r, _)| *r != z) {
        assert!(
            matches!(c.error(r, req), CohortError::Timeout { .. }),
            "rank {r}"
        );
    }
    let z_first = first.iter().find(|(r, _)| *r == z).expect("z called").1;
    assert!(
        c.reply(z, z_first).is_none(),
        "z has not heard of the failure yet"
    );
    // The others retry without w; their rounds reach z first (one of its two partners
    // in the 3-server ring is not p).
    let survivors = [root, z, v];
    let mut retry: Vec<(u32, u64)> = [root, v]
        .iter()
        .map(|&r| (r, c.construct(r, id, &survivors, ctx_opts())))
        .collect();
    c.release(p, z);
    assert!(matches!(c.error(z, z_first), CohortError::Timeout { .. }));
    retry.push((z, c.construct(z, id, &survivors, ctx_opts())));
    let g = c.group(root, retry[0].1);
    let mut members = vec![c.proc(root), c.proc(z), c.proc(v)];
    members.sort();
    assert_eq!(g.members, members);
    for &(r, req) in &retry {
        assert_eq!(c.group(r, req), g, "rank {r} (w = {w})");
    }
}

/// A retry's rounds can reach a server before the failure of the previous attempt
/// does: a dissemination round and the failure travel different links. They are kept
/// until the failure is applied there, then count for the retry.
#[test]
fn rounds_of_a_retry_that_overtake_the_failure_count_for_the_retry() {
    retry_after_a_late_verdict(false, &[2, 3, 2]);
}

/// A server that ended an attempt itself may still get the root's verdict on it
/// later, forwarded by a server that got it late (here v, z's child, after the timeout
/// and the probe's grace). By then its rank has retried: that old verdict is dropped,
/// and does not end the retry.
#[test]
fn a_late_verdict_on_an_attempt_a_server_ended_itself_does_not_end_the_retry() {
    retry_after_a_late_verdict(true, &[2, 3]);
}

/// After a server of the allgather is lost, each survivor sends what it has straight
/// to the root, but only once its own processes have all joined: a process of its own
/// that joins after the loss could not reach the root by the rounds (they pass through
/// the lost server). It used to send at the loss, and a rank joining later was never
/// counted: the construct (no timeout) hung.
#[test]
fn a_fallback_waits_for_the_servers_own_late_joiner() {
    let id = "late-joiner";
    let servers = 4;
    let mut c = new_cluster(2 * servers, servers, TreeShape::KAry(2));
    c.connect_all();
    let warm = c.fence_all(false);
    for r in 0..2 * servers {
        assert_eq!(c.reply(r, warm[r as usize]), Some(Ok(Response::Done)));
    }
    let root = cohort_topology::rendezvous(id, servers as usize) as u32;
    // Positions are node ids here. The root takes in round 0 from root + 1 and round 1
    // from root + 2, which carries root + 3's data: with root + 2 lost, root + 3's data
    // can reach the root only directly.
    let lost = (root + 2) % servers;
    let s = (root + 3) % servers;
    let late = 2 * s + 1;
    let all: Vec<u32> = (0..2 * servers).collect();
    let opts = ConstructOpts {
        optional: true,
        ..ctx_opts()
    };
    // Everyone but the lost server's ranks and s's second rank joins; the rounds wait
    // for the lost server's.
    let early: Vec<u32> = all
        .iter()
        .copied()
        .filter(|&r| c.job.rank_node[r as usize] != lost && r != late)
        .collect();
    let mut reqs: Vec<(u32, u64)> = early
        .iter()
        .map(|&r| (r, c.construct(r, id, &all, opts.clone())))
        .collect();
    for &(r, req) in &reqs {
        assert!(c.reply(r, req).is_none(), "rank {r} waits");
    }
    c.kill_node(lost);
    reqs.push((late, c.construct(late, id, &all, opts.clone())));
    let survivors: Vec<ProcId> = all
        .iter()
        .filter(|&&r| c.job.rank_node[r as usize] != lost)
        .map(|&r| c.proc(r))
        .collect();
    let first = c.group(reqs[0].0, reqs[0].1);
    assert_eq!(first.status, ConstructStatus::PartialSuccess);
    assert_eq!(first.members, survivors, "the late joiner is a member");
    for &(r, req) in &reqs {
        assert_eq!(c.group(r, req), first, "rank {r}");
    }
    for e in c.engines.iter().filter(|e| !c.is_dead(e.node())) {
        assert_eq!(e.collectives_in_progress(), 0, "server {}", e.node());
    }
}

/// A failure reaches a server none of whose processes joined yet (it has no tracker);
/// rounds of the failed attempt come after it. They are leftovers and are dropped
/// instead of opening a new operation there that nobody would end; the server's rank,
/// calling late, gets the failure.
#[test]
fn rounds_after_a_failure_that_found_no_tracker_are_dropped() {
    let n = 8u32;
    let nodes: Vec<u32> = (0..n).collect();
    // s takes its rounds from s + 1, s + 2 and s + 4, and the outcome from its tree
    // parent; the rounds' servers must be neither its parent nor its children (a
    // server passing the failure on knows that its children got it).
    let partners = |s: u32| [1, 2, 4].map(|d| (s + d) % n);
    let (id, s) = (0..)
        .find_map(|i| {
            let id = format!("no-tracker-{i}");
            let root = cohort_topology::rendezvous(&id, n as usize) as u32;
            let down = cohort_topology::Tree::new(&nodes, root, TreeShape::KAry(2));
            let s = (0..n).find(|&s| {
                s != root
                    && partners(s).iter().all(|&p| {
                        p != root && down.parent(s) != Some(p) && !down.children(s).contains(&p)
                    })
            })?;
            Some((id, s))
        })
        .expect("some id has such servers");
    let mut c = new_cluster(n, n, TreeShape::KAry(2));
    c.connect_all();
    for p in partners(s) {
        c.hold(p, s);
    }
    let opts = ConstructOpts {
        timeout_ms: Some(1_000),
        ..Default::default()
    };
    // s's rank does not call: everyone else times out, past the root's probe.
    let reqs: Vec<(u32, u64)> = nodes
        .iter()
        .filter(|&&r| r != s)
        .map(|&r| (r, c.construct(r, &id, &nodes, opts.clone())))
        .collect();
    c.advance(Duration::from_secs(2));
    c.advance(Duration::from_secs(6));
    for &(r, req) in &reqs {
        assert!(
            matches!(c.error(r, req), CohortError::Timeout { .. }),
            "rank {r}: {:?}",
            c.reply(r, req)
        );
    }
    for p in partners(s) {
        c.release(p, s);
    }
    assert_eq!(
        c.engines[s as usize].collectives_in_progress(),
        0,
        "server {s} opened an operation for leftover rounds"
    );
    let late = c.construct(s, &id, &nodes, opts);
    assert!(
        matches!(c.error(s, late), CohortError::Timeout { .. }),
        "the late caller gets the construct's failure"
    );
    for e in c.engines.iter() {
        assert_eq!(e.collectives_in_progress(), 0, "server {}", e.node());
    }
}

/// A server that hears of a loss only from another server falls back: it sends what it
/// gathered straight to the root. The root, which has not heard of the loss yet, can
/// decide on it. The server tells the root of the loss first, on the same link, so
/// that the root sends its outcome around the lost server. It used to send the outcome
/// into the lost server, the server's parent in the outcome's tree, and the server's
/// ranks (no timeout) waited for ever.
#[test]
fn a_fallback_tells_the_root_of_the_loss_before_the_root_decides() {
    let id = "unnoticed";
    let n = 8u32;
    let nodes: Vec<u32> = (0..n).collect();
    let (root, x, kids) = interior_of(id, n);
    let k = kids[0];
    let mut c = new_cluster(n, n, TreeShape::KAry(2));
    c.connect_all();
    // The root misses its last round, so it can decide only on what a fallback
    // brings; every other server completes its allgather and waits for the outcome.
    // Nothing reaches the root but from k.
    for z in (0..n).filter(|&z| z != root && z != k) {
        c.hold(z, root);
    }
    let opts = ConstructOpts {
        optional: true,
        ..ctx_opts()
    };
    let reqs: Vec<(u32, u64)> = nodes
        .iter()
        .map(|&r| (r, c.construct(r, id, &nodes, opts.clone())))
        .collect();
    for &(r, req) in &reqs {
        assert!(c.reply(r, req).is_none(), "rank {r} waits for the outcome");
    }
    // x is lost; k and the root hear of it only from other servers (the root not yet:
    // its links are held).
    c.kill_node_unnoticed_by(x, &[root, k]);
    for z in (0..n).filter(|&z| z != root && z != k && z != x) {
        c.release(z, root);
    }
    let first = c.group(root, reqs[root as usize].1);
    for &(r, req) in reqs.iter().filter(|&&(r, _)| r != x) {
        assert_eq!(c.group(r, req), first, "rank {r}");
    }
    for e in c.engines.iter().filter(|e| !c.is_dead(e.node())) {
        assert_eq!(e.collectives_in_progress(), 0, "server {}", e.node());
    }
}

/// After a fallback (a server was lost), a server sent what it gathered straight to the
/// root, but the root's outcome comes down the root's tree. When a server on that way is
/// lost with the outcome, the server asks the root again, which answers from the
/// outcome it keeps. It used to wait for ever (no timeout) once it had fallen back.
#[test]
fn a_server_that_fell_back_asks_again_when_the_outcome_is_lost_on_its_way() {
    let id = "lost-on-the-way";
    let n = 8u32;
    let nodes: Vec<u32> = (0..n).collect();
    let (root, x, kids) = interior_of(id, n);
    let k = kids[0];
    let y = (0..n)
        .find(|&y| ![root, x, k].contains(&y))
        .expect("8 servers");
    let mut c = new_cluster(n, n, TreeShape::KAry(2));
    c.connect_all();
    let warm = c.fence_all(false);
    for r in 0..n {
        assert_eq!(c.reply(r, warm[r as usize]), Some(Ok(Response::Done)));
    }
    // y is lost first: every server falls back to the root.
    c.kill_node(y);
    c.hold(x, k);
    let opts = ConstructOpts {
        optional: true,
        ..ctx_opts()
    };
    let reqs: Vec<(u32, u64)> = nodes
        .iter()
        .filter(|&&r| r != y)
        .map(|&r| (r, c.construct(r, id, &nodes, opts.clone())))
        .collect();
    let first = c.group(root, reqs.iter().find(|(r, _)| *r == root).unwrap().1);
    let k_req = reqs.iter().find(|(r, _)| *r == k).unwrap().1;
    assert!(c.reply(k, k_req).is_none(), "the outcome waits at x");
    // x is lost with the outcome.
    c.kill_node(x);
    assert_eq!(c.group(k, k_req), first);
    for &(r, req) in reqs.iter().filter(|&&(r, _)| r != x) {
        assert_eq!(c.group(r, req), first, "rank {r}");
    }
    for e in c.engines.iter().filter(|e| !c.is_dead(e.node())) {
        assert_eq!(e.collectives_in_progress(), 0, "server {}", e.node());
    }
}
