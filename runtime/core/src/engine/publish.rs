//! Publish / lookup / unpublish: every node server forwards its processes' calls to
//! the job's data store at [`DATA_HOME`] (`crate::datastore`), which answers each with
//! `PeerMsg::DataReply`. The store's server sees every call in one order, so
//! duplicates are decided in one place; it learns of terminations from the
//! `ProcTerminated` and `NodeLost` every server gets. If it is lost, every call
//! waiting for it, and every later one, fails with `PeerLost` naming it.

use super::*;

/// The node server holding the job's data store.
pub(super) const DATA_HOME: NodeId = 0;

/// A local process's call waiting for the data store's answer.
pub(super) struct DataWait {
    client: ClientId,
    req: ReqId,
    proc: ProcId,
}

impl Engine {
    fn data_home_lost(&self) -> CohortError {
        CohortError::PeerLost {
            node: DATA_HOME,
            reason: "it held the job's published data (publish/lookup)".into(),
        }
    }

    /// A local process's publish, lookup or unpublish: to the data store.
    pub(super) fn data_request(&mut self, client: ClientId, id: ReqId, proc: ProcId, req: Request) {
        if self.lost_nodes.contains(&DATA_HOME) {
            let err = self.data_home_lost();
            self.reply(client, id, Err(err));
            return;
        }
        let token = self.next_data_token;
        self.next_data_token += 1;
        self.data_waits.insert(
            token,
            DataWait {
                client,
                req: id,
                proc: proc.clone(),
            },
        );
        self.send_peer(DATA_HOME, PeerMsg::Data { token, proc, req });
    }

    /// At the data store: the call `req` of `proc`, forwarded by node server `from`.
    pub(super) fn on_data(
        &mut self,
        from: NodeId,
        token: u64,
        proc: ProcId,
        req: Request,
        now: Time,
    ) {
        let node = match self.job.node_of(&proc) {
            Some(n) if n == from => n,
            _ => {
                tracing::error!(%proc, from, "protocol violation: node server {from} forwarded a call of a process it does not host; dropped");
                return;
            }
        };
        if self.node != DATA_HOME {
            let err = CohortError::Protocol(format!(
                "node server {} does not hold the job's data store (node {DATA_HOME} does)",
                self.node
            ));
            self.send_peer(
                from,
                PeerMsg::DataReply {
                    token,
                    result: Err(err),
                },
            );
            return;
        }
        if self.terminated.contains(&proc) {
            return;
        }
        let result = match req {
            Request::Publish {
                data,
                range,
                persistence,
            } => match self
                .datastore
                .publish(&proc, node, data, &range, persistence)
            {
                Ok(answers) => {
                    self.send_data_answers(answers);
                    Some(Ok(Response::Done))
                }
                Err(e) => Some(Err(e)),
            },
            Request::Lookup { keys, opts } => self
                .datastore
                .lookup(&proc, node, keys, &opts, from, token, now),
            Request::Unpublish { keys, range } => Some(
                self.datastore
                    .unpublish(&proc, node, keys.as_deref(), &range)
                    .map(|_| Response::Done),
            ),
            other => Some(Err(CohortError::Protocol(format!(
                "{} is not a data store call",
                other.op_name()
            )))),
        };
        if let Some(result) = result {
            self.send_peer(from, PeerMsg::DataReply { token, result });
        }
    }

    pub(super) fn send_data_answers(&mut self, answers: Vec<crate::datastore::Answer>) {
        for a in answers {
            self.send_peer(
                a.home,
                PeerMsg::DataReply {
                    token: a.token,
                    result: a.result,
                },
            );
        }
    }

    /// The data store's answer to this server's call `token`.
    pub(super) fn on_data_reply(&mut self, token: u64, result: Result<Response, CohortError>) {
        if let Some(w) = self.data_waits.remove(&token) {
            self.reply(w.client, w.req, result);
        }
    }

    /// Process `proc` terminated: its calls here need no answer, and the store drops
    /// its proc-persistent data and waiting lookups.
    pub(super) fn data_proc_terminated(&mut self, proc: &ProcId) {
        self.data_waits.retain(|_, w| w.proc != *proc);
        if self.node == DATA_HOME {
            self.datastore.proc_terminated(proc);
        }
    }

    /// Node server `peer` is lost: if it held the data store, every call waiting for
    /// it fails; at the store, lookups to be answered there go.
    pub(super) fn data_node_lost(&mut self, peer: NodeId) {
        if peer == DATA_HOME {
            let err = self.data_home_lost();
            let mut waits: Vec<(u64, DataWait)> = self.data_waits.drain().collect();
            waits.sort_unstable_by_key(|(t, _)| *t);
            for (_, w) in waits {
                self.reply(w.client, w.req, Err(err.clone()));
            }
        }
        if self.node == DATA_HOME {
            self.datastore.home_lost(peer);
        }
    }
}
