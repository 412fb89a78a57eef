//! Values: [`PVal`], an owned Rust form of a `pmix_value_t` of the types this library
//! supports; its conversions from and to C (memory handed to C comes from `malloc`, as
//! the header's `PMIX_*_FREE` macros release it with `free`), and to and from the
//! cohort [`Value`]s that travel through `put`/`get` and events.

use std::ffi::{c_char, c_void, CStr};
use std::ptr;

use cohort::{ProcId, Value, RANK_WILDCARD};

use crate::types::*;

/// A PMIx value owned by Rust.
#[derive(Clone, Debug, PartialEq)]
pub enum PVal {
    Bool(bool),
    Byte(u8),
    Str(String),
    Size(u64),
    Pid(i32),
    Int(i32),
    Int8(i8),
    Int16(i16),
    Int32(i32),
    Int64(i64),
    Uint(u32),
    Uint8(u8),
    Uint16(u16),
    Uint32(u32),
    Uint64(u64),
    Float(f32),
    Double(f64),
    Status(i32),
    Rank(u32),
    Persist(u8),
    Scope(u8),
    Range(u8),
    ProcState(u8),
    DataType(u16),
    Proc(ProcId),
    Bytes(Vec<u8>),
    /// A `pmix_data_array_t`: element type and elements.
    Array(u16, Vec<PVal>),
    /// An element of an array of `pmix_info_t`.
    Info(String, Box<PVal>),
}

impl PVal {
    pub fn type_code(&self) -> pmix_data_type_t {
        match self {
            PVal::Bool(_) => PMIX_BOOL,
            PVal::Byte(_) => PMIX_BYTE,
            PVal::Str(_) => PMIX_STRING,
            PVal::Size(_) => PMIX_SIZE,
            PVal::Pid(_) => PMIX_PID,
            PVal::Int(_) => PMIX_INT,
            PVal::Int8(_) => PMIX_INT8,
            PVal::Int16(_) => PMIX_INT16,
            PVal::Int32(_) => PMIX_INT32,
            PVal::Int64(_) => PMIX_INT64,
            PVal::Uint(_) => PMIX_UINT,
            PVal::Uint8(_) => PMIX_UINT8,
            PVal::Uint16(_) => PMIX_UINT16,
            PVal::Uint32(_) => PMIX_UINT32,
            PVal::Uint64(_) => PMIX_UINT64,
            PVal::Float(_) => PMIX_FLOAT,
            PVal::Double(_) => PMIX_DOUBLE,
            PVal::Status(_) => PMIX_STATUS,
            PVal::Rank(_) => PMIX_PROC_RANK,
            PVal::Persist(_) => PMIX_PERSIST,
            PVal::Scope(_) => PMIX_SCOPE,
            PVal::Range(_) => PMIX_DATA_RANGE,
            PVal::ProcState(_) => PMIX_PROC_STATE,
            PVal::DataType(_) => PMIX_DATA_TYPE,
            PVal::Proc(_) => PMIX_PROC,
            PVal::Bytes(_) => PMIX_BYTE_OBJECT,
            PVal::Array(..) => PMIX_DATA_ARRAY,
            PVal::Info(..) => PMIX_INFO,
        }
    }

    /// As a boolean directive (PMIx treats an attribute without a value as true).
    pub fn truthy(&self) -> bool {
        match self {
            PVal::Bool(b) => *b,
            other => other.as_u64().is_some_and(|v| v != 0),
        }
    }

    pub fn as_u64(&self) -> Option<u64> {
        Some(match *self {
            PVal::Bool(b) => b as u64,
            PVal::Byte(v) | PVal::Uint8(v) => v.into(),
            PVal::Size(v) | PVal::Uint64(v) => v,
            PVal::Uint(v) | PVal::Uint32(v) | PVal::Rank(v) => v.into(),
            PVal::Uint16(v) => v.into(),
            PVal::Int(v) | PVal::Int32(v) | PVal::Pid(v) | PVal::Status(v) => {
                u64::try_from(v).ok()?
            }
            PVal::Int8(v) => u64::try_from(v).ok()?,
            PVal::Int16(v) => u64::try_from(v).ok()?,
            PVal::Int64(v) => u64::try_from(v).ok()?,
            _ => return None,
        })
    }
}

// ------------------------------------------------------------------ process ids

/// A cohort process id from a `pmix_proc_t` (PMIx's wildcard and undefined ranks
/// become cohort's wildcard).
pub fn proc_in(p: &pmix_proc_t) -> Result<ProcId, pmix_status_t> {
    let bytes: Vec<u8> = p
        .nspace
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    let nspace = String::from_utf8(bytes).map_err(|_| PMIX_ERR_BAD_PARAM)?;
    let rank = match p.rank {
        PMIX_RANK_WILDCARD | PMIX_RANK_UNDEF => RANK_WILDCARD,
        r => r,
    };
    Ok(ProcId::new(nspace, rank))
}

/// `nspace` as a NUL-terminated `pmix_nspace_t` (cut at PMIX_MAX_NSLEN bytes).
pub fn nspace_out(nspace: &str) -> [c_char; PMIX_MAX_NSLEN + 1] {
    let mut out = [0 as c_char; PMIX_MAX_NSLEN + 1];
    for (d, &b) in out
        .iter_mut()
        .zip(nspace.as_bytes().iter().take(PMIX_MAX_NSLEN))
    {
        *d = b as c_char;
    }
    out
}

pub fn proc_out(p: &ProcId) -> pmix_proc_t {
    pmix_proc_t {
        nspace: nspace_out(&p.nspace),
        rank: if p.rank == RANK_WILDCARD {
            PMIX_RANK_WILDCARD
        } else {
            p.rank
        },
    }
}

/// `key` into a `pmix_key_t` (cut at PMIX_MAX_KEYLEN bytes).
pub fn key_out(key: &str, out: &mut [c_char; PMIX_MAX_KEYLEN + 1]) {
    out.fill(0);
    for (d, &b) in out
        .iter_mut()
        .zip(key.as_bytes().iter().take(PMIX_MAX_KEYLEN))
    {
        *d = b as c_char;
    }
}

/// The text of a fixed-size, NUL-terminated key.
pub fn key_in(key: &[c_char]) -> String {
    let bytes: Vec<u8> = key
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c as u8)
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// # Safety
/// `s` is NULL or a NUL-terminated string.
pub unsafe fn c_str(s: *const c_char) -> Option<String> {
    if s.is_null() {
        return None;
    }
    // SAFETY: non-NULL and NUL-terminated per the contract.
    Some(unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned())
}

// ------------------------------------------------------------------ malloc'd memory

/// A `malloc`'d copy of `s` (NUL-terminated; interior NULs end it early).
pub fn strdup(s: &str) -> *mut c_char {
    let bytes = s.as_bytes();
    let n = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    // SAFETY: malloc of n+1 bytes, filled with n bytes of `s` and a NUL.
    unsafe {
        let p = libc::malloc(n + 1).cast::<u8>();
        if p.is_null() {
            return ptr::null_mut();
        }
        ptr::copy_nonoverlapping(bytes.as_ptr(), p, n);
        *p.add(n) = 0;
        p.cast()
    }
}

/// A zeroed `malloc`'d array of `n` `T`s (NULL when `n` is 0).
pub fn calloc<T>(n: usize) -> *mut T {
    if n == 0 {
        return ptr::null_mut();
    }
    // SAFETY: calloc has no preconditions; it checks n * size for overflow.
    unsafe { libc::calloc(n, std::mem::size_of::<T>()).cast() }
}

/// A `malloc`'d array of `pmix_info_t` holding `items` (with the header's array-end
/// flag on the last element, as PMIX_INFO_CREATE sets it).
pub fn info_array_out(items: &[(String, PVal)]) -> (*mut pmix_info_t, usize) {
    let arr = calloc::<pmix_info_t>(items.len());
    if arr.is_null() {
        return (ptr::null_mut(), 0);
    }
    for (i, (k, v)) in items.iter().enumerate() {
        // SAFETY: `arr` has `items.len()` zeroed elements.
        unsafe {
            let info = &mut *arr.add(i);
            key_out(k, &mut info.key);
            write_value(v, &mut info.value);
        }
    }
    // SAFETY: the array is not empty here (calloc returned non-NULL).
    unsafe { (*arr.add(items.len() - 1)).flags |= PMIX_INFO_ARRAY_END };
    (arr, items.len())
}

/// Releases an array from [`info_array_out`].
///
/// # Safety
/// `(arr, n)` came from [`info_array_out`] and was not released.
pub unsafe fn info_array_free(arr: *mut pmix_info_t, n: usize) {
    if arr.is_null() {
        return;
    }
    for i in 0..n {
        // SAFETY: element i of the array we built.
        unsafe { destruct_value(&mut (*arr.add(i)).value) };
    }
    // SAFETY: malloc'd by calloc.
    unsafe { libc::free(arr.cast()) };
}

// ------------------------------------------------------------------ reading C values

/// Size of one element of type `ty` inside a `pmix_data_array_t`.
fn elem_size(ty: pmix_data_type_t) -> Option<usize> {
    use std::mem::size_of;
    Some(match ty {
        PMIX_BOOL | PMIX_BYTE | PMIX_INT8 | PMIX_UINT8 | PMIX_PERSIST | PMIX_SCOPE
        | PMIX_DATA_RANGE | PMIX_PROC_STATE => 1,
        PMIX_INT16 | PMIX_UINT16 | PMIX_DATA_TYPE => 2,
        PMIX_PID | PMIX_INT | PMIX_INT32 | PMIX_UINT | PMIX_UINT32 | PMIX_FLOAT | PMIX_STATUS
        | PMIX_PROC_RANK | PMIX_INFO_DIRECTIVES => 4,
        PMIX_SIZE | PMIX_INT64 | PMIX_UINT64 | PMIX_DOUBLE => 8,
        PMIX_STRING => size_of::<*mut c_char>(),
        PMIX_PROC => size_of::<pmix_proc_t>(),
        PMIX_BYTE_OBJECT => size_of::<pmix_byte_object_t>(),
        PMIX_INFO => size_of::<pmix_info_t>(),
        PMIX_VALUE => size_of::<pmix_value_t>(),
        _ => return None,
    })
}

/// Reads one element of type `ty` stored inline at `p` (as in a data array, or the
/// scalar members of a value's union).
///
/// # Safety
/// `p` points to a readable, initialised element of type `ty`.
unsafe fn read_elem(ty: pmix_data_type_t, p: *const c_void) -> Result<PVal, pmix_status_t> {
    // SAFETY: the caller guarantees an element of type `ty` at `p` (for the whole
    // body); unaligned reads make no assumption about the array's alignment.
    unsafe {
        Ok(match ty {
            PMIX_BOOL => PVal::Bool(p.cast::<u8>().read() != 0),
            PMIX_BYTE => PVal::Byte(p.cast::<u8>().read()),
            PMIX_STRING => {
                PVal::Str(c_str(p.cast::<*const c_char>().read_unaligned()).unwrap_or_default())
            }
            PMIX_SIZE => PVal::Size(p.cast::<usize>().read_unaligned() as u64),
            PMIX_PID => PVal::Pid(p.cast::<i32>().read_unaligned()),
            PMIX_INT => PVal::Int(p.cast::<i32>().read_unaligned()),
            PMIX_INT8 => PVal::Int8(p.cast::<i8>().read()),
            PMIX_INT16 => PVal::Int16(p.cast::<i16>().read_unaligned()),
            PMIX_INT32 => PVal::Int32(p.cast::<i32>().read_unaligned()),
            PMIX_INT64 => PVal::Int64(p.cast::<i64>().read_unaligned()),
            PMIX_UINT => PVal::Uint(p.cast::<u32>().read_unaligned()),
            PMIX_UINT8 => PVal::Uint8(p.cast::<u8>().read()),
            PMIX_UINT16 => PVal::Uint16(p.cast::<u16>().read_unaligned()),
            PMIX_UINT32 => PVal::Uint32(p.cast::<u32>().read_unaligned()),
            PMIX_UINT64 => PVal::Uint64(p.cast::<u64>().read_unaligned()),
            PMIX_FLOAT => PVal::Float(p.cast::<f32>().read_unaligned()),
            PMIX_DOUBLE => PVal::Double(p.cast::<f64>().read_unaligned()),
            PMIX_STATUS => PVal::Status(p.cast::<i32>().read_unaligned()),
            PMIX_PROC_RANK => PVal::Rank(p.cast::<u32>().read_unaligned()),
            PMIX_PERSIST => PVal::Persist(p.cast::<u8>().read()),
            PMIX_SCOPE => PVal::Scope(p.cast::<u8>().read()),
            PMIX_DATA_RANGE => PVal::Range(p.cast::<u8>().read()),
            PMIX_PROC_STATE => PVal::ProcState(p.cast::<u8>().read()),
            PMIX_DATA_TYPE => PVal::DataType(p.cast::<u16>().read_unaligned()),
            PMIX_INFO_DIRECTIVES => PVal::Uint32(p.cast::<u32>().read_unaligned()),
            PMIX_PROC => PVal::Proc(proc_in(&p.cast::<pmix_proc_t>().read_unaligned())?),
            PMIX_BYTE_OBJECT => {
                let bo = p.cast::<pmix_byte_object_t>().read_unaligned();
                PVal::Bytes(bytes_in(bo.bytes, bo.size))
            }
            PMIX_INFO => {
                let info = &*p.cast::<pmix_info_t>();
                PVal::Info(key_in(&info.key), Box::new(read_value(&info.value)?))
            }
            PMIX_VALUE => read_value(&*p.cast::<pmix_value_t>())?,
            _ => return Err(PMIX_ERR_NOT_SUPPORTED),
        })
    }
}

/// # Safety
/// `p` is NULL with any `n`, or points to `n` readable bytes.
unsafe fn bytes_in(p: *const c_char, n: usize) -> Vec<u8> {
    if p.is_null() || n == 0 {
        return Vec::new();
    }
    // SAFETY: per the contract.
    unsafe { std::slice::from_raw_parts(p.cast::<u8>(), n) }.to_vec()
}

/// # Safety
/// `d` is NULL or a valid data array.
unsafe fn read_darray(d: *const pmix_data_array_t) -> Result<PVal, pmix_status_t> {
    // SAFETY: NULL checked; the caller guarantees a valid array otherwise.
    let Some(d) = (unsafe { d.as_ref() }) else {
        return Err(PMIX_ERR_BAD_PARAM);
    };
    let size = elem_size(d.type_).ok_or(PMIX_ERR_NOT_SUPPORTED)?;
    if d.size > 0 && d.array.is_null() {
        return Err(PMIX_ERR_BAD_PARAM);
    }
    let mut out = Vec::with_capacity(d.size);
    for i in 0..d.size {
        // SAFETY: element i of an array of `d.size` elements of this type.
        out.push(unsafe { read_elem(d.type_, d.array.cast::<u8>().add(i * size).cast()) }?);
    }
    Ok(PVal::Array(d.type_, out))
}

/// Reads a C value.
///
/// # Safety
/// `v` is a valid, initialised `pmix_value_t`.
pub unsafe fn read_value(v: &pmix_value_t) -> Result<PVal, pmix_status_t> {
    let data = ptr::addr_of!(v.data).cast::<c_void>();
    // SAFETY: the member read is the one `type_` names.
    unsafe {
        match v.type_ {
            PMIX_PROC => match v.data.proc_.as_ref() {
                Some(p) => Ok(PVal::Proc(proc_in(p)?)),
                None => Err(PMIX_ERR_BAD_PARAM),
            },
            PMIX_DATA_ARRAY => read_darray(v.data.darray),
            PMIX_INFO | PMIX_VALUE | PMIX_UNDEF => Err(PMIX_ERR_NOT_SUPPORTED),
            ty => read_elem(ty, data),
        }
    }
}

/// Reads an info array into key/value pairs, skipping entries whose type this library
/// does not carry (pointers, …).
///
/// # Safety
/// `info` is NULL or points to `n` valid infos.
pub unsafe fn read_infos(info: *const pmix_info_t, n: usize) -> Vec<(String, PVal)> {
    if info.is_null() {
        return Vec::new();
    }
    // SAFETY: per the contract.
    let infos = unsafe { std::slice::from_raw_parts(info, n) };
    infos
        .iter()
        .filter_map(|i| {
            let key = key_in(&i.key);
            // SAFETY: each info holds a valid value.
            match unsafe { read_value(&i.value) } {
                Ok(v) => Some((key, v)),
                // A directive without a value means "true".
                Err(_) if i.value.type_ == PMIX_UNDEF => Some((key, PVal::Bool(true))),
                Err(_) => None,
            }
        })
        .collect()
}

// ------------------------------------------------------------------ writing C values

/// Writes one element of `v` inline at `p`, allocating what it points to.
///
/// # Safety
/// `p` points to writable storage for an element of `v`'s type.
unsafe fn write_elem(v: &PVal, p: *mut c_void) {
    // SAFETY: `p` has room for an element of `v`'s type (for the whole body).
    unsafe {
        match v {
            PVal::Bool(b) => p.cast::<u8>().write(*b as u8),
            PVal::Byte(x) | PVal::Uint8(x) | PVal::Persist(x) | PVal::Scope(x) => {
                p.cast::<u8>().write(*x)
            }
            PVal::Range(x) | PVal::ProcState(x) => p.cast::<u8>().write(*x),
            PVal::Str(s) => p.cast::<*mut c_char>().write_unaligned(strdup(s)),
            PVal::Size(x) => p.cast::<usize>().write_unaligned(*x as usize),
            PVal::Pid(x) | PVal::Int(x) | PVal::Int32(x) | PVal::Status(x) => {
                p.cast::<i32>().write_unaligned(*x)
            }
            PVal::Int8(x) => p.cast::<i8>().write(*x),
            PVal::Int16(x) => p.cast::<i16>().write_unaligned(*x),
            PVal::Int64(x) => p.cast::<i64>().write_unaligned(*x),
            PVal::Uint(x) | PVal::Uint32(x) | PVal::Rank(x) => p.cast::<u32>().write_unaligned(*x),
            PVal::Uint16(x) | PVal::DataType(x) => p.cast::<u16>().write_unaligned(*x),
            PVal::Uint64(x) => p.cast::<u64>().write_unaligned(*x),
            PVal::Float(x) => p.cast::<f32>().write_unaligned(*x),
            PVal::Double(x) => p.cast::<f64>().write_unaligned(*x),
            PVal::Proc(id) => p.cast::<pmix_proc_t>().write_unaligned(proc_out(id)),
            PVal::Bytes(b) => p.cast::<pmix_byte_object_t>().write_unaligned(bytes_out(b)),
            PVal::Info(k, v) => {
                let info = &mut *p.cast::<pmix_info_t>();
                key_out(k, &mut info.key);
                info.flags = 0;
                write_value(v, &mut info.value);
            }
            PVal::Array(..) => {
                // An array inside an array is carried as an array of values.
                write_value(v, &mut *p.cast::<pmix_value_t>())
            }
        }
    }
}

fn bytes_out(b: &[u8]) -> pmix_byte_object_t {
    let p = calloc::<u8>(b.len());
    if !p.is_null() {
        // SAFETY: `p` has b.len() bytes.
        unsafe { ptr::copy_nonoverlapping(b.as_ptr(), p, b.len()) };
    }
    pmix_byte_object_t {
        bytes: p.cast(),
        size: if p.is_null() { 0 } else { b.len() },
    }
}

/// A `malloc`'d data array holding `elems` of type `ty`.
fn darray_out(ty: pmix_data_type_t, elems: &[PVal]) -> *mut pmix_data_array_t {
    let d = calloc::<pmix_data_array_t>(1);
    if d.is_null() {
        return d;
    }
    // Arrays nested in arrays, or of an unknown type, become arrays of values.
    let (ty, size) = match elem_size(ty) {
        Some(s) if elems.iter().all(|e| e.type_code() == ty) => (ty, s),
        _ => (PMIX_VALUE, std::mem::size_of::<pmix_value_t>()),
    };
    let arr = if elems.is_empty() {
        ptr::null_mut()
    } else {
        // SAFETY: calloc has no preconditions.
        unsafe { libc::calloc(elems.len(), size) }
    };
    for (i, e) in elems.iter().enumerate() {
        if arr.is_null() {
            break;
        }
        // SAFETY: element i of an array of elems.len() elements of `size` bytes.
        unsafe {
            let slot = arr.cast::<u8>().add(i * size).cast::<c_void>();
            if ty == PMIX_VALUE {
                write_value(e, &mut *slot.cast::<pmix_value_t>());
            } else {
                write_elem(e, slot);
            }
        }
    }
    // SAFETY: `d` is a zeroed, writable data array.
    unsafe {
        (*d).type_ = ty;
        (*d).size = if arr.is_null() { 0 } else { elems.len() };
        (*d).array = arr;
    }
    d
}

/// Writes `v` into `out` (a C value), allocating what it points to with `malloc`.
///
/// # Safety
/// `out` is writable; whatever it held is overwritten, not released.
pub unsafe fn write_value(v: &PVal, out: &mut pmix_value_t) {
    out.type_ = v.type_code();
    out.data = pmix_value_data { uint64: 0 };
    let data = ptr::addr_of_mut!(out.data).cast::<c_void>();
    match v {
        PVal::Proc(id) => {
            let p = calloc::<pmix_proc_t>(1);
            if !p.is_null() {
                // SAFETY: `p` is one writable proc.
                unsafe { p.write(proc_out(id)) };
            }
            out.data.proc_ = p;
        }
        PVal::Array(ty, elems) => out.data.darray = darray_out(*ty, elems),
        PVal::Info(..) => {
            // A single info as a value: carried as a one-element array of infos.
            out.type_ = PMIX_DATA_ARRAY;
            out.data.darray = darray_out(PMIX_INFO, std::slice::from_ref(v));
        }
        // SAFETY: the union has room for any inline element.
        other => unsafe { write_elem(other, data) },
    }
}

/// Releases what a data array's elements point to, then its storage.
///
/// # Safety
/// `d` is a valid data array whose memory came from `malloc`.
unsafe fn destruct_darray(d: &mut pmix_data_array_t) {
    if d.array.is_null() {
        d.size = 0;
        return;
    }
    if let Some(size) = elem_size(d.type_) {
        for i in 0..d.size {
            // SAFETY: element i of the array.
            unsafe {
                let p = d.array.cast::<u8>().add(i * size);
                match d.type_ {
                    PMIX_STRING => libc::free(p.cast::<*mut c_void>().read_unaligned()),
                    PMIX_BYTE_OBJECT => {
                        libc::free(p.cast::<pmix_byte_object_t>().read_unaligned().bytes.cast())
                    }
                    PMIX_INFO => {
                        let info = &mut *p.cast::<pmix_info_t>();
                        if info.flags & PMIX_INFO_PERSISTENT == 0 {
                            destruct_value(&mut info.value);
                        }
                    }
                    PMIX_VALUE => destruct_value(&mut *p.cast::<pmix_value_t>()),
                    _ => {}
                }
            }
        }
    }
    // SAFETY: malloc'd storage.
    unsafe { libc::free(d.array) };
    d.array = ptr::null_mut();
    d.size = 0;
}

/// Releases what `v` points to (PMIx_Value_destruct) and leaves it PMIX_UNDEF.
///
/// # Safety
/// `v` is a valid value whose memory came from `malloc`.
pub unsafe fn destruct_value(v: &mut pmix_value_t) {
    // SAFETY: the member read is the one `type_` names; all came from malloc.
    unsafe {
        match v.type_ {
            PMIX_STRING | PMIX_REGEX | PMIX_COMPRESSED_STRING => libc::free(v.data.string.cast()),
            PMIX_BYTE_OBJECT => libc::free(v.data.bo.bytes.cast()),
            PMIX_PROC => libc::free(v.data.proc_.cast()),
            PMIX_PROC_NSPACE => libc::free(v.data.ptr),
            PMIX_ENVAR => {
                libc::free(v.data.envar.envar.cast());
                libc::free(v.data.envar.value.cast());
            }
            PMIX_DATA_ARRAY => {
                if let Some(d) = v.data.darray.as_mut() {
                    destruct_darray(d);
                    libc::free((d as *mut pmix_data_array_t).cast());
                }
            }
            _ => {}
        }
    }
    v.type_ = PMIX_UNDEF;
    v.data = pmix_value_data { uint64: 0 };
}

/// Releases a data array's contents (PMIx_Data_array_destruct).
///
/// # Safety
/// As [`destruct_darray`].
pub unsafe fn data_array_destruct(d: &mut pmix_data_array_t) {
    // SAFETY: forwarded contract.
    unsafe { destruct_darray(d) }
}

// ------------------------------------------------------------------ cohort values

/// First element of a string list that carries a PMIx value cohort has no type for
/// (`uint16_t`, `size_t`, a single process, …): the rest is [`encode`]'s tokens.
const TYPED: &str = "\u{1}pmix-typed";

fn encode(v: &PVal, out: &mut Vec<String>) {
    out.push(v.type_code().to_string());
    match v {
        PVal::Str(s) => out.push(s.clone()),
        PVal::Float(x) => out.push(x.to_bits().to_string()),
        PVal::Double(x) => out.push(x.to_bits().to_string()),
        PVal::Int(x) | PVal::Int32(x) | PVal::Pid(x) | PVal::Status(x) => out.push(x.to_string()),
        PVal::Int8(x) => out.push(x.to_string()),
        PVal::Int16(x) => out.push(x.to_string()),
        PVal::Int64(x) => out.push(x.to_string()),
        PVal::Proc(p) => {
            out.push(p.nspace.to_string());
            out.push(p.rank.to_string());
        }
        PVal::Bytes(b) => out.push(b.iter().map(|x| format!("{x:02x}")).collect()),
        PVal::Array(ty, elems) => {
            out.push(ty.to_string());
            out.push(elems.len().to_string());
            for e in elems {
                encode(e, out);
            }
        }
        PVal::Info(k, inner) => {
            out.push(k.clone());
            encode(inner, out);
        }
        other => out.push(other.as_u64().unwrap_or(0).to_string()),
    }
}

fn decode(it: &mut std::slice::Iter<'_, String>) -> Option<PVal> {
    let ty: u16 = it.next()?.parse().ok()?;
    let mut next = || it.next().cloned();
    let tok = next()?;
    let u = || tok.parse::<u64>().ok();
    let i = || tok.parse::<i64>().ok();
    Some(match ty {
        PMIX_STRING => PVal::Str(tok),
        PMIX_FLOAT => PVal::Float(f32::from_bits(tok.parse().ok()?)),
        PMIX_DOUBLE => PVal::Double(f64::from_bits(tok.parse().ok()?)),
        PMIX_INT => PVal::Int(i()? as i32),
        PMIX_INT32 => PVal::Int32(i()? as i32),
        PMIX_PID => PVal::Pid(i()? as i32),
        PMIX_STATUS => PVal::Status(i()? as i32),
        PMIX_INT8 => PVal::Int8(i()? as i8),
        PMIX_INT16 => PVal::Int16(i()? as i16),
        PMIX_INT64 => PVal::Int64(i()?),
        PMIX_BOOL => PVal::Bool(u()? != 0),
        PMIX_BYTE => PVal::Byte(u()? as u8),
        PMIX_SIZE => PVal::Size(u()?),
        PMIX_UINT => PVal::Uint(u()? as u32),
        PMIX_UINT8 => PVal::Uint8(u()? as u8),
        PMIX_UINT16 => PVal::Uint16(u()? as u16),
        PMIX_UINT32 => PVal::Uint32(u()? as u32),
        PMIX_UINT64 => PVal::Uint64(u()?),
        PMIX_PROC_RANK => PVal::Rank(u()? as u32),
        PMIX_PERSIST => PVal::Persist(u()? as u8),
        PMIX_SCOPE => PVal::Scope(u()? as u8),
        PMIX_DATA_RANGE => PVal::Range(u()? as u8),
        PMIX_PROC_STATE => PVal::ProcState(u()? as u8),
        PMIX_DATA_TYPE => PVal::DataType(u()? as u16),
        PMIX_PROC => PVal::Proc(ProcId::new(tok, it.next()?.parse().ok()?)),
        PMIX_BYTE_OBJECT => PVal::Bytes(cohort_proto::env::from_hex(&tok)?),
        PMIX_DATA_ARRAY => {
            let ety: u16 = tok.parse().ok()?;
            let n: usize = it.next()?.parse().ok()?;
            let mut elems = Vec::with_capacity(n.min(4096));
            for _ in 0..n {
                elems.push(decode(it)?);
            }
            PVal::Array(ety, elems)
        }
        PMIX_INFO => PVal::Info(tok, Box::new(decode(it)?)),
        _ => return None,
    })
}

/// `v` as cohort carries it: natively when cohort has the type, else tagged.
pub fn to_cohort(v: &PVal) -> Value {
    match v {
        PVal::Bool(b) => Value::Bool(*b),
        PVal::Uint32(x) => Value::U32(*x),
        PVal::Uint64(x) => Value::U64(*x),
        PVal::Int64(x) => Value::I64(*x),
        PVal::Double(x) => Value::F64(*x),
        PVal::Str(s) => Value::Str(s.clone()),
        PVal::Bytes(b) => Value::Bytes(b.clone().into()),
        PVal::Array(PMIX_PROC, elems) if elems.iter().all(|e| matches!(e, PVal::Proc(_))) => {
            Value::Procs(
                elems
                    .iter()
                    .filter_map(|e| match e {
                        PVal::Proc(p) => Some(p.clone()),
                        _ => None,
                    })
                    .collect(),
            )
        }
        PVal::Array(PMIX_STRING, elems)
            if elems.iter().all(|e| matches!(e, PVal::Str(_)))
                && !matches!(elems.first(), Some(PVal::Str(s)) if s == TYPED) =>
        {
            Value::Strs(
                elems
                    .iter()
                    .filter_map(|e| match e {
                        PVal::Str(s) => Some(s.clone()),
                        _ => None,
                    })
                    .collect(),
            )
        }
        other => {
            let mut out = vec![TYPED.to_string()];
            encode(other, &mut out);
            Value::Strs(out)
        }
    }
}

/// A cohort value as PMIx sees it (tagged values get their type back).
pub fn from_cohort(v: &Value) -> PVal {
    match v {
        Value::Bool(b) => PVal::Bool(*b),
        Value::U32(x) => PVal::Uint32(*x),
        Value::U64(x) => PVal::Uint64(*x),
        Value::I64(x) => PVal::Int64(*x),
        Value::F64(x) => PVal::Double(*x),
        Value::Str(s) => PVal::Str(s.clone()),
        Value::Bytes(b) => PVal::Bytes(b.to_vec()),
        Value::Procs(p) => PVal::Array(PMIX_PROC, p.iter().cloned().map(PVal::Proc).collect()),
        Value::Strs(s) => {
            if s.first().map(String::as_str) == Some(TYPED) {
                if let Some(v) = decode(&mut s[1..].iter()) {
                    return v;
                }
            }
            PVal::Array(PMIX_STRING, s.iter().cloned().map(PVal::Str).collect())
        }
        #[allow(unreachable_patterns)]
        other => PVal::Str(format!("{other:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn samples() -> Vec<PVal> {
        vec![
            PVal::Bool(true),
            PVal::Uint16(7),
            PVal::Size(1 << 40),
            PVal::Int(-3),
            PVal::Float(1.5),
            PVal::Double(-2.25),
            PVal::Str("a,b".into()),
            PVal::Bytes(vec![0, 1, 255]),
            PVal::Proc(ProcId::new("job", 3)),
            PVal::Array(PMIX_PROC, vec![PVal::Proc(ProcId::new("job", 1))]),
            PVal::Array(PMIX_STRING, vec![PVal::Str("x".into())]),
            PVal::Array(PMIX_UINT32, vec![PVal::Uint32(1), PVal::Uint32(2)]),
            PVal::Array(
                PMIX_INFO,
                vec![PVal::Info("k".into(), Box::new(PVal::Uint8(4)))],
            ),
        ]
    }

    #[test]
    fn every_supported_value_keeps_its_type_through_cohort() {
        for v in samples() {
            assert_eq!(from_cohort(&to_cohort(&v)), v);
        }
    }

    #[test]
    fn every_supported_value_round_trips_through_c() {
        for v in samples() {
            let mut c = pmix_value_t {
                type_: PMIX_UNDEF,
                data: pmix_value_data { uint64: 0 },
            };
            // SAFETY: `c` is a local value; it is destructed once.
            unsafe {
                write_value(&v, &mut c);
                assert_eq!(read_value(&c).unwrap(), v);
                destruct_value(&mut c);
            }
            assert_eq!(c.type_, PMIX_UNDEF);
        }
    }
}
