// The uint8 wire format of docs/bagua.md's quantizer Q, shared by bytegrad (and qadam, which uses
// bytegrad's stages) and low_precision_decentralized: a chunk of n float32 values is encoded as its
// {min, max} (two f32) followed by its n bytes, padded to a multiple of 4 bytes so that the next
// chunk's floats are aligned.  Encoded chunks lie back to back in a u8 buffer; chunk i begins at
// byte i * encoded_bytes(n).  The arithmetic is the accelerator's quantize_u8 / dequantize_u8
// (ABI 1.4), one chunk per call.
#pragma once

#include <plrt/pl_plugin.h>

#include <cstdint>
#include <string>

#include "device_memory.hpp"

namespace plrt::bagua {

// Bytes of one encoded chunk of n values: {min, max}, then the bytes, padded to 4.
inline int64_t encoded_bytes(int64_t n) { return 8 + (n + 3) / 4 * 4; }

// A u8 view of `bytes` bytes at `data`, on `like`'s device.
PL_Tensor u8_view(const PL_Tensor& like, void* data, int64_t bytes);

// The accelerator has quantize_u8 / dequantize_u8 (ABI 1.4); else PL_ERR_UNSUPPORTED naming
// `who` and `algorithm`.
void require_codec(const strategy::DeviceContext& dev, const std::string& who, const char* algorithm);

// `src` (f32, n values) quantized into the encoded chunk at byte `offset` of `u8`.
void encode_chunk(const strategy::DeviceContext& dev, const PL_Tensor& src, const PL_Tensor& u8, int64_t offset,
                  const std::string& what);
// The encoded chunk of dst.numel values at byte `offset` of `u8`, decoded into `dst` (f32).
void decode_chunk(const strategy::DeviceContext& dev, const PL_Tensor& u8, int64_t offset, PL_Tensor& dst,
                  const std::string& what);

}  // namespace plrt::bagua
