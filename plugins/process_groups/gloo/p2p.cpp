// send / recv: gloo unbound buffers, one slot per (tag, dtype, element count), so a send pairs
// with the recv of the same tag, dtype and count on the other rank (sends of one tag to one peer
// arrive in order).  They are not numbered with the collectives (they pair by peer and tag, not by
// position); they are posted in issue order with them, their transfers complete on their own
// (GroupCore::run_p2p), and each is bounded by the group's timeout.
//
// A device tensor is staged through host memory with a host block of its own, held until the
// transfer completes: a send copies its tensor to the host when it is posted, a recv copies the
// received data to the device when its transfer completes (on whichever thread waits for it).
#include <gloo/transport/unbound_buffer.h>

#include "gloo_pg.hpp"

namespace plrt::gloo_pg {

namespace {

uint64_t p2p_slot(uint32_t tag) { return (kP2PSlotPrefix << 56) | (static_cast<uint64_t>(tag) << 24); }

// One posted transfer.  Members are destroyed in reverse order: the gloo buffer before the host
// block under it.
struct Transfer {
  PL_Tensor t{};
  std::unique_ptr<StagedOp> staged;
  OwnedBuffer buf;  // destroyed under buffers_mutex() (gloo_pg.hpp)
};

// Stages `arg` (when it is on the device) and binds a gloo buffer to its host memory.
std::shared_ptr<Transfer> prepare(const std::shared_ptr<gloo::Context>& ctx, const std::shared_ptr<Staging>& staging,
                                  const PL_Tensor& arg, StagedOp::Role role) {
  auto x = std::make_shared<Transfer>();
  x->t = arg;
  x->staged = std::make_unique<StagedOp>(staging);
  x->staged->add(&x->t, role);
  x->staged->stage_in();
  gloo_call([&] { x->buf = own(ctx->createUnboundBuffer(x->t.data, bytes_of(x->t))); });
  return x;
}

}  // namespace

PL_Error* send(PL_ProcessGroup* pg, const PL_Tensor* tensor, int32_t dst, int32_t tag, PL_Work** out) noexcept {
  return entry(pg, "send", [&] {
    const std::string w = where("send");
    pg::OpDesc d = pg::p2p_args(true, tensor, dst, tag, shape(pg), w, tensor_rule(*pg, w));
    pg->core->throw_if_unusable();
    const PL_Tensor t = *tensor;
    const auto ctx = pg->context;
    pg->core->run_p2p(
        std::move(d),
        [t, dst, ctx, staging = pg->staging](const pg::OpContext& oc) {
          std::shared_ptr<Transfer> x = prepare(ctx, staging, t, StagedOp::kRead);
          gloo_call([&] { x->buf->send(dst, p2p_slot(oc.tag)); });
          return pg::P2PWait([x](const pg::OpContext& c) {
            gloo_call([&] {
              if (!x->buf->waitSend(c.remaining())) throw std::runtime_error("the send was interrupted");
            });
          });
        },
        out);
  });
}

PL_Error* recv(PL_ProcessGroup* pg, PL_Tensor* tensor, int32_t src, int32_t tag, PL_Work** out) noexcept {
  return entry(pg, "recv", [&] {
    const std::string w = where("recv");
    pg::OpDesc d = pg::p2p_args(false, tensor, src, tag, shape(pg), w, tensor_rule(*pg, w));
    pg->core->throw_if_unusable();
    const PL_Tensor t = *tensor;
    const auto ctx = pg->context;
    pg->core->run_p2p(
        std::move(d),
        [t, src, ctx, staging = pg->staging](const pg::OpContext& oc) {
          std::shared_ptr<Transfer> x = prepare(ctx, staging, t, StagedOp::kWrite);
          gloo_call([&] { x->buf->recv(src, p2p_slot(oc.tag)); });
          return pg::P2PWait([x](const pg::OpContext& c) {
            gloo_call([&] {
              if (!x->buf->waitRecv(c.remaining())) throw std::runtime_error("the recv was interrupted");
            });
            x->staged->stage_out();  // the received bytes to the device before the recv completes
          });
        },
        out);
  });
}

}  // namespace plrt::gloo_pg
