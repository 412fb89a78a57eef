//! The rest of the PMIx v4 API, exported so that programs and Open MPI's `ext3x`
//! component (which links every call it may use, including the server and tool APIs)
//! load: each answers `PMIX_ERR_NOT_SUPPORTED` (or NULL, false, nothing) and never
//! calls a callback.
//!
//! The stubs take no parameters: under the C calling conventions of the platforms
//! cohort runs on (System V x86-64, AArch64), the caller owns its arguments, so a
//! callee that ignores them may declare none.

use crate::types::{pmix_status_t, PMIX_ERR_NOT_SUPPORTED};

macro_rules! not_supported {
    ($($name:ident,)*) => {
        $(
            #[no_mangle]
            pub extern "C" fn $name() -> pmix_status_t {
                crate::debug(|| concat!(stringify!($name), ": not supported").to_string());
                PMIX_ERR_NOT_SUPPORTED
            }
        )*
        /// The names of the stubs, for the README's list and the symbol test.
        pub const NOT_SUPPORTED: &[&str] = &[$(stringify!($name)),*];
    };
}

not_supported! {
    // Client calls Open MPI links.
    PMIx_generate_regex,
    PMIx_generate_ppn,
    // Other client calls of pmix.h.
    PMIx_Allocation_request,
    PMIx_Allocation_request_nb,
    PMIx_Process_monitor,
    PMIx_Process_monitor_nb,
    PMIx_Get_credential,
    PMIx_Get_credential_nb,
    PMIx_Validate_credential,
    PMIx_Validate_credential_nb,
    PMIx_Fabric_register,
    PMIx_Fabric_register_nb,
    PMIx_Fabric_update,
    PMIx_Fabric_update_nb,
    PMIx_Fabric_deregister,
    PMIx_Fabric_deregister_nb,
    PMIx_Compute_distances,
    PMIx_Compute_distances_nb,
    PMIx_Load_topology,
    PMIx_Get_cpuset,
    PMIx_Parse_cpuset_string,
    PMIx_Data_pack,
    PMIx_Data_unpack,
    PMIx_Data_copy,
    PMIx_Data_print,
    PMIx_Data_copy_payload,
    PMIx_Data_load,
    PMIx_Data_unload,
    PMIx_Data_embed,
    // Server calls (a cohort rank is never a PMIx server).
    PMIx_server_init,
    PMIx_server_finalize,
    PMIx_server_register_nspace,
    PMIx_server_register_client,
    PMIx_server_setup_fork,
    PMIx_server_dmodex_request,
    PMIx_server_setup_application,
    PMIx_server_setup_local_support,
    PMIx_server_IOF_deliver,
    PMIx_server_collect_inventory,
    PMIx_server_deliver_inventory,
    PMIx_server_register_resources,
    PMIx_server_deregister_resources,
    // Tool calls.
    PMIx_tool_init,
    PMIx_tool_finalize,
    PMIx_tool_disconnect,
    PMIx_tool_attach_to_server,
    PMIx_tool_get_servers,
    PMIx_tool_set_server,
    PMIx_tool_connect_to_server,
    PMIx_IOF_pull,
    PMIx_IOF_deregister,
    PMIx_IOF_push,
}

/// Server calls declared `void` in `pmix_server.h`: nothing to do.
#[no_mangle]
pub extern "C" fn PMIx_server_deregister_nspace() {}

#[no_mangle]
pub extern "C" fn PMIx_server_deregister_client() {}

#[no_mangle]
pub extern "C" fn PMIx_Topology_destruct() {}

#[no_mangle]
pub extern "C" fn PMIx_Cpuset_destruct() {}

#[no_mangle]
pub extern "C" fn PMIx_Data_compress() -> bool {
    false
}

#[no_mangle]
pub extern "C" fn PMIx_Data_decompress() -> bool {
    false
}
