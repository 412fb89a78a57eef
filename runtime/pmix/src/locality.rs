//! `PMIx_Get_relative_locality`: what two processes on one host share, from their
//! locality strings (PMIX_LOCALITY_STRING, as the node server writes them with
//! `cohort_topology::Topology::locality_string`, or as OpenPMIx and Open MPI do:
//! colon-separated tokens of a two-letter tag and a list of object indexes).

use std::ffi::c_char;

use cohort_topology::CpuSet;

use crate::types::*;

/// The tag of each kind of object and what sharing one means.
const TAGS: &[(&str, u16)] = &[
    ("HT", PMIX_LOCALITY_SHARE_HWTHREAD),
    ("CR", PMIX_LOCALITY_SHARE_CORE),
    ("L1", PMIX_LOCALITY_SHARE_L1CACHE),
    ("L2", PMIX_LOCALITY_SHARE_L2CACHE),
    ("L3", PMIX_LOCALITY_SHARE_L3CACHE),
    ("SK", PMIX_LOCALITY_SHARE_PACKAGE),
    ("NM", PMIX_LOCALITY_SHARE_NUMA),
];

/// The objects of each tag a locality string names. An optional leading `hwloc:`
/// (the generator's name, as PMIx says strings may begin) and tokens of other tags
/// are skipped; a malformed index list is an error.
fn tokens(s: &str) -> Result<Vec<(&str, CpuSet)>, String> {
    let s = s.strip_prefix("hwloc:").unwrap_or(s);
    let mut out = Vec::new();
    for token in s.split(':').filter(|t| !t.is_empty()) {
        let Some((tag, _)) = TAGS.iter().find(|(tag, _)| token.starts_with(tag)) else {
            continue;
        };
        let set = token[tag.len()..]
            .parse::<CpuSet>()
            .map_err(|e| format!("token {token:?}: {e}"))?;
        out.push((*tag, set));
    }
    Ok(out)
}

/// What processes at `a` and `b` (on one node) share: PMIX_LOCALITY_SHARE_NODE,
/// plus each kind of object of which both hold one.
pub fn relative(a: &str, b: &str) -> Result<u16, String> {
    let (a, b) = (tokens(a)?, tokens(b)?);
    let mut loc = PMIX_LOCALITY_SHARE_NODE;
    for (tag, set) in &a {
        let shared = b.iter().any(|(t, other)| t == tag && set.intersects(other));
        if shared {
            loc |= TAGS
                .iter()
                .find(|(t, _)| t == tag)
                .map_or(0, |(_, bit)| *bit);
        }
    }
    Ok(loc)
}

/// What processes at `locality1` and `locality2`, two locality strings of one node
/// (PMIX_LOCALITY_STRING), share (`pmix_locality_t` bits: PMIX_LOCALITY_SHARE_NODE
/// and each of hardware thread, core, L1/L2/L3 cache, package, NUMA node they both
/// touch).
///
/// # Safety
/// `locality1` and `locality2` NUL-terminated; `locality` writable.
#[no_mangle]
pub unsafe extern "C" fn PMIx_Get_relative_locality(
    locality1: *const c_char,
    locality2: *const c_char,
    locality: *mut u16,
) -> pmix_status_t {
    if locality.is_null() {
        return PMIX_ERR_BAD_PARAM;
    }
    // SAFETY: per the contract.
    let (a, b) = match unsafe { (crate::text(locality1), crate::text(locality2)) } {
        (Ok(a), Ok(b)) => (a, b),
        _ => return PMIX_ERR_BAD_PARAM,
    };
    match relative(&a, &b) {
        Ok(l) => {
            // SAFETY: checked non-NULL; writable per the contract.
            unsafe { *locality = l };
            PMIX_SUCCESS
        }
        Err(e) => {
            crate::debug(|| format!("PMIx_Get_relative_locality({a:?}, {b:?}): {e}"));
            PMIX_ERR_BAD_PARAM
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHARE_NODE: u16 = PMIX_LOCALITY_SHARE_NODE;
    const SHARE_PACKAGE: u16 = PMIX_LOCALITY_SHARE_PACKAGE;
    const SHARE_NUMA: u16 = PMIX_LOCALITY_SHARE_NUMA;
    const SHARE_L3CACHE: u16 = PMIX_LOCALITY_SHARE_L3CACHE;
    const SHARE_HWTHREAD: u16 = PMIX_LOCALITY_SHARE_HWTHREAD;

    #[test]
    fn what_two_bindings_share() {
        let core0 = "SK0:L30:L20:L10:CR0:HT0:NM0";
        let core1 = "SK0:L30:L21:L11:CR1:HT2:NM0";
        let pkg1 = "SK1:L31:L22:L12:CR2:HT4:NM1";
        let both = "SK0:L30:L20-1:L10-1:CR0-1:HT0-3:NM0";
        let node_pkg_numa_l3 = SHARE_NODE | SHARE_PACKAGE | SHARE_NUMA | SHARE_L3CACHE;
        assert_eq!(relative(core0, core1), Ok(node_pkg_numa_l3));
        assert_eq!(relative(core0, pkg1), Ok(SHARE_NODE));
        assert_eq!(relative(core0, core0), Ok(0x407f));
        // Inside a binding of two cores: everything.
        assert_eq!(relative(core1, both), Ok(0x407f));
        // Order, a `hwloc:` prefix and tags it does not know do not matter.
        assert_eq!(
            relative("hwloc:NM0:HT2:XX9:SK0", core1),
            Ok(SHARE_NODE | SHARE_NUMA | SHARE_HWTHREAD | SHARE_PACKAGE)
        );
        // A token missing on one side shares nothing of its kind.
        assert_eq!(relative("SK0", "CR0"), Ok(SHARE_NODE));
        assert!(relative("SK0-x", core0).is_err());
    }

    #[test]
    fn the_c_call_checks_its_arguments() {
        let a = c"SK0:CR0";
        let b = c"SK0:CR1";
        let mut loc = 0u16;
        // SAFETY: valid strings and a writable result.
        let rc = unsafe { PMIx_Get_relative_locality(a.as_ptr(), b.as_ptr(), &mut loc) };
        assert_eq!((rc, loc), (PMIX_SUCCESS, SHARE_NODE | SHARE_PACKAGE));
        // SAFETY: NULL arguments are refused before use.
        let rc = unsafe { PMIx_Get_relative_locality(std::ptr::null(), b.as_ptr(), &mut loc) };
        assert_eq!(rc, PMIX_ERR_BAD_PARAM);
        // SAFETY: as above.
        let rc =
            unsafe { PMIx_Get_relative_locality(a.as_ptr(), b.as_ptr(), std::ptr::null_mut()) };
        assert_eq!(rc, PMIX_ERR_BAD_PARAM);
    }
}
