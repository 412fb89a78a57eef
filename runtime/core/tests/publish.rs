//! Publish / lookup / unpublish (PMIx standard, "Publish/Lookup Operations") across
//! in-memory clusters of node servers: calls of every server reach the job's one data
//! store (the launcher's; the cluster plays it), waiting lookups are answered when the
//! data comes, and a process's end or a node server's loss ends what waited for them
//! and nothing else.

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

/// The store is the launcher's: losing any node server, node 0 included, keeps what
/// was published (but its ranks' proc-persistent values) and every other server's
/// waiting lookups, which a later publish answers.
#[test]
fn a_node_servers_loss_keeps_the_data_and_the_others_lookups() {
    let mut c = cluster();
    publish(&mut c, 0, "kept", 1, Persistence::App);
    publish(&mut c, 1, "theirs", 2, Persistence::Proc);
    let l = lookup(&mut c, 2, &["later"], waiting(None));
    let dead = lookup(&mut c, 0, &["later"], waiting(None));
    c.pump();
    assert_eq!(c.store.waiting(), 2);
    c.kill_node(0);
    c.pump();
    assert_eq!(c.store.waiting(), 1, "the dead server's lookup goes");
    assert_eq!(c.reply(2, l), None, "the other one still waits");
    publish(&mut c, 4, "later", 3, Persistence::App);
    c.pump();
    assert_eq!(found(&c, 2, l)[0].value, Value::U32(3));
    assert_eq!(c.reply(0, dead), None);
    let k = lookup(&mut c, 5, &["kept", "theirs"], LookupOpts::default());
    c.pump();
    let f = found(&c, 5, k);
    assert_eq!(f.len(), 1, "{f:?}");
    assert_eq!(f[0].key, "kept");
}

/// A call too large for the control connection is refused where it is made, naming
/// the caller and the limit, and nothing is forwarded.
#[test]
fn a_call_too_large_to_forward_is_refused_at_its_server() {
    let mut c = cluster();
    let big = vec![0u8; cohort_proto::control::MAX_DATA_CALL + 1];
    let p = c.request(
        3,
        Request::Publish {
            data: vec![("big".into(), Value::Bytes(big.into()))],
            range: DataRange::Session,
            persistence: Persistence::App,
        },
    );
    c.pump();
    let e = c.error(3, p);
    assert!(
        matches!(&e, CohortError::BadRequest(m) if m.contains("job:3") && m.contains("bytes")),
        "{e}"
    );
    assert!(c.store.is_empty());
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

/// A client that closes its connection without finalizing is terminated for its
/// server, which tells the data store at once (the process may live on, so its exit
/// would come late or never): its waiting lookup does not spend a first-read value,
/// and its proc-persistent values go.
#[test]
fn a_client_gone_without_finalize_is_gone_for_the_store_too() {
    let mut c = cluster();
    publish(&mut c, 2, "theirs", 1, Persistence::Proc);
    lookup(&mut c, 2, &["once"], waiting(None));
    let live = lookup(&mut c, 4, &["once"], waiting(None));
    c.pump();
    c.disconnect(2);
    assert_eq!(c.store.waiting(), 1);
    publish(&mut c, 1, "once", 9, Persistence::FirstRead);
    c.pump();
    assert_eq!(found(&c, 4, live)[0].value, Value::U32(9));
    let l = lookup(&mut c, 5, &["theirs"], LookupOpts::default());
    c.pump();
    assert!(found(&c, 5, l).is_empty());
}
