//! A locked-memory limit too low for the verbs backend is a typed error that names the
//! limit, the amount needed and how to raise it. `VerbsFabric::bind` checks the limit
//! before it opens a device, so this runs on any host, RDMA or not.
//!
//! Alone in its test binary on purpose: it lowers this process's RLIMIT_MEMLOCK.

use cohort_transport::{AnyFabric, FabricConfig, FabricError, FabricKind, MIN_MEMLOCK};

#[tokio::test]
async fn too_low_memlock_limit_is_a_typed_error_naming_limit_need_and_fix() {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: plain getrlimit/setrlimit on structs we own.
    assert_eq!(
        unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut lim) },
        0
    );
    let low: u64 = 64 * 1024;
    lim.rlim_cur = low.min(lim.rlim_max);
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &lim) }, 0);
    let low = lim.rlim_cur;
    assert!(low < MIN_MEMLOCK as u64);

    let cfg = FabricConfig::new(0, "127.0.0.1:0".parse().unwrap(), b"secret".to_vec());
    let err = AnyFabric::bind(FabricKind::Verbs, cfg).await.unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::OutOfMemory, "{err}");
    let typed = err
        .get_ref()
        .and_then(|e| e.downcast_ref::<FabricError>())
        .expect("a FabricError inside the io::Error");
    match typed {
        FabricError::MemlockTooLow { needed, limit, .. } => {
            assert_eq!(*needed, MIN_MEMLOCK as u64);
            assert_eq!(*limit, Some(low));
        }
        other => panic!("expected MemlockTooLow, got {other:?}"),
    }
    let text = err.to_string();
    for needle in [
        &format!("{low} bytes")[..],
        &format!("{MIN_MEMLOCK} bytes"),
        "RLIMIT_MEMLOCK",
        "ulimit -l",
        "/etc/security/limits.conf",
        "LimitMEMLOCK",
        "COHORT_FABRIC=tcp",
    ] {
        assert!(text.contains(needle), "{needle:?} missing from: {text}");
    }
    assert!(cohort_transport::check_memlock().is_err());
}
