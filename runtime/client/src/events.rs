//! Event handlers: registration, the cache of events nobody was registered for, and the
//! dedicated event thread that runs handlers (never the reader thread, so a handler may
//! call blocking client APIs).
//!
//! Ordering: the reader thread and `register_event_handler` feed one channel, so a new
//! handler becomes active at its place in the event stream. Events that arrived before
//! it and matched no handler sit in the cache and are handed to it, oldest first, when
//! the event thread activates it.
//!
//! An event goes to its matching handlers in PMIx's order: those registered for one
//! code, then those for several, then those for every code, each group in registration
//! order; a handler that answers [`EventFlow::Stop`] (PMIx's
//! `PMIX_EVENT_ACTION_COMPLETE`) ends the chain for that event.

use std::collections::VecDeque;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, Weak};

use cohort_proto::event::{codes, Event, EventCode};

use crate::conn::{lock, IoClock};
use crate::{Client, Inner};

/// Events kept for handlers not yet registered; the oldest are dropped beyond this.
pub const EVENT_CACHE_CAPACITY: usize = 1024;

/// Identifies a registered handler, for [`Client::deregister_event_handler`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HandlerId(u64);

pub(crate) type HandlerFn = dyn Fn(&Client, &Event) -> EventFlow + Send + Sync + 'static;

/// What a chained handler (`Client::register_event_chain`) says after an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventFlow {
    /// The next matching handler gets the event too.
    Continue,
    /// The event is dealt with: no further handler gets it.
    Stop,
}

/// Work for the event thread, in arrival order.
pub(crate) enum EventMsg {
    /// An event from the server (or the synthesized LOST_CONNECTION).
    Event(Event),
    /// A handler was registered: activate it and hand it matching cached events.
    Activate(HandlerId),
}

struct Registered {
    id: HandlerId,
    /// `None` = every code.
    codes: Option<Vec<EventCode>>,
    handler: Arc<HandlerFn>,
    /// False until the event thread reaches this registration in the stream.
    active: bool,
}

impl Registered {
    fn matches(&self, code: EventCode) -> bool {
        self.codes.as_ref().is_none_or(|c| c.contains(&code))
    }

    /// Its place in an event's chain: one code, several codes, every code.
    fn rank(&self) -> u8 {
        match &self.codes {
            Some(c) if c.len() == 1 => 0,
            Some(_) => 1,
            None => 2,
        }
    }
}

#[derive(Default)]
struct RegistryState {
    handlers: Vec<Registered>,
    cache: VecDeque<Event>,
    next_id: u64,
}

/// Handlers in registration order plus the bounded cache of unclaimed events.
#[derive(Default)]
pub(crate) struct EventRegistry {
    state: Mutex<RegistryState>,
    /// Whether any handler is registered (read by the event thread without the lock).
    has_handlers: std::sync::atomic::AtomicBool,
}

impl EventRegistry {
    /// Adds an inactive handler; the caller then queues [`EventMsg::Activate`].
    /// An empty code list means every code, as in PMIx.
    pub(crate) fn add(&self, codes: Option<&[EventCode]>, handler: Arc<HandlerFn>) -> HandlerId {
        let mut st = lock(&self.state);
        st.next_id += 1;
        let id = HandlerId(st.next_id);
        st.handlers.push(Registered {
            id,
            codes: codes.filter(|c| !c.is_empty()).map(<[EventCode]>::to_vec),
            handler,
            active: false,
        });
        self.has_handlers
            .store(true, std::sync::atomic::Ordering::Relaxed);
        id
    }

    /// Removes a handler; an invocation already running finishes, no new one starts.
    pub(crate) fn remove(&self, id: HandlerId) {
        let mut st = lock(&self.state);
        st.handlers.retain(|h| h.id != id);
        self.has_handlers.store(
            !st.handlers.is_empty(),
            std::sync::atomic::Ordering::Relaxed,
        );
    }

    /// Activates `id` and takes the cached events it matches, oldest first.
    fn activate(&self, id: HandlerId) -> Option<(Arc<HandlerFn>, Vec<Event>)> {
        let mut st = lock(&self.state);
        let h = st.handlers.iter_mut().find(|h| h.id == id)?;
        h.active = true;
        let handler = Arc::clone(&h.handler);
        let codes = h.codes.clone();
        let mut claimed = Vec::new();
        st.cache.retain(|ev| {
            let hit = codes.as_ref().is_none_or(|c| c.contains(&ev.code));
            if hit {
                claimed.push(ev.clone());
            }
            !hit
        });
        Some((handler, claimed))
    }

    /// Active handlers matching `event`, in chain order (see the module); caches it
    /// if none.
    fn route(&self, event: &Event) -> Vec<Arc<HandlerFn>> {
        let mut st = lock(&self.state);
        let mut matching: Vec<&Registered> = st
            .handlers
            .iter()
            .filter(|h| h.active && h.matches(event.code))
            .collect();
        // Stable: registration order within each rank.
        matching.sort_by_key(|h| h.rank());
        let targets: Vec<_> = matching
            .into_iter()
            .map(|h| Arc::clone(&h.handler))
            .collect();
        if targets.is_empty() {
            if st.cache.len() >= EVENT_CACHE_CAPACITY {
                if let Some(old) = st.cache.pop_front() {
                    tracing::warn!(
                        code = old.code,
                        name = codes::name(old.code).unwrap_or("application event"),
                        source = %old.source,
                        "event cache full ({EVENT_CACHE_CAPACITY}); dropping the oldest unclaimed event"
                    );
                }
            }
            st.cache.push_back(event.clone());
        }
        targets
    }
}

/// Body of the event thread. Ends when every sender is gone or the client is dropped.
pub(crate) fn run_event_thread(
    rx: crossbeam_channel::Receiver<EventMsg>,
    registry: Arc<EventRegistry>,
    client: Weak<Inner>,
    io_clock: Arc<IoClock>,
) {
    while let Some(msg) = next_msg(&rx, &registry, &io_clock) {
        let (targets, events) = match msg {
            EventMsg::Event(ev) => (registry.route(&ev), vec![ev]),
            EventMsg::Activate(id) => match registry.activate(id) {
                Some((h, evs)) => (vec![h], evs),
                None => continue,
            },
        };
        if targets.is_empty() || events.is_empty() {
            continue;
        }
        // A temporary handle; if it turns out to be the last one, the client closes here.
        let Some(inner) = client.upgrade() else {
            return;
        };
        let handle = Client { inner };
        for ev in &events {
            for h in &targets {
                if call_handler(h.as_ref(), &handle, ev) == EventFlow::Stop {
                    break;
                }
            }
        }
    }
}

/// The next message: polled for (yielding the CPU) for the spin budget after the last
/// event or the connection's last exchange, since events of one operation come in
/// bursts (invited, accepted, complete) and follow the process's own traffic; then
/// waited for. `None` once every sender is gone.
fn next_msg(
    rx: &crossbeam_channel::Receiver<EventMsg>,
    registry: &EventRegistry,
    io: &IoClock,
) -> Option<EventMsg> {
    let budget = crate::conn::spin_budget();
    let start = std::time::Instant::now();
    // Without handlers, events are only cached: no need to be prompt.
    let handled = || {
        registry
            .has_handlers
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    // While a call is blocked, its thread polls; a second poller would only compete
    // with it for the CPU.
    let recent_io = || !io.call_blocked() && io.within(budget);
    while !budget.is_zero() && handled() && (start.elapsed() < budget || recent_io()) {
        match rx.try_recv() {
            Ok(m) => return Some(m),
            Err(crossbeam_channel::TryRecvError::Disconnected) => return None,
            Err(crossbeam_channel::TryRecvError::Empty) => {
                cohort_proto::env::yield_cpu();
            }
        }
    }
    rx.recv().ok()
}

fn call_handler(h: &HandlerFn, client: &Client, ev: &Event) -> EventFlow {
    match std::panic::catch_unwind(AssertUnwindSafe(|| h(client, ev))) {
        Ok(flow) => flow,
        Err(_) => {
            tracing::error!(
                code = ev.code,
                source = %ev.source,
                "an event handler panicked; the event thread carries on"
            );
            EventFlow::Continue
        }
    }
}
