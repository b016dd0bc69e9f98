// The nccl collectives: argument checks, the descriptor, and the NCCL calls.  Each op runs in one
// NCCL group with the fingerprint allreduce (nccl_pg.hpp), on the group's stream, and is complete
// on the GPU when the call (or its PL_Work) returns.
#include <cuda_runtime_api.h>

#include <vector>

#include "int_avg.hpp"
#include "nccl_pg.hpp"

namespace plrt::nccl {

using plugin::fail;

pg::TensorCheck device_tensors(const PL_ProcessGroup& pg, const std::string& w) {
  const int device = pg.device;
  return [w, device](const PL_Tensor* t, const char* what) {
    pg::check_tensor_arg(t, w, what, PL_DEVICE_CUDA, kCudaOnly);
    if (t->device.index != device)
      fail(PL_ERR_INVALID_ARGUMENT, w + ": " + what + " is on cuda:" + std::to_string(t->device.index) +
                                        ", but the group runs on cuda:" + std::to_string(device));
  };
}

void run_collective(PL_ProcessGroup& pg, const pg::OpDesc& desc, const pg::OpContext& oc, const NcclOps& ops) {
  const std::string what = desc.title(kBackend, oc.seq);
  const uint64_t f = desc.fingerprint(oc.seq);
  pg.fp_host[0] = static_cast<int64_t>(f);
  pg.fp_host[1] = ~static_cast<int64_t>(f);
  pg.comm->enqueue(
      [&](ncclComm_t comm, cudaStream_t s) -> ncclResult_t {
        check_cuda(cudaMemcpyAsync(pg.fp_device, pg.fp_host, 2 * sizeof(int64_t), cudaMemcpyHostToDevice, s),
                   what + ": copying the fingerprint");
        ncclResult_t rc = ncclGroupStart();
        if (rc != ncclSuccess) return rc;
        ncclResult_t body = ops ? ops(comm, s) : ncclSuccess;
        ncclResult_t fp = ncclAllReduce(pg.fp_device, pg.fp_device, 2, ncclInt64, ncclMax, comm, s);
        rc = ncclGroupEnd();
        if (body != ncclSuccess && body != ncclInProgress) return body;
        if (fp != ncclSuccess && fp != ncclInProgress) return fp;
        return rc;
      },
      what, oc.deadline);
  check_cuda(
      cudaMemcpyAsync(pg.fp_host + 2, pg.fp_device, 2 * sizeof(int64_t), cudaMemcpyDeviceToHost, pg.comm->stream()),
      what + ": copying the fingerprint back");
  pg.comm->synchronize(what, oc.deadline);
  if (pg.fp_host[2] != pg.fp_host[0] || pg.fp_host[3] != pg.fp_host[1])
    // The core's diagnosis replaces this with the message naming every rank's call.
    throw std::runtime_error(what + ": another rank called a different collective at #" + std::to_string(oc.seq));
}

namespace {

// Allocates `bytes` on the group's stream (stream-ordered), freed by the destructor.
struct DeviceScratch {
  DeviceScratch(cudaStream_t s, size_t bytes) : stream(s) {
    if (bytes) check_cuda(cudaMallocAsync(&ptr, bytes, s), "nccl: allocating " + std::to_string(bytes) + " bytes");
  }
  ~DeviceScratch() {
    if (ptr) cudaFreeAsync(ptr, stream);
  }
  void* ptr = nullptr;
  cudaStream_t stream;
};

bool is_integer(PL_DType d) { return d == PL_I32 || d == PL_I64 || d == PL_U8; }

ncclResult_t as_nccl(cudaError_t rc) { return rc == cudaSuccess ? ncclSuccess : ncclUnhandledCudaError; }

}  // namespace

PL_Error* allreduce(PL_ProcessGroup* pg, PL_Tensor* tensor, PL_ReduceOp op, PL_Work** out) noexcept {
  return entry(pg, "allreduce", [&] {
    const std::string w = where("allreduce");
    const pg::OpDesc d = pg::allreduce_args(tensor, op, w, device_tensors(*pg, w));
    pg->core->throw_if_unusable();
    const PL_Tensor t = *tensor;
    PL_ProcessGroup* self = pg;
    pg->core->run(
        d,
        [self, t, op, d](const pg::OpContext& oc) {
          const size_t n = static_cast<size_t>(t.numel);
          const int world = self->world;
          if (op == PL_REDUCE_AVG && is_integer(t.dtype)) {
            // Exact integer mean: widen to int64 (u8, i32), sum, divide toward zero, narrow.
            DeviceScratch wide(self->comm->stream(), t.dtype == PL_I64 ? 0 : n * sizeof(int64_t));
            int64_t* acc = t.dtype == PL_I64 ? static_cast<int64_t*>(t.data) : static_cast<int64_t*>(wide.ptr);
            run_collective(*self, d, oc, [&](ncclComm_t c, cudaStream_t s) -> ncclResult_t {
              if (n == 0) return ncclSuccess;
              if (t.dtype != PL_I64) {
                ncclResult_t rc = as_nccl(widen_to_i64(t.data, t.dtype, acc, n, s));
                if (rc != ncclSuccess) return rc;
              }
              return ncclAllReduce(acc, acc, n, ncclInt64, ncclSum, c, s);
            });
            if (n) {
              check_cuda(narrow_avg_from_i64(acc, world, t.dtype, t.data, n, self->comm->stream()),
                         "nccl allreduce: narrowing the mean");
              self->comm->synchronize("nccl allreduce #" + std::to_string(oc.seq) + " (avg)", oc.deadline);
            }
            return;
          }
          run_collective(*self, d, oc, [&](ncclComm_t c, cudaStream_t s) -> ncclResult_t {
            if (n == 0) return ncclSuccess;
            return ncclAllReduce(t.data, t.data, n, nccl_dtype(t.dtype), nccl_op(op), c, s);
          });
        },
        out);
  });
}

PL_Error* broadcast(PL_ProcessGroup* pg, PL_Tensor* tensor, int32_t root, PL_Work** out) noexcept {
  return entry(pg, "broadcast", [&] {
    const std::string w = where("broadcast");
    const pg::OpDesc d = pg::broadcast_args(tensor, root, shape(pg), w, device_tensors(*pg, w));
    pg->core->throw_if_unusable();
    const PL_Tensor t = *tensor;
    PL_ProcessGroup* self = pg;
    pg->core->run(
        d,
        [self, t, root, d](const pg::OpContext& oc) {
          run_collective(*self, d, oc, [&](ncclComm_t c, cudaStream_t s) -> ncclResult_t {
            if (t.numel == 0) return ncclSuccess;
            return ncclBroadcast(t.data, t.data, static_cast<size_t>(t.numel), nccl_dtype(t.dtype), root, c, s);
          });
        },
        out);
  });
}

PL_Error* allgather(PL_ProcessGroup* pg, const PL_Tensor* input, PL_Tensor* outputs, size_t num_outputs,
                    PL_Work** out) noexcept {
  return entry(pg, "allgather", [&] {
    const std::string w = where("allgather");
    const pg::OpDesc d = pg::allgather_args(input, outputs, num_outputs, shape(pg), w, device_tensors(*pg, w));
    pg->core->throw_if_unusable();
    const PL_Tensor in = *input;
    std::vector<PL_Tensor> outs(outputs, outputs + num_outputs);
    PL_ProcessGroup* self = pg;
    pg->core->run(
        d,
        [self, in, outs, d](const pg::OpContext& oc) {
          const size_t es = pl_dtype_size(in.dtype);
          const auto dt = nccl_dtype(in.dtype);
          // ncclAllGather when every rank sends the same count into one buffer in rank order.
          bool packed = true;
          for (size_t r = 1; r < outs.size(); ++r)
            packed = packed && outs[r].numel == outs[0].numel &&
                     static_cast<char*>(outs[r].data) == static_cast<char*>(outs[0].data) + r * outs[0].numel * es;
          run_collective(*self, d, oc, [&](ncclComm_t c, cudaStream_t s) -> ncclResult_t {
            if (packed) {
              if (outs[0].numel == 0) return ncclSuccess;
              return ncclAllGather(in.data, outs[0].data, static_cast<size_t>(in.numel), dt, c, s);
            }
            for (size_t r = 0; r < outs.size(); ++r) {  // one broadcast per rank, fused by the group
              if (outs[r].numel == 0) continue;
              const void* src = static_cast<int>(r) == self->rank ? in.data : outs[r].data;
              ncclResult_t rc =
                  ncclBroadcast(src, outs[r].data, static_cast<size_t>(outs[r].numel), dt, static_cast<int>(r), c, s);
              if (rc != ncclSuccess && rc != ncclInProgress) return rc;
            }
            return ncclSuccess;
          });
        },
        out);
  });
}

PL_Error* reduce_scatter(PL_ProcessGroup* pg, const PL_Tensor* inputs, size_t num_inputs, PL_Tensor* output,
                         PL_ReduceOp op, PL_Work** out) noexcept {
  return entry(pg, "reduce_scatter", [&] {
    const std::string w = where("reduce_scatter");
    const pg::OpDesc d = pg::reduce_scatter_args(inputs, num_inputs, output, op, shape(pg), w, device_tensors(*pg, w));
    pg->core->throw_if_unusable();
    std::vector<PL_Tensor> ins(inputs, inputs + num_inputs);
    const PL_Tensor o = *output;
    PL_ProcessGroup* self = pg;
    pg->core->run(
        d,
        [self, ins, o, op, d](const pg::OpContext& oc) {
          const bool widen = op == PL_REDUCE_AVG && is_integer(o.dtype);
          const PL_DType dtype = widen ? PL_I64 : o.dtype;
          const size_t es = pl_dtype_size(dtype);
          size_t total = 0;
          for (const auto& t : ins) total += static_cast<size_t>(t.numel);
          // Integer AVG: every input widened into one int64 buffer, reduced with SUM, then narrowed.
          DeviceScratch wide(self->comm->stream(),
                             widen ? (total + static_cast<size_t>(o.numel)) * sizeof(int64_t) : 0);
          std::vector<const void*> src(ins.size());
          void* dst = o.data;
          if (widen) {
            auto* p = static_cast<int64_t*>(wide.ptr);
            for (size_t r = 0; r < ins.size(); ++r) {
              src[r] = p;
              const size_t n = static_cast<size_t>(ins[r].numel);
              if (ins[r].dtype == PL_I64)
                check_cuda(cudaMemcpyAsync(p, ins[r].data, n * 8, cudaMemcpyDeviceToDevice, self->comm->stream()),
                           "nccl reduce_scatter: staging");
              else
                check_cuda(widen_to_i64(ins[r].data, ins[r].dtype, p, n, self->comm->stream()),
                           "nccl reduce_scatter: widening");
              p += n;
            }
            dst = p;
          } else {
            for (size_t r = 0; r < ins.size(); ++r) src[r] = ins[r].data;
          }
          bool packed = true;
          for (size_t r = 1; r < ins.size(); ++r)
            packed = packed && ins[r].numel == ins[0].numel &&
                     static_cast<const char*>(src[r]) == static_cast<const char*>(src[0]) + r * ins[0].numel * es;
          const auto dt = nccl_dtype(dtype);
          const auto rop = widen ? ncclSum : nccl_op(op);
          run_collective(*self, d, oc, [&](ncclComm_t c, cudaStream_t s) -> ncclResult_t {
            if (packed) {
              if (o.numel == 0) return ncclSuccess;
              return ncclReduceScatter(src[0], dst, static_cast<size_t>(o.numel), dt, rop, c, s);
            }
            for (size_t r = 0; r < ins.size(); ++r) {  // one reduce per rank, fused by the group
              if (ins[r].numel == 0) continue;
              void* recv = static_cast<int>(r) == self->rank ? dst : const_cast<void*>(src[r]);
              ncclResult_t rc =
                  ncclReduce(src[r], recv, static_cast<size_t>(ins[r].numel), dt, rop, static_cast<int>(r), c, s);
              if (rc != ncclSuccess && rc != ncclInProgress) return rc;
            }
            return ncclSuccess;
          });
          if (widen && o.numel > 0) {
            check_cuda(narrow_avg_from_i64(static_cast<const int64_t*>(dst), self->world, o.dtype, o.data,
                                           static_cast<size_t>(o.numel), self->comm->stream()),
                       "nccl reduce_scatter: narrowing the mean");
            self->comm->synchronize("nccl reduce_scatter #" + std::to_string(oc.seq) + " (avg)", oc.deadline);
          }
        },
        out);
  });
}

PL_Error* barrier(PL_ProcessGroup* pg, PL_Work** out) noexcept {
  return entry(pg, "barrier", [&] {
    pg->core->throw_if_unusable();
    pg::OpDesc d;
    d.kind = pg::OpKind::kBarrier;
    PL_ProcessGroup* self = pg;
    // The fingerprint allreduce alone meets every rank: that is the barrier.
    pg->core->run(
        d, [self, d](const pg::OpContext& oc) { run_collective(*self, d, oc, NcclOps()); }, out);
  });
}

namespace {

PL_Error* p2p(PL_ProcessGroup* pg, PL_Tensor* tensor, int32_t peer, int32_t tag, bool is_send, PL_Work** out) {
  const char* name = is_send ? "send" : "recv";
  return entry(pg, name, [&] {
    const std::string w = where(name);
    const pg::OpDesc d = pg::p2p_args(is_send, tensor, peer, tag, shape(pg), w, device_tensors(*pg, w));
    pg->core->throw_if_unusable();
    const PL_Tensor t = *tensor;
    PL_ProcessGroup* self = pg;
    // NCCL matches sends and receives by order between two ranks; the tag is only checked by the
    // descriptor in error messages.
    pg->core->run(
        d,
        [self, t, peer, is_send, d](const pg::OpContext& oc) {
          const std::string what = d.title(kBackend, oc.seq);
          self->comm->enqueue(
              [&](ncclComm_t c, cudaStream_t s) -> ncclResult_t {
                if (t.numel == 0) return ncclSuccess;
                const size_t n = static_cast<size_t>(t.numel);
                return is_send ? ncclSend(t.data, n, nccl_dtype(t.dtype), peer, c, s)
                               : ncclRecv(t.data, n, nccl_dtype(t.dtype), peer, c, s);
              },
              what, oc.deadline);
          self->comm->synchronize(what, oc.deadline);
        },
        out);
  });
}

}  // namespace

PL_Error* send(PL_ProcessGroup* pg, const PL_Tensor* tensor, int32_t dst, int32_t tag, PL_Work** out) noexcept {
  return p2p(pg, const_cast<PL_Tensor*>(tensor), dst, tag, true, out);
}

PL_Error* recv(PL_ProcessGroup* pg, PL_Tensor* tensor, int32_t src, int32_t tag, PL_Work** out) noexcept {
  return p2p(pg, tensor, src, tag, false, out);
}

}  // namespace plrt::nccl
