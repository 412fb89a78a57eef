//! Applying bindings: the calling thread's CPU affinity (`sched_getaffinity` /
//! `sched_setaffinity`) and a `pre_exec` hook that binds a child before it runs a
//! single instruction of its program. Linux only; up to `CPU_SETSIZE` (1024) CPUs.

use std::io;

use crate::cpuset::CpuSet;

/// A kernel CPU mask built in advance, so that applying it in a forked child needs
/// no allocation (only async-signal-safe calls are allowed there).
#[derive(Clone, Copy)]
pub struct CpuMask(libc::cpu_set_t);

impl CpuMask {
    /// The mask of `cpus`; fails for an empty set or a CPU past `CPU_SETSIZE`.
    pub fn new(cpus: &CpuSet) -> io::Result<CpuMask> {
        if cpus.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "cannot bind to an empty CPU set",
            ));
        }
        // SAFETY: cpu_set_t is a plain bit array; all-zero is the empty set.
        let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
        for cpu in cpus.iter() {
            if cpu as usize >= libc::CPU_SETSIZE as usize {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "CPU {cpu} is beyond the {} CPUs cohort can bind",
                        libc::CPU_SETSIZE
                    ),
                ));
            }
            // SAFETY: the index is below CPU_SETSIZE, checked above.
            unsafe { libc::CPU_SET(cpu as usize, &mut set) };
        }
        Ok(CpuMask(set))
    }

    /// Binds the calling thread (async-signal-safe: one syscall).
    pub fn apply(&self) -> io::Result<()> {
        // SAFETY: pid 0 = the calling thread; the mask is a valid cpu_set_t of the
        // size we pass.
        let rc =
            unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &self.0) };
        if rc == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }
}

/// CPUs the calling thread may run on.
pub fn current_affinity() -> io::Result<CpuSet> {
    // SAFETY: all-zero is a valid empty cpu_set_t; the kernel fills at most its size.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: pid 0 = the calling thread; the size is that of `set`.
    let rc =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok((0..libc::CPU_SETSIZE as usize)
        // SAFETY: every index is below CPU_SETSIZE.
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .map(|c| c as u32)
        .collect())
}

/// Binds the calling thread to `cpus`.
pub fn bind_current_thread(cpus: &CpuSet) -> io::Result<()> {
    CpuMask::new(cpus)?.apply()
}

/// A `pre_exec` hook binding the child to `cpus` (the mask is built now, in the
/// parent; the child only makes the syscall).
pub fn bind_hook(cpus: &CpuSet) -> io::Result<impl FnMut() -> io::Result<()> + Send + Sync> {
    let mask = CpuMask::new(cpus)?;
    Ok(move || mask.apply())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn affinity_roundtrips_on_a_scratch_thread() {
        std::thread::spawn(|| {
            let all = current_affinity().unwrap();
            assert!(!all.is_empty());
            let one = CpuSet::from([all.first().unwrap()]);
            bind_current_thread(&one).unwrap();
            assert_eq!(current_affinity().unwrap(), one);
            bind_current_thread(&all).unwrap();
            assert_eq!(current_affinity().unwrap(), all);
        })
        .join()
        .unwrap();
    }

    #[test]
    fn empty_and_huge_sets_are_refused() {
        assert!(CpuMask::new(&CpuSet::new()).is_err());
        assert!(CpuMask::new(&CpuSet::from([5000])).is_err());
    }
}
