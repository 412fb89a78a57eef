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
