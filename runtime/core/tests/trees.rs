//! Collectives over switch-aware (hierarchical) trees: engines given a switch map
//! reach the same outcomes as with flat trees, for the whole job and for subsets.

use std::sync::Arc;

use cohort_core::cluster::Cluster;
use cohort_core::{Engine, EngineConfig};
use cohort_proto::msg::{ConstructOpts, Request, Response};
use cohort_proto::Value;
use cohort_topology::{SwitchMap, TreeShape};

/// Three levels: core → agg[1-2] → leaf[1-5]; node ids are dealt over the leaves so
/// that switches do not hold contiguous ids.
const TOPOLOGY: &str = "\
SwitchName=core Switches=agg[1-2]
SwitchName=agg1 Switches=leaf[1-3]
SwitchName=agg2 Switches=leaf[4-5]
SwitchName=leaf1 Nodes=node[0,5,10]
SwitchName=leaf2 Nodes=node[1,6,11]
SwitchName=leaf3 Nodes=node[2,7,12]
SwitchName=leaf4 Nodes=node[3,8]
SwitchName=leaf5 Nodes=node[4,9]
";

/// `n` ranks on 13 node servers whose engines know the switch map.
fn cluster(n: u32, shape: TreeShape) -> Cluster {
    cluster_with(n, shape, cohort_topology::Allgather::Tree)
}

fn cluster_with(n: u32, shape: TreeShape, allgather: cohort_topology::Allgather) -> Cluster {
    let map = Arc::new(SwitchMap::parse(TOPOLOGY).unwrap());
    let mut c = Cluster::new(n, 13, shape);
    c.engines = (0..13)
        .map(|node| {
            Engine::new(EngineConfig {
                node,
                job: c.job.clone(),
                tree_shape: shape,
                switches: Some(map.clone()),
                allgather,
            })
        })
        .collect();
    c.connect_all();
    c
}

/// A construct of `id` by `rank` with the leaders `leaders`, assigning a context id.
fn construct(c: &mut Cluster, rank: u32, id: &str, leaders: &[u32]) -> u64 {
    let opts = ConstructOpts {
        assign_context_id: true,
        ..Default::default()
    };
    c.construct(rank, id, leaders, opts)
}

#[test]
fn constructs_agree_with_flat_trees() {
    for shape in [TreeShape::KAry(2), TreeShape::KAry(4), TreeShape::Binomial] {
        let mut outcomes = Vec::new();
        for hierarchical in [true, false] {
            let mut c = if hierarchical {
                cluster(40, shape)
            } else {
                let mut c = Cluster::new(40, 13, shape);
                c.connect_all();
                c
            };
            // The whole job, then a subset spread over some of the switches.
            let all: Vec<u32> = (0..40).collect();
            let some: Vec<u32> = (0..40).filter(|r| r % 7 == 2 || *r < 3).collect();
            let mut results = Vec::new();
            for (id, members) in [("everyone", &all), ("some", &some)] {
                let reqs: Vec<(u32, u64)> = members
                    .iter()
                    .map(|&r| (r, construct(&mut c, r, id, members)))
                    .collect();
                let g0 = c.group(reqs[0].0, reqs[0].1);
                assert_eq!(g0.members.len(), members.len());
                for &(r, req) in &reqs {
                    assert_eq!(c.group(r, req), g0, "{shape:?} rank {r}");
                }
                results.push(g0.members);
            }
            for e in &c.engines {
                assert_eq!(e.collectives_in_progress(), 0);
            }
            outcomes.push(results);
        }
        assert_eq!(outcomes[0], outcomes[1], "{shape:?}");
    }
}

#[test]
fn fence_with_collect_over_switches() {
    let mut c = cluster(26, TreeShape::KAry(2));
    for r in 0..26 {
        c.request(
            r,
            Request::Commit {
                local: vec![],
                remote: vec![("ep".into(), Value::U32(100 + r))],
            },
        );
    }
    let reqs = c.fence_all(true);
    for r in 0..26 {
        assert_eq!(c.reply(r, reqs[r as usize]), Some(Ok(Response::Done)));
    }
    // Every rank reads every other rank's data locally after the fence.
    let sent_before = c.sent.clone();
    for (reader, owner) in [(0, 25), (25, 0), (7, 19)] {
        let p = c.proc(owner);
        let g = c.request(
            reader,
            Request::Get {
                proc: p,
                key: "ep".into(),
                timeout_ms: Some(1000),
                after_commits: 0,
            },
        );
        assert_eq!(
            c.reply(reader, g),
            Some(Ok(Response::Value(Value::U32(100 + owner))))
        );
    }
    assert_eq!(c.sent, sent_before, "collected data is served locally");
}

/// With a switch map, `auto` (cohortd's default) keeps the hierarchical tree for
/// fences and constructs even where it would pick the dissemination allgather on a
/// flat network: one message up and one down per server, not ⌈log2 13⌉ rounds each.
#[test]
fn auto_keeps_the_switch_tree_when_a_switch_map_is_known() {
    use cohort_topology::Allgather;
    assert!(
        Allgather::Auto.disseminates(13),
        "flat: auto would disseminate"
    );
    for (allgather, hierarchical) in [(Allgather::Auto, true), (Allgather::Dissemination, false)] {
        let mut c = cluster_with(13, TreeShape::KAry(2), allgather);
        let before: u64 = c.sent.iter().sum();
        let reqs = c.fence_all(true);
        for r in 0..13 {
            assert_eq!(c.reply(r, reqs[r as usize]), Some(Ok(Response::Done)));
        }
        let sent = c.sent.iter().sum::<u64>() - before;
        assert_eq!(sent == 2 * 12, hierarchical, "{allgather}: {sent} messages");
    }
}
