#include "u8_codec.hpp"

#include "reducer.hpp"

namespace plrt::bagua {

using strategy::check;

namespace {

// The {min, max} of the chunk at byte `offset`.
PL_Tensor minmax_view(const PL_Tensor& u8, int64_t offset) {
  PL_Tensor v = u8;
  v.dtype = PL_F32;
  v.data = static_cast<uint8_t*>(u8.data) + offset;
  v.ndim = 1;
  v.numel = v.shape[0] = 2;
  return v;
}

}  // namespace

PL_Tensor u8_view(const PL_Tensor& like, void* data, int64_t bytes) {
  PL_Tensor v = like;
  v.dtype = PL_U8;
  v.data = data;
  v.ndim = 1;
  v.numel = v.shape[0] = bytes;
  return v;
}

void require_codec(const strategy::DeviceContext& dev, const std::string& who, const char* algorithm) {
  const PL_AcceleratorApi* a = dev.api;
  if (a->struct_size < PL_STRUCT_SIZE(PL_AcceleratorApi, dequantize_u8) || a->quantize_u8 == nullptr ||
      a->dequantize_u8 == nullptr || a->axpy == nullptr)
    plugin::fail(PL_ERR_UNSUPPORTED, who + ": algorithm " + algorithm +
                                         " needs the accelerator's quantize_u8, dequantize_u8 and axpy (ABI 1.4); "
                                         "this accelerator lacks one");
}

void encode_chunk(const strategy::DeviceContext& dev, const PL_Tensor& src, const PL_Tensor& u8, int64_t offset,
                  const std::string& what) {
  PL_Tensor minmax = minmax_view(u8, offset), q = reducer::sub_view(u8, offset + 8, src.numel);
  check(dev.host, dev.api->quantize_u8(dev.acc, &src, &q, &minmax, src.numel, nullptr), what);
}

void decode_chunk(const strategy::DeviceContext& dev, const PL_Tensor& u8, int64_t offset, PL_Tensor& dst,
                  const std::string& what) {
  const PL_Tensor minmax = minmax_view(u8, offset), q = reducer::sub_view(u8, offset + 8, dst.numel);
  check(dev.host, dev.api->dequantize_u8(dev.acc, &q, &minmax, &dst, dst.numel, nullptr), what);
}

}  // namespace plrt::bagua
