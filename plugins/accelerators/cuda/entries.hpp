// The kernel entries of the cuda accelerator's function table (entries_*.cpp, gemm_cublas.cpp):
// each checks its arguments with the rules the cpu reference uses (kernel_args.hpp, Target::cuda),
// then launches on the given stream.
#pragma once

#include <plrt/pl_accelerator.h>

#include "kernel_args.hpp"

namespace plrt::cuda {

// What the entries give the shared argument rules: tensors in CUDA device memory, one device a call.
constexpr kernel_args::Target kTarget = kernel_args::Target::cuda;

// entries_elementwise.cpp
PL_Error* cuda_fill(PL_Accelerator* acc, PL_Tensor* x, double value, PL_Stream* stream);
PL_Error* cuda_scale(PL_Accelerator* acc, PL_Tensor* x, double alpha, PL_Stream* stream);
PL_Error* cuda_axpy(PL_Accelerator* acc, PL_Tensor* y, double alpha, const PL_Tensor* x, PL_Stream* stream);
PL_Error* cuda_cast(PL_Accelerator* acc, PL_Tensor* dst, const PL_Tensor* src, PL_Stream* stream);
PL_Error* cuda_unscale_check(PL_Accelerator* acc, PL_Tensor* x, double inv_scale, PL_Tensor* found_inf,
                             PL_Stream* stream);
// entries_clip.cpp (ABI 1.5)
PL_Error* cuda_sum_squares(PL_Accelerator* acc, const PL_Tensor* x, PL_Tensor* out, PL_Stream* stream);
PL_Error* cuda_clamp(PL_Accelerator* acc, PL_Tensor* x, double lo, double hi, PL_Stream* stream);
// entries_pack.cpp (ABI 1.4)
PL_Error* cuda_pack(PL_Accelerator* acc, const PL_Tensor* parts, size_t num_parts, const int64_t* offsets,
                    PL_Tensor* flat, PL_Stream* stream);
PL_Error* cuda_unpack(PL_Accelerator* acc, const PL_Tensor* flat, const int64_t* offsets, PL_Tensor* parts,
                      size_t num_parts, PL_Stream* stream);
// entries_optim.cpp
PL_Error* cuda_sgd_step(PL_Accelerator* acc, PL_Tensor* param, const PL_Tensor* grad, PL_Tensor* momentum_buf,
                        const PL_SgdParams* params, PL_Stream* stream);
PL_Error* cuda_adam_step(PL_Accelerator* acc, PL_Tensor* param, const PL_Tensor* grad, PL_Tensor* exp_avg,
                         PL_Tensor* exp_avg_sq, const PL_AdamParams* params, PL_Stream* stream);
// entries_quant.cpp
PL_Error* cuda_quantize_u8(PL_Accelerator* acc, const PL_Tensor* src, PL_Tensor* q, PL_Tensor* minmax,
                           int64_t chunk_size, PL_Stream* stream);
PL_Error* cuda_dequantize_u8(PL_Accelerator* acc, const PL_Tensor* q, const PL_Tensor* minmax, PL_Tensor* dst,
                             int64_t chunk_size, PL_Stream* stream);
// gemm_cublas.cpp
PL_Error* cuda_gemm(PL_Accelerator* acc, int32_t trans_a, int32_t trans_b, double alpha, const PL_Tensor* a,
                    const PL_Tensor* b, double beta, PL_Tensor* c, PL_Stream* stream);
// entries_layers.cpp
PL_Error* cuda_add_bias(PL_Accelerator* acc, PL_Tensor* y, const PL_Tensor* bias, PL_Stream* stream);
PL_Error* cuda_sum_rows(PL_Accelerator* acc, double alpha, const PL_Tensor* x, double beta, PL_Tensor* out,
                        PL_Stream* stream);
PL_Error* cuda_relu(PL_Accelerator* acc, const PL_Tensor* x, PL_Tensor* y, PL_Stream* stream);
PL_Error* cuda_relu_backward(PL_Accelerator* acc, const PL_Tensor* y, const PL_Tensor* dy, PL_Tensor* dx,
                             PL_Stream* stream);
PL_Error* cuda_cross_entropy(PL_Accelerator* acc, const PL_Tensor* logits, const PL_Tensor* labels, PL_Tensor* loss,
                             PL_Tensor* grad, double grad_scale, PL_Stream* stream);
PL_Error* cuda_argmax_rows(PL_Accelerator* acc, const PL_Tensor* x, PL_Tensor* out, PL_Stream* stream);

}  // namespace plrt::cuda
