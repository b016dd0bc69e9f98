/*
 * plrt plugin ABI: the accelerator plugin kind (cpu, cuda).  Plain C99.
 *
 * An accelerator counts and describes devices, moves memory, and runs the element-wise kernels
 * the strategies need.  The CPU plugin's kernels are the reference that every other accelerator
 * mirrors (same results within float rounding).  f16/bf16 results round to nearest, ties to even.
 */
#ifndef PLRT_PL_ACCELERATOR_H_
#define PLRT_PL_ACCELERATOR_H_

#include "pl_abi.h"
#include "pl_host.h"
#include "pl_tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct PL_Accelerator PL_Accelerator; /* opaque instance; owned by its creator */
typedef struct PL_Stream PL_Stream;           /* opaque; NULL = the device's default stream */
typedef struct PL_Event PL_Event;             /* opaque */

typedef int32_t PL_AcceleratorFlags;
enum {
  /* `devices` is a number of processes, not a set of device indices (cpu). */
  PL_ACCEL_DEVICES_ARE_PROCESSES = 1,
  /* Kernels run synchronously on the calling thread; streams and events are trivially complete. */
  PL_ACCEL_SYNCHRONOUS = 2
};

typedef struct PL_DeviceAvailability {
  size_t struct_size;
  int32_t device_count; /* devices this process can use; 0 when none */
  char reason[256];     /* inline; when device_count is 0, why (no driver, no device, ...) */
} PL_DeviceAvailability;

typedef struct PL_DeviceInfo {
  size_t struct_size;
  char name[128];        /* inline */
  uint64_t total_memory; /* bytes */
  uint64_t free_memory;  /* bytes */
  int32_t compute_major; /* compute capability; 0 where it has no meaning */
  int32_t compute_minor;
} PL_DeviceInfo;

/* ABI 1.4: one device's state for devices="usable:N" (see device_status). */
typedef struct PL_DeviceStatus {
  size_t struct_size;
  int32_t index;    /* 0-based, within the devices this process can see */
  int32_t usable;   /* nonzero: a job could take it now */
  char name[128];   /* inline: "NVIDIA H100 80GB HBM3" */
  char reason[256]; /* inline; when not usable, why: "exclusive mode, held by another process",
                       "busy: 3.2 GiB used by other processes", "cannot create a context: ..." */
} PL_DeviceStatus;

/* SGD as torch.optim.SGD: d = g + wd*p (when wd != 0); buf = first_step ? d : momentum*buf + (1-dampening)*d;
 * d = nesterov ? d + momentum*buf : buf (when momentum != 0); p -= lr*d. */
typedef struct PL_SgdParams {
  size_t struct_size;
  double lr;
  double momentum;
  double dampening;
  double weight_decay;
  int32_t nesterov;
  int32_t first_step; /* nonzero on the first step: the momentum buffer is initialised to d */
} PL_SgdParams;

/* Adam/AdamW as torch.optim.Adam/AdamW (no amsgrad).  `step` is 1-based (bias correction).
 * param, grad, exp_avg, exp_avg_sq share one float dtype; math in f32 (f64 for f64):
 * AdamW: p *= 1 - lr*wd, else g += wd*p; m = b1*m + (1-b1)*g; v = b2*v + (1-b2)*g*g;
 * p -= lr / (1 - b1^step) * m / (sqrt(v) / sqrt(1 - b2^step) + eps). */
typedef struct PL_AdamParams {
  size_t struct_size;
  double lr;
  double beta1;
  double beta2;
  double eps;
  double weight_decay;
  int64_t step;
  int32_t decoupled_weight_decay; /* nonzero = AdamW: p *= 1 - lr*wd before the update */
  /* ---- ABI 1.6 (QAdam after its warmup; read only when struct_size covers them) ---- */
  int32_t freeze_exp_avg_sq; /* nonzero: exp_avg_sq is read, never written (the second moment frozen) */
  int32_t grad_is_exp_avg;   /* nonzero: `grad` holds the new first moment itself: exp_avg = grad, no
                                weight decay and no beta1 mixing (the bias corrections still use
                                beta1, beta2 and step) */
} PL_AdamParams;

typedef struct PL_AcceleratorApi {
  size_t struct_size;
  PL_DeviceType device_type;
  PL_AcceleratorFlags flags;

  /* ---- lifecycle (REQUIRED) ---- */
  /* `host` is borrowed and outlives the instance; `options` is borrowed for the call. */
  PL_Error* (*create)(const PL_Host* host, const PL_OptionList* options, PL_Accelerator** out);
  void (*destroy)(PL_Accelerator* acc);

  /* ---- devices (REQUIRED) ---- */
  PL_Error* (*availability)(PL_Accelerator* acc, PL_DeviceAvailability* out);
  PL_Error* (*device_info)(PL_Accelerator* acc, int32_t index, PL_DeviceInfo* out);
  PL_Error* (*set_device)(PL_Accelerator* acc, int32_t index); /* binds the calling thread */

  /* ---- memory ---- */
  /* *out is owned by the caller, freed with free_memory on the same device. */
  PL_Error* (*alloc)(PL_Accelerator* acc, PL_Device device, size_t bytes, void** out);
  PL_Error* (*free_memory)(PL_Accelerator* acc, PL_Device device, void* ptr);
  /* Page-locked host memory for staging (plain host memory where that is all there is). */
  PL_Error* (*alloc_host)(PL_Accelerator* acc, size_t bytes, void** out);
  PL_Error* (*free_host)(PL_Accelerator* acc, void* ptr);
  /* Copies `bytes` between any two devices of this accelerator or the host (PL_DEVICE_CPU). */
  PL_Error* (*copy)(PL_Accelerator* acc, void* dst, PL_Device dst_device, const void* src, PL_Device src_device,
                    size_t bytes, PL_Stream* stream);

  /* ---- streams and events ---- */
  PL_Error* (*stream_create)(PL_Accelerator* acc, PL_Device device, PL_Stream** out);
  PL_Error* (*stream_destroy)(PL_Accelerator* acc, PL_Stream* stream);
  PL_Error* (*stream_synchronize)(PL_Accelerator* acc, PL_Stream* stream);
  PL_Error* (*event_create)(PL_Accelerator* acc, PL_Device device, PL_Event** out);
  PL_Error* (*event_destroy)(PL_Accelerator* acc, PL_Event* event);
  PL_Error* (*event_record)(PL_Accelerator* acc, PL_Event* event, PL_Stream* stream);
  PL_Error* (*event_synchronize)(PL_Accelerator* acc, PL_Event* event);
  PL_Error* (*stream_wait_event)(PL_Accelerator* acc, PL_Stream* stream, PL_Event* event);

  /* ---- element-wise kernels.  Tensors are borrowed until the stream reaches the kernel. ----
   * Integer dtypes take integral scalars only (else PL_ERR_INVALID_ARGUMENT) and wrap on overflow,
   * as PyTorch's integer tensors do. */
  PL_Error* (*fill)(PL_Accelerator* acc, PL_Tensor* x, double value, PL_Stream* stream);
  PL_Error* (*scale)(PL_Accelerator* acc, PL_Tensor* x, double alpha, PL_Stream* stream);
  /* y += alpha * x; same dtype and numel. */
  PL_Error* (*axpy)(PL_Accelerator* acc, PL_Tensor* y, double alpha, const PL_Tensor* x, PL_Stream* stream);
  /* dst = src converted; both of f64, f32, f16, bf16; same numel.  f64 -> f16/bf16 rounds once,
   * straight from the double. */
  PL_Error* (*cast)(PL_Accelerator* acc, PL_Tensor* dst, const PL_Tensor* src, PL_Stream* stream);
  /* param, grad, momentum of one float dtype; math in f32 (f64 for f64).  momentum_buf may be
   * NULL when params->momentum == 0. */
  PL_Error* (*sgd_step)(PL_Accelerator* acc, PL_Tensor* param, const PL_Tensor* grad, PL_Tensor* momentum_buf,
                        const PL_SgdParams* params, PL_Stream* stream);
  PL_Error* (*adam_step)(PL_Accelerator* acc, PL_Tensor* param, const PL_Tensor* grad, PL_Tensor* exp_avg,
                         PL_Tensor* exp_avg_sq, const PL_AdamParams* params, PL_Stream* stream);
  /* ByteGrad format: src (f32, f16 or bf16) in chunks of `chunk_size` elements (the last may be
   * shorter); minmax (f32, 2 per chunk) = {min, max}; in f32 arithmetic,
   * scale = (max - min) / 255.0f and q (u8, src.numel) = round_half_even(clamp((x - min) / scale,
   * 0, 255)), 0 when scale is 0.  dequantize: x = min + q * scale.  Non-finite inputs, and a
   * chunk whose max - min overflows, are PL_ERR_INVALID_ARGUMENT (an asynchronous accelerator may
   * report these data errors at the next synchronisation, as cross_entropy's labels). */
  PL_Error* (*quantize_u8)(PL_Accelerator* acc, const PL_Tensor* src, PL_Tensor* q, PL_Tensor* minmax,
                           int64_t chunk_size, PL_Stream* stream);
  PL_Error* (*dequantize_u8)(PL_Accelerator* acc, const PL_Tensor* q, const PL_Tensor* minmax, PL_Tensor* dst,
                             int64_t chunk_size, PL_Stream* stream);

  /* ---- ABI 1.2: the math of dense layers, so that a module runs on any accelerator ----
   * Matrices are row-major 2-D tensors (ndim == 2) of one float dtype, f32 or f64 (f16/bf16 are
   * PL_ERR_UNSUPPORTED here).  Shapes are checked; a mismatch is PL_ERR_INVALID_ARGUMENT naming
   * both shapes.  Outputs never alias inputs unless the entry says so. */
  /* c = alpha * op(a) @ op(b) + beta * c, where op(x) is x (trans == 0) or x^T.  op(a) is [m, k],
   * op(b) [k, n], c [m, n].  beta == 0: c is only written (NaNs in it are not propagated). */
  PL_Error* (*gemm)(PL_Accelerator* acc, int32_t trans_a, int32_t trans_b, double alpha, const PL_Tensor* a,
                    const PL_Tensor* b, double beta, PL_Tensor* c, PL_Stream* stream);
  /* y[i, j] += bias[j]; y [rows, cols], bias [cols] (ndim 1). */
  PL_Error* (*add_bias)(PL_Accelerator* acc, PL_Tensor* y, const PL_Tensor* bias, PL_Stream* stream);
  /* out[j] = alpha * sum_i x[i, j] + beta * out[j]; x [rows, cols], out [cols].  beta == 0: out is
   * only written. */
  PL_Error* (*sum_rows)(PL_Accelerator* acc, double alpha, const PL_Tensor* x, double beta, PL_Tensor* out,
                        PL_Stream* stream);
  /* y = max(x, 0) element-wise; same shape; y may be x. */
  PL_Error* (*relu)(PL_Accelerator* acc, const PL_Tensor* x, PL_Tensor* y, PL_Stream* stream);
  /* dx = dy where y > 0, else 0 (y is relu's output); same shapes; dx may be dy. */
  PL_Error* (*relu_backward)(PL_Accelerator* acc, const PL_Tensor* y, const PL_Tensor* dy, PL_Tensor* dx,
                             PL_Stream* stream);
  /* Softmax cross-entropy over the rows of logits [n, c] (f32/f64) with labels (i64 [n]):
   *   loss[i] = logsumexp(logits[i, :]) - logits[i, labels[i]]    (loss [n], logits' dtype)
   *   grad[i, j] = grad_scale * (softmax(logits[i, :])[j] - (j == labels[i]))   (grad may be NULL;
   *   grad may be logits itself).  Computed stably (max subtracted).  A label outside [0, c) is
   *   PL_ERR_INVALID_ARGUMENT naming the row and the value (an asynchronous accelerator may report
   *   it at the next synchronisation). */
  PL_Error* (*cross_entropy)(PL_Accelerator* acc, const PL_Tensor* logits, const PL_Tensor* labels, PL_Tensor* loss,
                             PL_Tensor* grad, double grad_scale, PL_Stream* stream);
  /* out[i] = the first j with x[i, j] maximal (i64 [rows]); x [rows, cols], f32 or f64. */
  PL_Error* (*argmax_rows)(PL_Accelerator* acc, const PL_Tensor* x, PL_Tensor* out, PL_Stream* stream);

  /* ---- ABI 1.3: mixed precision ----
   * From minor 3, gemm, add_bias, sum_rows, relu and relu_backward also take f16 and bf16 (every
   * float operand of one call shares the dtype): products and sums run in f32 and each result is
   * rounded once to the dtype (round to nearest, ties to even), so an f16 gemm equals an f32 gemm
   * of the widened operands rounded once, as tensor cores compute it.  alpha and beta are
   * converted to f32.  cross_entropy and argmax_rows stay f32/f64 (autocast runs losses in f32).
   * A plugin of minor < 3 answers PL_ERR_UNSUPPORTED for these dtypes. */
  /* The gradient scaler's unscale, as torch._amp_foreach_non_finite_check_and_unscale_:
   * x = x * inv_scale element-wise (x f64, f32, f16 or bf16; f64 math for f64, else f32, rounded
   * once on store), and found_inf[0] = 1.0f when any element of x was inf or NaN before scaling.
   * found_inf: f32, numel 1, on x's device; it is only ever set, never cleared, so one flag
   * collects many tensors.  inv_scale must be finite (else PL_ERR_INVALID_ARGUMENT). */
  PL_Error* (*unscale_check)(PL_Accelerator* acc, PL_Tensor* x, double inv_scale, PL_Tensor* found_inf,
                             PL_Stream* stream);

  /* ---- ABI 1.4 (optional; NULL = not supported, the caller copies part by part) ----
   * Bucket packing: many tensors gathered into one flat buffer, or scattered back, in one launch.
   *   pack:   flat[offsets[i] .. offsets[i] + parts[i].numel) = parts[i]          for every i
   *   unpack: parts[i] = flat[offsets[i] .. offsets[i] + parts[i].numel)          for every i
   * Offsets count elements.  Every part has flat's dtype (any dtype) and lies on flat's device or,
   * for an accelerator that reads host memory directly (PL_ACCEL_SYNCHRONOUS), in host memory;
   * each slice lies inside flat; no part overlaps flat, and unpack's parts do not overlap each
   * other (else PL_ERR_INVALID_ARGUMENT naming the part).  num_parts may be 0.  The arrays `parts`
   * and `offsets` are borrowed for the call only (the plugin copies what it needs before it
   * returns); the memory they describe is borrowed until the stream reaches the launch. */
  PL_Error* (*pack)(PL_Accelerator* acc, const PL_Tensor* parts, size_t num_parts, const int64_t* offsets,
                    PL_Tensor* flat, PL_Stream* stream);
  PL_Error* (*unpack)(PL_Accelerator* acc, const PL_Tensor* flat, const int64_t* offsets, PL_Tensor* parts,
                      size_t num_parts, PL_Stream* stream);
  /* Which devices a job could take now, for devices="usable:N" (Lightning's
   * find_usable_cuda_devices): one PL_DeviceStatus per device this process can see, in index
   * order.  The plugin judges (cuda: compute mode, exclusive mode held by another process, a
   * context that cannot be made, memory or utilization of other processes over a threshold) and
   * may probe in a child process; it never leaves a context behind in the caller.  `options`
   * (borrowed for the call, may be NULL) carries the thresholds by name ("max_utilization" in
   * percent, "max_foreign_memory_mb"; a plugin that probes in a child also "probe_timeout_ms"); an
   * unknown name or bad value is PL_ERR_INVALID_ARGUMENT naming it.  Writes min(capacity, count)
   * entries (each out[i].struct_size set by the caller, rule 4) and sets *out_count to the count,
   * so a caller may ask with capacity 0 first.  With no device visible a plugin may fail instead,
   * saying why (no driver, no device): a count of 0 cannot carry the reason.  NULL entry: every
   * device availability() counts is usable. */
  PL_Error* (*device_status)(PL_Accelerator* acc, const PL_OptionList* options, PL_DeviceStatus* out, size_t capacity,
                             size_t* out_count);

  /* ---- ABI 1.5 (optional; NULL = not supported, the caller computes in host memory) ----
   * Gradient clipping (Lightning's gradient_clip_val), one call per tensor or range of one.
   *   sum_squares: out[0] += sum over i of x[i]^2, computed in f64 (x f64, f32, f16 or bf16; the
   *                elements widened exactly).  out: f64, numel 1, on x's device; only added to, so
   *                one out collects many tensors and the caller reads it once (a norm's square).
   *   clamp:       x[i] = min(max(x[i], lo), hi) element-wise (x f64, f32, f16 or bf16; NaN stays
   *                NaN, as torch.clamp_).  lo <= hi, both not NaN (else PL_ERR_INVALID_ARGUMENT
   *                naming them); for f16/bf16 the bounds are rounded to the dtype.
   * Both run on `stream` (NULL: the device's default) and are asynchronous like fill and scale: the
   * caller synchronises before reading out on the host. */
  PL_Error* (*sum_squares)(PL_Accelerator* acc, const PL_Tensor* x, PL_Tensor* out, PL_Stream* stream);
  PL_Error* (*clamp)(PL_Accelerator* acc, PL_Tensor* x, double lo, double hi, PL_Stream* stream);
} PL_AcceleratorApi;

/* The smallest table a v1 host accepts: everything through the REQUIRED device entries. */
#define PL_ACCELERATOR_API_MIN_SIZE PL_STRUCT_SIZE(PL_AcceleratorApi, set_device)

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* PLRT_PL_ACCELERATOR_H_ */
