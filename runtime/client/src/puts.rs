//! Data posted with `put` and not yet committed: split by scope into the local and
//! remote halves of a `Commit` (global data goes into both).

use cohort_proto::msg::Request;
use cohort_proto::{Info, Scope, Value};

#[derive(Default)]
pub(crate) struct PutBuffer {
    local: Info,
    remote: Info,
    /// Commit requests taken (each is sent, or restored): the node server counts the
    /// same, which orders gets after a node-local fence.
    commits: u64,
}

impl PutBuffer {
    /// Records `key`; a later put of the same key in the same half replaces it.
    pub(crate) fn put(&mut self, scope: Scope, key: &str, value: Value) {
        match scope {
            Scope::Local => upsert(&mut self.local, key, value),
            Scope::Remote => upsert(&mut self.remote, key, value),
            Scope::Global => {
                upsert(&mut self.local, key, value.clone());
                upsert(&mut self.remote, key, value);
            }
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.local.is_empty() && self.remote.is_empty()
    }

    /// Empties the buffer into a commit request.
    pub(crate) fn take_commit(&mut self) -> Request {
        self.commits += 1;
        Request::Commit {
            local: std::mem::take(&mut self.local),
            remote: std::mem::take(&mut self.remote),
        }
    }

    /// Puts back a commit that could not be sent (too large). Called under the same
    /// lock as `take_commit`, so no newer put can be in the buffer.
    pub(crate) fn restore(&mut self, commit: Request) {
        if let Request::Commit { local, remote } = commit {
            self.commits -= 1;
            self.local = local;
            self.remote = remote;
        }
    }

    /// Commit requests sent so far.
    pub(crate) fn commits(&self) -> u64 {
        self.commits
    }
}

fn upsert(info: &mut Info, key: &str, value: Value) {
    match info.iter_mut().find(|(k, _)| k == key) {
        Some(slot) => slot.1 = value,
        None => info.push((key.to_string(), value)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_split_and_last_put_wins() {
        let mut b = PutBuffer::default();
        b.put(Scope::Local, "l", 1u32.into());
        b.put(Scope::Remote, "r", 2u32.into());
        b.put(Scope::Global, "g", "x".into());
        b.put(Scope::Local, "l", 3u32.into());
        let Request::Commit { local, remote } = b.take_commit() else {
            panic!("not a commit")
        };
        assert_eq!(
            local,
            vec![("l".into(), Value::U32(3)), ("g".into(), "x".into())]
        );
        assert_eq!(
            remote,
            vec![("r".into(), Value::U32(2)), ("g".into(), "x".into())]
        );
        assert!(b.is_empty());
    }
}
