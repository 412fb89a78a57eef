//! Keys and their values crossing the boundary as lists (PMIx's `pmix_info_t`
//! arrays): the group info a process contributes to a construct, invite or join
//! (PMIX_GROUP_INFO) and gets back from every member with the group, an event's info
//! given to `cohort_notify` and handed to a handler.

use std::ffi::{c_char, c_int, CString};

use cohort::{Info, ProcId, Value};

use crate::{
    bad_param, cohort_proc_t, cohort_value_free, cohort_value_t, proc_out, procs_in, text,
    value_out, COHORT_VALUE_BOOL, COHORT_VALUE_BYTES, COHORT_VALUE_F64, COHORT_VALUE_I64,
    COHORT_VALUE_PROCS, COHORT_VALUE_STRING, COHORT_VALUE_STRINGS, COHORT_VALUE_U32,
    COHORT_VALUE_U64,
};

/// A key and its value.
#[repr(C)]
pub struct cohort_info_t {
    pub key: *mut c_char,
    pub value: cohort_value_t,
}

/// One member's contribution to a group's info.
#[repr(C)]
pub struct cohort_group_info_t {
    pub member: cohort_proc_t,
    pub key: *mut c_char,
    pub value: cohort_value_t,
}

/// A string handed to C (NULs, which C cannot hold, become spaces).
pub(crate) fn c_string(s: &str) -> *mut c_char {
    CString::new(s.replace('\0', " "))
        .unwrap_or_default()
        .into_raw()
}

/// The value C passed in under `key` (which names it in errors).
///
/// # Safety
/// The field `v.type_` selects points to what the header says (`len` elements).
unsafe fn value_in(v: &cohort_value_t, key: &str) -> Result<Value, c_int> {
    let absent = |ptr_is_null: bool, what: &str| {
        if v.len > 0 && ptr_is_null {
            Err(bad_param(format!("{key}: {} {what} at NULL", v.len)))
        } else {
            Ok(())
        }
    };
    Ok(match v.type_ {
        COHORT_VALUE_BOOL => Value::Bool(v.boolean != 0),
        COHORT_VALUE_U32 => Value::U32(v.u32_),
        COHORT_VALUE_U64 => Value::U64(v.u64_),
        COHORT_VALUE_I64 => Value::I64(v.i64_),
        COHORT_VALUE_F64 => Value::F64(v.f64_),
        COHORT_VALUE_STRING => Value::Str(text(v.str_, &format!("the string of {key}"))?.into()),
        COHORT_VALUE_BYTES => {
            absent(v.bytes.is_null(), "bytes")?;
            let bytes: &[u8] = if v.len == 0 {
                &[]
            } else {
                std::slice::from_raw_parts(v.bytes.cast(), v.len)
            };
            Value::from(bytes.to_vec())
        }
        COHORT_VALUE_PROCS => Value::Procs(procs_in(v.procs, v.len)?),
        COHORT_VALUE_STRINGS => {
            absent(v.strs.is_null(), "strings")?;
            let strs: &[*mut c_char] = if v.len == 0 {
                &[]
            } else {
                std::slice::from_raw_parts(v.strs, v.len)
            };
            Value::Strs(
                strs.iter()
                    .map(|&s| text(s, &format!("a string of {key}")).map(String::from))
                    .collect::<Result<_, _>>()?,
            )
        }
        other => {
            return Err(bad_param(format!(
                "{key}: a value of type {other} cannot be passed in"
            )))
        }
    })
}

/// The list C passed in.
///
/// # Safety
/// `info` is NULL with `n` 0, or points to `n` entries whose keys are strings and
/// whose values are as [`value_in`] needs.
pub(crate) unsafe fn info_in(info: *const cohort_info_t, n: usize) -> Result<Info, c_int> {
    if n == 0 {
        return Ok(Vec::new());
    }
    if info.is_null() {
        return Err(bad_param(format!("a list of {n} keys is NULL")));
    }
    std::slice::from_raw_parts(info, n)
        .iter()
        .map(|i| {
            let key = text(i.key, "a key")?;
            Ok((key.to_string(), value_in(&i.value, key)?))
        })
        .collect()
}

/// A list handed to C, released by [`free_info`].
pub(crate) fn info_out(info: &Info) -> (*mut cohort_info_t, usize) {
    if info.is_empty() {
        return (std::ptr::null_mut(), 0);
    }
    let list: Box<[cohort_info_t]> = info
        .iter()
        .map(|(k, v)| cohort_info_t {
            key: c_string(k),
            value: value_out(v.clone()),
        })
        .collect();
    let n = list.len();
    (Box::into_raw(list).cast(), n)
}

/// An entry of a list handed out: its key and value, to release.
trait Entry {
    fn key_and_value(&mut self) -> (*mut c_char, &mut cohort_value_t);
}

impl Entry for cohort_info_t {
    fn key_and_value(&mut self) -> (*mut c_char, &mut cohort_value_t) {
        (self.key, &mut self.value)
    }
}

impl Entry for cohort_group_info_t {
    fn key_and_value(&mut self) -> (*mut c_char, &mut cohort_value_t) {
        (self.key, &mut self.value)
    }
}

/// Releases a list of entries the library handed out.
///
/// # Safety
/// `(p, n)` came from [`info_out`] or [`group_info_out`] and was not released.
unsafe fn free_entries<T: Entry>(p: *mut T, n: usize) {
    if p.is_null() {
        return;
    }
    let mut list = Box::from_raw(std::ptr::slice_from_raw_parts_mut(p, n));
    for e in list.iter_mut() {
        let (key, value) = e.key_and_value();
        drop(CString::from_raw(key));
        cohort_value_free(value);
    }
}

/// # Safety
/// `(p, n)` came from [`info_out`] and was not released.
pub(crate) unsafe fn free_info(p: *mut cohort_info_t, n: usize) {
    free_entries(p, n);
}

/// Every member's contributions, member by member, as a list handed to C, released
/// by [`free_group_info`].
pub(crate) fn group_info_out(info: &[(ProcId, Info)]) -> (*mut cohort_group_info_t, usize) {
    let list: Box<[cohort_group_info_t]> = info
        .iter()
        .flat_map(|(member, kvs)| {
            kvs.iter().map(move |(k, v)| cohort_group_info_t {
                member: proc_out(member),
                key: c_string(k),
                value: value_out(v.clone()),
            })
        })
        .collect();
    if list.is_empty() {
        return (std::ptr::null_mut(), 0);
    }
    let n = list.len();
    (Box::into_raw(list).cast(), n)
}

/// # Safety
/// `(p, n)` came from [`group_info_out`] and was not released.
pub(crate) unsafe fn free_group_info(p: *mut cohort_group_info_t, n: usize) {
    free_entries(p, n);
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CStr;

    /// Every type C can pass in comes back as it went, through the output list.
    #[test]
    fn values_cross_in_and_out_unchanged() {
        let info: Info = vec![
            ("b".into(), Value::Bool(true)),
            ("u32".into(), Value::U32(7)),
            ("u64".into(), Value::U64(1 << 40)),
            ("i64".into(), Value::I64(-3)),
            ("f64".into(), Value::F64(0.5)),
            ("s".into(), Value::Str("text".into())),
            ("bytes".into(), Value::from(vec![1u8, 0, 2])),
            ("empty".into(), Value::from(Vec::<u8>::new())),
            ("procs".into(), Value::Procs(vec![ProcId::new("job", 2)])),
            ("strs".into(), Value::Strs(vec!["a".into(), "b".into()])),
        ];
        let (list, n) = info_out(&info);
        let back = unsafe { info_in(list, n) }.unwrap();
        unsafe { free_info(list, n) };
        assert_eq!(back, info);
    }

    #[test]
    fn bad_entries_are_refused_naming_the_key() {
        let mut v = value_out(Value::U32(0));
        v.type_ = COHORT_VALUE_STRING;
        let key = CString::new("colour").unwrap();
        let entry = cohort_info_t {
            key: key.as_ptr().cast_mut(),
            value: v,
        };
        assert_eq!(
            unsafe { info_in(&entry, 1) },
            Err(crate::COHORT_ERR_BAD_PARAM)
        );
        let last = unsafe { CStr::from_ptr(crate::cohort_last_error()) };
        assert!(last.to_str().unwrap().contains("colour"), "{last:?}");
        assert_eq!(
            unsafe { info_in(std::ptr::null(), 3) },
            Err(crate::COHORT_ERR_BAD_PARAM)
        );
        let mut other = value_out(Value::U32(0));
        other.type_ = 99;
        let odd = cohort_info_t {
            key: key.as_ptr().cast_mut(),
            value: other,
        };
        assert_eq!(
            unsafe { info_in(&odd, 1) },
            Err(crate::COHORT_ERR_BAD_PARAM)
        );
    }

    #[test]
    fn group_info_lists_each_members_keys_under_its_name() {
        let a = ProcId::new("job", 0);
        let b = ProcId::new("job", 1);
        let info = vec![
            (a.clone(), vec![("k".into(), Value::U64(1))]),
            (b.clone(), vec![]),
            (
                b.clone(),
                vec![
                    ("k".into(), Value::U64(2)),
                    ("s".into(), Value::Str("x".into())),
                ],
            ),
        ];
        let (list, n) = group_info_out(&info);
        assert_eq!(n, 3);
        let entries = unsafe { std::slice::from_raw_parts(list, n) };
        let seen: Vec<(u32, String, u64)> = entries
            .iter()
            .map(|e| {
                let key = unsafe { CStr::from_ptr(e.key) }
                    .to_str()
                    .unwrap()
                    .to_string();
                (e.member.rank, key, e.value.u64_)
            })
            .collect();
        assert_eq!(seen[0], (0, "k".into(), 1));
        assert_eq!(seen[1], (1, "k".into(), 2));
        assert_eq!(seen[2].0, 1);
        unsafe { free_group_info(list, n) };
        assert_eq!(group_info_out(&[]).1, 0);
    }
}
