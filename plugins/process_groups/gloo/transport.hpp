// Where the gloo tcp transport listens.  The first that applies:
//   1. option `iface`            that interface's address
//   2. option `hostname`         that address or name
//   3. $GLOO_SOCKET_IFNAME       its first interface (as PyTorch reads it)
//   4. $MASTER_ADDR unset, empty or loopback (localhost, 127.x, ::1): 127.0.0.1 — single-node jobs
//      and tests stay on the loopback interface
//   5. otherwise the local address of the route to $MASTER_ADDR (the interface this host uses to
//      reach the rendezvous store, so every rank picks one that the others can reach), or, with no
//      route, this host's name as gloo resolves it.
#pragma once

#include <gloo/transport/tcp/attr.h>

#include <string>

namespace plrt::gloo_pg {

struct Endpoint {
  gloo::transport::tcp::attr attr;
  std::string description;  // for logs and errors: "127.0.0.1 (MASTER_ADDR is unset)"
};

Endpoint choose_endpoint(const std::string& iface, const std::string& hostname);

}  // namespace plrt::gloo_pg
