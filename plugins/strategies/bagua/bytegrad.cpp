// bytegrad (docs/bagua.md §2): each bucket's gradients averaged through a uint8-compressed
// reduce-scatter and allgather, in three stages on the reducer (one BucketComm):
//   start   zero the padding, quantize the n chunks of the flat buffer into the send buffer, and
//           all_to_all it: rank j receives every rank's chunk j;
//   next    decode the n received chunks into this rank's chunk (in rank order, the first written,
//           the others added), scale by 1/n (average=true), quantize it again (fresh min and max)
//           and allgather the encoded chunk;
//   finish  decode every gathered chunk, this rank's own included, into the flat buffer, and
//           unpack it into the gradients: every rank holds the same values.
// Q and the wire format of a chunk (its {min, max}, then its bytes, padded to 4): u8_codec.hpp.
#include <algorithm>

#include "algorithm.hpp"
#include "bagua_strategy.hpp"
#include "reducer.hpp"
#include "u8_codec.hpp"

namespace plrt::bagua {

using plugin::fail;
using strategy::check;

namespace {

struct ByteGradState final : reducer::BucketState {
  int64_t chunk = 0;   // elements a chunk (flat.numel / n)
  int64_t stride = 0;  // bytes an encoded chunk
  strategy::DeviceMemory send, recv, tmp;
  PL_Tensor send_all{}, recv_all{};    // n encoded chunks each (u8)
  std::vector<PL_Tensor> gathered;     // recv's n encoded chunks, the allgather's outputs
  PL_Tensor own_encoded{}, decoded{};  // send's chunk `rank` (the allgather input); tmp (f32, chunk)
};

class ByteGradComm final : public reducer::BucketComm {
 public:
  ByteGradComm(const Scope& scope, bool average)
      : BucketComm(scope.group), world_(scope.world), rank_(scope.rank), average_(average) {}
  std::string name() const override { return "bytegrad (uint8 reduce-scatter and allgather)"; }
  int64_t padded_numel(int64_t numel) const override { return (numel + world_ - 1) / world_ * world_; }

  void prepare(reducer::Reducer& r, reducer::Bucket& b) override {
    const strategy::DeviceContext& dev = r.device();
    if (b.flat.dtype != PL_F32)
      fail(PL_ERR_UNSUPPORTED, r.who() + ": algorithm bytegrad compresses float32 gradients; " + r.describe(b) +
                                   " is not (use float32 parameters, or algorithm=gradient_allreduce)");
    require_codec(dev, r.who(), "bytegrad");
    if (dev.api->scale == nullptr || dev.api->fill == nullptr)
      fail(PL_ERR_UNSUPPORTED, r.who() + ": algorithm bytegrad needs the accelerator's scale and fill");
    auto st = std::make_unique<ByteGradState>();
    st->chunk = b.flat.numel / world_;
    st->stride = encoded_bytes(st->chunk);
    const size_t all = static_cast<size_t>(st->stride) * static_cast<size_t>(world_);
    st->send = strategy::DeviceMemory(dev, all, r.who() + ": bytegrad's send buffer for " + r.describe(b));
    st->recv = strategy::DeviceMemory(dev, all, r.who() + ": bytegrad's receive buffer for " + r.describe(b));
    st->tmp = strategy::DeviceMemory(dev, static_cast<size_t>(st->chunk) * 4,
                                     r.who() + ": bytegrad's decode buffer for " + r.describe(b));
    st->send_all = u8_view(b.flat, st->send.get(), static_cast<int64_t>(all));
    st->recv_all = u8_view(b.flat, st->recv.get(), static_cast<int64_t>(all));
    for (int i = 0; i < world_; ++i)
      st->gathered.push_back(reducer::sub_view(st->recv_all, i * st->stride, st->stride));
    st->own_encoded = reducer::sub_view(st->send_all, rank_ * st->stride, st->stride);
    st->decoded = reducer::sub_view(b.flat, 0, st->chunk);
    st->decoded.data = st->tmp.get();
    b.state = std::move(st);
  }

  PL_Work* start(reducer::Reducer& r, reducer::Bucket& b) override {
    auto& st = static_cast<ByteGradState&>(*b.state);
    const strategy::DeviceContext& dev = r.device();
    if (b.flat.numel > b.numel) {  // the padding is zeros at every step (the last stage wrote it)
      PL_Tensor pad = reducer::sub_view(b.flat, b.numel, b.flat.numel - b.numel);
      check(dev.host, dev.api->fill(dev.acc, &pad, 0.0, nullptr),
            r.who() + ": zeroing the padding of " + r.describe(b));
    }
    for (int i = 0; i < world_; ++i) encode(r, b, st, i, st.send_all);
    PL_Work* w = nullptr;
    const strategy::Group& g = group(r);
    check(dev.host, g.api()->all_to_all(g.get(), &st.send_all, nullptr, &st.recv_all, nullptr, &w),
          r.who() + ": starting bytegrad's all_to_all of " + r.describe(b));
    return w;
  }

  PL_Work* next(reducer::Reducer& r, reducer::Bucket& b) override {
    if (b.stage >= 2) return nullptr;  // the allgather completed
    auto& st = static_cast<ByteGradState&>(*b.state);
    const strategy::DeviceContext& dev = r.device();
    PL_Tensor own = reducer::sub_view(b.flat, rank_ * st.chunk, st.chunk);
    const std::string what = r.who() + ": bytegrad's reduction of " + r.describe(b);
    for (int i = 0; i < world_; ++i) {
      decode(r, st, st.recv_all, i, i == 0 ? own : st.decoded);
      if (i > 0) check(dev.host, dev.api->axpy(dev.acc, &own, 1.0, &st.decoded, nullptr), what);
    }
    if (average_) check(dev.host, dev.api->scale(dev.acc, &own, 1.0 / world_, nullptr), what);
    encode(r, b, st, rank_, st.send_all);  // own chunk again, with a fresh min and max
    PL_Work* w = nullptr;
    const strategy::Group& g = group(r);
    check(dev.host, g.api()->allgather(g.get(), &st.own_encoded, st.gathered.data(), st.gathered.size(), &w),
          r.who() + ": starting bytegrad's allgather of " + r.describe(b));
    return w;
  }

  void finish(reducer::Reducer& r, reducer::Bucket& b) override {
    auto& st = static_cast<ByteGradState&>(*b.state);
    for (int i = 0; i < world_; ++i) {
      PL_Tensor dst = reducer::sub_view(b.flat, i * st.chunk, st.chunk);
      decode(r, st, st.recv_all, i, dst);
    }
    r.unpack(b);
  }

 private:
  // Chunk i of the flat buffer, quantized into encoded chunk i of `out`.
  void encode(reducer::Reducer& r, reducer::Bucket& b, ByteGradState& st, int i, const PL_Tensor& out) const {
    encode_chunk(r.device(), reducer::sub_view(b.flat, i * st.chunk, st.chunk), out, i * st.stride,
                 r.who() + ": bytegrad's quantization of chunk " + std::to_string(i) + " of " + r.describe(b));
  }
  // Encoded chunk i of `in`, decoded into `dst` (f32, chunk elements).
  void decode(reducer::Reducer& r, ByteGradState& st, const PL_Tensor& in, int i, PL_Tensor& dst) const {
    decode_chunk(r.device(), in, i * st.stride, dst,
                 r.who() + ": bytegrad's decoding of the chunk from rank " + std::to_string(i));
  }

  int world_, rank_;
  bool average_;
};

class ByteGrad final : public Algorithm {
 public:
  ByteGrad(bool average, const Scope& scope) : average_(average), scope_(scope) {}
  std::unique_ptr<reducer::BucketComm> bucket_comm() override {
    return std::make_unique<ByteGradComm>(scope_, average_);
  }
  std::vector<std::string> needs() const override { return {"all_to_all", "allgather"}; }
  void setup(BaguaStrategy& s) override { encoded_ = bytegrad_encoded_bytes(s, scope_.world); }
  double bytes_per_step(const BaguaStrategy& s) const override {
    (void)s;
    return encoded_;
  }

 private:
  bool average_;
  Scope scope_;
  double encoded_ = 0;
};

}  // namespace

double bytegrad_encoded_bytes(const BaguaStrategy& s, int world) {
  if (!s.core->group) return 0.0;
  double total = 0;
  for (const reducer::Bucket& b : s.core->grads->buckets())
    total += static_cast<double>(world) * static_cast<double>(encoded_bytes(b.flat.numel / world));
  return total;
}

std::unique_ptr<reducer::BucketComm> make_bytegrad_comm(const Scope& scope, bool average) {
  return std::make_unique<ByteGradComm>(scope, average);
}

std::unique_ptr<Algorithm> make_bytegrad(const BaguaOptions& opts, const PL_StrategyConfig& c, const Scope& scope) {
  (void)c;
  return std::make_unique<ByteGrad>(opts.average, scope);
}

}  // namespace plrt::bagua
