//! Info lists (`PMIx_Info_list_*`, PMIx v4): an opaque list a program fills one info
//! at a time and turns into the `pmix_info_t` array an API call takes.
//!
//! Each element is a deep copy made with [`PMIx_Info_load`] or [`PMIx_Info_xfer`]
//! (memory from `malloc`), owned by the list until [`PMIx_Info_list_release`].
//! `PMIx_Info_list_insert` copies too: the caller's info stays the caller's (OpenPMIx
//! takes it over instead; a caller that never frees it loses only that memory here).

use std::ffi::{c_char, c_void};

use crate::types::*;
use crate::value::{calloc, destruct_value};
use crate::{guard, PMIx_Info_load, PMIx_Info_xfer};

/// What `PMIx_Info_list_start` hands out.
#[derive(Default)]
struct InfoList {
    items: Vec<pmix_info_t>,
}

impl Drop for InfoList {
    fn drop(&mut self) {
        for info in &mut self.items {
            // SAFETY: each element is a deep copy this list made and owns.
            unsafe { destruct_value(&mut info.value) };
        }
    }
}

fn zeroed_info() -> pmix_info_t {
    // SAFETY: pmix_info_t is plain C data; all zeroes is an empty info (PMIX_UNDEF).
    unsafe { std::mem::zeroed() }
}

/// # Safety
/// `ptr` NULL or from [`PMIx_Info_list_start`] and not released.
unsafe fn list<'a>(ptr: *mut c_void) -> Result<&'a mut InfoList, pmix_status_t> {
    // SAFETY: per the contract.
    unsafe { ptr.cast::<InfoList>().as_mut() }.ok_or(PMIX_ERR_BAD_PARAM)
}

/// Pushes a copy made by `fill` (a status-returning loader) onto the list.
///
/// # Safety
/// `ptr` as [`list`].
unsafe fn push(
    ptr: *mut c_void,
    fill: impl FnOnce(&mut pmix_info_t) -> pmix_status_t,
) -> pmix_status_t {
    guard(|| {
        // SAFETY: forwarded contract.
        let l = unsafe { list(ptr) }?;
        let mut info = zeroed_info();
        match fill(&mut info) {
            PMIX_SUCCESS => {
                l.items.push(info);
                Ok(())
            }
            st => Err(st),
        }
    })
}

/// A new, empty list.
#[no_mangle]
pub extern "C" fn PMIx_Info_list_start() -> *mut c_void {
    Box::into_raw(Box::<InfoList>::default()).cast()
}

/// Appends `key` = a copy of `value` (of type `ty`, as `PMIx_Info_load` takes it).
///
/// # Safety
/// `ptr` from [`PMIx_Info_list_start`], not released; `key` NUL-terminated; `value`
/// as `PMIx_Info_load` takes it.
#[no_mangle]
pub unsafe extern "C" fn PMIx_Info_list_add(
    ptr: *mut c_void,
    key: *const c_char,
    value: *const c_void,
    ty: pmix_data_type_t,
) -> pmix_status_t {
    // SAFETY: forwarded contract; `i` is a zeroed info of the list's.
    unsafe { push(ptr, |i| PMIx_Info_load(i, key, value, ty)) }
}

/// Appends a copy of `info` (see the module's note on ownership).
///
/// # Safety
/// `ptr` as [`PMIx_Info_list_add`]; `info` a valid info.
#[no_mangle]
pub unsafe extern "C" fn PMIx_Info_list_insert(
    ptr: *mut c_void,
    info: *mut pmix_info_t,
) -> pmix_status_t {
    // SAFETY: forwarded contract.
    unsafe { PMIx_Info_list_xfer(ptr, info) }
}

/// Appends a copy of `info` (key, flags and value).
///
/// # Safety
/// `ptr` as [`PMIx_Info_list_add`]; `info` a valid info.
#[no_mangle]
pub unsafe extern "C" fn PMIx_Info_list_xfer(
    ptr: *mut c_void,
    info: *const pmix_info_t,
) -> pmix_status_t {
    // SAFETY: forwarded contract; `i` is a zeroed info of the list's.
    unsafe { push(ptr, |i| PMIx_Info_xfer(i, info)) }
}

/// Fills `par` with a new `malloc`'d array of copies of the list's infos (type
/// PMIX_INFO; size 0 and no array for an empty list), for the caller to release with
/// `PMIx_Data_array_destruct`. The list is unchanged.
///
/// # Safety
/// `ptr` as [`PMIx_Info_list_add`]; `par` writable.
#[no_mangle]
pub unsafe extern "C" fn PMIx_Info_list_convert(
    ptr: *mut c_void,
    par: *mut pmix_data_array_t,
) -> pmix_status_t {
    guard(|| {
        // SAFETY: forwarded contract.
        let l = unsafe { list(ptr) }?;
        // SAFETY: NULL checked; writable per the contract.
        let out = unsafe { par.as_mut() }.ok_or(PMIX_ERR_BAD_PARAM)?;
        let n = l.items.len();
        let arr = calloc::<pmix_info_t>(n);
        if n > 0 && arr.is_null() {
            return Err(PMIX_ERR_NOMEM);
        }
        for (i, info) in l.items.iter().enumerate() {
            // SAFETY: `arr` has `n` zeroed elements; `info` is a valid info of ours.
            let st = unsafe { PMIx_Info_xfer(arr.add(i), info) };
            if st != PMIX_SUCCESS {
                for j in 0..i {
                    // SAFETY: the copies made so far.
                    unsafe { destruct_value(&mut (*arr.add(j)).value) };
                }
                // SAFETY: from calloc.
                unsafe { libc::free(arr.cast()) };
                return Err(st);
            }
        }
        *out = pmix_data_array_t {
            type_: PMIX_INFO,
            size: n,
            array: arr.cast(),
        };
        Ok(())
    })
}

/// Releases the list and every info it holds.
///
/// # Safety
/// `ptr` NULL or from [`PMIx_Info_list_start`] and not released before.
#[no_mangle]
pub unsafe extern "C" fn PMIx_Info_list_release(ptr: *mut c_void) {
    if !ptr.is_null() {
        // SAFETY: from Box::into_raw in PMIx_Info_list_start, released once.
        drop(unsafe { Box::from_raw(ptr.cast::<InfoList>()) });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::value::key_in;

    #[test]
    fn a_list_becomes_an_info_array() {
        let l = PMIx_Info_list_start();
        let n: u32 = 7;
        let mut src = zeroed_info();
        // SAFETY: valid keys, values and a live list throughout.
        unsafe {
            assert_eq!(
                PMIx_Info_list_add(l, c"a.num".as_ptr(), (&n as *const u32).cast(), PMIX_UINT32),
                PMIX_SUCCESS
            );
            assert_eq!(
                PMIx_Info_list_add(l, c"a.str".as_ptr(), c"hello".as_ptr().cast(), PMIX_STRING),
                PMIX_SUCCESS
            );
            assert_eq!(
                PMIx_Info_load(&mut src, c"a.flag".as_ptr(), std::ptr::null(), PMIX_BOOL),
                PMIX_SUCCESS
            );
            src.flags = PMIX_INFO_REQD;
            assert_eq!(PMIx_Info_list_xfer(l, &src), PMIX_SUCCESS);
            // The copy is the list's: the source may go.
            destruct_value(&mut src.value);
            let mut arr = pmix_data_array_t {
                type_: PMIX_UNDEF,
                size: 0,
                array: std::ptr::null_mut(),
            };
            assert_eq!(PMIx_Info_list_convert(l, &mut arr), PMIX_SUCCESS);
            PMIx_Info_list_release(l);
            assert_eq!((arr.type_, arr.size), (PMIX_INFO, 3));
            let infos = std::slice::from_raw_parts(arr.array.cast::<pmix_info_t>(), 3);
            let keys: Vec<String> = infos.iter().map(|i| key_in(&i.key)).collect();
            assert_eq!(keys, ["a.num", "a.str", "a.flag"]);
            assert_eq!(infos[0].value.type_, PMIX_UINT32);
            assert_eq!(infos[0].value.data.uint32, 7);
            let s = std::ffi::CStr::from_ptr(infos[1].value.data.string);
            assert_eq!(s.to_str(), Ok("hello"));
            assert!(infos[2].value.data.flag);
            assert_eq!(infos[2].flags & PMIX_INFO_REQD, PMIX_INFO_REQD);
            crate::PMIx_Data_array_destruct(&mut arr);
        }
    }

    #[test]
    fn bad_arguments_are_refused() {
        let n: u32 = 1;
        // SAFETY: NULL lists and outputs are refused before use.
        unsafe {
            let st = PMIx_Info_list_add(
                std::ptr::null_mut(),
                c"k".as_ptr(),
                (&n as *const u32).cast(),
                PMIX_UINT32,
            );
            assert_eq!(st, PMIX_ERR_BAD_PARAM);
            let l = PMIx_Info_list_start();
            let st = PMIx_Info_list_add(l, c"k".as_ptr(), (&n as *const u32).cast(), 9999);
            assert_ne!(st, PMIX_SUCCESS, "an unknown type");
            assert_eq!(
                PMIx_Info_list_convert(l, std::ptr::null_mut()),
                PMIX_ERR_BAD_PARAM
            );
            let mut arr = pmix_data_array_t {
                type_: PMIX_UNDEF,
                size: 9,
                array: std::ptr::null_mut(),
            };
            assert_eq!(PMIx_Info_list_convert(l, &mut arr), PMIX_SUCCESS);
            assert_eq!(
                (arr.type_, arr.size, arr.array.is_null()),
                (PMIX_INFO, 0, true)
            );
            PMIx_Info_list_release(l);
            PMIx_Info_list_release(std::ptr::null_mut());
        }
    }
}
