// The argument rules of quantize_u8 / dequantize_u8, and the messages of their data errors (see
// kernel_args.hpp).
#include <limits>
#include <string>

#include "kernel_args.hpp"

namespace plrt::kernel_args {
namespace {

void check_chunk_size(int64_t chunk_size, const char* op) {
  if (chunk_size < 1)
    fail(PL_ERR_INVALID_ARGUMENT,
         std::string(op) + ": chunk_size " + std::to_string(chunk_size) + " is invalid; valid: chunk_size >= 1");
}

void check_minmax(const PL_Tensor* minmax, int64_t n, int64_t chunk_size, const char* op) {
  if (minmax->dtype != PL_F32)
    fail(PL_ERR_INVALID_ARGUMENT,
         std::string(op) + ": minmax is " + pl_dtype_name(minmax->dtype) + "; it must be float32");
  const int64_t chunks = chunk_count(n, chunk_size);
  if (minmax->numel != 2 * chunks)
    fail(PL_ERR_INVALID_ARGUMENT, std::string(op) + ": minmax has " + std::to_string(minmax->numel) + " elements but " +
                                      std::to_string(n) + " elements in chunks of " + std::to_string(chunk_size) +
                                      " make " + std::to_string(chunks) + " chunks, which need " +
                                      std::to_string(2 * chunks) + " (min, max per chunk)");
}

void require_quant_dtype(const PL_Tensor* t, const char* op, const char* what) {
  if (t->dtype != PL_F32 && t->dtype != PL_F16 && t->dtype != PL_BF16)
    fail(PL_ERR_UNSUPPORTED, std::string(op) + ": " + what + " has dtype " + pl_dtype_name(t->dtype) +
                                 "; supported: float32, float16, bfloat16");
}

void require_u8(const PL_Tensor* q, const char* op) {
  if (q->dtype != PL_U8)
    fail(PL_ERR_INVALID_ARGUMENT, std::string(op) + ": q is " + pl_dtype_name(q->dtype) + "; it must be uint8");
}

}  // namespace

void quantize_u8(Target target, const PL_Tensor* src, const PL_Tensor* q, const PL_Tensor* minmax, int64_t chunk_size) {
  constexpr const char* op = "quantize_u8";
  check_tensor_on(target, src, op, "src");
  check_tensor_on(target, q, op, "q");
  check_tensor_on(target, minmax, op, "minmax");
  require_quant_dtype(src, op, "src");
  require_u8(q, op);
  check_same_numel(src, "src", q, "q", op);
  check_chunk_size(chunk_size, op);
  check_minmax(minmax, src->numel, chunk_size, op);
  check_same_device(target, src, "src", q, "q", op);
  check_same_device(target, src, "src", minmax, "minmax", op);
  check_no_overlap(q, "q", src, "src", op, false);
  check_no_overlap(minmax, "minmax", src, "src", op, false);
  check_no_overlap(minmax, "minmax", q, "q", op, false);
}

void dequantize_u8(Target target, const PL_Tensor* q, const PL_Tensor* minmax, const PL_Tensor* dst,
                   int64_t chunk_size) {
  constexpr const char* op = "dequantize_u8";
  check_tensor_on(target, q, op, "q");
  check_tensor_on(target, minmax, op, "minmax");
  check_tensor_on(target, dst, op, "dst");
  require_u8(q, op);
  require_quant_dtype(dst, op, "dst");
  check_same_numel(dst, "dst", q, "q", op);
  check_chunk_size(chunk_size, op);
  check_minmax(minmax, q->numel, chunk_size, op);
  check_same_device(target, dst, "dst", q, "q", op);
  check_same_device(target, dst, "dst", minmax, "minmax", op);
  check_no_overlap(dst, "dst", q, "q", op, false);
  check_no_overlap(dst, "dst", minmax, "minmax", op, false);
}

std::string nonfinite_src_message(int64_t index, float value) {
  return "src[" + std::to_string(index) + "] is " + num(value) + "; quantisation needs finite values";
}

std::string chunk_range_message(int64_t chunk, float lo, float hi) {
  return "chunk " + std::to_string(chunk) + " has min " + num(lo) + " and max " + num(hi) +
         ", a range beyond float32; valid: max - min <= " + num(std::numeric_limits<float>::max());
}

std::string chunk_minmax_message(int64_t chunk, float lo, float hi) {
  return "chunk " + std::to_string(chunk) + " has min " + num(lo) + " and max " + num(hi) +
         "; valid: finite with min <= max";
}

}  // namespace plrt::kernel_args
