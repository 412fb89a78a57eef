//! Adaptive polling for a tokio runtime that serves a fabric (and, in `cohortd`, local
//! clients): after each input the runtime's thread stays runnable for a short budget,
//! yielding the CPU between looks at its sockets, so the next message of an exchange in
//! flight is read without the process being woken.
//!
//! Why: a process sleeping in `epoll_wait` must be woken for each message. On a virtual
//! machine that is an inter-processor interrupt through the hypervisor to a halted
//! vCPU, tens of microseconds (measured on the 2-vCPU CI box: a pipe ping-pong is
//! 6.6 µs between processes on one vCPU and 53 µs across two), on bare metal a few.
//! A collective has one wake-up per hop. While polling, `sched_yield` hands the CPU to
//! any other runnable process, and an idle runtime polls at most one budget after its
//! last input, then sleeps. It does not hand the CPU away between a received frame and
//! the task that consumes it ([`Spinner::handoff`]): a node server forwards a message
//! before the other processes on its CPU take their turns.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::Notify;

/// Says on which turns of a polling loop to look at the clock: the first, then every
/// eighth. A turn is well under a microsecond and a clock read a noticeable part of an
/// idle one; a budget then overruns by at most a few turns, and a loop entered after
/// its budget ended still stops on its first turn.
#[derive(Debug, Default)]
pub(crate) struct ClockTurns(u8);

impl ClockTurns {
    /// Counts a turn; `true` on the turns that should read the clock.
    pub(crate) fn due(&mut self) -> bool {
        let due = self.0 == 0;
        self.0 = (self.0 + 1) % 8;
        due
    }
}

/// Keeps a runtime polling for [`Spinner::budget`] after each [`Spinner::input`]; the
/// polling itself is [`Spinner::run`], spawned once on that runtime.
#[derive(Debug)]
pub struct Spinner {
    budget: Duration,
    epoch: Instant,
    /// Microseconds since `epoch` of the last input.
    last_input_us: AtomicU64,
    /// Whether `run` is (or is about to be) polling.
    polling: AtomicBool,
    /// Counts [`Spinner::handoff`]s: `run` does not give the CPU away on a turn after
    /// one, so the task it woke runs first.
    handoffs: AtomicU64,
    /// How many times `run` gave the CPU away (`sched_yield`).
    yields: AtomicU64,
    wake: Notify,
}

impl Spinner {
    /// A spinner polling for `budget` after each input; a zero budget never polls.
    pub fn new(budget: Duration) -> Arc<Spinner> {
        Arc::new(Spinner {
            budget,
            epoch: Instant::now(),
            last_input_us: AtomicU64::new(0),
            polling: AtomicBool::new(false),
            handoffs: AtomicU64::new(0),
            yields: AtomicU64::new(0),
            wake: Notify::new(),
        })
    }

    pub fn budget(&self) -> Duration {
        self.budget
    }

    fn now_us(&self) -> u64 {
        self.epoch.elapsed().as_micros() as u64
    }

    /// Something was received or sent (an answer is likely soon): poll for a budget
    /// from now.
    pub fn input(&self) {
        if self.budget.is_zero() {
            return;
        }
        self.last_input_us.store(self.now_us(), Ordering::Release);
        if !self.polling.swap(true, Ordering::AcqRel) {
            self.wake.notify_one();
        }
    }

    /// An input was handed to another task of this runtime (a received frame to its
    /// consumer): like [`Spinner::input`], and the next turn of [`Spinner::run`] does
    /// not give the CPU away, so that task handles it (and sends any answer) before
    /// other processes run. Without this, the polling task could be queued between the
    /// reader and the consumer, and each forwarded message would wait for every other
    /// runnable process on this CPU to take a turn.
    pub fn handoff(&self) {
        if self.budget.is_zero() {
            return;
        }
        self.handoffs.fetch_add(1, Ordering::AcqRel);
        self.input();
    }

    /// How many times the polling task gave the CPU away to other processes.
    pub fn yields(&self) -> u64 {
        self.yields.load(Ordering::Acquire)
    }

    /// Whether an input came within the last budget.
    fn recent(&self) -> bool {
        let last = self.last_input_us.load(Ordering::Acquire);
        self.now_us().saturating_sub(last) < self.budget.as_micros() as u64
    }

    /// The polling task: sleeps until an input, then yields — to the runtime's other
    /// tasks, which it runs after polling its sockets, and to other processes — until
    /// a budget has passed since the last input. Returns at once for a zero budget.
    pub async fn run(self: Arc<Self>) {
        if self.budget.is_zero() {
            return;
        }
        let mut handoffs_seen = self.handoffs.load(Ordering::Acquire);
        let mut clock = ClockTurns::default();
        loop {
            if !self.polling.load(Ordering::Acquire) {
                self.wake.notified().await;
                continue;
            }
            if clock.due() && !self.recent() {
                self.polling.store(false, Ordering::Release);
                // An input between the check and the store saw `polling` set and did
                // not notify: look again rather than sleep through its budget.
                if self.recent() {
                    self.polling.store(true, Ordering::Release);
                }
                continue;
            }
            let handoffs = self.handoffs.load(Ordering::Acquire);
            if handoffs == handoffs_seen {
                self.yields.fetch_add(1, Ordering::Relaxed);
                cohort_proto::env::yield_cpu();
            } else {
                // A task woken by the handoff may be queued behind this one: let it
                // run before anything else gets this CPU.
                handoffs_seen = handoffs;
            }
            tokio::task::yield_now().await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    /// Polls while inputs are recent, and goes back to sleep (waiting for the next
    /// input, not spinning) once the budget passed: seen through its `polling` flag.
    #[test]
    fn polls_for_the_budget_after_an_input_then_sleeps() {
        let rt = rt();
        rt.block_on(async {
            let s = Spinner::new(Duration::from_millis(20));
            let task = tokio::spawn(s.clone().run());
            tokio::time::sleep(Duration::from_millis(5)).await;
            assert!(
                !s.polling.load(Ordering::Acquire),
                "polling before any input"
            );
            s.input();
            assert!(s.polling.load(Ordering::Acquire));
            // Long after the budget: back to sleep.
            tokio::time::sleep(Duration::from_millis(300)).await;
            assert!(
                !s.polling.load(Ordering::Acquire),
                "still polling 300 ms after the only input (budget 20 ms)"
            );
            // A new input starts another period.
            s.input();
            assert!(s.polling.load(Ordering::Acquire));
            task.abort();
        });
    }

    /// After a handoff the polling task does not give the CPU away before the task
    /// the handoff woke has run, even when it is queued between the two.
    #[test]
    fn no_cpu_yield_between_a_handoff_and_its_consumer() {
        let rt = rt();
        rt.block_on(async {
            let s = Spinner::new(Duration::from_secs(60));
            let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<u64>();
            // Spawned before the spinner, so each turn it runs first and the consumer
            // it wakes is queued behind the spinner.
            let producer = {
                let s = s.clone();
                tokio::spawn(async move {
                    for _ in 0..200 {
                        tokio::task::yield_now().await;
                        let before = s.yields();
                        s.handoff();
                        tx.send(before).unwrap();
                    }
                })
            };
            let spinner = tokio::spawn(s.clone().run());
            s.input();
            let mut handled = 0;
            while let Some(before) = rx.recv().await {
                assert_eq!(
                    s.yields(),
                    before,
                    "the CPU was given away between handoff {handled} and its consumer"
                );
                handled += 1;
            }
            assert_eq!(handled, 200);
            producer.await.unwrap();
            // Without handoffs it polls and yields as before.
            let y = s.yields();
            s.input();
            tokio::time::sleep(Duration::from_millis(20)).await;
            assert!(
                s.yields() > y,
                "no CPU yield while polling without handoffs"
            );
            spinner.abort();
        });
    }

    /// The clock is looked at on the first turn and every eighth after it, no more and
    /// no less often.
    #[test]
    fn clock_turns_are_the_first_and_every_eighth() {
        let mut c = ClockTurns::default();
        let due: Vec<usize> = (1..=40).filter(|_| c.due()).collect();
        assert_eq!(due, vec![1, 9, 17, 25, 33]);
    }

    #[test]
    fn a_zero_budget_never_polls() {
        let rt = rt();
        rt.block_on(async {
            let s = Spinner::new(Duration::ZERO);
            s.input();
            assert!(!s.polling.load(Ordering::Acquire));
            // run returns at once.
            tokio::time::timeout(Duration::from_secs(10), s.clone().run())
                .await
                .expect("run of a zero-budget spinner returns");
        });
    }
}
