// The store's function table, as the runtime puts it in PL_Host.store_api.
#pragma once

#include <plrt/pl_store.h>

namespace plrt::store {

// Static: valid for the life of the process.  Works on the PL_Store* made by pl_store_create_tcp.
const PL_StoreApi* tcp_store_api();

}  // namespace plrt::store
