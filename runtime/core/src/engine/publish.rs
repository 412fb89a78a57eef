//! Publish / lookup / unpublish: the job's data store (`crate::datastore`) is the
//! launcher's, the one process of a job that lives exactly as long as the job, so no
//! node server's loss takes the published data with it. A node server forwards its
//! processes' calls there ([`Action::Data`], which its driver sends over the control
//! connection) and hands their answers back ([`Engine::on_data_answer`]).

use super::*;
use cohort_proto::control::MAX_DATA_CALL;

/// A local process's call waiting for the data store's answer.
pub(super) struct DataWait {
    client: ClientId,
    req: ReqId,
    proc: ProcId,
}

impl Engine {
    /// A local process's publish, lookup or unpublish: to the data store, unless it is
    /// too large to forward.
    pub(super) fn data_request(&mut self, client: ClientId, id: ReqId, proc: ProcId, req: Request) {
        // The body's size, computed without encoding it (the driver encodes it once).
        let size = cohort_proto::frame::encoded_len(&req) - 4;
        if size > MAX_DATA_CALL {
            let err = CohortError::BadRequest(format!(
                "{} by {proc} is {size} bytes; the job's data store takes calls of up to \
                 {MAX_DATA_CALL} bytes",
                req.op_name()
            ));
            return self.reply(client, id, Err(err));
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
        self.actions.push(Action::Data { token, proc, req });
    }

    /// The data store's answer to this server's call `token` (a call of a process
    /// that terminated meanwhile gets none).
    pub fn on_data_answer(&mut self, token: u64, result: Result<Response, CohortError>) {
        if let Some(w) = self.data_waits.remove(&token) {
            self.reply(w.client, w.req, result);
        }
    }

    /// Process `proc` terminated: its calls here need no answer, and if it is local,
    /// the data store is told (its rank's exit may come much later, or never for a
    /// client that closed its connection and lives on).
    pub(super) fn data_proc_terminated(&mut self, proc: &ProcId) {
        self.data_waits.retain(|_, w| w.proc != *proc);
        if self.jobs.node_of(proc) == Some(self.node) {
            self.actions
                .push(Action::DataProcGone { proc: proc.clone() });
        }
    }
}
