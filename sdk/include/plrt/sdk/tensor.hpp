// pl::Tensor: a contiguous, row-major n-d array on a device, owning its memory (shared between
// copies of the Tensor, as torch.Tensor shares storage).  Host tensors (device cpu, no accelerator)
// are allocated with aligned malloc; device tensors through their Accelerator, which they keep alive.
#pragma once

#include <plrt/pl_tensor.h>

#include <cstdint>
#include <cstring>
#include <memory>
#include <plrt/sdk/accelerator.hpp>
#include <plrt/sdk/dtype.hpp>
#include <plrt/sdk/error.hpp>
#include <string>
#include <vector>

namespace pl {

using Shape = std::vector<int64_t>;

// "[64, 784]"
std::string shape_text(const Shape& shape);

class Tensor {
 public:
  Tensor() = default;  // undefined: defined() is false

  // ---- host tensors (device cpu; no accelerator needed) ----
  static Tensor empty(Shape shape, PL_DType dtype = PL_F32);
  static Tensor zeros(Shape shape, PL_DType dtype = PL_F32);
  template <class T>
  static Tensor from_vector(const std::vector<T>& values, Shape shape);
  // ---- tensors on a device of `acc` ----
  static Tensor empty(const Accelerator& acc, PL_Device device, Shape shape, PL_DType dtype = PL_F32);
  static Tensor zeros(const Accelerator& acc, PL_Device device, Shape shape, PL_DType dtype = PL_F32);
  // A tensor over memory another library owns (a torch tensor's, through DLPack): `view` describes
  // it (compact, row-major), `acc` is the accelerator of its device (undefined for host memory) and
  // `owner` keeps the memory alive while any Tensor shares this storage; the memory is not freed here.
  static Tensor borrow(const PL_Tensor& view, const Accelerator& acc, std::shared_ptr<void> owner);

  bool defined() const { return storage_ != nullptr; }
  PL_DType dtype() const { return dtype_; }
  PL_Device device() const { return device_; }
  const Shape& shape() const { return shape_; }
  int dim() const { return static_cast<int>(shape_.size()); }
  int64_t size(int d) const;  // negative d counts from the end; out of range throws
  int64_t numel() const { return numel_; }
  size_t nbytes() const { return static_cast<size_t>(numel_) * pl_dtype_size(dtype_); }
  void* data() const { return data_; }
  // Host memory as T*; throws when the dtype is not T's or the memory is not host-addressable
  // (a cuda tensor).
  template <class T>
  T* data_ptr() const;
  bool is_host() const;  // its memory can be read by the CPU (device type cpu)
  // The accelerator that owns the memory; empty for host tensors.
  const Accelerator& accelerator() const;
  // How many Tensors share this one's storage (views included); 0 for an undefined tensor.
  long use_count() const { return storage_.use_count(); }

  // The C descriptor (borrowed memory), shape included (at most PL_MAX_DIMS dims).
  PL_Tensor view() const;

  // ---- copies and views ----
  // A copy on `device` of `acc` (the same storage when it already lives there).
  Tensor to(const Accelerator& acc, PL_Device device) const;
  Tensor to_host() const;  // a host copy (the same storage for a host tensor)
  Tensor clone() const;    // a new storage on the same device
  // Copies src's elements into this tensor (same dtype and numel; any two devices).
  void copy_from(const Tensor& src);
  template <class T>
  std::vector<T> to_vector() const;                   // copies to host; T must match the dtype
  Tensor reshape(Shape shape) const;                  // same storage; numel must match
  Tensor narrow(int64_t begin, int64_t count) const;  // rows [begin, begin+count) of dim 0; same storage

 private:
  struct Storage;
  std::shared_ptr<Storage> storage_;
  void* data_ = nullptr;
  PL_DType dtype_ = PL_DTYPE_INVALID;
  PL_Device device_{PL_DEVICE_CPU, 0};
  Shape shape_;
  int64_t numel_ = 0;
};

// ---- template definitions ----
void tensor_check_dtype(const Tensor& t, PL_DType wanted, const char* what);
void tensor_check_host(const Tensor& t, const char* what);

template <class T>
Tensor Tensor::from_vector(const std::vector<T>& values, Shape shape) {
  Tensor t = empty(std::move(shape), dtype_of<T>());
  if (static_cast<size_t>(t.numel()) != values.size())
    throw Error(PL_ERR_INVALID_ARGUMENT, "Tensor::from_vector: " + std::to_string(values.size()) +
                                             " values do not fill shape " + shape_text(t.shape()));
  if (!values.empty()) std::memcpy(t.data(), values.data(), values.size() * sizeof(T));
  return t;
}

template <class T>
T* Tensor::data_ptr() const {
  tensor_check_dtype(*this, dtype_of<T>(), "data_ptr");
  tensor_check_host(*this, "data_ptr");
  return static_cast<T*>(data_);
}

template <class T>
std::vector<T> Tensor::to_vector() const {
  tensor_check_dtype(*this, dtype_of<T>(), "to_vector");
  Tensor h = to_host();
  const T* p = static_cast<const T*>(h.data());
  return std::vector<T>(p, p + numel_);
}

}  // namespace pl
