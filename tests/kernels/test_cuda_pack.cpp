// The cuda accelerator's pack and unpack (ABI 1.4) against the cpu reference: every dtype, parts
// that are aligned (16-byte copies) and misaligned (an odd element offset: 4- or 1-byte copies),
// more parts than one launch takes (kPackBatch), and the argument errors, message for message.
#include <memory>

#include "test_cuda_support.hpp"

namespace {

using namespace cuda_test;

const PL_DType kAll[] = {PL_F32, PL_F64, PL_F16, PL_BF16, PL_I32, PL_I64, PL_U8};

// Packs `sizes` parts (device, at element offset `misalign` into their allocations) into a flat
// buffer at `offsets`, unpacks into fresh parts, and compares both with the cpu reference.
void round_trip(PL_DType dt, const std::vector<int64_t>& sizes, const std::vector<int64_t>& offsets, int64_t flat_n,
                int64_t misalign) {
  std::vector<Host> host;
  std::vector<std::unique_ptr<Dev>> dev, back;
  std::vector<PL_Tensor> hparts, dparts, dback;
  for (size_t i = 0; i < sizes.size(); ++i) {
    host.push_back(random_host(dt, sizes[i], static_cast<uint32_t>(i + 1)));
    dev.push_back(std::make_unique<Dev>(host.back(), misalign));
    back.push_back(std::make_unique<Dev>(dt, sizes[i], misalign));
  }
  for (size_t i = 0; i < sizes.size(); ++i) {
    hparts.push_back(host[i].t());
    dparts.push_back(dev[i]->t());
    dback.push_back(back[i]->t());
  }
  Host hflat = random_host(dt, flat_n, 99);
  Dev dflat(hflat, misalign);
  PL_Tensor hf = hflat.t(), df = dflat.t();
  plrt::cpu::pack(hparts.data(), hparts.size(), offsets.data(), &hf);
  ok(api()->pack(cuda().get(), dparts.data(), dparts.size(), offsets.data(), &df, nullptr));
  ok(api()->stream_synchronize(cuda().get(), nullptr));
  EXPECT_EQ(dflat.download().bytes, hflat.bytes) << "pack";
  ok(api()->unpack(cuda().get(), &df, offsets.data(), dback.data(), dback.size(), nullptr));
  ok(api()->stream_synchronize(cuda().get(), nullptr));
  for (size_t i = 0; i < sizes.size(); ++i) {
    Host got = back[i]->download();
    EXPECT_EQ(std::memcmp(got.data(), host[i].data(), host[i].size()), 0) << "unpack, part " << i;
  }
}

TEST(CudaPack, MatchesCpuForEveryDtypeAlignedAndNot) {
  REQUIRE_GPU();
  for (PL_DType dt : kAll)
    for (int64_t misalign : {0, 1}) {
      SCOPED_TRACE(std::string(pl_dtype_name(dt)) + " misalign=" + std::to_string(misalign));
      round_trip(dt, {5, 0, 1, 70000, 333}, {3, 9, 8, 20, 70030}, 70400, misalign);
    }
}

TEST(CudaPack, MoreThanOneLaunchOfParts) {
  REQUIRE_GPU();
  const int64_t n = 1024 + 37;  // more than the 1024 parts one launch takes (kernels.hpp: kPackBatch)
  std::vector<int64_t> sizes(static_cast<size_t>(n)), offsets(static_cast<size_t>(n));
  int64_t at = 0;
  for (int64_t i = 0; i < n; ++i) {
    sizes[static_cast<size_t>(i)] = 1 + i % 7;
    offsets[static_cast<size_t>(i)] = at;
    at += sizes[static_cast<size_t>(i)] + 1;
  }
  round_trip(PL_F32, sizes, offsets, at, 0);
}

TEST(CudaPack, ArgumentErrorsMatchTheCpuReference) {
  auto* fake = reinterpret_cast<uint8_t*>(uintptr_t{1} << 40);  // never dereferenced: every call fails first
  std::vector<float> ha(4), hf(8);
  PL_Tensor flat = tensor(fake, PL_F32, kGpu, {8});
  PL_Tensor hflat = tensor(hf.data(), PL_F32, kHost, {8});
  std::vector<int64_t> past{5};
  std::vector<PL_Tensor> parts{tensor(fake + 4096, PL_F32, kGpu, {4})};
  std::vector<PL_Tensor> hparts{tensor(ha.data(), PL_F32, kHost, {4})};
  const Outcome got = outcome(api()->pack(cuda().get(), parts.data(), 1, past.data(), &flat, nullptr));
  std::string want;
  try {
    plrt::cpu::pack(hparts.data(), 1, past.data(), &hflat);
  } catch (const plrt::plugin::Failure& f) {
    want = f.message;
  }
  EXPECT_EQ(got.code, PL_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(got.message, want);
  EXPECT_EQ(got.message, "pack: parts[0] (4 elements at offset 5) runs past the end of flat (8 elements)");
  // A host part for a device flat is refused (the cuda kernels read device memory only).
  const Outcome host_part = outcome(api()->pack(cuda().get(), hparts.data(), 1, past.data(), &flat, nullptr));
  EXPECT_EQ(host_part.code, PL_ERR_INVALID_ARGUMENT);
  EXPECT_NE(host_part.message.find("pack: parts[0] is on cpu:0"), std::string::npos) << host_part.message;
}

}  // namespace
