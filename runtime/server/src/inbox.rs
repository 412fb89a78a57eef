//! How fabric events reach a node service's `Rc` state from the fabric's handler.
//!
//! The fabric calls its handler from the task that read the event (see
//! `cohort_transport::AnyFabric::bind_handler`), and a handler must be `Send`, so it
//! cannot hold the service's `Rc<RefCell<..>>` state. It holds the service's id; a
//! per-thread table maps ids to the state (the fabric's tasks run in the service's
//! `LocalSet`, so on its thread). An event is applied in the handler's call when the
//! state exists and is free; otherwise it waits in the service's backlog, which a task
//! of the service drains, and every later event queues behind it, so events are applied
//! in the fabric's order. Generic over the state so these rules are tested alone.

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::rc::{Rc, Weak};
use std::thread::LocalKey;

use cohort_transport::FabricEvent;
use tokio::sync::Notify;

/// A thread's services, by id.
pub(crate) type Table<T> = RefCell<HashMap<u64, Slot<T>>>;

pub(crate) struct Slot<T> {
    /// Set once the service's state exists.
    state: Weak<RefCell<T>>,
    /// Events not applied in the handler's call (the state did not exist yet, or was
    /// in use), in order.
    backlog: VecDeque<FabricEvent>,
    /// Wakes [`drain`].
    wake: Rc<Notify>,
}

/// Registers service `id` (its state comes later, with [`attach`]); returns what wakes
/// its [`drain`] task.
pub(crate) fn register<T: 'static>(table: &'static LocalKey<Table<T>>, id: u64) -> Rc<Notify> {
    let wake = Rc::new(Notify::new());
    table.with(|t| {
        t.borrow_mut().insert(
            id,
            Slot {
                state: Weak::new(),
                backlog: VecDeque::new(),
                wake: wake.clone(),
            },
        )
    });
    wake
}

/// Service `id`'s state exists: what waited for it is applied by [`drain`].
pub(crate) fn attach<T: 'static>(
    table: &'static LocalKey<Table<T>>,
    id: u64,
    state: &Rc<RefCell<T>>,
) {
    table.with(|t| {
        if let Some(slot) = t.borrow_mut().get_mut(&id) {
            slot.state = Rc::downgrade(state);
            slot.wake.notify_one();
        }
    });
}

/// Service `id` is gone: later events for it are dropped, and its [`drain`] task ends.
pub(crate) fn unregister<T: 'static>(table: &'static LocalKey<Table<T>>, id: u64) {
    if let Some(slot) = table.with(|t| t.borrow_mut().remove(&id)) {
        slot.wake.notify_one();
    }
}

/// The handler's part: applies `ev` to service `id`'s state with `apply` now, or
/// queues it (see the module docs). `false` when there is no such service on this
/// thread (the event is dropped).
pub(crate) fn deliver<T: 'static>(
    table: &'static LocalKey<Table<T>>,
    id: u64,
    ev: FabricEvent,
    apply: impl FnOnce(&mut T, FabricEvent),
) -> bool {
    let now = table.with(|t| {
        let mut t = t.borrow_mut();
        let slot = t.get_mut(&id)?;
        if slot.backlog.is_empty() {
            if let Some(state) = slot.state.upgrade() {
                if state.try_borrow_mut().is_ok() {
                    return Some(Some((state, ev)));
                }
            }
        }
        slot.backlog.push_back(ev);
        slot.wake.notify_one();
        Some(None)
    });
    match now {
        None => false,
        Some(None) => true,
        Some(Some((state, ev))) => {
            apply(&mut state.borrow_mut(), ev);
            true
        }
    }
}

/// Service `id`'s task: applies its backlog in order whenever woken, until the
/// service is unregistered.
pub(crate) async fn drain<T: 'static>(
    table: &'static LocalKey<Table<T>>,
    id: u64,
    wake: Rc<Notify>,
    apply: impl Fn(&mut T, FabricEvent),
) {
    loop {
        wake.notified().await;
        loop {
            let next = table.with(|t| {
                let mut t = t.borrow_mut();
                let slot = t.get_mut(&id)?;
                let state = slot.state.upgrade()?;
                Some((state, slot.backlog.pop_front()?))
            });
            let Some((state, ev)) = next else { break };
            apply(&mut state.borrow_mut(), ev);
        }
        if table.with(|t| !t.borrow().contains_key(&id)) {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    thread_local! {
        static TABLE: Table<Vec<u8>> = RefCell::new(HashMap::new());
    }

    fn msg(n: u8) -> FabricEvent {
        FabricEvent::Message {
            from: 1,
            payload: Bytes::from(vec![n]),
        }
    }

    fn record(v: &mut Vec<u8>, ev: FabricEvent) {
        match ev {
            FabricEvent::Message { payload, .. } => v.push(payload[0]),
            FabricEvent::PeerLost { .. } => v.push(255),
        }
    }

    /// Events before the state exists, and while it is in use, wait; events after them
    /// queue behind them even when the state is free; everything is applied in order;
    /// once unregistered, events are refused and the drain task ends.
    #[test]
    fn events_are_applied_in_order_whether_now_or_from_the_backlog() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        tokio::task::LocalSet::new().block_on(&rt, async {
            let id = 7;
            let wake = register(&TABLE, id);
            let task = tokio::task::spawn_local(drain(&TABLE, id, wake, record));
            // No state yet: queued.
            assert!(deliver(&TABLE, id, msg(1), record));
            let state = Rc::new(RefCell::new(Vec::new()));
            attach(&TABLE, id, &state);
            // Behind the backlog, though the state is free.
            assert!(deliver(&TABLE, id, msg(2), record));
            assert!(state.borrow().is_empty(), "applied ahead of the backlog");
            tokio::task::yield_now().await;
            assert_eq!(*state.borrow(), vec![1, 2]);
            // Free and no backlog: applied in the call.
            assert!(deliver(&TABLE, id, msg(3), record));
            assert_eq!(*state.borrow(), vec![1, 2, 3]);
            // In use: queued, then applied by the task.
            {
                let _held = state.borrow_mut();
                assert!(deliver(&TABLE, id, msg(4), record));
            }
            assert!(deliver(&TABLE, id, msg(5), record));
            assert_eq!(*state.borrow(), vec![1, 2, 3]);
            tokio::task::yield_now().await;
            assert_eq!(*state.borrow(), vec![1, 2, 3, 4, 5]);
            unregister(&TABLE, id);
            assert!(!deliver(&TABLE, id, msg(6), record));
            tokio::time::timeout(std::time::Duration::from_secs(10), task)
                .await
                .expect("the drain task ends once unregistered")
                .unwrap();
            assert_eq!(*state.borrow(), vec![1, 2, 3, 4, 5]);
        });
    }
}
