// Device counting (with the reason when there is none) and DeviceScope.
#include "device_scope.hpp"

#include <string>

namespace plrt::cuda {

namespace {

std::string runtime_version() {
  return std::to_string(CUDART_VERSION / 1000) + "." + std::to_string(CUDART_VERSION % 1000 / 10);
}

// Why cudaGetDeviceCount failed, in words first and with the runtime's own name and text after.
std::string no_device_reason(cudaError_t rc) {
  const std::string detail = std::string(cudaGetErrorName(rc)) + ": " + cudaGetErrorString(rc);
  switch (rc) {
    case cudaErrorInsufficientDriver:
      return "no CUDA driver, or one older than this plugin's CUDA runtime " + runtime_version() + " needs (" + detail +
             ")";
    case cudaErrorStubLibrary:
      return "no CUDA driver: only the toolkit's stub libcuda.so was found (" + detail + ")";
    case cudaErrorNoDevice:
      return "no CUDA device (" + detail + "); check CUDA_VISIBLE_DEVICES";
    default:
      return "the CUDA runtime cannot count the devices (" + detail + ")";
  }
}

}  // namespace

int device_count_or_zero(std::string* reason) {
  int n = 0;
  const cudaError_t rc = cudaGetDeviceCount(&n);  // leaves n untouched on error
  if (rc != cudaSuccess) {
    cudaGetLastError();
    if (reason) *reason = no_device_reason(rc);
    return 0;
  }
  if (n == 0 && reason) *reason = "the CUDA runtime sees no device (check CUDA_VISIBLE_DEVICES)";
  return n;
}

void check_device_index(int32_t index, const std::string& subject) {
  std::string reason;
  const int n = device_count_or_zero(&reason);
  if (index >= 0 && index < n) return;
  if (n == 0) fail(PL_ERR_INVALID_ARGUMENT, subject + " but no CUDA device is available: " + reason);
  fail(PL_ERR_INVALID_ARGUMENT, subject + " but this process sees " + std::to_string(n) + " CUDA device" +
                                    (n == 1 ? "" : "s") + " (valid indices 0.." + std::to_string(n - 1) + ")");
}

DeviceScope::DeviceScope(const char* op, const PL_Tensor& t, const char* what, PL_Stream* stream) {
  const int index = t.device.index;
  check_device_index(index, std::string(op) + ": " + what + " is on cuda:" + std::to_string(index));
  int sms = 0;
  check_cuda(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, index), "cudaDeviceGetAttribute");
  launch_.device = index;
  launch_.stream = reinterpret_cast<cudaStream_t>(stream);
  launch_.sm_count = sms > 0 ? sms : 1;
  // Last, so that nothing can throw after the switch (a throwing constructor runs no destructor).
  int current = 0;
  check_cuda(cudaGetDevice(&current), "cudaGetDevice");
  if (current != index) {
    check_cuda(cudaSetDevice(index), "cudaSetDevice(" + std::to_string(index) + ")");
    previous_ = current;
  }
}

DeviceScope::~DeviceScope() {
  if (previous_ >= 0 && cudaSetDevice(previous_) != cudaSuccess) cudaGetLastError();
}

}  // namespace plrt::cuda
