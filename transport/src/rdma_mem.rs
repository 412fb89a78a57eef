//! Registered memory for the verbs bulk path: a bounded cache of registrations of the
//! payloads being sent, and a pool of registered receive buffers, so that once warm a
//! bulk transfer registers nothing on its way.
//!
//! The bookkeeping is generic over how memory gets registered ([`Registrar`]), so its
//! bounds and reuse are tested on hosts without an RDMA device; `verbs` plugs in the
//! protection domain.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::sync::{Arc, Mutex, Weak};

use bytes::Bytes;

/// What a registration allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    /// The peer reads it (a payload we send).
    RemoteRead,
    /// Our device writes into it (a buffer an RDMA read lands in).
    LocalWrite,
}

/// Registers memory with a device.
pub(crate) trait Registrar: Send + Sync + 'static {
    /// A live registration; dropping the last clone deregisters.
    type Region: Clone + Send + Sync + 'static;

    /// Registers `len` bytes at `addr`.
    ///
    /// # Safety
    /// `addr..addr + len` must stay allocated while the returned region is used for
    /// transfers.
    unsafe fn register(&self, addr: usize, len: usize, access: Access) -> io::Result<Self::Region>;
}

/// Registrations of payloads being sent, most recently used first, bounded in count
/// and bytes. An entry keeps its payload alive (a clone of the `Bytes`), so its
/// address range cannot be freed and reused by other data while it is registered:
/// a later payload lying inside a cached range is the same memory, and reuses the
/// registration. That is what makes a payload sent to several peers, or a buffer sent
/// again, cost one registration.
pub(crate) struct SendCache<R: Registrar> {
    registrar: Arc<R>,
    entries: VecDeque<SendEntry<R::Region>>,
    bytes: usize,
    max_bytes: usize,
    max_entries: usize,
    /// Registrations made (misses), for tests and logs.
    pub registrations: u64,
}

struct SendEntry<M> {
    keep: Bytes,
    start: usize,
    region: M,
}

impl<R: Registrar> SendCache<R> {
    pub fn new(registrar: Arc<R>, max_bytes: usize, max_entries: usize) -> Self {
        SendCache {
            registrar,
            entries: VecDeque::new(),
            bytes: 0,
            max_bytes,
            max_entries: max_entries.max(1),
            registrations: 0,
        }
    }

    /// The registration covering `payload`, registering it on a miss. On a failed
    /// registration (typically the locked-memory limit) the cache lets go of
    /// everything else and tries once more.
    pub fn region(&mut self, payload: &Bytes) -> io::Result<R::Region> {
        let start = payload.as_ptr() as usize;
        let end = start + payload.len();
        if let Some(i) = self
            .entries
            .iter()
            .position(|e| e.start <= start && end <= e.start + e.keep.len())
        {
            let entry = self.entries.remove(i).expect("index from position");
            let region = entry.region.clone();
            self.entries.push_front(entry);
            return Ok(region);
        }
        // SAFETY: the entry keeps `payload`'s memory alive as long as it is cached,
        // and every transfer from it holds a clone of the payload too.
        let region = match unsafe {
            self.registrar
                .register(start, payload.len(), Access::RemoteRead)
        } {
            Ok(region) => region,
            Err(_) if !self.entries.is_empty() => {
                self.entries.clear();
                self.bytes = 0;
                // SAFETY: as above.
                unsafe {
                    self.registrar
                        .register(start, payload.len(), Access::RemoteRead)?
                }
            }
            Err(e) => return Err(e),
        };
        self.registrations += 1;
        self.bytes += payload.len();
        self.entries.push_front(SendEntry {
            keep: payload.clone(),
            start,
            region: region.clone(),
        });
        while self.entries.len() > 1
            && (self.bytes > self.max_bytes || self.entries.len() > self.max_entries)
        {
            if let Some(old) = self.entries.pop_back() {
                self.bytes -= old.keep.len();
            }
        }
        Ok(region)
    }

    /// Registered bytes held by the cache.
    #[cfg(test)]
    pub fn cached_bytes(&self) -> usize {
        self.bytes
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.entries.len()
    }
}

/// Smallest receive buffer class; buffers come in powers of two from here.
pub(crate) const MIN_CLASS: usize = 64 << 10;

/// A registered receive buffer. Field order is drop order: the registration goes
/// before the memory it pins.
pub(crate) struct PoolBuf<M> {
    pub region: M,
    mem: Box<[u8]>,
}

impl<M> PoolBuf<M> {
    pub fn addr(&self) -> u64 {
        self.mem.as_ptr() as u64
    }

    pub fn capacity(&self) -> usize {
        self.mem.len()
    }
}

/// Registered receive buffers by size class. Buffers lent out come back when the
/// payload delivered from them is dropped; idle ones are kept up to `max_idle_bytes`,
/// the rest deregistered and freed.
pub(crate) struct RecvPool<R: Registrar> {
    registrar: Arc<R>,
    max_idle_bytes: usize,
    state: Mutex<PoolState<R::Region>>,
}

struct PoolState<M> {
    idle: HashMap<usize, Vec<PoolBuf<M>>>,
    idle_bytes: usize,
    registrations: u64,
}

impl<R: Registrar> RecvPool<R> {
    pub fn new(registrar: Arc<R>, max_idle_bytes: usize) -> Arc<Self> {
        Arc::new(RecvPool {
            registrar,
            max_idle_bytes,
            state: Mutex::new(PoolState {
                idle: HashMap::new(),
                idle_bytes: 0,
                registrations: 0,
            }),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, PoolState<R::Region>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A buffer of at least `len` bytes: an idle one of its class, else a new one.
    pub fn take(&self, len: usize) -> io::Result<PoolBuf<R::Region>> {
        let class = len.max(MIN_CLASS).next_power_of_two();
        {
            let mut st = self.lock();
            if let Some(buf) = st.idle.get_mut(&class).and_then(Vec::pop) {
                st.idle_bytes -= class;
                return Ok(buf);
            }
        }
        let mut mem = vec![0u8; class].into_boxed_slice();
        // SAFETY: `mem` moves into the `PoolBuf` with the region, and is dropped after it.
        let region = unsafe {
            self.registrar
                .register(mem.as_mut_ptr() as usize, class, Access::LocalWrite)?
        };
        self.lock().registrations += 1;
        Ok(PoolBuf { region, mem })
    }

    /// Takes a buffer back (kept idle while within the bound).
    pub fn give_back(&self, buf: PoolBuf<R::Region>) {
        let class = buf.capacity();
        let mut st = self.lock();
        if st.idle_bytes + class <= self.max_idle_bytes {
            st.idle_bytes += class;
            st.idle.entry(class).or_default().push(buf);
        }
    }

    /// The first `len` bytes of `buf` as a payload; the buffer returns to this pool
    /// when the payload (and every slice of it) is dropped.
    pub fn lend(self: &Arc<Self>, buf: PoolBuf<R::Region>, len: usize) -> Bytes {
        Bytes::from_owner(Lent {
            buf: Some(buf),
            pool: Arc::downgrade(self),
        })
        .slice(..len)
    }

    #[cfg(test)]
    pub fn idle_bytes(&self) -> usize {
        self.lock().idle_bytes
    }

    pub fn registrations(&self) -> u64 {
        self.lock().registrations
    }
}

/// A pooled buffer owned by a delivered payload.
struct Lent<R: Registrar> {
    buf: Option<PoolBuf<R::Region>>,
    pool: Weak<RecvPool<R>>,
}

impl<R: Registrar> AsRef<[u8]> for Lent<R> {
    fn as_ref(&self) -> &[u8] {
        self.buf.as_ref().map_or(&[], |b| &b.mem[..])
    }
}

impl<R: Registrar> Drop for Lent<R> {
    fn drop(&mut self) {
        if let (Some(buf), Some(pool)) = (self.buf.take(), self.pool.upgrade()) {
            pool.give_back(buf);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Counts registrations and deregistrations; fails above a byte budget, like a
    /// locked-memory limit would.
    #[derive(Default)]
    struct FakeRegistrar {
        live_bytes: Arc<AtomicUsize>,
        budget: usize,
    }

    struct FakeRegion {
        len: usize,
        live_bytes: Arc<AtomicUsize>,
    }

    impl Drop for FakeRegion {
        fn drop(&mut self) {
            self.live_bytes.fetch_sub(self.len, Ordering::SeqCst);
        }
    }

    impl Registrar for FakeRegistrar {
        type Region = Arc<FakeRegion>;
        unsafe fn register(&self, _addr: usize, len: usize, _: Access) -> io::Result<Self::Region> {
            if self.live_bytes.load(Ordering::SeqCst) + len > self.budget {
                return Err(io::Error::from_raw_os_error(libc::ENOMEM));
            }
            self.live_bytes.fetch_add(len, Ordering::SeqCst);
            Ok(Arc::new(FakeRegion {
                len,
                live_bytes: self.live_bytes.clone(),
            }))
        }
    }

    fn registrar(budget: usize) -> Arc<FakeRegistrar> {
        Arc::new(FakeRegistrar {
            live_bytes: Arc::default(),
            budget,
        })
    }

    #[test]
    fn a_payload_sent_again_or_sliced_is_registered_once() {
        let mut cache = SendCache::new(registrar(1 << 30), 1 << 20, 8);
        let payload = Bytes::from(vec![7u8; 100_000]);
        for _ in 0..5 {
            cache.region(&payload).unwrap();
            cache.region(&payload.clone()).unwrap();
        }
        cache.region(&payload.slice(10..5000)).unwrap();
        assert_eq!(cache.registrations, 1);
    }

    #[test]
    fn the_cache_stays_within_its_bounds_evicting_the_least_recent() {
        let reg = registrar(1 << 30);
        let mut cache = SendCache::new(reg.clone(), 300_000, 3);
        let payloads: Vec<Bytes> = (0..6)
            .map(|i| Bytes::from(vec![i as u8; 100_000]))
            .collect();
        for p in &payloads {
            cache.region(p).unwrap();
            assert!(cache.len() <= 3 && cache.cached_bytes() <= 300_000);
        }
        // The three most recent are cached; the oldest was deregistered.
        let before = cache.registrations;
        cache.region(&payloads[5]).unwrap();
        cache.region(&payloads[3]).unwrap();
        assert_eq!(cache.registrations, before);
        cache.region(&payloads[0]).unwrap();
        assert_eq!(cache.registrations, before + 1);
        assert_eq!(reg.live_bytes.load(Ordering::SeqCst), 300_000);
    }

    #[test]
    fn a_registration_refused_for_memory_lets_the_cache_go_and_retries() {
        let reg = registrar(250_000);
        let mut cache = SendCache::new(reg.clone(), 1 << 30, 64);
        let a = Bytes::from(vec![1u8; 100_000]);
        let b = Bytes::from(vec![2u8; 100_000]);
        let c = Bytes::from(vec![3u8; 100_000]);
        cache.region(&a).unwrap();
        cache.region(&b).unwrap();
        let held = cache.region(&c).unwrap(); // over budget: a and b are dropped first
        assert_eq!(cache.len(), 1);
        drop(held);
        assert_eq!(reg.live_bytes.load(Ordering::SeqCst), 100_000);
        let too_big = Bytes::from(vec![4u8; 300_000]);
        assert!(cache.region(&too_big).is_err());
    }

    #[test]
    fn received_buffers_come_back_to_the_pool_and_are_reused() {
        let reg = registrar(1 << 30);
        let pool = RecvPool::new(reg.clone(), 4 << 20);
        for round in 0..10 {
            let buf = pool.take(1 << 20).unwrap();
            assert_eq!(buf.capacity(), 1 << 20);
            let payload = pool.lend(buf, 1000 + round);
            assert_eq!(payload.len(), 1000 + round);
            let slice = payload.slice(1..10);
            drop(payload);
            assert_eq!(pool.idle_bytes(), 0, "a slice still holds the buffer");
            drop(slice);
            assert_eq!(pool.idle_bytes(), 1 << 20);
        }
        assert_eq!(pool.registrations(), 1);
        // Small requests share the smallest class.
        assert_eq!(pool.take(1).unwrap().capacity(), MIN_CLASS);
    }

    #[test]
    fn idle_buffers_beyond_the_bound_are_released() {
        let reg = registrar(1 << 30);
        let pool = RecvPool::new(reg.clone(), 2 << 20);
        let held: Vec<Bytes> = (0..4)
            .map(|_| {
                let buf = pool.take(1 << 20).unwrap();
                pool.lend(buf, 1 << 20)
            })
            .collect();
        assert_eq!(reg.live_bytes.load(Ordering::SeqCst), 4 << 20);
        drop(held);
        assert_eq!(pool.idle_bytes(), 2 << 20);
        assert_eq!(reg.live_bytes.load(Ordering::SeqCst), 2 << 20);
        // A payload outliving its pool just frees its buffer.
        let buf = pool.take(1 << 20).unwrap();
        let orphan = pool.lend(buf, 10);
        drop(pool);
        drop(orphan);
        assert_eq!(reg.live_bytes.load(Ordering::SeqCst), 0);
    }
}
