//! The failure detector: which node server watches which, and when its silence means
//! it is lost.
//!
//! The fabric reports a peer lost when a connection breaks, which is what a crashed
//! process gives: its kernel closes its sockets. A node server whose host powers off or
//! panics, whose process is frozen (stopped, or stuck in the kernel), or that the
//! network cuts off closes nothing; without a detector every operation waiting on it
//! waits for its timeout, and an operation without one for ever. A job that runs for
//! hours needs to find those within a bounded time.
//!
//! The servers form a ring in node order, skipping the ones known lost. Each sends a
//! heartbeat to its successor every `period` and watches its predecessor; every message
//! from the watched server counts as a heartbeat. A watched server silent for `timeout`
//! is declared lost, and the watcher moves on to the next server back, giving it a
//! full `timeout` from then. A declaration is an accusation, not yet a loss: a server
//! that the network cut off hears nobody and declares its own watched server too. In
//! `cohortd` the launcher judges the accusations, kills the server it condemns and
//! tells every other server, which then routes around it as if the fabric had reported
//! it (`cohort_launcher::monitor::Tribunal`). Each server is watched by exactly
//! one live server and sends one heartbeat per period: the cost is the same whatever
//! the job's size (an all-to-all heartbeat would be quadratic). Servers that fail
//! together and are neighbours in the ring would be found one after the other, one
//! `timeout` each; the launcher asks every server when it finds one that does not
//! answer, which finds the others at once. This is the ring detector of ULFM and PRRTE.
//!
//! A watcher that was not run for a while cannot tell the silence of the watched
//! server from its own: the heartbeats may be sitting in its socket. When its timer
//! fires more than half a `timeout` late, it restarts the watched server's window
//! instead of declaring it.
//!
//! Sans-IO like the engine: the node server feeds it the time, the messages' senders
//! and the losses it learns of, and carries out the [`Detection`]s it returns.

use std::collections::BTreeSet;
use std::time::Duration;

use cohort_proto::NodeId;

use crate::Time;

/// How often heartbeats go, and how long a silence means lost.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DetectorConfig {
    pub period: Duration,
    pub timeout: Duration,
}

impl DetectorConfig {
    /// `cohort run`'s defaults: a heartbeat a second, lost after 10 s of silence.
    pub const DEFAULT: DetectorConfig = DetectorConfig {
        period: Duration::from_secs(1),
        timeout: Duration::from_secs(10),
    };

    /// Checks that the two fit together: a positive period, and a timeout of at least
    /// three periods (a watcher late by half a timeout must still have heard a
    /// heartbeat within the other half).
    pub fn validate(&self) -> Result<(), String> {
        if self.period.is_zero() {
            return Err("the heartbeat period must be positive".into());
        }
        if self.timeout < self.period * 3 {
            return Err(format!(
                "the peer timeout ({:?}) must be at least three heartbeat periods ({:?})",
                self.timeout, self.period
            ));
        }
        Ok(())
    }
}

/// What the owner must do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Detection {
    /// Send a heartbeat to `to`.
    Beat { to: NodeId },
    /// Node server `node` was silent for `silent`: it is lost.
    Declare { node: NodeId, silent: Duration },
}

/// One node server's part of the ring (see the module docs).
#[derive(Debug)]
pub struct Detector {
    me: NodeId,
    nodes: u32,
    cfg: DetectorConfig,
    /// Lost for good: declared by this detector, or by the owner's verdict.
    lost: BTreeSet<NodeId>,
    /// Reported lost by the fabric or another server, without a verdict yet: they get
    /// no heartbeat, but a watched one stays watched (see [`Detector::unreachable`]).
    unreachable: BTreeSet<NodeId>,
    /// The server watched, and when it was last heard from (or watching it began).
    watched: Option<(NodeId, Time)>,
    next_beat: Time,
    /// The deadline as of the last timer (it moves no further than a period later:
    /// heartbeats are due every period); a timer firing well after it means this
    /// server was not run.
    due: Time,
}

impl Detector {
    /// Node `me` of `nodes` servers (ids `0..nodes`), starting at `now`: the first
    /// heartbeat is due at once, and the predecessor has a whole timeout.
    pub fn new(me: NodeId, nodes: u32, cfg: DetectorConfig, now: Time) -> Detector {
        let mut d = Detector {
            me,
            nodes,
            cfg,
            lost: BTreeSet::new(),
            unreachable: BTreeSet::new(),
            watched: None,
            next_beat: now,
            due: now,
        };
        d.watched = d.predecessor().map(|p| (p, now));
        d
    }

    /// The server this one watches.
    pub fn watched(&self) -> Option<NodeId> {
        self.watched.map(|(n, _)| n)
    }

    /// The server this one sends heartbeats to.
    pub fn successor(&self) -> Option<NodeId> {
        (1..self.nodes)
            .map(|k| (self.me + k) % self.nodes)
            .find(|n| !self.lost.contains(n) && !self.unreachable.contains(n))
    }

    fn predecessor(&self) -> Option<NodeId> {
        (1..self.nodes)
            .map(|k| (self.me + self.nodes - k) % self.nodes)
            .find(|n| !self.lost.contains(n))
    }

    /// A message (a heartbeat or anything else) arrived from `from`.
    pub fn heard(&mut self, from: NodeId, now: Time) {
        if let Some((w, heard)) = &mut self.watched {
            if *w == from {
                *heard = now;
            }
        }
    }

    /// The owner learnt that `node` is lost (from the fabric, or another server). If it
    /// was the successor, the next one gets a heartbeat at once, so that it does not
    /// wait a whole period to hear from its new predecessor; if it was the watched
    /// server, the next one back is watched from now.
    pub fn lost(&mut self, node: NodeId, now: Time) {
        if node == self.me || node >= self.nodes || self.lost.contains(&node) {
            return;
        }
        let successor_before = self.successor();
        self.lost.insert(node);
        if self.watched() == Some(node) {
            self.watched = self.predecessor().map(|p| (p, now));
        }
        if successor_before == Some(node) {
            self.next_beat = now;
        }
    }

    /// The owner heard that `node` is lost from its fabric (a connection broke, or
    /// could not be made) or from another server, with no verdict yet. It gets no more
    /// heartbeats (the next server gets one at once if it was the successor), but a
    /// watched one stays watched until this detector declares it or the verdict comes
    /// ([`Detector::lost`]): a crashed server is reaped meanwhile, but one that the
    /// network cut off from some servers still runs, and only a declaration gets it
    /// ended. (Dropping the watch let a server cut off go on alone: its watcher's
    /// fabric had failed to connect to it, and nobody ever declared it.)
    pub fn unreachable(&mut self, node: NodeId, now: Time) {
        if node == self.me || node >= self.nodes || self.lost.contains(&node) {
            return;
        }
        let successor_before = self.successor();
        if self.unreachable.insert(node) && successor_before == Some(node) {
            self.next_beat = now;
        }
    }

    /// The owner's judge dropped this detector's declaration of `node` (it talks to
    /// others: only the link between the two is broken, or this server is cut off).
    /// Watched again from `now` if it is still the nearest server back that is not
    /// lost, so that it stays watched by someone. (Declared again after another
    /// silent timeout, so a broken link shows once a timeout.)
    pub fn watch_again(&mut self, node: NodeId, now: Time) {
        if node == self.me || node >= self.nodes || !self.lost.remove(&node) {
            return;
        }
        let back = self.predecessor();
        if back == Some(node) {
            self.watched = Some((node, now));
        } else {
            // A verdict took a server between (or the judge answered late): keep the
            // watch where it is, and the server out of it.
            self.lost.insert(node);
        }
    }

    /// When [`Detector::on_timer`] must run next.
    pub fn deadline(&self) -> Option<Time> {
        let watch = self.watched.map(|(_, heard)| heard + self.cfg.timeout);
        let beat = self.successor().map(|_| self.next_beat);
        match (watch, beat) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The timer fired: heartbeats due go out, a watched server silent for the timeout
    /// is declared lost.
    pub fn on_timer(&mut self, now: Time, out: &mut Vec<Detection>) {
        let late = now.saturating_sub(self.due);
        if late > self.cfg.timeout / 2 {
            if let Some((node, heard)) = &mut self.watched {
                tracing::warn!(
                    late_ms = late.as_millis() as u64,
                    watched = *node,
                    "this node server was not run for a while; its watch on node {node} \
                     starts again rather than count that time as the node's silence"
                );
                *heard = now;
            }
        }
        while let Some((node, heard)) = self.watched {
            let silent = now.saturating_sub(heard);
            if silent < self.cfg.timeout {
                break;
            }
            out.push(Detection::Declare { node, silent });
            self.lost(node, now);
        }
        if now >= self.next_beat {
            if let Some(to) = self.successor() {
                out.push(Detection::Beat { to });
            }
            self.next_beat = now + self.cfg.period;
        }
        if let Some(d) = self.deadline() {
            self.due = d;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CFG: DetectorConfig = DetectorConfig {
        period: Duration::from_millis(100),
        timeout: Duration::from_millis(1000),
    };

    fn ms(n: u64) -> Time {
        Duration::from_millis(n)
    }

    fn tick(d: &mut Detector, now: Time) -> Vec<Detection> {
        let mut out = Vec::new();
        d.on_timer(now, &mut out);
        out
    }

    #[test]
    fn a_ring_in_node_order() {
        let d = Detector::new(0, 4, CFG, ms(0));
        assert_eq!((d.watched(), d.successor()), (Some(3), Some(1)));
        let d = Detector::new(2, 4, CFG, ms(0));
        assert_eq!((d.watched(), d.successor()), (Some(1), Some(3)));
        let d = Detector::new(1, 2, CFG, ms(0));
        assert_eq!((d.watched(), d.successor()), (Some(0), Some(0)));
        let d = Detector::new(0, 1, CFG, ms(0));
        assert_eq!(
            (d.watched(), d.successor(), d.deadline()),
            (None, None, None)
        );
    }

    #[test]
    fn heartbeats_go_to_the_successor_every_period() {
        let mut d = Detector::new(1, 3, CFG, ms(0));
        assert_eq!(tick(&mut d, ms(0)), vec![Detection::Beat { to: 2 }]);
        assert_eq!(d.deadline(), Some(ms(100)));
        assert_eq!(tick(&mut d, ms(50)), vec![]);
        assert_eq!(tick(&mut d, ms(100)), vec![Detection::Beat { to: 2 }]);
        assert_eq!(d.deadline(), Some(ms(200)));
    }

    /// Runs the timer every period from `from` up to and including `to`; returns
    /// the declarations with the time of each.
    fn run(d: &mut Detector, from: u64, to: u64) -> Vec<(u64, Detection)> {
        let mut declared = Vec::new();
        for t in (from..=to).step_by(100) {
            for a in tick(d, ms(t)) {
                if matches!(a, Detection::Declare { .. }) {
                    declared.push((t, a));
                }
            }
        }
        declared
    }

    #[test]
    fn a_silent_predecessor_is_declared_after_the_timeout_and_the_next_is_watched() {
        let mut d = Detector::new(2, 4, CFG, ms(0));
        // Node 1 beats until 500 ms, then falls silent.
        for t in (0..=500).step_by(100) {
            d.heard(1, ms(t));
            assert_eq!(run(&mut d, t, t), vec![]);
        }
        let declared = run(&mut d, 600, 1500);
        let silent = ms(1000);
        assert_eq!(
            declared,
            vec![(1500, Detection::Declare { node: 1, silent })]
        );
        // Node 0 is watched next, with a whole timeout from now.
        assert_eq!(d.watched(), Some(0));
        let declared = run(&mut d, 1600, 3000);
        assert_eq!(
            declared,
            vec![(2500, Detection::Declare { node: 0, silent })]
        );
        assert_eq!(d.watched(), Some(3));
    }

    #[test]
    fn any_message_from_the_watched_server_counts() {
        let mut d = Detector::new(0, 3, CFG, ms(0));
        for t in (0..5000).step_by(100) {
            d.heard(2, ms(t)); // node 2's ordinary traffic, no heartbeat
            d.heard(1, ms(t)); // not watched: changes nothing
            let out = tick(&mut d, ms(t));
            assert!(!out.iter().any(|a| matches!(a, Detection::Declare { .. })));
        }
    }

    #[test]
    fn a_lost_successor_hands_the_heartbeat_to_the_next_at_once() {
        let mut d = Detector::new(0, 4, CFG, ms(0));
        tick(&mut d, ms(0));
        d.lost(1, ms(30));
        assert_eq!(d.successor(), Some(2));
        assert_eq!(d.deadline(), Some(ms(30)));
        assert_eq!(tick(&mut d, ms(30)), vec![Detection::Beat { to: 2 }]);
        // A loss elsewhere changes neither the beat nor the watch.
        d.lost(2, ms(40));
        d.lost(2, ms(40));
        assert_eq!((d.watched(), d.successor()), (Some(3), Some(3)));
        assert_eq!(tick(&mut d, ms(40)), vec![Detection::Beat { to: 3 }]);
    }

    #[test]
    fn a_watched_server_lost_otherwise_moves_the_watch_back_with_a_fresh_window() {
        let mut d = Detector::new(2, 4, CFG, ms(0));
        d.lost(1, ms(900));
        assert_eq!(d.watched(), Some(0));
        // Node 0 has until 1900 ms, not 1000.
        let declared = run(&mut d, 900, 1900);
        let silent = ms(1000);
        assert_eq!(
            declared,
            vec![(1900, Detection::Declare { node: 0, silent })]
        );
    }

    #[test]
    fn a_server_reported_unreachable_is_still_watched_but_gets_no_heartbeat() {
        let mut d = Detector::new(2, 4, CFG, ms(0));
        assert_eq!(run(&mut d, 0, 0), vec![]);
        // The predecessor (1) and the successor (3) are reported lost by the fabric.
        d.unreachable(1, ms(50));
        d.unreachable(3, ms(50));
        assert_eq!((d.watched(), d.successor()), (Some(1), Some(0)));
        assert_eq!(tick(&mut d, ms(50)), vec![Detection::Beat { to: 0 }]);
        // Node 1 stays watched and is declared after the timeout from its last word.
        let silent = ms(1000);
        assert_eq!(
            run(&mut d, 100, 1000),
            vec![(1000, Detection::Declare { node: 1, silent })]
        );
        assert_eq!(d.watched(), Some(0));
        // A verdict about an unreachable server moves nothing more.
        d.lost(3, ms(1100));
        assert_eq!((d.watched(), d.successor()), (Some(0), Some(0)));
    }

    #[test]
    fn a_declaration_the_judge_dropped_watches_the_server_again() {
        let mut d = Detector::new(2, 4, CFG, ms(0));
        let silent = ms(1000);
        assert_eq!(
            run(&mut d, 0, 1000),
            vec![(1000, Detection::Declare { node: 1, silent })]
        );
        assert_eq!(
            run(&mut d, 1100, 2000),
            vec![(2000, Detection::Declare { node: 0, silent })]
        );
        assert_eq!(d.watched(), Some(3));
        d.watch_again(1, ms(2050));
        assert_eq!(d.watched(), Some(1));
        // Not a server further back than the one watched: that one watches it.
        d.watch_again(0, ms(2060));
        assert_eq!(d.watched(), Some(1));
        // Nor one it never declared.
        d.watch_again(3, ms(2070));
        assert_eq!(d.watched(), Some(1));
        // Node 1's heartbeats still do not arrive (the link is broken): declared again
        // a timeout later.
        let again = Detection::Declare {
            node: 1,
            silent: ms(1050),
        };
        assert_eq!(run(&mut d, 2100, 3100), vec![(3100, again)]);
    }

    #[test]
    fn the_last_server_standing_watches_nobody() {
        let mut d = Detector::new(1, 2, CFG, ms(0));
        let declared = run(&mut d, 0, 1000);
        let silent = ms(1000);
        assert_eq!(
            declared,
            vec![(1000, Detection::Declare { node: 0, silent })]
        );
        assert_eq!(
            (d.watched(), d.successor(), d.deadline()),
            (None, None, None)
        );
        assert_eq!(tick(&mut d, ms(5000)), vec![]);
    }

    #[test]
    fn a_watcher_that_was_not_run_does_not_blame_the_watched_server() {
        let mut d = Detector::new(1, 3, CFG, ms(0));
        d.heard(0, ms(0));
        tick(&mut d, ms(0));
        let due = d.deadline().unwrap();
        // The watcher is frozen for 5 s; node 0's heartbeats wait in its socket.
        let out = tick(&mut d, due + ms(5000));
        assert!(
            !out.iter().any(|a| matches!(a, Detection::Declare { .. })),
            "{out:?}"
        );
        assert_eq!(d.watched(), Some(0));
        // It reads them and goes on watching.
        d.heard(0, due + ms(5001));
        assert!(!tick(&mut d, due + ms(5100))
            .iter()
            .any(|a| matches!(a, Detection::Declare { .. })));
        // Slightly late timers still count the silence.
        let mut d = Detector::new(1, 3, CFG, ms(0));
        let mut t = 0;
        while t < 1000 {
            let out = tick(&mut d, ms(t));
            assert!(!out.iter().any(|a| matches!(a, Detection::Declare { .. })));
            t += 130; // each timer 30 ms late
        }
        assert!(tick(&mut d, ms(1040)).contains(&Detection::Declare {
            node: 0,
            silent: ms(1040)
        }));
    }

    #[test]
    fn configurations_are_checked() {
        assert!(DetectorConfig::DEFAULT.validate().is_ok());
        let zero = DetectorConfig {
            period: Duration::ZERO,
            timeout: ms(10),
        };
        assert!(zero.validate().unwrap_err().contains("positive"));
        let short = DetectorConfig {
            period: ms(500),
            timeout: ms(1000),
        };
        assert!(short
            .validate()
            .unwrap_err()
            .contains("three heartbeat periods"));
    }
}
