// The kernel entries of the cpu accelerator's table: each checks the stream, then runs the reference
// kernel of kernels.hpp (which checks its arguments, ../common/kernel_args.hpp) inside the instance's
// guard, so a bad argument comes back as a PL_Error.  cpu_accelerator.cpp sets them into the table
// with set_kernel_entries.
#include "cpu_instance.hpp"
#include "kernels.hpp"

namespace plrt::cpu_plugin {
namespace {

// ---- element-wise, optimizers, quantisation ----

PL_Error* cpu_fill(PL_Accelerator* acc, PL_Tensor* x, double value, PL_Stream* stream) {
  return run(acc, "fill", [&] {
    check_stream(acc, stream, "fill");
    plrt::cpu::fill(x, value);
  });
}

PL_Error* cpu_scale(PL_Accelerator* acc, PL_Tensor* x, double alpha, PL_Stream* stream) {
  return run(acc, "scale", [&] {
    check_stream(acc, stream, "scale");
    plrt::cpu::scale(x, alpha);
  });
}

PL_Error* cpu_axpy(PL_Accelerator* acc, PL_Tensor* y, double alpha, const PL_Tensor* x, PL_Stream* stream) {
  return run(acc, "axpy", [&] {
    check_stream(acc, stream, "axpy");
    plrt::cpu::axpy(y, alpha, x);
  });
}

PL_Error* cpu_cast(PL_Accelerator* acc, PL_Tensor* dst, const PL_Tensor* src, PL_Stream* stream) {
  return run(acc, "cast", [&] {
    check_stream(acc, stream, "cast");
    plrt::cpu::cast(dst, src);
  });
}

PL_Error* cpu_sgd_step(PL_Accelerator* acc, PL_Tensor* param, const PL_Tensor* grad, PL_Tensor* momentum_buf,
                       const PL_SgdParams* params, PL_Stream* stream) {
  return run(acc, "sgd_step", [&] {
    check_stream(acc, stream, "sgd_step");
    plrt::cpu::sgd_step(param, grad, momentum_buf, params);
  });
}

PL_Error* cpu_adam_step(PL_Accelerator* acc, PL_Tensor* param, const PL_Tensor* grad, PL_Tensor* exp_avg,
                        PL_Tensor* exp_avg_sq, const PL_AdamParams* params, PL_Stream* stream) {
  return run(acc, "adam_step", [&] {
    check_stream(acc, stream, "adam_step");
    plrt::cpu::adam_step(param, grad, exp_avg, exp_avg_sq, params);
  });
}

PL_Error* cpu_quantize_u8(PL_Accelerator* acc, const PL_Tensor* src, PL_Tensor* q, PL_Tensor* minmax,
                          int64_t chunk_size, PL_Stream* stream) {
  return run(acc, "quantize_u8", [&] {
    check_stream(acc, stream, "quantize_u8");
    plrt::cpu::quantize_u8(src, q, minmax, chunk_size);
  });
}

PL_Error* cpu_dequantize_u8(PL_Accelerator* acc, const PL_Tensor* q, const PL_Tensor* minmax, PL_Tensor* dst,
                            int64_t chunk_size, PL_Stream* stream) {
  return run(acc, "dequantize_u8", [&] {
    check_stream(acc, stream, "dequantize_u8");
    plrt::cpu::dequantize_u8(q, minmax, dst, chunk_size);
  });
}

// ---- layer kernels (ABI 1.2) ----

PL_Error* cpu_gemm(PL_Accelerator* acc, int32_t trans_a, int32_t trans_b, double alpha, const PL_Tensor* a,
                   const PL_Tensor* b, double beta, PL_Tensor* c, PL_Stream* stream) {
  return run(acc, "gemm", [&] {
    check_stream(acc, stream, "gemm");
    plrt::cpu::gemm(trans_a, trans_b, alpha, a, b, beta, c);
  });
}

PL_Error* cpu_add_bias(PL_Accelerator* acc, PL_Tensor* y, const PL_Tensor* bias, PL_Stream* stream) {
  return run(acc, "add_bias", [&] {
    check_stream(acc, stream, "add_bias");
    plrt::cpu::add_bias(y, bias);
  });
}

PL_Error* cpu_sum_rows(PL_Accelerator* acc, double alpha, const PL_Tensor* x, double beta, PL_Tensor* out,
                       PL_Stream* stream) {
  return run(acc, "sum_rows", [&] {
    check_stream(acc, stream, "sum_rows");
    plrt::cpu::sum_rows(alpha, x, beta, out);
  });
}

PL_Error* cpu_relu(PL_Accelerator* acc, const PL_Tensor* x, PL_Tensor* y, PL_Stream* stream) {
  return run(acc, "relu", [&] {
    check_stream(acc, stream, "relu");
    plrt::cpu::relu(x, y);
  });
}

PL_Error* cpu_relu_backward(PL_Accelerator* acc, const PL_Tensor* y, const PL_Tensor* dy, PL_Tensor* dx,
                            PL_Stream* stream) {
  return run(acc, "relu_backward", [&] {
    check_stream(acc, stream, "relu_backward");
    plrt::cpu::relu_backward(y, dy, dx);
  });
}

PL_Error* cpu_cross_entropy(PL_Accelerator* acc, const PL_Tensor* logits, const PL_Tensor* labels, PL_Tensor* loss,
                            PL_Tensor* grad, double grad_scale, PL_Stream* stream) {
  return run(acc, "cross_entropy", [&] {
    check_stream(acc, stream, "cross_entropy");
    plrt::cpu::cross_entropy(logits, labels, loss, grad, grad_scale);
  });
}

PL_Error* cpu_argmax_rows(PL_Accelerator* acc, const PL_Tensor* x, PL_Tensor* out, PL_Stream* stream) {
  return run(acc, "argmax_rows", [&] {
    check_stream(acc, stream, "argmax_rows");
    plrt::cpu::argmax_rows(x, out);
  });
}

// ---- mixed precision (ABI 1.3) ----

PL_Error* cpu_unscale_check(PL_Accelerator* acc, PL_Tensor* x, double inv_scale, PL_Tensor* found_inf,
                            PL_Stream* stream) {
  return run(acc, "unscale_check", [&] {
    check_stream(acc, stream, "unscale_check");
    plrt::cpu::unscale_check(x, inv_scale, found_inf);
  });
}

// ---- bucket copies (ABI 1.4) ----

PL_Error* cpu_pack(PL_Accelerator* acc, const PL_Tensor* parts, size_t num_parts, const int64_t* offsets,
                   PL_Tensor* flat, PL_Stream* stream) {
  return run(acc, "pack", [&] {
    check_stream(acc, stream, "pack");
    plrt::cpu::pack(parts, num_parts, offsets, flat);
  });
}

PL_Error* cpu_unpack(PL_Accelerator* acc, const PL_Tensor* flat, const int64_t* offsets, PL_Tensor* parts,
                     size_t num_parts, PL_Stream* stream) {
  return run(acc, "unpack", [&] {
    check_stream(acc, stream, "unpack");
    plrt::cpu::unpack(flat, offsets, parts, num_parts);
  });
}

// ---- gradient clipping (ABI 1.5) ----

PL_Error* cpu_sum_squares(PL_Accelerator* acc, const PL_Tensor* x, PL_Tensor* out, PL_Stream* stream) {
  return run(acc, "sum_squares", [&] {
    check_stream(acc, stream, "sum_squares");
    plrt::cpu::sum_squares(x, out);
  });
}

PL_Error* cpu_clamp(PL_Accelerator* acc, PL_Tensor* x, double lo, double hi, PL_Stream* stream) {
  return run(acc, "clamp", [&] {
    check_stream(acc, stream, "clamp");
    plrt::cpu::clamp(x, lo, hi);
  });
}

}  // namespace

void set_kernel_entries(PL_AcceleratorApi& a) {
  a.fill = cpu_fill;
  a.scale = cpu_scale;
  a.axpy = cpu_axpy;
  a.cast = cpu_cast;
  a.sgd_step = cpu_sgd_step;
  a.adam_step = cpu_adam_step;
  a.quantize_u8 = cpu_quantize_u8;
  a.dequantize_u8 = cpu_dequantize_u8;
  a.gemm = cpu_gemm;
  a.add_bias = cpu_add_bias;
  a.sum_rows = cpu_sum_rows;
  a.relu = cpu_relu;
  a.relu_backward = cpu_relu_backward;
  a.cross_entropy = cpu_cross_entropy;
  a.argmax_rows = cpu_argmax_rows;
  a.unscale_check = cpu_unscale_check;
  a.pack = cpu_pack;
  a.unpack = cpu_unpack;
  a.sum_squares = cpu_sum_squares;
  a.clamp = cpu_clamp;
}

}  // namespace plrt::cpu_plugin
