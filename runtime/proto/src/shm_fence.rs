//! The node-local fence: when every rank of a job runs on one node, a fence over the
//! whole job is a barrier in a shared-memory segment the node server creates, and the
//! ranks meet there without a message through the server.
//!
//! Why: on one node a fence's data is already at the node server (each rank's commit
//! precedes its fence on its connection); what the fence adds is only the rendezvous
//! and the ordering "data committed before the fence is readable after it". Through
//! the server that costs a request and a reply per rank, with the wake-ups of every
//! process; in shared memory it is one atomic add per rank.
//!
//! Layout (all little-endian native atomics; the file lives in the job's private
//! socket directory): a [`Header`] and one [`Slot`] per rank, each on its own cache
//! line.
//!
//! Protocol for a rank's `k`-th whole-job fence (`k` counted by the rank from 0):
//! 1. If a rank is dead ([`ShmFence::mark_dead`], set by the node server) and did not
//!    arrive at fence `k`, fail with that rank; nothing is counted.
//! 2. Write its commit count into its slot, then `arrived_for = k + 1`.
//! 3. Add one to `arrived`. The last of `n` resets `arrived` and publishes
//!    `generation = k + 1`, waking sleepers.
//! 4. Others wait for `generation != k`: polling with `sched_yield` for the spin
//!    budget, then `futex` waits in slices that re-check deaths and the deadline.
//!
//! A rank whose fence `k` times out marks the segment: fence `k` failed for every
//! rank (those waiting at it and those yet to come get [`FenceFailure::TimedOut`], as
//! a node server answers every participant of a fence that timed out), and fences
//! from `k + 1` on fail with [`FenceFailure::Abandoned`] before counting: each rank
//! takes them to its node server, so all ranks meet there from the same fence on.
//! (Counting here, a rank's arrival at `k + 1` would complete fence `k`.) A death
//! ([`FenceFailure::Terminated`]) is sticky too: every later fence fails before
//! counting.
//!
//! After the fence a rank reads every slot's commit count: a later `get` of rank r's
//! data waits at the server until r's commits up to that count arrived (they were sent
//! before r arrived, but on another connection, so a get could otherwise overtake
//! them).

use std::fs::OpenOptions;
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The segment's file name in the node server's socket directory.
pub const FILE_NAME: &str = "fence.shm";

const MAGIC: u64 = 0x636f_686f_7274_6631; // "cohortf1"
const LINE: usize = 64;
/// Longest single futex sleep: deaths and deadlines are re-checked this often.
const SLEEP_SLICE: Duration = Duration::from_millis(50);

#[repr(C, align(64))]
struct Header {
    magic: AtomicU64,
    ranks: AtomicU32,
    /// Ranks arrived at the current fence.
    arrived: AtomicU32,
    /// Fences completed (wrapping).
    generation: AtomicU32,
    /// Ranks waiting in `futex` (the last arriver wakes them only if non-zero).
    sleepers: AtomicU32,
    /// Set (and never cleared) once a rank died: every waiter then checks the slots.
    deaths: AtomicU32,
    /// 0, or 1 + the fence that timed out (it failed, and the later ones may no
    /// longer meet here).
    abandoned: AtomicU32,
}

#[repr(C, align(64))]
struct Slot {
    /// 1 + the index of the last fence this rank arrived at (0: none yet).
    arrived_for: AtomicU32,
    /// Set by the node server when the rank terminated.
    dead: AtomicU32,
    /// How many commits the rank had sent its node server when it arrived.
    commits: AtomicU64,
}

const _: () = assert!(std::mem::size_of::<Header>() == LINE);
const _: () = assert!(std::mem::size_of::<Slot>() == LINE);

fn segment_len(ranks: u32) -> usize {
    LINE * (1 + ranks as usize)
}

/// Why a fence in shared memory did not complete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FenceFailure {
    /// These ranks terminated before arriving.
    Terminated(Vec<u32>),
    /// The fence timed out, at this rank's deadline or another's: it failed for every
    /// rank, and later fences are abandoned.
    TimedOut,
    /// A fence before this one timed out: this fence and every later one must meet
    /// elsewhere (at the node server). Nothing was counted.
    Abandoned,
    /// The caller's `give_up` check said so (e.g. its node server is gone).
    GaveUp,
}

/// A mapped fence segment (the node server's or a rank's view).
pub struct ShmFence {
    base: *mut u8,
    ranks: u32,
}

// SAFETY: the mapping is shared memory accessed only through atomics; the pointer is
// valid for the lifetime of the value (unmapped in Drop).
unsafe impl Send for ShmFence {}
// SAFETY: as above: all access is through atomic operations.
unsafe impl Sync for ShmFence {}

impl std::fmt::Debug for ShmFence {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShmFence")
            .field("ranks", &self.ranks)
            .finish()
    }
}

impl ShmFence {
    /// The node server's side: creates (or replaces) the segment at `path` for
    /// `ranks` ranks, readable and writable by this user only.
    pub fn create(path: &Path, ranks: u32) -> io::Result<ShmFence> {
        if ranks == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "no ranks"));
        }
        let _ = std::fs::remove_file(path);
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(path)?;
        file.set_len(segment_len(ranks) as u64)?;
        let fence = Self::map(&file, ranks)?;
        let h = fence.header();
        h.ranks.store(ranks, Ordering::Relaxed);
        h.magic.store(MAGIC, Ordering::Release);
        Ok(fence)
    }

    /// A rank's side: maps the segment at `path`, which must be for `ranks` ranks.
    pub fn open(path: &Path, ranks: u32) -> io::Result<ShmFence> {
        let file = OpenOptions::new().read(true).write(true).open(path)?;
        let len = file.metadata()?.len();
        if len != segment_len(ranks) as u64 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{} is {len} bytes, not the {} a {ranks}-rank fence segment has",
                    path.display(),
                    segment_len(ranks)
                ),
            ));
        }
        let fence = Self::map(&file, ranks)?;
        let h = fence.header();
        if h.magic.load(Ordering::Acquire) != MAGIC || h.ranks.load(Ordering::Relaxed) != ranks {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{} is not a {ranks}-rank fence segment", path.display()),
            ));
        }
        Ok(fence)
    }

    fn map(file: &std::fs::File, ranks: u32) -> io::Result<ShmFence> {
        // SAFETY: a fresh shared mapping of a file we hold open, with the file's
        // length; checked for MAP_FAILED below.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                segment_len(ranks),
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(ShmFence {
            base: base.cast(),
            ranks,
        })
    }

    fn header(&self) -> &Header {
        // SAFETY: the mapping starts with a 64-byte-aligned Header (page-aligned
        // mapping) made only of atomics, valid for any bit pattern.
        unsafe { &*(self.base as *const Header) }
    }

    fn slot(&self, rank: u32) -> &Slot {
        assert!(
            rank < self.ranks,
            "rank {rank} outside a {}-rank segment",
            self.ranks
        );
        // SAFETY: slot `rank` lies within the mapping (checked above), 64-byte
        // aligned, made only of atomics.
        unsafe { &*(self.base.add(LINE * (1 + rank as usize)) as *const Slot) }
    }

    pub fn ranks(&self) -> u32 {
        self.ranks
    }

    /// The node server's side: `rank` terminated. Waiters of a fence it did not
    /// arrive at fail at once, and every later fence fails before counting.
    pub fn mark_dead(&self, rank: u32) {
        if rank >= self.ranks {
            return;
        }
        self.slot(rank).dead.store(1, Ordering::Release);
        let h = self.header();
        h.deaths.fetch_add(1, Ordering::AcqRel);
        // Wake sleepers so they see it; a bump of the generation word is not needed
        // (futex_wake does not require the value to change).
        futex_wake(&h.generation);
    }

    /// Why fence `seq` cannot meet here: it timed out (at some rank), or one before it
    /// did.
    fn abandoned(&self, seq: u32) -> Option<FenceFailure> {
        match self.header().abandoned.load(Ordering::Acquire) {
            0 => None,
            // Wrapping order of `seq` and the fence that timed out.
            v => match seq.wrapping_sub(v.wrapping_sub(1)) as i32 {
                0 => Some(FenceFailure::TimedOut),
                d if d > 0 => Some(FenceFailure::Abandoned),
                _ => None,
            },
        }
    }

    /// Fence `seq` timed out here: it fails for every rank, and the later ones are
    /// abandoned (the first timeout counts); waiters are woken to see it.
    fn time_out(&self, seq: u32) {
        let h = self.header();
        let _ = h.abandoned.compare_exchange(
            0,
            seq.wrapping_add(1),
            Ordering::AcqRel,
            Ordering::Acquire,
        );
        futex_wake(&h.generation);
    }

    /// Ranks dead without having arrived at fence `seq`.
    fn missing_dead(&self, seq: u32) -> Vec<u32> {
        if self.header().deaths.load(Ordering::Acquire) == 0 {
            return Vec::new();
        }
        (0..self.ranks)
            .filter(|&r| {
                let s = self.slot(r);
                s.dead.load(Ordering::Acquire) != 0
                    && s.arrived_for.load(Ordering::Acquire) != seq.wrapping_add(1)
            })
            .collect()
    }

    /// Rank `rank`'s fence number `seq`: arrive with `commits`, then wait for the others
    /// (polling for `spin`, then sleeping) until `deadline`. `give_up` is asked before
    /// each sleep (at least every 50 ms) whether to stop waiting.
    pub fn fence(
        &self,
        rank: u32,
        seq: u32,
        commits: u64,
        spin: Duration,
        deadline: Option<Instant>,
        give_up: &dyn Fn() -> bool,
    ) -> Result<(), FenceFailure> {
        let h = self.header();
        if let Some(why) = self.abandoned(seq) {
            return Err(why);
        }
        let dead = self.missing_dead(seq);
        if !dead.is_empty() {
            return Err(FenceFailure::Terminated(dead));
        }
        let me = self.slot(rank);
        me.commits.store(commits, Ordering::Release);
        me.arrived_for.store(seq.wrapping_add(1), Ordering::Release);
        if h.arrived.fetch_add(1, Ordering::AcqRel) + 1 == self.ranks {
            h.arrived.store(0, Ordering::Relaxed);
            // SeqCst on both sides (this store then the sleepers load; the waiter's
            // sleepers add then its futex check): no missed wake-up.
            h.generation.store(seq.wrapping_add(1), Ordering::SeqCst);
            if h.sleepers.load(Ordering::SeqCst) > 0 {
                futex_wake(&h.generation);
            }
            return Ok(());
        }
        let start = Instant::now();
        loop {
            if h.generation.load(Ordering::Acquire) != seq {
                return Ok(());
            }
            if let Some(why) = self.abandoned(seq) {
                return Err(why);
            }
            let dead = self.missing_dead(seq);
            if !dead.is_empty() {
                return Err(FenceFailure::Terminated(dead));
            }
            let now = Instant::now();
            if deadline.is_some_and(|d| now >= d) {
                self.time_out(seq);
                return Err(FenceFailure::TimedOut);
            }
            if now.duration_since(start) < spin {
                crate::env::yield_cpu();
                continue;
            }
            if give_up() {
                return Err(FenceFailure::GaveUp);
            }
            let nap = deadline.map_or(SLEEP_SLICE, |d| (d - now).min(SLEEP_SLICE));
            h.sleepers.fetch_add(1, Ordering::SeqCst);
            futex_wait(&h.generation, seq, nap);
            h.sleepers.fetch_sub(1, Ordering::SeqCst);
        }
    }

    /// Ranks that have not arrived at fence `seq` (for a timeout's message).
    pub fn not_arrived(&self, seq: u32) -> Vec<u32> {
        (0..self.ranks)
            .filter(|&r| self.slot(r).arrived_for.load(Ordering::Acquire) != seq.wrapping_add(1))
            .collect()
    }

    /// How many commits `rank` had sent when it last arrived.
    pub fn commits_of(&self, rank: u32) -> u64 {
        self.slot(rank).commits.load(Ordering::Acquire)
    }
}

impl Drop for ShmFence {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the mapping made in `map`; no reference into it
        // outlives `self`.
        unsafe {
            libc::munmap(self.base.cast(), segment_len(self.ranks));
        }
    }
}

/// Sleeps while `word` holds `expected`, at most `timeout` (spurious returns are fine:
/// the caller re-checks).
fn futex_wait(word: &AtomicU32, expected: u32, timeout: Duration) {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: FUTEX_WAIT on a valid, aligned u32 in shared memory (not
    // FUTEX_PRIVATE: other processes wake it), with a valid relative timeout.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
        );
    }
}

fn futex_wake(word: &AtomicU32) {
    // SAFETY: FUTEX_WAKE on a valid, aligned u32 in shared memory.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, i32::MAX);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn segment(ranks: u32) -> (tempdir::Dir, ShmFence) {
        let dir = tempdir::Dir::new();
        let f = ShmFence::create(&dir.path().join(FILE_NAME), ranks).unwrap();
        (dir, f)
    }

    /// A private temporary directory, removed on drop (no dependency for one test).
    mod tempdir {
        pub struct Dir(std::path::PathBuf);
        impl Dir {
            pub fn new() -> Dir {
                use std::sync::atomic::{AtomicU32, Ordering};
                static N: AtomicU32 = AtomicU32::new(0);
                let p = std::env::temp_dir().join(format!(
                    "cohort-shm-fence-test-{}-{}",
                    std::process::id(),
                    N.fetch_add(1, Ordering::Relaxed)
                ));
                std::fs::create_dir_all(&p).unwrap();
                Dir(p)
            }
            pub fn path(&self) -> &std::path::Path {
                &self.0
            }
        }
        impl Drop for Dir {
            fn drop(&mut self) {
                let _ = std::fs::remove_dir_all(&self.0);
            }
        }
    }

    const BOUND: Option<Duration> = Some(Duration::from_secs(60));

    fn deadline() -> Option<Instant> {
        BOUND.map(|b| Instant::now() + b)
    }

    /// Threads standing in for ranks, each with its own mapping, run many fences: no
    /// rank leaves fence k before every rank arrived at it, and the commit counts read
    /// after fence k are at least the ones written for it.
    #[test]
    fn no_rank_passes_a_fence_before_all_arrived() {
        const RANKS: u32 = 4;
        const FENCES: u32 = 2000;
        let (dir, _server) = segment(RANKS);
        let path = dir.path().join(FILE_NAME);
        let counters: Arc<Vec<AtomicU32>> =
            Arc::new((0..RANKS).map(|_| AtomicU32::new(0)).collect());
        let threads: Vec<_> = (0..RANKS)
            .map(|r| {
                let path = path.clone();
                let counters = counters.clone();
                std::thread::spawn(move || {
                    let f = ShmFence::open(&path, RANKS).unwrap();
                    for k in 0..FENCES {
                        counters[r as usize].store(k + 1, Ordering::SeqCst);
                        f.fence(
                            r,
                            k,
                            u64::from(k) * 10 + u64::from(r),
                            Duration::from_micros(50),
                            deadline(),
                            &|| false,
                        )
                        .unwrap();
                        for (other, c) in counters.iter().enumerate() {
                            let seen = c.load(Ordering::SeqCst);
                            assert!(
                                seen > k,
                                "rank {r} left fence {k} before rank {other} arrived ({seen})"
                            );
                            assert!(f.commits_of(other as u32) >= u64::from(k) * 10 + other as u64);
                        }
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
    }

    /// A dead rank that did not arrive fails the waiters at once (named), and every
    /// later fence fails before counting; one that arrived first does not.
    #[test]
    fn a_dead_rank_fails_the_fence_it_missed() {
        let (dir, server) = segment(3);
        let path = dir.path().join(FILE_NAME);
        let a = ShmFence::open(&path, 3).unwrap();
        // Fence 0: rank 2 arrives, then dies; 0 and 1 still complete it.
        let p = path.clone();
        let t = std::thread::spawn(move || {
            let c = ShmFence::open(&p, 3).unwrap();
            c.fence(2, 0, 0, Duration::ZERO, deadline(), &|| false)
        });
        std::thread::sleep(Duration::from_millis(20));
        server.mark_dead(2);
        let p = path.clone();
        let b = std::thread::spawn(move || {
            ShmFence::open(&p, 3)
                .unwrap()
                .fence(1, 0, 0, Duration::ZERO, deadline(), &|| false)
        });
        assert_eq!(
            a.fence(0, 0, 0, Duration::ZERO, deadline(), &|| false),
            Ok(())
        );
        assert_eq!(b.join().unwrap(), Ok(()));
        assert_eq!(t.join().unwrap(), Ok(()));
        // Fence 1: rank 2 is dead and did not arrive: fails before counting.
        assert_eq!(
            a.fence(0, 1, 0, Duration::ZERO, deadline(), &|| false),
            Err(FenceFailure::Terminated(vec![2]))
        );
    }

    /// A rank sleeping in a fence is woken by a death and fails, long before its
    /// deadline.
    #[test]
    fn a_death_wakes_a_sleeping_waiter() {
        let (dir, server) = segment(2);
        let p = dir.path().join(FILE_NAME);
        let waiter = std::thread::spawn(move || {
            let f = ShmFence::open(&p, 2).unwrap();
            let start = Instant::now();
            let r = f.fence(0, 0, 0, Duration::ZERO, deadline(), &|| false);
            (r, start.elapsed())
        });
        std::thread::sleep(Duration::from_millis(50));
        server.mark_dead(1);
        let (r, took) = waiter.join().unwrap();
        assert_eq!(r, Err(FenceFailure::Terminated(vec![1])));
        assert!(took < Duration::from_secs(30), "woken only after {took:?}");
    }

    /// A missing rank makes the waiter time out at its deadline, not hang.
    #[test]
    fn a_missing_rank_times_out() {
        let (_dir, server) = segment(2);
        let r = server.fence(
            0,
            0,
            0,
            Duration::from_micros(10),
            Some(Instant::now() + Duration::from_millis(100)),
            &|| false,
        );
        assert_eq!(r, Err(FenceFailure::TimedOut));
    }

    /// A fence that timed out failed for every rank, late ones included (as a node
    /// server answers them), and the later fences no longer meet here: a rank's arrival
    /// at the next fence would otherwise complete the one that timed out.
    #[test]
    fn a_timed_out_fence_fails_for_all_and_abandons_the_later_ones() {
        let (dir, server) = segment(2);
        let other = ShmFence::open(&dir.path().join(FILE_NAME), 2).unwrap();
        let soon = || Some(Instant::now() + Duration::from_millis(50));
        assert_eq!(
            server.fence(0, 0, 0, Duration::ZERO, soon(), &|| false),
            Err(FenceFailure::TimedOut)
        );
        assert_eq!(
            other.fence(1, 0, 0, Duration::ZERO, deadline(), &|| false),
            Err(FenceFailure::TimedOut),
            "the late rank"
        );
        assert_eq!(other.not_arrived(0), vec![1]);
        for (f, rank) in [(&server, 0), (&other, 1)] {
            for seq in [1, 2, 1000] {
                assert_eq!(
                    f.fence(rank, seq, 0, Duration::ZERO, deadline(), &|| false),
                    Err(FenceFailure::Abandoned),
                    "rank {rank}, fence {seq}"
                );
            }
        }
    }

    /// A waiter whose `give_up` says so (its node server is gone) stops waiting.
    #[test]
    fn a_waiter_gives_up_when_told() {
        let (_dir, server) = segment(2);
        let asked = std::sync::atomic::AtomicU32::new(0);
        let r = server.fence(0, 0, 0, Duration::ZERO, deadline(), &|| {
            asked.fetch_add(1, Ordering::Relaxed) >= 2
        });
        assert_eq!(r, Err(FenceFailure::GaveUp));
        assert_eq!(asked.load(Ordering::Relaxed), 3);
    }

    #[test]
    fn a_segment_for_another_rank_count_is_refused() {
        let (dir, _server) = segment(2);
        let e = ShmFence::open(&dir.path().join(FILE_NAME), 3).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
    }
}
