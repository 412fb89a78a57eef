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
//!
//! A deferred handler ([`Client::register_event_chain_deferred`], what libpmix's
//! handlers are) answers through a [`ChainResume`], at once or later from any thread;
//! until it does, the rest of that event's chain waits (parked here) while other
//! events go on, as PMIx's handlers hold their chain until they call its callback.
//! It may answer with results ([`ChainResume::proceed_with`]), which the deferred
//! handlers after it in that event's chain see ([`ChainResume::results`]), as PMIx
//! hands each handler the results of those before it.

use std::collections::{HashMap, VecDeque};
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, Weak};

use cohort_proto::event::{codes, Event, EventCode};
use cohort_proto::Info;

use crate::conn::{lock, IoClock};
use crate::{Client, Inner};

/// Events kept for handlers not yet registered; the oldest are dropped beyond this.
pub const EVENT_CACHE_CAPACITY: usize = 1024;

/// Identifies a registered handler, for [`Client::deregister_event_handler`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HandlerId(u64);

pub(crate) type HandlerFn = dyn Fn(&Client, &Event) -> EventFlow + Send + Sync + 'static;
pub(crate) type DeferredFn = dyn Fn(&Client, &Event, ChainResume) + Send + Sync + 'static;

/// How a handler answers: when it returns, or later through a [`ChainResume`].
pub(crate) enum Handler {
    Now(Box<HandlerFn>),
    Deferred(Box<DeferredFn>),
}

/// A deferred handler's say in its event's chain: [`proceed`](Self::proceed) once,
/// from any thread, during the call or after it. Until then, the handlers after it do
/// not get that event. Dropped without an answer, it ends the chain (as
/// [`EventFlow::Stop`]).
pub struct ChainResume {
    chain: u64,
    state: Arc<Mutex<ResumeSlot>>,
    /// The results of the handlers before this one in the event's chain.
    results: Info,
    /// Not a sender of its own: one kept unanswered must not keep the event thread
    /// of a dropped client waiting.
    client: Weak<Inner>,
    answered: bool,
}

/// A deferred handler's answer as the event thread finds it.
struct ResumeSlot {
    state: ResumeState,
    /// The chain's results with this handler's merged in, once it answered.
    results: Info,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ResumeState {
    /// The handler is running.
    Running,
    /// It returned without an answer: the chain waits for one.
    Parked,
    Answered(EventFlow),
}

impl ChainResume {
    /// Lets the chain go on ([`EventFlow::Continue`]) or ends it ([`EventFlow::Stop`]).
    pub fn proceed(mut self, flow: EventFlow) {
        self.answer(flow, Info::new());
    }

    /// As [`proceed`](Self::proceed), adding `results` to the chain's: the deferred
    /// handlers after this one get them in [`results`](Self::results). A key already
    /// there takes the new value; new keys come after the earlier ones (PMIx's
    /// aggregation of handler results).
    pub fn proceed_with(mut self, flow: EventFlow, results: Info) {
        self.answer(flow, results);
    }

    /// What the handlers before this one in the event's chain answered with (empty
    /// for the first, and after handlers that gave none).
    pub fn results(&self) -> &Info {
        &self.results
    }

    fn answer(&mut self, flow: EventFlow, results: Info) {
        if std::mem::replace(&mut self.answered, true) {
            return;
        }
        let mut merged = std::mem::take(&mut self.results);
        merge_results(&mut merged, results);
        let mut slot = lock(&self.state);
        let parked = slot.state == ResumeState::Parked;
        slot.state = ResumeState::Answered(flow);
        if !parked {
            slot.results = merged;
            return;
        }
        drop(slot);
        if let Some(inner) = self.client.upgrade() {
            let _ = inner.events.send(EventMsg::Resume {
                chain: self.chain,
                flow,
                results: merged,
            });
        }
    }
}

/// Adds a handler's `new` results to the chain's `acc`: a key already there takes
/// the new value, new keys are appended in their order.
fn merge_results(acc: &mut Info, new: Info) {
    for (k, v) in new {
        match acc.iter_mut().find(|(key, _)| *key == k) {
            Some(slot) => slot.1 = v,
            None => acc.push((k, v)),
        }
    }
}

impl Drop for ChainResume {
    fn drop(&mut self) {
        self.answer(EventFlow::Stop, Info::new());
    }
}

impl std::fmt::Debug for ChainResume {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChainResume")
            .field("chain", &self.chain)
            .finish()
    }
}

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
    /// A deferred handler answered after it returned: chain `chain` goes on (with
    /// the chain's results so far) or ends.
    Resume {
        chain: u64,
        flow: EventFlow,
        results: Info,
    },
}

struct Registered {
    id: HandlerId,
    /// `None` = every code.
    codes: Option<Vec<EventCode>>,
    handler: Arc<Handler>,
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
    pub(crate) fn add(&self, codes: Option<&[EventCode]>, handler: Arc<Handler>) -> HandlerId {
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

    /// Whether `id` is still registered.
    fn is_registered(&self, id: HandlerId) -> bool {
        lock(&self.state).handlers.iter().any(|h| h.id == id)
    }

    /// Activates `id` and takes the cached events it matches, oldest first.
    fn activate(&self, id: HandlerId) -> Option<(Target, Vec<Event>)> {
        let mut st = lock(&self.state);
        let h = st.handlers.iter_mut().find(|h| h.id == id)?;
        h.active = true;
        let handler = (h.id, Arc::clone(&h.handler));
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
    fn route(&self, event: &Event) -> Vec<Target> {
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
            .map(|h| (h.id, Arc::clone(&h.handler)))
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

/// A handler an event goes to.
type Target = (HandlerId, Arc<Handler>);

/// The rest of an event's chain, waiting for a deferred handler's answer.
struct Parked {
    event: Event,
    targets: Vec<Target>,
    next: usize,
}

/// Body of the event thread. Ends when every sender is gone or the client is dropped.
pub(crate) fn run_event_thread(
    rx: crossbeam_channel::Receiver<EventMsg>,
    registry: Arc<EventRegistry>,
    client: Weak<Inner>,
    io_clock: Arc<IoClock>,
) {
    let mut parked: HashMap<u64, Parked> = HashMap::new();
    let mut next_chain: u64 = 0;
    while let Some(msg) = next_msg(&rx, &registry, &io_clock) {
        // The results a resumed chain carries on with (a new event's chain has none).
        let mut carried = Info::new();
        let (targets, events, first) = match msg {
            EventMsg::Event(ev) => (registry.route(&ev), vec![ev], 0),
            EventMsg::Activate(id) => match registry.activate(id) {
                Some((h, evs)) => (vec![h], evs, 0),
                None => continue,
            },
            EventMsg::Resume {
                chain,
                flow,
                results,
            } => match parked.remove(&chain) {
                Some(p) if flow == EventFlow::Continue => {
                    carried = results;
                    (p.targets, vec![p.event], p.next)
                }
                _ => continue,
            },
        };
        if targets.len() <= first || events.is_empty() {
            continue;
        }
        // A temporary handle; if it turns out to be the last one, the client closes here.
        let Some(inner) = client.upgrade() else {
            return;
        };
        let handle = Client { inner };
        let resumed = first > 0;
        for ev in events {
            let mut results = std::mem::take(&mut carried);
            let mut i = first;
            while i < targets.len() {
                let (id, h) = &targets[i];
                i += 1;
                // A resumed chain skips handlers deregistered while it waited.
                if resumed && !registry.is_registered(*id) {
                    continue;
                }
                let flow = match h.as_ref() {
                    Handler::Now(f) => call_handler(f.as_ref(), &handle, &ev),
                    Handler::Deferred(f) => {
                        next_chain += 1;
                        let chain = next_chain;
                        let state = Arc::new(Mutex::new(ResumeSlot {
                            state: ResumeState::Running,
                            results: Info::new(),
                        }));
                        let resume = ChainResume {
                            chain,
                            state: Arc::clone(&state),
                            results: std::mem::take(&mut results),
                            client: Arc::downgrade(&handle.inner),
                            answered: false,
                        };
                        call_deferred(f.as_ref(), &handle, &ev, resume);
                        let mut slot = lock(&state);
                        match slot.state {
                            ResumeState::Answered(flow) => {
                                results = std::mem::take(&mut slot.results);
                                flow
                            }
                            _ => {
                                slot.state = ResumeState::Parked;
                                drop(slot);
                                let rest = Parked {
                                    event: ev.clone(),
                                    targets: targets.clone(),
                                    next: i,
                                };
                                parked.insert(chain, rest);
                                break;
                            }
                        }
                    }
                };
                if flow == EventFlow::Stop {
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

/// Calls a deferred handler; a panic drops its `resume`, which ends the chain.
fn call_deferred(h: &DeferredFn, client: &Client, ev: &Event, resume: ChainResume) {
    if std::panic::catch_unwind(AssertUnwindSafe(|| h(client, ev, resume))).is_err() {
        tracing::error!(
            code = ev.code,
            source = %ev.source,
            "an event handler panicked; the event thread carries on"
        );
    }
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
