//! Job- and node-level keys the node server answers without anyone posting them:
//! the host's topology (`pmix.hwlocxml2`) and the node rank and size that span every
//! job of the session (`pmix.nrank`, `pmix.node.size`). In-memory engines.

use cohort_core::cluster::Cluster;
use cohort_proto::event::keys;
use cohort_proto::msg::{LocalBinding, Request, Response};
use cohort_proto::{CohortError, JobMap, ProcId, Value};
use cohort_topology::TreeShape;

fn get(c: &mut Cluster, reader: u32, proc: ProcId, key: &str) -> Result<Response, CohortError> {
    let id = c.request(
        reader,
        Request::Get {
            proc,
            key: key.into(),
            timeout_ms: None,
            after_commits: 0,
        },
    );
    c.pump();
    // No clock advance: every answer here is immediate, found or not.
    c.reply(reader, id)
        .unwrap_or_else(|| panic!("no immediate answer to {key}"))
}

/// Each node server serves its own host's topology, to its processes and for any
/// job's wildcard (the asker's node); another host's is not known there and is "not
/// found" at once, never a wait for data nobody posts.
#[test]
fn the_topology_is_the_asking_node_servers_own() {
    let mut c = Cluster::new(4, 2, TreeShape::Binomial);
    c.connect_all();
    c.engines[0].set_local_topology(Some("<topology node0/>".into()));
    c.engines[1].set_local_topology(Some("<topology node1/>".into()));
    let xml = |s: &str| Ok(Response::Value(Value::Str(s.into())));
    let wild = ProcId::wildcard("job");
    assert_eq!(
        get(&mut c, 0, wild.clone(), keys::HWLOC_XML),
        xml("<topology node0/>")
    );
    assert_eq!(
        get(&mut c, 3, wild, keys::HWLOC_XML),
        xml("<topology node1/>")
    );
    let own = c.proc(1);
    assert_eq!(
        get(&mut c, 0, own, keys::HWLOC_XML),
        xml("<topology node0/>")
    );
    let elsewhere = c.proc(3);
    assert!(matches!(
        get(&mut c, 0, elsewhere, keys::HWLOC_XML),
        Err(CohortError::NotFound { .. })
    ));
    // Without hwloc there is none to give.
    c.engines[0].set_local_topology(None);
    assert!(matches!(
        get(&mut c, 0, ProcId::wildcard("job"), keys::HWLOC_XML),
        Err(CohortError::NotFound { .. })
    ));
}

/// A spawned job's node ranks follow the launched job's processes on the same node,
/// and the node size counts both jobs.
#[test]
fn node_ranks_and_sizes_span_the_jobs() {
    let mut c = Cluster::new(4, 2, TreeShape::Binomial);
    c.connect_all();
    // Ranks 0, 1 on node 0, ranks 2, 3 on node 1; a spawned job of 3, round-robin.
    let child = JobMap::spawned(
        "job@1".into(),
        &c.job,
        vec![3],
        &[0, 1],
        cohort_proto::spawn::SpawnMapping::RoundRobin,
    )
    .unwrap();
    for e in &mut c.engines {
        e.add_job(1, child.clone(), ProcId::new("job", 0)).unwrap();
    }
    let u32v = |x: u32| Ok(Response::Value(Value::U32(x)));
    for (rank, node_rank) in [(0, 2), (1, 2), (2, 3)] {
        let p = ProcId::new("job@1", rank);
        assert_eq!(
            get(&mut c, 3, p, keys::NODE_RANK),
            u32v(node_rank),
            "job@1:{rank}"
        );
    }
    let launched = c.proc(3);
    assert_eq!(get(&mut c, 0, launched, keys::NODE_RANK), u32v(1));
    assert_eq!(
        get(&mut c, 0, ProcId::wildcard("job"), keys::NODE_SIZE),
        u32v(4)
    );
    assert_eq!(
        get(&mut c, 2, ProcId::wildcard("job@1"), keys::NODE_SIZE),
        u32v(3)
    );
}

/// PMIX_LOCALITY_STRING and PMIX_CPUSET: a node server answers them for the bound
/// processes of its own node, of any job (a parent asks about its spawned children);
/// an unbound process and another node's are "not found" at once. The processes of
/// a job learn their local peers' bindings when they connect (`local_bindings`).
#[test]
fn bindings_are_served_for_the_node_servers_own_processes() {
    let mut c = Cluster::new(4, 2, TreeShape::Binomial);
    c.connect_all();
    let bind = |rank, cpus: &str, locality: &str| LocalBinding {
        rank,
        cpus: cpus.into(),
        locality: locality.into(),
    };
    // Ranks 0, 1 on node 0 (rank 1 unbound), ranks 2, 3 on node 1.
    c.engines[0].set_local_bindings("job", vec![bind(0, "0", "SK0:CR0:HT0")]);
    c.engines[1].set_local_bindings("job", vec![bind(2, "1", "SK0:CR1:HT1")]);
    let s = |x: &str| Ok(Response::Value(Value::Str(x.into())));
    let p = |r| ProcId::new("job", r);
    assert_eq!(
        get(&mut c, 1, p(0), keys::LOCALITY_STRING),
        s("SK0:CR0:HT0")
    );
    assert_eq!(get(&mut c, 1, p(0), keys::CPUSET), s("hwloc:0"));
    assert_eq!(get(&mut c, 3, p(2), keys::CPUSET), s("hwloc:1"));
    for (reader, owner) in [(0, 1), (0, 2), (3, 0)] {
        for key in [keys::LOCALITY_STRING, keys::CPUSET] {
            assert!(
                matches!(
                    get(&mut c, reader, p(owner), key),
                    Err(CohortError::NotFound { .. })
                ),
                "{key} of rank {owner} asked by rank {reader}"
            );
        }
    }
    assert_eq!(
        c.engines[0].local_bindings("job"),
        [bind(0, "0", "SK0:CR0:HT0")]
    );
    // A spawned job's bound process on node 1, asked about by the launched job.
    let child = JobMap::spawned(
        "job@1".into(),
        &c.job,
        vec![2],
        &[0, 1],
        cohort_proto::spawn::SpawnMapping::RoundRobin,
    )
    .unwrap();
    for e in &mut c.engines {
        e.add_job(1, child.clone(), ProcId::new("job", 0)).unwrap();
    }
    c.engines[1].set_local_bindings("job@1", vec![bind(1, "0-1", "SK0:CR0-1:HT0-1")]);
    assert_eq!(
        get(&mut c, 2, ProcId::new("job@1", 1), keys::LOCALITY_STRING),
        s("SK0:CR0-1:HT0-1")
    );
    assert!(c.engines[1].local_bindings("job@1").len() == 1);
    assert!(c.engines[1].local_bindings("job").len() == 1);
    // Set again (the same job): replaced, not added to.
    c.engines[1].set_local_bindings("job@1", Vec::new());
    assert!(c.engines[1].local_bindings("job@1").is_empty());
}
