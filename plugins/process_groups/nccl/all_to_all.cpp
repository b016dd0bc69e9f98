// all_to_all on NCCL: one ncclSend and one ncclRecv per peer inside one NCCL group, as PyTorch's
// c10d does it (NCCL has no all-to-all of its own); this rank's own chunk is a device-to-device
// copy on the group's stream.  Zero-count chunks post nothing (both ends know the count).
//
// PEER COUNTS.  With equal chunks (both count arrays NULL) every rank's numel is in the op's
// fingerprint, which the fingerprint allreduce fused into the op checks (nccl_pg.hpp).  Per-rank
// counts are not in it (they differ between ranks by design): the ranks first allgather their
// count rows (input_counts then output_counts: 16 * world bytes each) in the op's checked NCCL
// group, copy the world x world matrix back and compare it on every rank, so a disagreement is the
// same error on every rank naming both counts (pg::AgreedFailure), before any data moves and
// without NCCL ever seeing a short receive.  Cost, per call with counts: that allgather, two small
// copies and one extra stream synchronisation; nothing for equal chunks.
#include <cuda_runtime_api.h>

#include <vector>

#include "nccl_pg.hpp"

namespace plrt::nccl {

namespace {

// Posts this rank's sends, receives and own-chunk copy (inside the caller's NCCL group).
ncclResult_t post_exchange(const PL_Tensor& in, const PL_Tensor& o, const std::vector<int64_t>& send,
                           const std::vector<int64_t>& recv, int rank, ncclComm_t c, cudaStream_t s) {
  const size_t es = pl_dtype_size(in.dtype);
  const auto dt = nccl_dtype(in.dtype);
  size_t in_at = 0, out_at = 0;
  for (size_t r = 0; r < send.size(); ++r) {
    const auto ns = static_cast<size_t>(send[r]), nr = static_cast<size_t>(recv[r]);
    const char* src = static_cast<const char*>(in.data) + in_at * es;
    char* dst = static_cast<char*>(o.data) + out_at * es;
    in_at += ns;
    out_at += nr;
    if (static_cast<int>(r) == rank) {
      if (ns > 0 && cudaMemcpyAsync(dst, src, ns * es, cudaMemcpyDeviceToDevice, s) != cudaSuccess)
        return ncclUnhandledCudaError;
      continue;
    }
    if (ns > 0) {
      const ncclResult_t rc = ncclSend(src, ns, dt, static_cast<int>(r), c, s);
      if (rc != ncclSuccess && rc != ncclInProgress) return rc;
    }
    if (nr > 0) {
      const ncclResult_t rc = ncclRecv(dst, nr, dt, static_cast<int>(r), c, s);
      if (rc != ncclSuccess && rc != ncclInProgress) return rc;
    }
  }
  return ncclSuccess;
}

// Every rank's count row, rank by rank, gathered in the op's checked group (run_collective).
std::vector<int64_t> exchange_counts(PL_ProcessGroup& pg, const pg::OpDesc& d, const pg::OpContext& oc,
                                     const std::vector<int64_t>& row) {
  const size_t W = static_cast<size_t>(pg.world), n = row.size();
  const cudaStream_t s = pg.comm->stream();
  void* dev = nullptr;
  check_cuda(cudaMallocAsync(&dev, (W + 1) * n * sizeof(int64_t), s), "nccl all_to_all: allocating the count table");
  auto* mine = static_cast<int64_t*>(dev);
  int64_t* table = mine + n;
  std::vector<int64_t> host(W * n);
  try {
    check_cuda(cudaMemcpyAsync(mine, row.data(), n * sizeof(int64_t), cudaMemcpyHostToDevice, s),
               "nccl all_to_all: copying the counts");
    run_collective(pg, d, oc,
                   [&](ncclComm_t c, cudaStream_t st) { return ncclAllGather(mine, table, n, ncclInt64, c, st); });
    check_cuda(cudaMemcpyAsync(host.data(), table, W * n * sizeof(int64_t), cudaMemcpyDeviceToHost, s),
               "nccl all_to_all: copying the count table back");
    pg.comm->synchronize(d.title(kBackend, oc.seq) + " (the count exchange)", oc.deadline);
  } catch (...) {
    cudaFreeAsync(dev, s);
    throw;
  }
  cudaFreeAsync(dev, s);
  return host;
}

}  // namespace

PL_Error* all_to_all(PL_ProcessGroup* pg, const PL_Tensor* input, const int64_t* input_counts, PL_Tensor* output,
                     const int64_t* output_counts, PL_Work** out) noexcept {
  return entry(pg, "all_to_all", [&] {
    const std::string w = where("all_to_all");
    const pg::OpDesc d =
        pg::all_to_all_args(input, input_counts, output, output_counts, shape(pg), w, device_tensors(*pg, w));
    pg->core->throw_if_unusable();
    const PL_Tensor in = *input, o = *output;
    PL_ProcessGroup* self = pg;
    pg->core->run(
        d,
        [self, in, o, d](const pg::OpContext& oc) {
          const auto post = [&](ncclComm_t c, cudaStream_t s) {
            return post_exchange(in, o, d.counts, d.recv_counts, self->rank, c, s);
          };
          if (d.equal_chunks) return run_collective(*self, d, oc, post);  // numel checked by the fingerprint
          const auto table = exchange_counts(*self, d, oc, pg::peer_count_row(d));
          pg::check_peer_counts(table, self->world);
          const std::string what = d.title(kBackend, oc.seq);
          self->comm->enqueue(
              [&](ncclComm_t c, cudaStream_t s) -> ncclResult_t {
                ncclResult_t rc = ncclGroupStart();
                if (rc != ncclSuccess) return rc;
                const ncclResult_t body = post(c, s);
                rc = ncclGroupEnd();
                if (body != ncclSuccess && body != ncclInProgress) return body;
                return rc;
              },
              what, oc.deadline);
          self->comm->synchronize(what, oc.deadline);
        },
        out);
  });
}

}  // namespace plrt::nccl
