//! Which connections belong to which live incarnation of each peer, and when a broken
//! connection means "peer lost". Pure bookkeeping shared by backends: the backend feeds
//! it connection events and carries out the returned [`Verdict`] (emit the event, tear
//! down the listed connections).
//!
//! Rules: every established connection carries the remote process's incarnation. The
//! first connection of a live incarnation to break without a goodbye reports the peer
//! lost once and condemns that incarnation's other connections, so one crash is one
//! `PeerLost` however many connections it breaks. A goodbye marks the incarnation as
//! departing: its connections may then end quietly. A new incarnation replacing a live
//! one means the old process died ([`FabricError::Restarted`]).

use std::collections::{HashMap, VecDeque};

use crate::{FabricError, NodeId};

/// Identifies one connection (or connection task) inside a fabric.
pub(crate) type ConnId = u64;

/// How a registered connection ended.
#[derive(Debug)]
pub(crate) enum LinkEnd {
    /// The peer said goodbye on it.
    Goodbye,
    /// It broke: the peer is lost (unless it was already departing).
    Broken(FabricError),
    /// We ended it ourselves (closing, or our own queue went away).
    Local,
}

/// What the backend must do after a liveness change.
#[derive(Debug, Default)]
pub(crate) struct Verdict {
    /// Report this peer lost with this error as the reason.
    pub lost: Option<(NodeId, FabricError)>,
    /// Connections to tear down without further reports.
    pub condemned: Vec<ConnId>,
}

#[derive(Debug)]
struct Incarnation {
    id: u64,
    departing: bool,
}

#[derive(Debug, Default)]
pub(crate) struct Liveness {
    conns: HashMap<ConnId, (NodeId, u64)>,
    current: HashMap<NodeId, Incarnation>,
    /// How many times each peer was reported lost. A connect attempt that fails after
    /// this moved on was overtaken by the report of the same loss, and stays quiet.
    losses: HashMap<NodeId, u64>,
    /// Incarnations reported lost, newest last (a few per peer). A connection of one
    /// that finishes its handshake late must not bring it back to life: it would be
    /// reported lost a second time when it breaks.
    dead: HashMap<NodeId, VecDeque<u64>>,
}

/// Dead incarnations remembered per peer.
const DEAD_REMEMBERED: usize = 8;

impl Liveness {
    /// A connection to/from `peer` finished its handshake; `incarnation` is the peer's.
    pub fn established(&mut self, peer: NodeId, incarnation: u64, conn: ConnId) -> Verdict {
        let mut verdict = Verdict::default();
        if self
            .dead
            .get(&peer)
            .is_some_and(|d| d.contains(&incarnation))
        {
            // Late handshake of an incarnation already reported lost: drop it quietly.
            verdict.condemned.push(conn);
            return verdict;
        }
        match self.current.get(&peer) {
            Some(cur) if cur.id == incarnation => {}
            Some(cur) => {
                // A departing incarnation may still be flushing: leave its connections be.
                if !cur.departing {
                    let old = cur.id;
                    verdict.lost = Some((peer, FabricError::Restarted { peer }));
                    verdict.condemned = self.take_conns(peer, old);
                    self.bury(peer, old);
                }
                self.current.insert(
                    peer,
                    Incarnation {
                        id: incarnation,
                        departing: false,
                    },
                );
            }
            None => {
                self.current.insert(
                    peer,
                    Incarnation {
                        id: incarnation,
                        departing: false,
                    },
                );
            }
        }
        self.conns.insert(conn, (peer, incarnation));
        verdict
    }

    /// How many losses of `peer` were reported so far (see [`Liveness::losses`] field).
    pub fn losses(&self, peer: NodeId) -> u64 {
        self.losses.get(&peer).copied().unwrap_or(0)
    }

    /// Whether `conn` still speaks for a peer (messages read from it may be delivered).
    pub fn is_registered(&self, conn: ConnId) -> bool {
        self.conns.contains_key(&conn)
    }

    /// A connection ended. Unknown (never registered or already condemned) ones are ignored.
    pub fn ended(&mut self, conn: ConnId, how: LinkEnd) -> Verdict {
        let mut verdict = Verdict::default();
        let Some((peer, inc)) = self.conns.remove(&conn) else {
            return verdict;
        };
        let Some(cur) = self.current.get_mut(&peer).filter(|c| c.id == inc) else {
            // An older, departing incarnation finishing up.
            return verdict;
        };
        match how {
            LinkEnd::Goodbye => cur.departing = true,
            LinkEnd::Local => {}
            LinkEnd::Broken(err) => {
                if !cur.departing {
                    verdict.lost = Some((peer, err));
                    verdict.condemned = self.take_conns(peer, inc);
                    self.current.remove(&peer);
                    self.bury(peer, inc);
                    return verdict;
                }
            }
        }
        if !self.conns.values().any(|&(p, i)| p == peer && i == inc) {
            self.current.remove(&peer);
        }
        verdict
    }

    /// An outbound connection to `peer` could not be set up: the peer is lost. Its
    /// current incarnation, if any, is buried with its connections (condemned: their
    /// own ends stay quiet), so one crash seen first as a failed connect and then as
    /// broken connections is still one loss, and a later incarnation is a fresh peer,
    /// not a restart of a live one.
    pub fn unreachable(&mut self, peer: NodeId, err: FabricError) -> Verdict {
        Verdict {
            lost: Some((peer, err)),
            condemned: self.bury_current(peer),
        }
    }

    /// The owner declared `peer` lost with no connection broken (its failure detector,
    /// or a verdict from above, said so): its current incarnation is buried with its
    /// connections, as [`Liveness::unreachable`] does, but nothing is reported. Its
    /// connections that finish their handshake later are condemned; a restarted peer
    /// is a new incarnation.
    pub fn declared_lost(&mut self, peer: NodeId) -> Verdict {
        Verdict {
            lost: None,
            condemned: self.bury_current(peer),
        }
    }

    /// Buries `peer`'s current incarnation, if any, and returns its connections; with
    /// none, only the loss count moves (so a connect attempt begun before stays quiet).
    fn bury_current(&mut self, peer: NodeId) -> Vec<ConnId> {
        match self.current.remove(&peer) {
            Some(cur) => {
                let conns = self.take_conns(peer, cur.id);
                self.bury(peer, cur.id);
                conns
            }
            None => {
                *self.losses.entry(peer).or_default() += 1;
                Vec::new()
            }
        }
    }

    /// `inc` of `peer` was reported lost.
    fn bury(&mut self, peer: NodeId, inc: u64) {
        *self.losses.entry(peer).or_default() += 1;
        let dead = self.dead.entry(peer).or_default();
        dead.push_back(inc);
        if dead.len() > DEAD_REMEMBERED {
            dead.pop_front();
        }
    }

    fn take_conns(&mut self, peer: NodeId, inc: u64) -> Vec<ConnId> {
        let ids: Vec<ConnId> = self
            .conns
            .iter()
            .filter(|(_, &(p, i))| p == peer && i == inc)
            .map(|(&c, _)| c)
            .collect();
        for c in &ids {
            self.conns.remove(c);
        }
        ids
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn broken(peer: NodeId) -> LinkEnd {
        LinkEnd::Broken(FabricError::PeerClosed { peer })
    }

    /// Seen under load in the conformance suite: an outbound connect fails before the
    /// established inbound connection of the same crashed peer reports its break.
    #[test]
    fn a_failed_connect_then_a_broken_connection_is_one_loss() {
        let mut l = Liveness::default();
        l.established(1, 100, 10);
        let v = l.unreachable(1, FabricError::PeerClosed { peer: 1 });
        assert_eq!(v.lost.as_ref().map(|(p, _)| *p), Some(1));
        assert_eq!(v.condemned, vec![10]);
        assert_eq!(l.losses(1), 1);
        assert!(
            l.ended(10, broken(1)).lost.is_none(),
            "the break is the same loss"
        );
        // The restarted peer is a fresh one, not a second loss of the old.
        let v = l.established(1, 200, 11);
        assert!(v.lost.is_none() && v.condemned.is_empty());
        // A connect failure with no connection at all still counts once.
        let mut l = Liveness::default();
        assert!(l
            .unreachable(2, FabricError::PeerClosed { peer: 2 })
            .lost
            .is_some());
        assert_eq!(l.losses(2), 1);
    }

    #[test]
    fn one_crash_is_one_loss() {
        let mut l = Liveness::default();
        assert!(l.established(1, 100, 10).lost.is_none());
        assert!(l.established(1, 100, 11).lost.is_none());
        let v = l.ended(10, broken(1));
        assert_eq!(v.lost.as_ref().map(|(p, _)| *p), Some(1));
        assert_eq!(v.condemned, vec![11]);
        assert!(!l.is_registered(11));
        // The condemned connection's own end is silent.
        assert!(l.ended(11, broken(1)).lost.is_none());
    }

    /// An outbound connection of an incarnation still in its handshake when another
    /// connection's break reported that incarnation lost must not revive it.
    #[test]
    fn a_late_handshake_of_a_lost_incarnation_is_condemned_not_revived() {
        let mut l = Liveness::default();
        l.established(1, 100, 10);
        assert!(l.ended(10, broken(1)).lost.is_some());
        let v = l.established(1, 100, 11);
        assert!(v.lost.is_none());
        assert_eq!(v.condemned, vec![11]);
        assert!(!l.is_registered(11));
        assert!(l.ended(11, broken(1)).lost.is_none(), "one crash, one loss");
        // The restarted process (a new incarnation) is welcome.
        assert!(l.established(1, 101, 12).lost.is_none());
        assert!(l.is_registered(12));
    }

    #[test]
    fn a_peer_declared_lost_is_buried_quietly() {
        let mut l = Liveness::default();
        assert!(l.established(3, 7, 1).lost.is_none());
        assert!(l.established(3, 7, 2).lost.is_none());
        let v = l.declared_lost(3);
        assert!(v.lost.is_none(), "the owner knows: no report");
        let mut condemned = v.condemned;
        condemned.sort_unstable();
        assert_eq!(condemned, [1, 2]);
        // Its connections ending afterwards, or a late one, stay quiet.
        assert!(l.ended(1, broken(3)).lost.is_none());
        assert_eq!(l.established(3, 7, 5).condemned, [5]);
        // A connect attempt begun before the declaration and failing after it stays
        // quiet too (the loss count moved); a restart is a fresh peer.
        assert_eq!(l.losses(3), 1);
        assert!(l.established(3, 8, 6).lost.is_none());
        // A peer never connected: only the count moves.
        assert!(l.declared_lost(4).condemned.is_empty());
        assert_eq!(l.losses(4), 1);
    }

    #[test]
    fn goodbye_makes_later_breaks_quiet() {
        let mut l = Liveness::default();
        l.established(2, 7, 1);
        l.established(2, 7, 2);
        assert!(l.ended(1, LinkEnd::Goodbye).lost.is_none());
        assert!(l.is_registered(2));
        assert!(l.ended(2, broken(2)).lost.is_none());
        // Fully gone: a fresh connection of the same incarnation starts clean.
        l.established(2, 7, 3);
        assert!(l.ended(3, broken(2)).lost.is_some());
    }

    #[test]
    fn new_incarnation_replaces_live_one_with_a_loss() {
        let mut l = Liveness::default();
        l.established(3, 1, 1);
        let v = l.established(3, 2, 2);
        assert!(matches!(
            v.lost,
            Some((3, FabricError::Restarted { peer: 3 }))
        ));
        assert_eq!(v.condemned, vec![1]);
        assert!(l.is_registered(2));
        assert!(l.ended(2, broken(3)).lost.is_some());
    }

    #[test]
    fn new_incarnation_after_goodbye_lets_old_connections_finish() {
        let mut l = Liveness::default();
        l.established(4, 1, 1);
        l.established(4, 1, 2);
        l.ended(1, LinkEnd::Goodbye);
        let v = l.established(4, 2, 3);
        assert!(v.lost.is_none() && v.condemned.is_empty());
        assert!(l.is_registered(2), "old incarnation may still deliver");
        assert!(l.ended(2, broken(4)).lost.is_none());
        assert!(l.ended(3, broken(4)).lost.is_some());
    }

    #[test]
    fn local_end_is_silent() {
        let mut l = Liveness::default();
        l.established(5, 1, 1);
        assert!(l.ended(1, LinkEnd::Local).lost.is_none());
        assert!(l.ended(99, broken(5)).lost.is_none());
    }
}
