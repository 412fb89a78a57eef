//! Client tests against a scripted in-test server that speaks the proto frames over a
//! real Unix socket: reply routing, event caching, connection loss, handshake errors,
//! put/commit framing and handler re-entrancy.

use std::future::Future;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::PathBuf;
use std::pin::pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Wake, Waker};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

use cohort_proto::frame::{self, MAX_CLIENT_FRAME};
use cohort_proto::msg::{ClientFrame, Hello, Request, Response, ServerFrame, Welcome};
use cohort_proto::value::info_get;
use cohort_proto::PROTOCOL_VERSION;

use crate::*;

/// Upper bound on any wait in these tests, so a bug fails a test instead of hanging it.
pub(crate) const TEST_DEADLINE: Duration = Duration::from_secs(10);
const TOKEN: &[u8] = b"\x01\x02secret";

/// The server end of one client connection.
pub(crate) struct ServerSide {
    stream: UnixStream,
    buf: Vec<u8>,
}

impl ServerSide {
    /// Next client frame; `None` once the client closed the connection.
    pub(crate) fn recv(&mut self) -> Option<ClientFrame> {
        frame::read_frame(&mut self.stream, MAX_CLIENT_FRAME, &mut self.buf)
            .expect("test server read")
    }

    pub(crate) fn expect(&mut self) -> ClientFrame {
        self.recv().expect("client closed the connection early")
    }

    pub(crate) fn send(&mut self, f: &ServerFrame) {
        use std::io::Write;
        self.stream
            .write_all(&frame::encode(f))
            .expect("test server write");
    }

    pub(crate) fn reply(&mut self, id: u64, result: std::result::Result<Response, CohortError>) {
        self.send(&ServerFrame::Reply { id, result });
    }

    fn event(&mut self, code: EventCode, n: u64) {
        self.send(&ServerFrame::Event(Event {
            code,
            source: ProcId::new("job", 3),
            affected: Vec::new(),
            info: vec![("n".into(), Value::U64(n))],
        }));
    }
}

fn socket_path() -> PathBuf {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let dir = std::env::temp_dir().join(format!(
        "cohort-client-test-{}-{}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ));
    std::fs::create_dir_all(&dir).expect("test socket dir");
    dir.join("server.sock")
}

fn welcome() -> Welcome {
    Welcome {
        job: JobMap::block("job", 4, 2),
        node: 0,
        node_name: "node0".into(),
        fence_shm: None,
        universe: 4,
        local_bindings: Vec::new(),
    }
}

/// Starts a one-connection server that checks the hello, answers `welcome`, then runs
/// `script` on the connection.
fn serve(
    welcome: std::result::Result<Welcome, CohortError>,
    script: impl FnOnce(&mut ServerSide) + Send + 'static,
) -> (PathBuf, JoinHandle<()>) {
    let path = socket_path();
    let listener = UnixListener::bind(&path).expect("bind test socket");
    let cleanup = path.clone();
    let handle = thread::spawn(move || {
        let (stream, _) = listener.accept().expect("accept");
        stream
            .set_read_timeout(Some(TEST_DEADLINE))
            .expect("read timeout");
        let mut side = ServerSide {
            stream,
            buf: Vec::new(),
        };
        let hello: Hello = frame::read_frame(&mut side.stream, MAX_CLIENT_FRAME, &mut side.buf)
            .expect("hello")
            .expect("hello frame");
        assert_eq!(hello.version, PROTOCOL_VERSION);
        assert_eq!(hello.token, TOKEN);
        assert_eq!(hello.pid, std::process::id());
        let accepted = welcome.is_ok();
        side.send(&ServerFrame::Welcome(welcome));
        if accepted {
            script(&mut side);
        }
        if let Some(dir) = cleanup.parent() {
            let _ = std::fs::remove_dir_all(dir);
        }
    });
    (path, handle)
}

pub(crate) fn client_with(
    script: impl FnOnce(&mut ServerSide) + Send + 'static,
) -> (Client, JoinHandle<()>) {
    let (path, server) = serve(Ok(welcome()), script);
    let client = Client::connect(&path, "job", 1, TOKEN).expect("connect");
    (client, server)
}

/// Runs `f` on its own thread and fails the test if it does not finish in time.
fn within_deadline<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = crossbeam_channel::bounded(1);
    thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(TEST_DEADLINE)
        .expect("operation did not finish within the test deadline")
}

/// A minimal executor (no tokio), to show the async forms are runtime-agnostic.
pub(crate) fn block_on<F: Future>(f: F) -> F::Output {
    struct Unpark(thread::Thread);
    impl Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(Unpark(thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut f = pin!(f);
    loop {
        match f.as_mut().poll(&mut cx) {
            Poll::Ready(v) => return v,
            Poll::Pending => thread::park(),
        }
    }
}

fn key_of(req: &Request) -> String {
    match req {
        Request::Get { key, .. } => key.clone(),
        other => panic!("expected a get, got {other:?}"),
    }
}

#[test]
fn connect_exposes_the_welcome() {
    let (client, server) = client_with(|s| assert!(s.recv().is_none()));
    assert_eq!(client.proc_id(), &ProcId::new("job", 1));
    assert_eq!(
        (client.rank(), client.size(), client.nspace()),
        (1, 4, "job")
    );
    assert_eq!((client.node_id(), client.node_name()), (0, "node0"));
    assert_eq!(client.job().rank_node, vec![0, 0, 1, 1]);
    // Dropping the last handle closes the socket, so the server sees EOF.
    drop(client);
    server.join().expect("server");
}

#[test]
fn replies_route_by_id_when_out_of_order() {
    const THREADS: usize = 4;
    const ROUNDS: usize = 25;
    let (client, server) = client_with(|s| {
        for _ in 0..ROUNDS {
            // Every client thread has exactly one get outstanding: collect them all,
            // then answer in reverse arrival order.
            let batch: Vec<ClientFrame> = (0..THREADS).map(|_| s.expect()).collect();
            for f in batch.iter().rev() {
                let key = key_of(&f.req);
                s.reply(f.id, Ok(Response::Value(Value::Str(key))));
            }
        }
        assert!(s.recv().is_none());
    });
    let workers: Vec<_> = (0..THREADS)
        .map(|t| {
            let client = client.clone();
            thread::spawn(move || {
                let peer = ProcId::new("job", 0);
                for r in 0..ROUNDS {
                    let key = format!("t{t}-r{r}");
                    let v = if t == 0 {
                        block_on(client.get_async(&peer, &key, None))
                    } else {
                        client.get(&peer, &key, Some(Duration::from_secs(5)))
                    };
                    assert_eq!(v.expect("get"), Value::Str(key));
                }
            })
        })
        .collect();
    for w in workers {
        w.join().expect("worker");
    }
    drop(client);
    server.join().expect("server");
}

#[test]
fn server_errors_reach_the_caller_unchanged() {
    let err = CohortError::NotFound {
        proc: ProcId::new("job", 2),
        key: "k".into(),
    };
    let sent = err.clone();
    let (client, server) = client_with(move |s| {
        let f = s.expect();
        s.reply(f.id, Err(sent));
        let f = s.expect();
        // A reply of the wrong kind is a protocol error, not a panic.
        s.reply(f.id, Ok(Response::Done));
        assert!(s.recv().is_none());
    });
    let got = client.get(&ProcId::new("job", 2), "k", None);
    assert_eq!(got, Err(err));
    let got = client.group_query("g");
    assert!(matches!(got, Err(CohortError::Protocol(_))), "{got:?}");
    drop(client);
    server.join().expect("server");
}

type Log = Arc<Mutex<Vec<(&'static str, EventCode, u64)>>>;

fn recording_handler(
    name: &'static str,
    log: &Log,
    done: &crossbeam_channel::Sender<()>,
) -> impl Fn(&Client, &Event) + Send + Sync + 'static {
    let log = Arc::clone(log);
    let done = done.clone();
    move |_, ev| {
        let n = info_get(&ev.info, "n").and_then(Value::as_u64).unwrap_or(0);
        log.lock().expect("log").push((name, ev.code, n));
        let _ = done.send(());
    }
}

/// PMIx's chain: handlers for the event's code alone, then for several codes, then
/// for every code, whatever order they were registered in; a handler that says
/// `Stop` (PMIX_EVENT_ACTION_COMPLETE) ends the chain for that event only.
#[test]
fn handlers_run_in_pmix_order_and_stop_ends_the_chain() {
    const A: EventCode = 1101;
    const B: EventCode = 1102;
    let (client, server) = client_with(|s| {
        let f = s.expect();
        s.event(A, 1);
        s.event(B, 2);
        s.reply(f.id, Ok(Response::GroupNames(vec![])));
        assert!(s.recv().is_none());
    });
    let log: Log = Arc::default();
    let (done, fired) = crossbeam_channel::unbounded();
    client.register_event_handler(None, recording_handler("all", &log, &done));
    client.register_event_handler(Some(&[A, B]), recording_handler("both", &log, &done));
    let record = recording_handler("only-A", &log, &done);
    client.register_event_chain(Some(&[A]), move |c, e| {
        record(c, e);
        EventFlow::Stop
    });
    client.register_event_handler(Some(&[B]), recording_handler("only-B", &log, &done));
    client.group_names().expect("sync");
    // A: only-A first, and it stops the chain. B: only-B, both, all.
    for _ in 0..4 {
        fired.recv_timeout(TEST_DEADLINE).expect("delivery");
    }
    assert!(fired.recv_timeout(Duration::from_millis(200)).is_err());
    assert_eq!(
        *log.lock().expect("log"),
        vec![
            ("only-A", A, 1),
            ("only-B", B, 2),
            ("both", B, 2),
            ("all", B, 2)
        ]
    );
    drop(client);
    server.join().expect("server thread");
}

/// A deferred handler (libpmix's kind) holds its event's chain until it answers, from
/// another thread after it returned; other events go on meanwhile. `Stop` given late
/// ends the chain, and so does a resume dropped without an answer.
#[test]
fn a_deferred_handler_holds_its_chain_until_it_answers() {
    const A: EventCode = 1201;
    const B: EventCode = 1202;
    const C: EventCode = 1203;
    let (client, server) = client_with(|s| {
        let f = s.expect();
        s.event(A, 1);
        s.event(B, 2);
        s.event(C, 3);
        s.reply(f.id, Ok(Response::GroupNames(vec![])));
        assert!(s.recv().is_none());
    });
    let log: Log = Arc::default();
    let (done, fired) = crossbeam_channel::unbounded();
    let (parked_tx, parked) = crossbeam_channel::unbounded::<(EventCode, ChainResume)>();
    // First in every chain (one code each); it answers from this test's thread.
    for code in [A, B, C] {
        let tx = parked_tx.clone();
        client.register_event_chain_deferred(Some(&[code]), move |_, ev, resume| {
            let _ = tx.send((ev.code, resume));
        });
    }
    client.register_event_handler(None, recording_handler("all", &log, &done));
    client.group_names().expect("sync");
    let mut waiting = std::collections::BTreeMap::new();
    for _ in 0..3 {
        let (code, resume) = parked.recv_timeout(TEST_DEADLINE).expect("deferred call");
        waiting.insert(code, resume);
    }
    // All three chains wait: "all" has seen nothing.
    assert!(fired.recv_timeout(Duration::from_millis(200)).is_err());
    assert!(log.lock().expect("log").is_empty());
    // B goes on (from another thread); C ends; A's resume is dropped.
    let b = waiting.remove(&B).expect("B");
    thread::spawn(move || b.proceed(EventFlow::Continue))
        .join()
        .expect("resume thread");
    fired
        .recv_timeout(TEST_DEADLINE)
        .expect("B reaches the next handler");
    waiting.remove(&C).expect("C").proceed(EventFlow::Stop);
    drop(waiting);
    assert!(fired.recv_timeout(Duration::from_millis(200)).is_err());
    assert_eq!(*log.lock().expect("log"), vec![("all", B, 2)]);
    drop(client);
    server.join().expect("server thread");
}

/// PMIx hands each handler the results of those before it in the event's chain: a
/// handler's results (given at once or later) reach the deferred handlers after it,
/// merged by key, and never another event's chain.
#[test]
fn a_chains_results_reach_the_handlers_after_it() {
    const A: EventCode = 1301;
    const B: EventCode = 1302;
    let (client, server) = client_with(|s| {
        let f = s.expect();
        s.event(A, 1);
        s.event(B, 2);
        s.reply(f.id, Ok(Response::GroupNames(vec![])));
        assert!(s.recv().is_none());
    });
    let num = |k: &str, v: u64| (k.to_string(), Value::U64(v));
    // first for A: answers at once with x=1, y=2
    client.register_event_chain_deferred(Some(&[A]), move |_, _, resume| {
        assert!(resume.results().is_empty(), "{:?}", resume.results());
        resume.proceed_with(EventFlow::Continue, vec![num("x", 1), num("y", 2)]);
    });
    // then, for A and B: hands its resume over, answered later with y=3, z=4
    let (mid_tx, mid) = crossbeam_channel::unbounded::<(EventCode, ChainResume)>();
    client.register_event_chain_deferred(Some(&[A, B]), move |_, ev, resume| {
        let _ = mid_tx.send((ev.code, resume));
    });
    // last, for every code: records what it was given
    let (last_tx, last) = crossbeam_channel::unbounded::<(EventCode, Info)>();
    client.register_event_chain_deferred(None, move |_, ev, resume| {
        let _ = last_tx.send((ev.code, resume.results().clone()));
        resume.proceed(EventFlow::Continue);
    });
    client.group_names().expect("sync");
    let mut seen = std::collections::BTreeMap::new();
    for _ in 0..2 {
        let (code, resume) = mid.recv_timeout(TEST_DEADLINE).expect("the middle handler");
        seen.insert(code, resume);
    }
    assert_eq!(*seen[&A].results(), vec![num("x", 1), num("y", 2)]);
    assert!(seen[&B].results().is_empty(), "{:?}", seen[&B].results());
    let a = seen.remove(&A).expect("A");
    thread::spawn(move || a.proceed_with(EventFlow::Continue, vec![num("y", 3), num("z", 4)]))
        .join()
        .expect("resume thread");
    let (code, got) = last
        .recv_timeout(TEST_DEADLINE)
        .expect("A reaches the last");
    assert_eq!(code, A);
    assert_eq!(got, vec![num("x", 1), num("y", 3), num("z", 4)]);
    seen.remove(&B).expect("B").proceed(EventFlow::Continue);
    let (code, got) = last
        .recv_timeout(TEST_DEADLINE)
        .expect("B reaches the last");
    assert_eq!((code, got), (B, Info::new()));
    drop(client);
    server.join().expect("server thread");
}

#[test]
fn cached_event_goes_to_matching_handlers_once_in_order() {
    const A: EventCode = 1001;
    const B: EventCode = 1002;
    let (client, server) = client_with(|s| {
        s.event(A, 1);
        s.event(B, 2);
        s.event(A, 3);
        // The reply follows the events on the stream, so once the client has it the
        // events are queued for the event thread.
        let f = s.expect();
        s.reply(f.id, Ok(Response::GroupNames(vec![])));
        let f = s.expect();
        s.event(A, 4);
        s.reply(f.id, Ok(Response::GroupNames(vec![])));
        let f = s.expect();
        s.event(A, 5);
        s.event(B, 6);
        s.reply(f.id, Ok(Response::GroupNames(vec![])));
        assert!(s.recv().is_none());
    });
    client.group_names().expect("sync 1");

    let log: Log = Arc::default();
    let (done, fired) = crossbeam_channel::unbounded();
    let h1 = client.register_event_handler(Some(&[A]), recording_handler("h1", &log, &done));
    client.register_event_handler(Some(&[A]), recording_handler("h2", &log, &done));
    client.register_event_handler(None, recording_handler("all", &log, &done));
    for _ in 0..3 {
        fired.recv_timeout(TEST_DEADLINE).expect("cached delivery");
    }
    // h1 took both cached A events (in arrival order) and h2, registered later, got
    // none of them: each cached event is delivered once. B waited for "all".
    assert_eq!(
        *log.lock().expect("log"),
        vec![("h1", A, 1), ("h1", A, 3), ("all", B, 2)]
    );
    log.lock().expect("log").clear();

    // A live event goes to every matching handler, in registration order.
    client.group_names().expect("sync 2");
    for _ in 0..3 {
        fired.recv_timeout(TEST_DEADLINE).expect("live delivery");
    }
    assert_eq!(
        *log.lock().expect("log"),
        vec![("h1", A, 4), ("h2", A, 4), ("all", A, 4)]
    );
    log.lock().expect("log").clear();

    client.deregister_event_handler(h1);
    client.group_names().expect("sync 3");
    for _ in 0..3 {
        fired
            .recv_timeout(TEST_DEADLINE)
            .expect("delivery after deregister");
    }
    assert_eq!(
        *log.lock().expect("log"),
        vec![("h2", A, 5), ("all", A, 5), ("all", B, 6)]
    );
    assert!(fired.try_recv().is_err());
    drop(client);
    server.join().expect("server");
}

#[test]
fn event_cache_keeps_the_newest() {
    const C: EventCode = 77;
    let total = EVENT_CACHE_CAPACITY as u64 + 10;
    let (client, server) = client_with(move |s| {
        for n in 0..total {
            s.event(C, n);
        }
        let f = s.expect();
        s.reply(f.id, Ok(Response::GroupNames(vec![])));
        assert!(s.recv().is_none());
    });
    client.group_names().expect("sync");
    let log: Log = Arc::default();
    let (done, fired) = crossbeam_channel::unbounded();
    client.register_event_handler(Some(&[C]), recording_handler("h", &log, &done));
    for _ in 0..EVENT_CACHE_CAPACITY {
        fired.recv_timeout(TEST_DEADLINE).expect("cached delivery");
    }
    let seen: Vec<u64> = log.lock().expect("log").iter().map(|e| e.2).collect();
    assert_eq!(seen, (10..total).collect::<Vec<_>>());
    drop(client);
    server.join().expect("server");
}

#[test]
fn server_loss_fails_pending_blocking_and_async_calls() {
    let (client, server) = client_with(|s| {
        // Take both requests, answer neither, and hang up.
        s.expect();
        s.expect();
    });
    let (lost_tx, lost_rx) = crossbeam_channel::unbounded();
    client.register_event_handler(Some(&[codes::LOST_CONNECTION]), move |_, ev| {
        let reason = info_get(&ev.info, LOST_REASON_KEY).and_then(|v| v.as_str().map(String::from));
        let _ = lost_tx.send(reason);
    });

    // The async form sends at call time, before anyone polls it.
    let pending_get = client.get_async(&ProcId::new("job", 0), "never", None);
    let blocking = client.clone();
    let fence = within_deadline(move || blocking.fence(&[], FenceOpts::default()));
    let get = within_deadline(move || block_on(pending_get));
    assert!(
        matches!(fence, Err(CohortError::ServerLost(_))),
        "{fence:?}"
    );
    assert!(matches!(get, Err(CohortError::ServerLost(_))), "{get:?}");

    // Later calls fail at once, with the same reason.
    let start = Instant::now();
    let again = client.group_names();
    assert!(start.elapsed() < Duration::from_secs(1));
    assert_eq!(again, fence.map(|_| Vec::new()));
    let reason = lost_rx
        .recv_timeout(TEST_DEADLINE)
        .expect("LOST_CONNECTION event");
    assert!(
        reason.as_deref().is_some_and(|r| r.contains("closed")),
        "{reason:?}"
    );
    server.join().expect("server");
}

#[test]
fn welcome_error_fails_connect_with_the_servers_error() {
    let refused = CohortError::AuthRefused("token mismatch for job:1".into());
    let (path, server) = serve(Err(refused.clone()), |_| {});
    let got = Client::connect(&path, "job", 1, TOKEN).map(|_| ());
    assert_eq!(got, Err(refused));
    server.join().expect("server");
}

/// A 6-rank MPMD job: apps of 2 and 4 ranks, sets "ocean" (app 0), "ice" (app 1) and
/// "evens"; the client is rank 3.
fn mpmd_welcome() -> Welcome {
    let mut job = JobMap::block("job", 6, 2);
    job.set_apps(vec![2, 4]).unwrap();
    job.define_pset("ocean", RankSet::range(0..2)).unwrap();
    job.define_pset("ice", RankSet::range(2..6)).unwrap();
    job.define_pset("evens", RankSet::parse("0,2,4").unwrap())
        .unwrap();
    Welcome { job, ..welcome() }
}

/// A process's sets and app are in its job map (the session's sets, which spawned jobs
/// change, are asked of the node server: `cluster-tests/tests/spawn.rs`).
#[test]
fn a_procs_psets_and_app_are_local_lookups_in_the_job_map() {
    // The server sees nothing after the welcome: every answer is local.
    let (path, server) = serve(Ok(mpmd_welcome()), |s| assert!(s.recv().is_none()));
    let client = Client::connect(&path, "job", 3, TOKEN).expect("connect");
    let p = |r| ProcId::new("job", r);
    assert_eq!(client.psets_of(&p(0)).unwrap(), ["ocean", "evens"]);
    assert_eq!(client.psets_of(client.proc_id()).unwrap(), ["ice"]);
    assert_eq!(client.psets_of(&p(4)).unwrap(), ["ice", "evens"]);
    let apps: Vec<u32> = (0..6).map(|r| client.appnum(&p(r)).unwrap()).collect();
    assert_eq!(apps, [0, 0, 1, 1, 1, 1]);
    assert_eq!(client.num_apps(), 2);
    for bad in [p(6), ProcId::new("other", 0), ProcId::wildcard("job")] {
        assert!(
            matches!(client.psets_of(&bad), Err(CohortError::UnknownProc { .. })),
            "{bad}"
        );
        assert!(client.appnum(&bad).is_err(), "{bad}");
    }
    drop(client);
    server.join().expect("server");
}

#[test]
fn a_job_map_that_does_not_fit_the_job_is_refused_at_connect() {
    let mut bad = mpmd_welcome();
    bad.job.psets[2].members = RankSet::range(5..7);
    let (path, server) = serve(Ok(bad), |_| {});
    let got = Client::connect(&path, "job", 1, TOKEN).map(|_| ());
    assert!(
        matches!(got, Err(CohortError::Protocol(ref m)) if m.contains("rank 6")),
        "{got:?}"
    );
    server.join().expect("server");
}

#[test]
fn connect_to_a_missing_socket_is_server_lost() {
    let path = socket_path();
    let got = Client::connect(&path, "job", 0, TOKEN).map(|_| ());
    if let Some(dir) = path.parent() {
        let _ = std::fs::remove_dir_all(dir);
    }
    assert!(
        matches!(got, Err(CohortError::ServerLost(ref m)) if m.contains("cannot connect")),
        "{got:?}"
    );
}

#[test]
fn init_names_the_missing_variable() {
    let vars = |set: &'static [(&'static str, &'static str)]| {
        move |name: &str| {
            set.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| v.to_string())
        }
    };
    let e = Client::init_from(&vars(&[])).map(|_| ()).unwrap_err();
    assert!(e.to_string().contains("COHORT_SERVER_URI"), "{e}");
    assert!(e.to_string().contains("cohort run"), "{e}");
    let e = Client::init_from(&vars(&[("COHORT_SERVER_URI", "/x")]))
        .map(|_| ())
        .unwrap_err();
    assert!(e.to_string().contains("COHORT_NSPACE"), "{e}");
    let e = Client::init_from(&vars(&[
        ("COHORT_SERVER_URI", "/x"),
        ("COHORT_NSPACE", "job"),
        ("COHORT_RANK", "three"),
        ("COHORT_TOKEN", "00"),
    ]))
    .map(|_| ())
    .unwrap_err();
    assert!(e.to_string().contains("COHORT_RANK"), "{e}");
    let e = Client::init_from(&vars(&[
        ("COHORT_SERVER_URI", "/x"),
        ("COHORT_NSPACE", "job"),
        ("COHORT_RANK", "3"),
        ("COHORT_TOKEN", "xyz"),
    ]))
    .map(|_| ())
    .unwrap_err();
    assert!(e.to_string().contains("COHORT_TOKEN"), "{e}");
}

#[test]
fn put_commit_splits_scopes_and_collectives_auto_commit() {
    let (frames_tx, frames) = crossbeam_channel::unbounded();
    let (client, server) = client_with(move |s| {
        while let Some(f) = s.recv() {
            let reply = match &f.req {
                Request::Commit { .. } => None,
                Request::Fence { .. } => Some(Response::Done),
                Request::Construct { id, procs, .. } => Some(Response::Group(
                    GroupResult {
                        id: id.clone(),
                        status: ConstructStatus::Success,
                        members: procs.to_vec(),
                        context_id: Some(9),
                        group_info: Vec::new(),
                        failed: Vec::new(),
                    }
                    .into(),
                )),
                other => panic!("unexpected {other:?}"),
            };
            if let Some(r) = reply {
                s.reply(f.id, Ok(r));
            }
            let _ = frames_tx.send(f);
        }
    });
    client.put(Scope::Local, "l", 1u32).expect("put");
    client.put(Scope::Remote, "r", "far").expect("put");
    client.put(Scope::Global, "g", true).expect("put");
    client.commit().expect("commit");
    let f = frames.recv_timeout(TEST_DEADLINE).expect("commit frame");
    assert_eq!(
        f,
        ClientFrame {
            id: 0,
            req: Request::Commit {
                local: vec![("l".into(), Value::U32(1)), ("g".into(), Value::Bool(true))],
                remote: vec![("r".into(), "far".into()), ("g".into(), Value::Bool(true))],
            }
        }
    );

    // A fence sends the pending puts first, in the same write.
    client.put(Scope::Remote, "x", 5u64).expect("put");
    client.fence(&[], FenceOpts::default()).expect("fence");
    let f = frames.recv_timeout(TEST_DEADLINE).expect("auto commit");
    assert_eq!(
        f.req,
        Request::Commit {
            local: vec![],
            remote: vec![("x".into(), Value::U64(5))]
        }
    );
    assert_eq!(f.id, 0);
    let f = frames.recv_timeout(TEST_DEADLINE).expect("fence frame");
    assert_eq!(
        f.req,
        Request::Fence {
            procs: vec![ProcId::wildcard("job")],
            opts: FenceOpts::default()
        }
    );
    assert_ne!(f.id, 0);

    // Nothing pending: no commit frame.
    let procs = [ProcId::new("job", 0), ProcId::new("job", 1)];
    client.fence(&procs, FenceOpts::default()).expect("fence");
    let f = frames.recv_timeout(TEST_DEADLINE).expect("fence frame");
    assert!(
        matches!(f.req, Request::Fence { ref procs, .. } if procs.len() == 2),
        "{f:?}"
    );

    // A construct also carries pending puts, in the async form too.
    client.put(Scope::Local, "ep", "here").expect("put");
    let g = block_on(client.group_construct_async("grp", &procs, ConstructOpts::default()))
        .expect("construct");
    assert_eq!(g.context_id, Some(9));
    let f = frames.recv_timeout(TEST_DEADLINE).expect("auto commit");
    assert!(
        matches!(f.req, Request::Commit { ref local, .. } if local.len() == 1),
        "{f:?}"
    );
    let f = frames.recv_timeout(TEST_DEADLINE).expect("construct frame");
    assert!(
        matches!(f.req, Request::Construct { ref id, .. } if id == "grp"),
        "{f:?}"
    );
    drop(client);
    server.join().expect("server");
}

#[test]
fn handler_may_call_blocking_apis() {
    const PING: EventCode = 4242;
    let (client, server) = client_with(|s| {
        s.event(PING, 1);
        let f = s.expect();
        let key = key_of(&f.req);
        s.reply(
            f.id,
            Ok(Response::Value(Value::Str(format!("answer to {key}")))),
        );
        assert!(s.recv().is_none());
    });
    let (tx, rx) = crossbeam_channel::bounded(1);
    client.register_event_handler(Some(&[PING]), move |c, ev| {
        let v = c.get(&ev.source, "question", Some(Duration::from_secs(5)));
        let _ = tx.send(v);
    });
    let got = rx.recv_timeout(TEST_DEADLINE).expect("handler finished");
    assert_eq!(got, Ok(Value::Str("answer to question".into())));
    drop(client);
    server.join().expect("server");
}

#[test]
fn wedged_server_hits_the_client_side_deadline() {
    let (client, server) = client_with(|s| {
        let fence = s.expect();
        let names = s.expect();
        // The fence's reply arrives after the client gave up: it must be ignored.
        s.reply(fence.id, Ok(Response::Done));
        s.reply(names.id, Ok(Response::GroupNames(vec!["g1".into()])));
        assert!(s.recv().is_none());
    });
    let opts = FenceOpts {
        collect: false,
        timeout_ms: Some(50),
        ft_collective: false,
    };
    let start = Instant::now();
    let got = client.fence(&[], opts);
    assert!(start.elapsed() >= Duration::from_millis(50) + HARD_DEADLINE_GRACE);
    assert!(
        matches!(got, Err(CohortError::Timeout { timeout_ms: 50, ref op, .. }) if op == "fence"),
        "{got:?}"
    );
    assert_eq!(client.group_names(), Ok(vec!["g1".to_string()]));
    drop(client);
    server.join().expect("server");
}

#[test]
fn invalid_group_ids_never_reach_the_server() {
    let (client, server) = client_with(|s| {
        let f = s.expect();
        assert_eq!(f.req, Request::QueryGroupNames);
        s.reply(f.id, Ok(Response::GroupNames(vec![])));
        assert!(s.recv().is_none());
    });
    let long = "x".repeat(256);
    let invalid = |r: Result<()>| matches!(r, Err(CohortError::InvalidGroupId { .. }));
    assert!(invalid(
        client
            .group_construct("", &[], ConstructOpts::default())
            .map(|_| ())
    ));
    assert!(invalid(client.group_destruct(&long, None)));
    assert!(invalid(client.group_leave("a\0b")));
    assert!(invalid(client.group_query("").map(|_| ())));
    assert!(invalid(client.notify(
        1,
        Range::Group(String::new()),
        vec![]
    )));
    assert!(invalid(block_on(client.group_leave_async(""))));
    assert!(invalid(block_on(client.group_query_async("")).map(|_| ())));
    assert!(invalid(block_on(client.group_destruct_async("", None))));
    assert!(invalid(block_on(client.notify_async(
        1,
        Range::Group(long.clone()),
        vec![]
    ))));
    assert!(invalid(
        block_on(client.group_construct_async(&long, &[], ConstructOpts::default())).map(|_| ())
    ));
    assert_eq!(client.group_names(), Ok(vec![]));
    drop(client);
    server.join().expect("server");
}

#[test]
fn async_forms_run_under_tokio_and_finalize_closes() {
    let (client, server) = client_with(|s| {
        while let Some(f) = s.recv() {
            let reply = match f.req {
                Request::Fence { .. } | Request::Leave { .. } | Request::Notify { .. } => {
                    Response::Done
                }
                Request::Destruct { timeout_ms, .. } => {
                    assert_eq!(timeout_ms, Some(1500));
                    Response::Done
                }
                Request::QueryGroupNames => Response::GroupNames(vec!["a".into()]),
                Request::Finalize => {
                    s.reply(f.id, Ok(Response::Done));
                    assert!(s.recv().is_none(), "finalize must close the connection");
                    return;
                }
                other => panic!("unexpected {other:?}"),
            };
            s.reply(f.id, Ok(reply));
        }
        panic!("client closed without finalize");
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    rt.block_on(async {
        let fence = client.fence_async(&[], FenceOpts::default());
        let names = client.group_names_async();
        let leave = client.group_leave_async("a");
        let destruct = client.group_destruct_async("a", Some(Duration::from_millis(1500)));
        let notify = client.notify_async(5, Range::Session, vec![]);
        // Spawned futures are 'static and Send.
        let spawned = tokio::spawn(client.group_names_async());
        assert_eq!(fence.await, Ok(()));
        assert_eq!(names.await, Ok(vec!["a".to_string()]));
        assert_eq!(leave.await, Ok(()));
        assert_eq!(destruct.await, Ok(()));
        assert_eq!(notify.await, Ok(()));
        assert_eq!(spawned.await.expect("join"), Ok(vec!["a".to_string()]));
    });
    let other = client.clone();
    within_deadline(move || client.finalize()).expect("finalize");
    assert!(
        matches!(other.group_names(), Err(CohortError::ServerLost(ref m)) if m.contains("finalized"))
    );
    server.join().expect("server");
}

/// Round-trip cost of a blocking call against a server that answers at once. Run with
/// `cargo test -p cohort --release -- --ignored --nocapture roundtrip`.
#[test]
#[ignore = "timing report, not a check"]
fn roundtrip_latency_report() {
    const N: u32 = 20_000;
    let (client, server) = client_with(|s| {
        while let Some(f) = s.recv() {
            s.reply(f.id, Ok(Response::Done));
        }
    });
    for _ in 0..1000 {
        client.fence(&[], FenceOpts::default()).expect("warm-up");
    }
    let start = Instant::now();
    for _ in 0..N {
        client.fence(&[], FenceOpts::default()).expect("fence");
    }
    let blocking = start.elapsed() / N;
    let start = Instant::now();
    for _ in 0..N {
        block_on(client.fence_async(&[], FenceOpts::default())).expect("fence");
    }
    let asynchronous = start.elapsed() / N;
    println!("round trip: blocking {blocking:?}, async {asynchronous:?}");
    drop(client);
    server.join().expect("server");
}

/// A node-local fence segment for a 4-rank one-node job, in its own temporary
/// directory (removed on drop), and the welcome that offers it.
struct NodeLocalSegment {
    _fence: cohort_proto::shm_fence::ShmFence,
    dir: PathBuf,
}

impl NodeLocalSegment {
    fn welcome() -> (Welcome, NodeLocalSegment) {
        let path = socket_path().with_file_name(cohort_proto::shm_fence::FILE_NAME);
        let job = JobMap::block("job", 4, 1);
        let fence = cohort_proto::shm_fence::ShmFence::create(&path, job.size())
            .expect("create the fence segment");
        let welcome = Welcome {
            job,
            node: 0,
            node_name: "node0".into(),
            fence_shm: Some(path.display().to_string()),
            universe: 4,
            local_bindings: Vec::new(),
        };
        let dir = path.parent().expect("dir").to_path_buf();
        (welcome, NodeLocalSegment { _fence: fence, dir })
    }
}

impl Drop for NodeLocalSegment {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A rank waiting in a node-local fence (shared memory) whose node server goes away
/// gets ServerLost: nobody could mark the other ranks' deaths any more, so it must not
/// wait for them (bounded by the 50 ms sleep slice, not by a timeout it did not set).
#[test]
fn a_node_local_fence_ends_with_server_lost_when_the_server_goes() {
    let (welcome, segment) = NodeLocalSegment::welcome();
    // Let the client arrive and wait, then vanish.
    let (path, server) = serve(Ok(welcome), |_| thread::sleep(Duration::from_millis(200)));
    let client = Client::connect(&path, "job", 1, TOKEN).expect("connect");
    assert!(client.fences_in_shared_memory());
    let got = within_deadline(move || client.fence(&[], FenceOpts::default()));
    assert!(
        matches!(got, Err(CohortError::ServerLost(_))),
        "expected ServerLost, got {got:?}"
    );
    server.join().expect("server");
    drop(segment);
}

/// While one thread waits in a node-local fence, another thread's get goes out and is
/// answered (the fence's wait holds no lock a get needs), and the get carries no commit
/// count yet (no node-local fence has completed).
#[test]
fn a_get_from_another_thread_is_not_held_up_by_a_waiting_node_local_fence() {
    let (welcome, segment) = NodeLocalSegment::welcome();
    let (done_tx, done_rx) = crossbeam_channel::bounded::<()>(1);
    let (path, server) = serve(Ok(welcome), move |side| {
        let f = side.expect();
        match f.req {
            Request::Get {
                key, after_commits, ..
            } => {
                assert_eq!(key, "ep");
                assert_eq!(after_commits, 0);
                side.reply(f.id, Ok(Response::Value(Value::Str("tcp://x".into()))));
            }
            other => panic!("expected a get, got {other:?}"),
        }
        // Stay until the test saw the get answered, then vanish (ending the fence).
        let _ = done_rx.recv_timeout(TEST_DEADLINE);
    });
    let client = Client::connect(&path, "job", 1, TOKEN).expect("connect");
    let fencer = client.clone();
    let fence = thread::spawn(move || fencer.fence(&[], FenceOpts::default()));
    thread::sleep(Duration::from_millis(50));
    let got = within_deadline(move || client.get(&ProcId::new("job", 2), "ep", None));
    assert_eq!(got, Ok(Value::Str("tcp://x".into())));
    done_tx.send(()).expect("server waits");
    let fenced = within_deadline(move || fence.join().expect("fence thread"));
    assert!(
        matches!(fenced, Err(CohortError::ServerLost(_))),
        "{fenced:?}"
    );
    server.join().expect("server");
    drop(segment);
}
