//! The PMIx v4 types and constants this library exchanges with C, laid out as
//! `pmix_common.h` (OpenPMIx 4.2) lays them out. `tests/layout.rs` compiles a C program
//! against the system header that checks every size, offset and constant listed in
//! [`LAYOUT`], [`CONSTANTS`] and [`KEYS`].

#![allow(non_camel_case_types)]

use std::ffi::{c_char, c_int, c_void};

pub const PMIX_MAX_NSLEN: usize = 255;
pub const PMIX_MAX_KEYLEN: usize = 511;

pub type pmix_status_t = c_int;
pub type pmix_rank_t = u32;
pub type pmix_data_type_t = u16;
pub type pmix_scope_t = u8;
pub type pmix_data_range_t = u8;
pub type pmix_persistence_t = u8;
pub type pmix_info_directives_t = u32;
pub type pmix_proc_state_t = u8;
pub type pmix_group_opt_t = c_int;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct pmix_proc_t {
    pub nspace: [c_char; PMIX_MAX_NSLEN + 1],
    pub rank: pmix_rank_t,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct pmix_byte_object_t {
    pub bytes: *mut c_char,
    pub size: usize,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct pmix_envar_t {
    pub envar: *mut c_char,
    pub value: *mut c_char,
    pub separator: c_char,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct timeval {
    pub tv_sec: i64,
    pub tv_usec: i64,
}

/// The union of `pmix_value_t` (the members this library reads or writes, plus the
/// largest, `envar`, which sets its size).
#[repr(C)]
#[derive(Clone, Copy)]
pub union pmix_value_data {
    pub flag: bool,
    pub byte: u8,
    pub string: *mut c_char,
    pub size: usize,
    pub pid: i32,
    pub integer: c_int,
    pub int8: i8,
    pub int16: i16,
    pub int32: i32,
    pub int64: i64,
    pub uint: u32,
    pub uint8: u8,
    pub uint16: u16,
    pub uint32: u32,
    pub uint64: u64,
    pub fval: f32,
    pub dval: f64,
    pub tv: timeval,
    pub time: i64,
    pub status: pmix_status_t,
    pub rank: pmix_rank_t,
    pub proc_: *mut pmix_proc_t,
    pub bo: pmix_byte_object_t,
    pub persist: pmix_persistence_t,
    pub scope: pmix_scope_t,
    pub range: pmix_data_range_t,
    pub state: pmix_proc_state_t,
    pub darray: *mut pmix_data_array_t,
    pub ptr: *mut c_void,
    pub envar: pmix_envar_t,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct pmix_value_t {
    pub type_: pmix_data_type_t,
    pub data: pmix_value_data,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct pmix_info_t {
    pub key: [c_char; PMIX_MAX_KEYLEN + 1],
    pub flags: pmix_info_directives_t,
    pub value: pmix_value_t,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct pmix_pdata_t {
    pub proc_: pmix_proc_t,
    pub key: [c_char; PMIX_MAX_KEYLEN + 1],
    pub value: pmix_value_t,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct pmix_data_array_t {
    pub type_: pmix_data_type_t,
    pub size: usize,
    pub array: *mut c_void,
}

#[repr(C)]
#[derive(Clone, Copy)]
pub struct pmix_query_t {
    pub keys: *mut *mut c_char,
    pub qualifiers: *mut pmix_info_t,
    pub nqual: usize,
}

/// One application of a spawn.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct pmix_app_t {
    pub cmd: *mut c_char,
    pub argv: *mut *mut c_char,
    pub env: *mut *mut c_char,
    pub cwd: *mut c_char,
    pub maxprocs: c_int,
    pub info: *mut pmix_info_t,
    pub ninfo: usize,
}

/// `pmix_spawn_cbfunc_t`: the namespace parameter is a `pmix_nspace_t`, an array,
/// so a pointer to its first character.
pub type pmix_spawn_cbfunc_t =
    Option<unsafe extern "C" fn(status: pmix_status_t, nspace: *mut c_char, cbdata: *mut c_void)>;
pub type pmix_lookup_cbfunc_t = Option<
    unsafe extern "C" fn(
        status: pmix_status_t,
        data: *mut pmix_pdata_t,
        ndata: usize,
        cbdata: *mut c_void,
    ),
>;
pub type pmix_op_cbfunc_t =
    Option<unsafe extern "C" fn(status: pmix_status_t, cbdata: *mut c_void)>;
pub type pmix_value_cbfunc_t =
    Option<unsafe extern "C" fn(status: pmix_status_t, kv: *mut pmix_value_t, cbdata: *mut c_void)>;
pub type pmix_release_cbfunc_t = Option<unsafe extern "C" fn(cbdata: *mut c_void)>;
pub type pmix_info_cbfunc_t = Option<
    unsafe extern "C" fn(
        status: pmix_status_t,
        info: *mut pmix_info_t,
        ninfo: usize,
        cbdata: *mut c_void,
        release_fn: pmix_release_cbfunc_t,
        release_cbdata: *mut c_void,
    ),
>;
pub type pmix_hdlr_reg_cbfunc_t =
    Option<unsafe extern "C" fn(status: pmix_status_t, refid: usize, cbdata: *mut c_void)>;
pub type pmix_event_notification_cbfunc_fn_t = Option<
    unsafe extern "C" fn(
        status: pmix_status_t,
        results: *mut pmix_info_t,
        nresults: usize,
        cbfunc: pmix_op_cbfunc_t,
        thiscbdata: *mut c_void,
        notification_cbdata: *mut c_void,
    ),
>;
pub type pmix_notification_fn_t = Option<
    unsafe extern "C" fn(
        evhdlr_registration_id: usize,
        status: pmix_status_t,
        source: *const pmix_proc_t,
        info: *mut pmix_info_t,
        ninfo: usize,
        results: *mut pmix_info_t,
        nresults: usize,
        cbfunc: pmix_event_notification_cbfunc_fn_t,
        cbdata: *mut c_void,
    ),
>;

/// Defines constants and a list of them by their header names, which the layout test
/// checks against the header.
macro_rules! constants {
    ($list:ident: $ty:ty { $($name:ident = $value:expr,)* }) => {
        $(pub const $name: $ty = $value;)*
        pub const $list: &[(&str, i64)] = &[$((stringify!($name), $name as i64)),*];
    };
}

constants! { STATUSES: pmix_status_t {
    PMIX_SUCCESS = 0,
    PMIX_ERROR = -1,
    PMIX_ERR_EXISTS = -11,
    PMIX_ERR_TYPE_MISMATCH = -18,
    PMIX_ERR_NO_PERMISSIONS = -23,
    PMIX_ERR_TIMEOUT = -24,
    PMIX_ERR_UNREACH = -25,
    PMIX_ERR_BAD_PARAM = -27,
    PMIX_ERR_OUT_OF_RESOURCE = -29,
    PMIX_ERR_INIT = -31,
    PMIX_ERR_NOMEM = -32,
    PMIX_ERR_NOT_FOUND = -46,
    PMIX_ERR_NOT_SUPPORTED = -47,
    PMIX_ERR_COMM_FAILURE = -49,
    PMIX_ERR_PARTIAL_SUCCESS = -52,
    PMIX_ERR_DUPLICATE_KEY = -53,
    PMIX_ERR_UNKNOWN_DATA_TYPE = -16,
    PMIX_ERR_LOST_CONNECTION = -61,
    PMIX_ERR_INVALID_OPERATION = -158,
    PMIX_ERR_PROC_REQUESTED_ABORT = -8,
    PMIX_PROC_TERMINATED = -111,
    PMIX_OPERATION_SUCCEEDED = -157,
    PMIX_GROUP_INVITED = -159,
    PMIX_GROUP_LEFT = -160,
    PMIX_GROUP_INVITE_ACCEPTED = -161,
    PMIX_GROUP_INVITE_DECLINED = -162,
    PMIX_GROUP_INVITE_FAILED = -163,
    PMIX_GROUP_MEMBERSHIP_UPDATE = -164,
    PMIX_GROUP_CONSTRUCT_ABORT = -165,
    PMIX_GROUP_CONSTRUCT_COMPLETE = -166,
    PMIX_GROUP_LEADER_SELECTED = -167,
    PMIX_GROUP_LEADER_FAILED = -168,
    PMIX_GROUP_CONTEXT_ID_ASSIGNED = -169,
    PMIX_GROUP_MEMBER_FAILED = -170,
    PMIX_EVENT_PROC_TERMINATED = -201,
    PMIX_EVENT_NO_ACTION_TAKEN = -331,
    PMIX_EVENT_ACTION_COMPLETE = -334,
}}

constants! { DATA_TYPES: pmix_data_type_t {
    PMIX_UNDEF = 0,
    PMIX_BOOL = 1,
    PMIX_BYTE = 2,
    PMIX_STRING = 3,
    PMIX_SIZE = 4,
    PMIX_PID = 5,
    PMIX_INT = 6,
    PMIX_INT8 = 7,
    PMIX_INT16 = 8,
    PMIX_INT32 = 9,
    PMIX_INT64 = 10,
    PMIX_UINT = 11,
    PMIX_UINT8 = 12,
    PMIX_UINT16 = 13,
    PMIX_UINT32 = 14,
    PMIX_UINT64 = 15,
    PMIX_FLOAT = 16,
    PMIX_DOUBLE = 17,
    PMIX_TIMEVAL = 18,
    PMIX_TIME = 19,
    PMIX_STATUS = 20,
    PMIX_VALUE = 21,
    PMIX_PROC = 22,
    PMIX_INFO = 24,
    PMIX_PDATA = 25,
    PMIX_BYTE_OBJECT = 27,
    PMIX_PERSIST = 30,
    PMIX_POINTER = 31,
    PMIX_SCOPE = 32,
    PMIX_DATA_RANGE = 33,
    PMIX_INFO_DIRECTIVES = 35,
    PMIX_DATA_TYPE = 36,
    PMIX_PROC_STATE = 37,
    PMIX_DATA_ARRAY = 39,
    PMIX_PROC_RANK = 40,
    PMIX_QUERY = 41,
    PMIX_COMPRESSED_STRING = 42,
    PMIX_ENVAR = 46,
    PMIX_REGEX = 49,
    PMIX_PROC_NSPACE = 60,
}}

constants! { OTHER_CONSTANTS: u32 {
    PMIX_RANK_UNDEF = u32::MAX,
    PMIX_RANK_WILDCARD = u32::MAX - 1,
    PMIX_RANK_LOCAL_NODE = u32::MAX - 2,
    PMIX_RANK_INVALID = u32::MAX - 3,
    PMIX_SCOPE_UNDEF = 0,
    PMIX_LOCAL = 1,
    PMIX_REMOTE = 2,
    PMIX_GLOBAL = 3,
    PMIX_INTERNAL = 4,
    PMIX_RANGE_UNDEF = 0,
    PMIX_RANGE_RM = 1,
    PMIX_RANGE_LOCAL = 2,
    PMIX_RANGE_NAMESPACE = 3,
    PMIX_RANGE_SESSION = 4,
    PMIX_RANGE_GLOBAL = 5,
    PMIX_RANGE_CUSTOM = 6,
    PMIX_RANGE_PROC_LOCAL = 7,
    PMIX_PERSIST_INDEF = 0,
    PMIX_PERSIST_FIRST_READ = 1,
    PMIX_PERSIST_PROC = 2,
    PMIX_PERSIST_APP = 3,
    PMIX_PERSIST_SESSION = 4,
    PMIX_INFO_REQD = 1,
    PMIX_INFO_ARRAY_END = 2,
    PMIX_INFO_PERSISTENT = 0x10,
    PMIX_GROUP_DECLINE = 0,
    PMIX_GROUP_ACCEPT = 1,
}}

// What two processes share (`pmix_locality_t`, PMIx_Get_relative_locality).
constants! { LOCALITIES: u16 {
    PMIX_LOCALITY_SHARE_HWTHREAD = 0x0001,
    PMIX_LOCALITY_SHARE_CORE = 0x0002,
    PMIX_LOCALITY_SHARE_L1CACHE = 0x0004,
    PMIX_LOCALITY_SHARE_L2CACHE = 0x0008,
    PMIX_LOCALITY_SHARE_L3CACHE = 0x0010,
    PMIX_LOCALITY_SHARE_PACKAGE = 0x0020,
    PMIX_LOCALITY_SHARE_NUMA = 0x0040,
    PMIX_LOCALITY_SHARE_NODE = 0x4000,
}}

/// Defines the attribute keys this library reads or serves, with their header names.
macro_rules! keys {
    ($($name:ident = $value:expr,)*) => {
        $(pub const $name: &str = $value;)*
        pub const KEYS: &[(&str, &str)] = &[$((stringify!($name), $value)),*];
    };
}

keys! {
    PMIX_JOB_SIZE = "pmix.job.size",
    PMIX_UNIV_SIZE = "pmix.univ.size",
    PMIX_MAX_PROCS = "pmix.max.size",
    PMIX_LOCAL_RANK = "pmix.lrank",
    PMIX_NODE_RANK = "pmix.nrank",
    PMIX_LOCAL_SIZE = "pmix.local.size",
    PMIX_NODE_SIZE = "pmix.node.size",
    PMIX_LOCAL_PEERS = "pmix.lpeers",
    PMIX_LOCALLDR = "pmix.lldr",
    PMIX_NODEID = "pmix.nodeid",
    PMIX_HOSTNAME = "pmix.hname",
    PMIX_APPNUM = "pmix.appnum",
    PMIX_APP_SIZE = "pmix.app.size",
    PMIX_APP_RANK = "pmix.apprank",
    PMIX_APPLDR = "pmix.aldr",
    PMIX_JOB_NUM_APPS = "pmix.job.napps",
    PMIX_NUM_NODES = "pmix.num.nodes",
    PMIX_NODE_LIST = "pmix.nlist",
    PMIX_LOCALITY_STRING = "pmix.locstr",
    PMIX_CPUSET = "pmix.cpuset",
    PMIX_JOBID = "pmix.jobid",
    PMIX_NSPACE = "pmix.nspace",
    PMIX_RANK = "pmix.rank",
    PMIX_GLOBAL_RANK = "pmix.grank",
    PMIX_PROCID = "pmix.procid",
    PMIX_PSET_NAMES = "pmix.pset.nms",
    PMIX_PSET_NAME = "pmix.pset.nm",
    PMIX_TMPDIR = "pmix.tmpdir",
    PMIX_COLLECT_DATA = "pmix.collect",
    PMIX_EMBED_BARRIER = "pmix.embed.barrier",
    PMIX_TIMEOUT = "pmix.timeout",
    PMIX_RANGE = "pmix.range",
    PMIX_PERSISTENCE = "pmix.persist",
    PMIX_WAIT = "pmix.wait",
    PMIX_OPTIONAL = "pmix.optional",
    PMIX_IMMEDIATE = "pmix.immediate",
    PMIX_GROUP_ID = "pmix.grp.id",
    PMIX_GROUP_LEADER = "pmix.grp.ldr",
    PMIX_GROUP_OPTIONAL = "pmix.grp.opt",
    PMIX_GROUP_NOTIFY_TERMINATION = "pmix.grp.notterm",
    PMIX_GROUP_FT_COLLECTIVE = "pmix.grp.ftcoll",
    PMIX_GROUP_LOCAL_ONLY = "pmix.grp.lcl",
    PMIX_GROUP_MEMBERSHIP = "pmix.grp.mbrs",
    PMIX_GROUP_ASSIGN_CONTEXT_ID = "pmix.grp.actxid",
    PMIX_GROUP_CONTEXT_ID = "pmix.grp.ctxid",
    PMIX_GROUP_NAMES = "pmix.pgrp.nm",
    PMIX_GROUP_INFO = "pmix.grp.info",
    PMIX_GROUP_ADD_MEMBERS = "pmix.grp.add",
    PMIX_EVENT_HDLR_NAME = "pmix.evname",
    PMIX_EVENT_AFFECTED_PROC = "pmix.evproc",
    PMIX_EVENT_AFFECTED_PROCS = "pmix.evaffected",
    PMIX_EVENT_CUSTOM_RANGE = "pmix.evrange",
    PMIX_EVENT_NON_DEFAULT = "pmix.evnondef",
    PMIX_PARENT_ID = "pmix.parent",
    PMIX_SPAWNED = "pmix.spawned",
    PMIX_NOTIFY_COMPLETION = "pmix.notecomp",
    PMIX_EXIT_CODE = "pmix.exit.code",
    PMIX_JOB_TERM_STATUS = "pmix.job.term.status",
    PMIX_WDIR = "pmix.wdir",
    PMIX_MAPBY = "pmix.mapby",
    PMIX_CPUS_PER_PROC = "pmix.cpuperproc",
    PMIX_BINDTO = "pmix.bindto",
    PMIX_HOST = "pmix.host",
    PMIX_SPAWN_TIMEOUT = "pmix.sp.time",
    PMIX_QUERY_NAMESPACES = "pmix.qry.ns",
    PMIX_QUERY_NUM_PSETS = "pmix.qry.psetnum",
    PMIX_QUERY_PSET_NAMES = "pmix.qry.psets",
    PMIX_QUERY_PSET_MEMBERSHIP = "pmix.qry.pmems",
    PMIX_QUERY_NUM_GROUPS = "pmix.qry.pgrpnum",
    PMIX_QUERY_GROUP_NAMES = "pmix.qry.pgrp",
    PMIX_QUERY_GROUP_MEMBERSHIP = "pmix.qry.pgrpmems",
}

/// Sizes and field offsets to check against the header: `(C type, field or "", Rust
/// value)`; an empty field is the type's size.
pub fn layout() -> Vec<(&'static str, &'static str, usize)> {
    use std::mem::{offset_of, size_of};
    vec![
        ("pmix_proc_t", "", size_of::<pmix_proc_t>()),
        ("pmix_proc_t", "rank", offset_of!(pmix_proc_t, rank)),
        ("pmix_byte_object_t", "", size_of::<pmix_byte_object_t>()),
        (
            "pmix_byte_object_t",
            "size",
            offset_of!(pmix_byte_object_t, size),
        ),
        ("pmix_envar_t", "", size_of::<pmix_envar_t>()),
        (
            "pmix_envar_t",
            "separator",
            offset_of!(pmix_envar_t, separator),
        ),
        ("pmix_value_t", "", size_of::<pmix_value_t>()),
        ("pmix_value_t", "data", offset_of!(pmix_value_t, data)),
        ("pmix_info_t", "", size_of::<pmix_info_t>()),
        ("pmix_info_t", "flags", offset_of!(pmix_info_t, flags)),
        ("pmix_info_t", "value", offset_of!(pmix_info_t, value)),
        ("pmix_pdata_t", "", size_of::<pmix_pdata_t>()),
        ("pmix_pdata_t", "key", offset_of!(pmix_pdata_t, key)),
        ("pmix_pdata_t", "value", offset_of!(pmix_pdata_t, value)),
        ("pmix_data_array_t", "", size_of::<pmix_data_array_t>()),
        (
            "pmix_data_array_t",
            "size",
            offset_of!(pmix_data_array_t, size),
        ),
        (
            "pmix_data_array_t",
            "array",
            offset_of!(pmix_data_array_t, array),
        ),
        ("pmix_app_t", "", size_of::<pmix_app_t>()),
        ("pmix_app_t", "env", offset_of!(pmix_app_t, env)),
        ("pmix_app_t", "cwd", offset_of!(pmix_app_t, cwd)),
        ("pmix_app_t", "maxprocs", offset_of!(pmix_app_t, maxprocs)),
        ("pmix_app_t", "info", offset_of!(pmix_app_t, info)),
        ("pmix_app_t", "ninfo", offset_of!(pmix_app_t, ninfo)),
        ("pmix_query_t", "", size_of::<pmix_query_t>()),
        (
            "pmix_query_t",
            "qualifiers",
            offset_of!(pmix_query_t, qualifiers),
        ),
        ("pmix_query_t", "nqual", offset_of!(pmix_query_t, nqual)),
        ("pmix_status_t", "", size_of::<pmix_status_t>()),
        ("pmix_rank_t", "", size_of::<pmix_rank_t>()),
        ("pmix_data_type_t", "", size_of::<pmix_data_type_t>()),
        ("pmix_scope_t", "", size_of::<pmix_scope_t>()),
        ("pmix_data_range_t", "", size_of::<pmix_data_range_t>()),
        (
            "pmix_info_directives_t",
            "",
            size_of::<pmix_info_directives_t>(),
        ),
        ("pmix_group_opt_t", "", size_of::<pmix_group_opt_t>()),
    ]
}
