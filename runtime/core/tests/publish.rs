//! Publish / lookup / unpublish (PMIx standard, "Publish/Lookup Operations") across
//! in-memory clusters of node servers: calls of every server reach the job's one data
//! store (node 0), waiting lookups are answered when the data comes, and the loss of
//! the store's server or of a process ends what waited for them.

use std::time::Duration;

use cohort_core::cluster::Cluster;
use cohort_proto::msg::{Request, Response};
use cohort_proto::publish::{DataRange, LookupOpts, Persistence, Published};
use cohort_proto::{CohortError, Value};
use cohort_topology::TreeShape;

fn cluster() -> Cluster {
    // 6 ranks over 3 servers: ranks 0-1 on node 0 (the store's), 2-3 on 1, 4-5 on 2.
    let mut c = Cluster::new(6, 3, TreeShape::KAry(2));
    c.connect_all();
    c
}

fn publish(c: &mut Cluster, rank: u32, key: &str, v: u32, persistence: Persistence) -> u64 {
    c.request(
        rank,
        Request::Publish {
            data: vec![(key.into(), Value::U32(v))],
            range: DataRange::Session,
            persistence,
        },
    )
}

fn lookup(c: &mut Cluster, rank: u32, keys: &[&str], opts: LookupOpts) -> u64 {
    c.request(
        rank,
        Request::Lookup {
            keys: keys.iter().map(|k| k.to_string()).collect(),
            opts,
        },
    )
}

fn waiting(timeout_ms: Option<u64>) -> LookupOpts {
    LookupOpts {
        wait: Some(0),
        timeout_ms,
        ..LookupOpts::default()
    }
}

fn found(c: &Cluster, rank: u32, id: u64) -> Vec<Published> {
    match c.reply(rank, id) {
        Some(Ok(Response::Published(v))) => v,
        other => panic!("rank {rank}: expected lookup results, got {other:?}"),
    }
}

#[test]
fn a_lookup_on_one_server_finds_what_a_process_of_another_published() {
    let mut c = cluster();
    let p = publish(&mut c, 5, "port", 42, Persistence::App);
    c.pump();
    assert_eq!(c.reply(5, p), Some(Ok(Response::Done)));
    let l = lookup(&mut c, 3, &["port", "nothing"], LookupOpts::default());
    c.pump();
    let f = found(&c, 3, l);
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!((f[0].key.as_str(), &f[0].publisher), ("port", &c.proc(5)));
    assert_eq!(f[0].value, Value::U32(42));
}

#[test]
fn two_servers_publishing_one_key_at_once_get_one_success_and_one_duplicate() {
    let mut c = cluster();
    let a = publish(&mut c, 2, "k", 1, Persistence::App);
    let b = publish(&mut c, 4, "k", 2, Persistence::App);
    c.pump();
    let (ra, rb) = (c.reply(2, a).unwrap(), c.reply(4, b).unwrap());
    let dups = [&ra, &rb]
        .iter()
        .filter(|r| matches!(r, Err(CohortError::KeyPublished { key, .. }) if key == "k"))
        .count();
    assert_eq!(dups, 1, "{ra:?} / {rb:?}");
    assert!(ra.is_ok() || rb.is_ok());
}

#[test]
fn a_waiting_lookup_is_answered_when_the_key_is_published_later() {
    let mut c = cluster();
    let l = lookup(&mut c, 4, &["later"], waiting(None));
    c.pump();
    assert_eq!(c.reply(4, l), None, "it waits");
    publish(&mut c, 3, "later", 7, Persistence::App);
    c.pump();
    assert_eq!(found(&c, 4, l)[0].value, Value::U32(7));
}

#[test]
fn a_waiting_lookup_times_out_at_the_store() {
    let mut c = cluster();
    let l = lookup(&mut c, 5, &["never"], waiting(Some(100)));
    c.pump();
    c.advance(Duration::from_millis(50));
    assert_eq!(c.reply(5, l), None);
    c.advance(Duration::from_millis(60));
    let e = c.error(5, l);
    assert!(
        matches!(
            e,
            CohortError::Timeout {
                timeout_ms: 100,
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("never"), "{e}");
}

#[test]
fn losing_the_stores_server_fails_waiting_and_later_calls_naming_it() {
    let mut c = cluster();
    let l = lookup(&mut c, 2, &["x"], waiting(None));
    c.pump();
    c.kill_node(0);
    c.pump();
    for e in [c.error(2, l), {
        let p = publish(&mut c, 4, "y", 1, Persistence::App);
        c.pump();
        c.error(4, p)
    }] {
        assert!(
            matches!(&e, CohortError::PeerLost { node: 0, reason } if reason.contains("publish")),
            "{e}"
        );
    }
}

#[test]
fn a_publishers_end_removes_its_proc_persistent_data() {
    let mut c = cluster();
    publish(&mut c, 3, "mine", 1, Persistence::Proc);
    publish(&mut c, 3, "kept", 2, Persistence::App);
    c.pump();
    c.exit(3);
    c.pump();
    let l = lookup(&mut c, 0, &["mine", "kept"], LookupOpts::default());
    c.pump();
    let f = found(&c, 0, l);
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(f[0].key, "kept");
}

#[test]
fn a_dead_waiter_does_not_spend_a_first_read_value() {
    let mut c = cluster();
    lookup(&mut c, 2, &["once"], waiting(None));
    let live = lookup(&mut c, 4, &["once"], waiting(None));
    c.pump();
    c.exit(2);
    c.pump();
    publish(&mut c, 1, "once", 9, Persistence::FirstRead);
    c.pump();
    assert_eq!(found(&c, 4, live)[0].value, Value::U32(9));
}

#[test]
fn unpublish_frees_the_key_for_another_publisher() {
    let mut c = cluster();
    publish(&mut c, 2, "k", 1, Persistence::Indefinite);
    c.pump();
    let u = c.request(
        2,
        Request::Unpublish {
            keys: None,
            range: DataRange::Session,
        },
    );
    c.pump();
    assert_eq!(c.reply(2, u), Some(Ok(Response::Done)));
    let p = publish(&mut c, 5, "k", 2, Persistence::App);
    c.pump();
    assert_eq!(c.reply(5, p), Some(Ok(Response::Done)));
}
