// dlopen of cuBLAS on first use (see cublas_loader.hpp).
#include "cublas_loader.hpp"

#include <dlfcn.h>

#include <string>
#include <type_traits>

#include "cuda_common.hpp"

namespace plrt::cuda {
namespace {

// The table's pointer types against cuBLAS's own prototypes (unevaluated: nothing gets linked).
static_assert(std::is_same_v<decltype(CublasApi::create), decltype(&cublasCreate_v2)>);
static_assert(std::is_same_v<decltype(CublasApi::destroy), decltype(&cublasDestroy_v2)>);
static_assert(std::is_same_v<decltype(CublasApi::set_stream), decltype(&cublasSetStream_v2)>);
static_assert(std::is_same_v<decltype(CublasApi::set_workspace), decltype(&cublasSetWorkspace_v2)>);
static_assert(std::is_same_v<decltype(CublasApi::set_math_mode), decltype(&cublasSetMathMode)>);
static_assert(std::is_same_v<decltype(CublasApi::sgemm), decltype(&cublasSgemm_v2)>);
static_assert(std::is_same_v<decltype(CublasApi::dgemm), decltype(&cublasDgemm_v2)>);
// cublasGemmEx is overloaded in C++ (an inline shim takes the old cudaDataType compute type): the
// cast compiles only if the C prototype matches.
static_assert(
    std::is_same_v<decltype(CublasApi::gemm_ex), decltype(static_cast<decltype(CublasApi::gemm_ex)>(&cublasGemmEx))>);
static_assert(std::is_same_v<decltype(CublasApi::status_name), decltype(&cublasGetStatusName)>);
static_assert(std::is_same_v<decltype(CublasApi::status_string), decltype(&cublasGetStatusString)>);

const std::string kLibrary = "libcublas.so." + std::to_string(CUBLAS_VER_MAJOR);

void* open_library() {
  void* h = dlopen(kLibrary.c_str(), RTLD_NOW | RTLD_LOCAL);  // the loader's path, LD_LIBRARY_PATH
  if (h != nullptr) return h;
  std::string errors = dlerror();
#ifdef PLRT_CUBLAS_DIR
  const std::string path = std::string(PLRT_CUBLAS_DIR) + "/" + kLibrary;  // the toolkit it was built with
  h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h != nullptr) return h;
  errors += "; " + std::string(dlerror());
#endif
  fail(PL_ERR_RUNTIME, "cuda: gemm needs cuBLAS, but " + kLibrary + " could not be loaded (" + errors +
                           "); install cuBLAS " + std::to_string(CUBLAS_VER_MAJOR) +
                           " or put its folder on LD_LIBRARY_PATH");
}

template <class F>
void resolve(void* lib, const char* name, F& out) {
  void* p = dlsym(lib, name);
  if (p == nullptr)
    fail(PL_ERR_RUNTIME, "cuda: " + kLibrary + " has no symbol " + name + " (" + dlerror() +
                             "); it is not the cuBLAS this plugin was built for");
  out = reinterpret_cast<F>(p);
}

CublasApi load() {
  void* lib = open_library();  // never closed: cuBLAS keeps process-wide state
  CublasApi a{};
  resolve(lib, "cublasCreate_v2", a.create);
  resolve(lib, "cublasDestroy_v2", a.destroy);
  resolve(lib, "cublasSetStream_v2", a.set_stream);
  resolve(lib, "cublasSetWorkspace_v2", a.set_workspace);
  resolve(lib, "cublasSetMathMode", a.set_math_mode);
  resolve(lib, "cublasSgemm_v2", a.sgemm);
  resolve(lib, "cublasDgemm_v2", a.dgemm);
  resolve(lib, "cublasGemmEx", a.gemm_ex);
  resolve(lib, "cublasGetStatusName", a.status_name);
  resolve(lib, "cublasGetStatusString", a.status_string);
  return a;
}

}  // namespace

const CublasApi& cublas() {
  static const CublasApi api = load();  // a failed load throws and is tried again next time
  return api;
}

std::string cublas_status(cublasStatus_t s) {
  const CublasApi& a = cublas();
  return std::string(a.status_name(s)) + ": " + a.status_string(s);
}

}  // namespace plrt::cuda
