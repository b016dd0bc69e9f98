// send / recv: gloo unbound buffers, one slot per (tag, dtype, element count), so a send pairs
// with the recv of the same tag, dtype and count on the other rank (sends of one tag to one peer
// arrive in order).  They are not numbered with the collectives (they pair by peer and tag, not by
// position); they are posted in issue order with them, their transfers complete on their own
// (GroupCore::run_p2p), and each is bounded by the group's timeout.
#include "gloo_pg.hpp"

#include <gloo/transport/unbound_buffer.h>

namespace plrt::gloo_pg {

namespace {

uint64_t p2p_slot(uint32_t tag) { return (kP2PSlotPrefix << 56) | (static_cast<uint64_t>(tag) << 24); }

}  // namespace

PL_Error* send(PL_ProcessGroup* pg, const PL_Tensor* tensor, int32_t dst, int32_t tag, PL_Work** out) noexcept {
  return entry(pg, "send", [&] {
    const std::string w = where("send");
    pg::OpDesc d = pg::p2p_args(true, tensor, dst, tag, shape(pg), w, cpu_tensors(w));
    pg->core->throw_if_unusable();
    const PL_Tensor t = *tensor;
    const auto ctx = pg->context;
    pg->core->run_p2p(std::move(d), [t, dst, ctx](const pg::OpContext& oc) {
      std::shared_ptr<gloo::transport::UnboundBuffer> buf;
      gloo_call([&] {
        buf = ctx->createUnboundBuffer(const_cast<void*>(t.data), bytes_of(t));
        buf->send(dst, p2p_slot(oc.tag));
      });
      return pg::P2PWait([buf](const pg::OpContext& c) {
        gloo_call([&] {
          if (!buf->waitSend(c.remaining())) throw std::runtime_error("the send was interrupted");
        });
      });
    }, out);
  });
}

PL_Error* recv(PL_ProcessGroup* pg, PL_Tensor* tensor, int32_t src, int32_t tag, PL_Work** out) noexcept {
  return entry(pg, "recv", [&] {
    const std::string w = where("recv");
    pg::OpDesc d = pg::p2p_args(false, tensor, src, tag, shape(pg), w, cpu_tensors(w));
    pg->core->throw_if_unusable();
    const PL_Tensor t = *tensor;
    const auto ctx = pg->context;
    pg->core->run_p2p(std::move(d), [t, src, ctx](const pg::OpContext& oc) {
      std::shared_ptr<gloo::transport::UnboundBuffer> buf;
      gloo_call([&] {
        buf = ctx->createUnboundBuffer(t.data, bytes_of(t));
        buf->recv(src, p2p_slot(oc.tag));
      });
      return pg::P2PWait([buf](const pg::OpContext& c) {
        gloo_call([&] {
          if (!buf->waitRecv(c.remaining())) throw std::runtime_error("the recv was interrupted");
        });
      });
    }, out);
  });
}

}  // namespace plrt::gloo_pg
