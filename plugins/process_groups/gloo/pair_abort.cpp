// abort_pairs: wakes every pending operation of a gloo context with an error and closes its
// sockets, from any thread, so that the op blocked in gloo fails now and the peers see their
// connections closed (and fail now too).
//
// gloo's tcp Pair does exactly this in Pair::signalExceptionExternal(msg) (gloo's own timeout
// path calls it on every pair): it records the exception, signals every pending send/recv of the
// pair and moves it to CLOSED.  Debian's libgloo-dev 0.0~git20220518 exports the symbol, but its
// header, gloo/transport/tcp/pair.h, cannot be compiled: it includes gloo/common/memory.h, which the
// package does not ship (and it declares the method protected).  So this file, which includes no
// gloo tcp header, declares the one member it calls; the compiler then emits a call to the
// library's own symbol with the member-function calling convention.  The object's dynamic type is
// checked first (typeid names gloo::transport::tcp::Pair), and tcp::Pair's first base is the
// polymorphic transport::Pair, so both pointers have the same address.  Were the check to fail
// (another transport), the pair is closed with the public Pair::close() instead.
#include <exception>
#include <string>
#include <typeinfo>

#include "gloo_pg.hpp"

namespace gloo {
namespace transport {
namespace tcp {
class Pair {
 public:
  std::exception_ptr signalExceptionExternal(const std::string& msg);  // defined in libgloo
};
}  // namespace tcp
}  // namespace transport
}  // namespace gloo

namespace plrt::gloo_pg {

std::mutex& buffers_mutex() {
  static std::mutex m;
  return m;
}

void abort_pairs(gloo::Context& context, const std::string& reason) {
  static const char* const kTcpPair = "N4gloo9transport3tcp4PairE";
  // No op's buffer is destroyed while the pairs signal them (gloo_pg.hpp).
  std::lock_guard<std::mutex> lock(buffers_mutex());
  for (int i = 0; i < context.size; ++i) {
    if (i == context.rank) continue;
    auto& pair = context.getPair(i);
    if (!pair) continue;
    gloo::transport::Pair* base = pair.get();
    if (std::string(typeid(*base).name()) == kTcpPair)
      reinterpret_cast<gloo::transport::tcp::Pair*>(base)->signalExceptionExternal(reason);
    else
      base->close();
  }
}

}  // namespace plrt::gloo_pg
