// The gloo tcp transport as this plugin uses it: the tagged barrier of ops that move no data, and
// the choice of the address the transport listens on.  (Aborting the pairs: pair_abort.cpp.)
#include "transport.hpp"

#include <arpa/inet.h>
#include <gloo/barrier.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "gloo_pg.hpp"

namespace plrt::gloo_pg {

namespace {

bool is_loopback(const std::string& host) {
  return host == "localhost" || host == "ip6-localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

// The local address of the route to `host` (a UDP socket "connected" to it sends nothing).
std::string local_address_towards(const std::string& host, const char* port) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), port, &hints, &res) != 0 || res == nullptr) return "";
  std::string out;
  const int fd = ::socket(res->ai_family, SOCK_DGRAM, 0);
  if (fd >= 0 && ::connect(fd, res->ai_addr, res->ai_addrlen) == 0) {
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    char buf[INET6_ADDRSTRLEN] = {};
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) == 0) {
      const void* a = ss.ss_family == AF_INET
                          ? static_cast<const void*>(&reinterpret_cast<sockaddr_in*>(&ss)->sin_addr)
                          : static_cast<const void*>(&reinterpret_cast<sockaddr_in6*>(&ss)->sin6_addr);
      if (inet_ntop(ss.ss_family, a, buf, sizeof buf)) out = buf;
    }
  }
  if (fd >= 0) ::close(fd);
  freeaddrinfo(res);
  return out;
}

// The interfaces that have an IPv4 or IPv6 address, in the order getifaddrs lists them.
std::vector<std::string> interfaces_with_address() {
  std::vector<std::string> out;
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return out;
  for (ifaddrs* i = list; i != nullptr; i = i->ifa_next) {
    if (i->ifa_addr == nullptr || (i->ifa_addr->sa_family != AF_INET && i->ifa_addr->sa_family != AF_INET6)) continue;
    if (std::find(out.begin(), out.end(), i->ifa_name) == out.end()) out.push_back(i->ifa_name);
  }
  freeifaddrs(list);
  return out;
}

// gloo's own lookup fails with a terse message (and leaks its getifaddrs list): check first.
void check_interface(const std::string& iface, const std::string& source) {
  const auto names = interfaces_with_address();
  if (names.empty() || std::find(names.begin(), names.end(), iface) != names.end()) return;
  std::string list;
  for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
  plugin::fail(PL_ERR_INVALID_ARGUMENT, "gloo: interface '" + iface + "' (" + source +
                                            ") does not exist or has no IP address (interfaces with one: " + list +
                                            ")");
}

}  // namespace

void tagged_barrier(const std::shared_ptr<gloo::Context>& context, const pg::OpContext& oc) {
  gloo_call([&] {
    Guarded<gloo::BarrierOptions> guarded_opts(context);  // destroyed under buffers_mutex()
    auto& opts = *guarded_opts;
    opts.setTag(oc.tag);
    opts.setTimeout(oc.remaining());
    gloo::barrier(opts);
  });
}

Endpoint choose_endpoint(const std::string& iface, const std::string& hostname) {
  Endpoint e;
  if (!iface.empty()) {
    check_interface(iface, "option iface");
    e.attr.iface = iface;
    e.description = "interface " + iface + " (option iface)";
    return e;
  }
  if (!hostname.empty()) {
    e.attr.hostname = hostname;
    e.description = hostname + " (option hostname)";
    return e;
  }
  if (const char* env = std::getenv("GLOO_SOCKET_IFNAME"); env && *env) {
    std::string first(env);
    first = first.substr(0, first.find(','));
    check_interface(first, "GLOO_SOCKET_IFNAME");
    e.attr.iface = first;
    e.description = "interface " + first + " (GLOO_SOCKET_IFNAME)";
    return e;
  }
  const char* master = std::getenv("MASTER_ADDR");
  if (master == nullptr || *master == '\0' || is_loopback(master)) {
    e.attr.hostname = "127.0.0.1";
    e.description = std::string("127.0.0.1 (MASTER_ADDR is ") + (master && *master ? master : "unset") + ")";
    return e;
  }
  const char* port = std::getenv("MASTER_PORT");
  const std::string local = local_address_towards(master, port && *port ? port : "29500");
  if (!local.empty()) {
    e.attr.hostname = local;
    e.description = local + " (the local address of the route to MASTER_ADDR " + master + ")";
    return e;
  }
  char name[256] = {};
  ::gethostname(name, sizeof name - 1);
  e.attr.hostname = name;
  e.description = std::string(name) + " (this host's name; no route to MASTER_ADDR " + master + " was found)";
  return e;
}

}  // namespace plrt::gloo_pg
