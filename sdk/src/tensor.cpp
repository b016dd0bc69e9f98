// pl::Tensor: shared storage (host: aligned malloc; device: the accelerator's alloc/free), shape,
// dtype; copies between any two devices go through the owning accelerator.
#include <cstdlib>
#include <numeric>
#include <plrt/sdk/tensor.hpp>
#include <sstream>

namespace pl {

std::string shape_text(const Shape& shape) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << "]";
  return os.str();
}

struct Tensor::Storage {
  Accelerator acc;  // empty for host memory
  PL_Device device{PL_DEVICE_CPU, 0};
  void* ptr = nullptr;
  size_t bytes = 0;
  std::shared_ptr<void> owner;  // borrowed memory (Tensor::borrow): its owner, which frees it
  ~Storage() {
    if (!ptr || owner) return;
    if (acc.defined())
      acc.free(device, ptr);
    else
      std::free(ptr);
  }
};

namespace {

int64_t checked_numel(const Shape& shape) {
  if (shape.size() > PL_MAX_DIMS)
    throw Error(PL_ERR_INVALID_ARGUMENT, "tensor shape " + shape_text(shape) + " has " + std::to_string(shape.size()) +
                                             " dimensions; at most " + std::to_string(PL_MAX_DIMS) + " are supported");
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) throw Error(PL_ERR_INVALID_ARGUMENT, "tensor shape " + shape_text(shape) + " has a negative size");
    if (d != 0 && n > INT64_MAX / d)
      throw Error(PL_ERR_INVALID_ARGUMENT, "tensor shape " + shape_text(shape) + " overflows int64");
    n *= d;
  }
  return n;
}

size_t checked_elem(PL_DType dtype) {
  size_t e = pl_dtype_size(dtype);
  if (e == 0) throw Error(PL_ERR_INVALID_ARGUMENT, "invalid tensor dtype " + std::to_string(dtype));
  return e;
}

}  // namespace

void tensor_check_dtype(const Tensor& t, PL_DType wanted, const char* what) {
  if (!t.defined()) throw Error(PL_ERR_INVALID_ARGUMENT, std::string("Tensor::") + what + " on an undefined tensor");
  if (t.dtype() != wanted)
    throw Error(PL_ERR_INVALID_ARGUMENT, std::string("Tensor::") + what + ": the tensor is " +
                                             pl_dtype_name(t.dtype()) + ", not " + pl_dtype_name(wanted));
}

void tensor_check_host(const Tensor& t, const char* what) {
  if (!t.is_host())
    throw Error(
        PL_ERR_INVALID_ARGUMENT,
        std::string("Tensor::") + what + ": the tensor lives on a device the CPU cannot read; copy it with to_host()");
}

Tensor Tensor::empty(Shape shape, PL_DType dtype) {
  Tensor t;
  t.numel_ = checked_numel(shape);
  size_t bytes = static_cast<size_t>(t.numel_) * checked_elem(dtype);
  auto s = std::make_shared<Storage>();
  size_t rounded = (bytes + 63) / 64 * 64;
  s->ptr = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
  if (!s->ptr) throw Error(PL_ERR_RESOURCE, "out of host memory allocating " + std::to_string(bytes) + " bytes");
  s->bytes = bytes;
  t.storage_ = std::move(s);
  t.data_ = t.storage_->ptr;
  t.dtype_ = dtype;
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::zeros(Shape shape, PL_DType dtype) {
  Tensor t = empty(std::move(shape), dtype);
  std::memset(t.data_, 0, t.nbytes());
  return t;
}

Tensor Tensor::empty(const Accelerator& acc, PL_Device device, Shape shape, PL_DType dtype) {
  if (!acc.defined()) return empty(std::move(shape), dtype);
  if (device.type != acc.device_type())
    throw Error(PL_ERR_INVALID_ARGUMENT, "Tensor::empty: accelerator '" + acc.name() +
                                             "' cannot allocate on a device of type " + std::to_string(device.type));
  Tensor t;
  t.numel_ = checked_numel(shape);
  size_t bytes = static_cast<size_t>(t.numel_) * checked_elem(dtype);
  auto s = std::make_shared<Storage>();
  s->acc = acc;
  s->device = device;
  s->ptr = acc.alloc(device, bytes == 0 ? 1 : bytes);
  s->bytes = bytes;
  t.storage_ = std::move(s);
  t.data_ = t.storage_->ptr;
  t.dtype_ = dtype;
  t.device_ = device;
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::borrow(const PL_Tensor& view, const Accelerator& acc, std::shared_ptr<void> owner) {
  if (!owner) throw Error(PL_ERR_INVALID_ARGUMENT, "Tensor::borrow: the memory's owner is null");
  if (view.ndim < 0 || view.ndim > PL_MAX_DIMS)
    throw Error(PL_ERR_INVALID_ARGUMENT, "Tensor::borrow: " + std::to_string(view.ndim) + " dimensions; at most " +
                                             std::to_string(PL_MAX_DIMS) + " are supported");
  if (acc.defined() && view.device.type != acc.device_type())
    throw Error(PL_ERR_INVALID_ARGUMENT, "Tensor::borrow: accelerator '" + acc.name() +
                                             "' does not own memory on a device of type " +
                                             std::to_string(view.device.type));
  if (!acc.defined() && view.device.type != PL_DEVICE_CPU)
    throw Error(PL_ERR_INVALID_ARGUMENT, "Tensor::borrow: device memory needs its accelerator");
  Tensor t;
  t.shape_.assign(view.shape, view.shape + view.ndim);
  t.numel_ = checked_numel(t.shape_);
  if (t.numel_ != view.numel)
    throw Error(PL_ERR_INVALID_ARGUMENT, "Tensor::borrow: numel " + std::to_string(view.numel) +
                                             " does not match the shape " + shape_text(t.shape_));
  if (t.numel_ > 0 && view.data == nullptr) throw Error(PL_ERR_INVALID_ARGUMENT, "Tensor::borrow: null data");
  auto s = std::make_shared<Storage>();
  s->acc = acc;
  s->device = view.device;
  s->ptr = view.data;
  s->bytes = static_cast<size_t>(t.numel_) * checked_elem(view.dtype);
  s->owner = std::move(owner);
  t.storage_ = std::move(s);
  t.data_ = view.data;
  t.dtype_ = view.dtype;
  t.device_ = view.device;
  return t;
}

Tensor Tensor::zeros(const Accelerator& acc, PL_Device device, Shape shape, PL_DType dtype) {
  Tensor t = empty(acc, device, std::move(shape), dtype);
  if (t.is_host()) {
    std::memset(t.data_, 0, t.nbytes());
  } else if (t.numel_ > 0) {
    PL_Tensor v = t.view();
    acc.fill(v, 0.0);
  }
  return t;
}

int64_t Tensor::size(int d) const {
  int n = dim();
  int i = d < 0 ? d + n : d;
  if (i < 0 || i >= n)
    throw Error(PL_ERR_INVALID_ARGUMENT, "Tensor::size(" + std::to_string(d) + "): the tensor has " +
                                             std::to_string(n) + " dimensions (shape " + shape_text(shape_) + ")");
  return shape_[static_cast<size_t>(i)];
}

bool Tensor::is_host() const { return device_.type == PL_DEVICE_CPU; }

const Accelerator& Tensor::accelerator() const {
  static const Accelerator kNone;
  return storage_ ? storage_->acc : kNone;
}

PL_Tensor Tensor::view() const {
  PL_Tensor v{};
  v.struct_size = sizeof v;
  v.data = data_;
  v.dtype = dtype_;
  v.device = device_;
  v.numel = numel_;
  v.ndim = static_cast<int32_t>(shape_.size());
  for (size_t i = 0; i < shape_.size(); ++i) v.shape[i] = shape_[i];
  return v;
}

Tensor Tensor::to(const Accelerator& acc, PL_Device device) const {
  if (!defined()) throw Error(PL_ERR_INVALID_ARGUMENT, "Tensor::to on an undefined tensor");
  bool same_place = device.type == device_.type && (device.type == PL_DEVICE_CPU || device.index == device_.index);
  if (same_place) return *this;
  Tensor out = empty(acc, device, shape_, dtype_);
  out.copy_from(*this);
  return out;
}

Tensor Tensor::to_host() const {
  if (!defined()) throw Error(PL_ERR_INVALID_ARGUMENT, "Tensor::to_host on an undefined tensor");
  if (is_host()) return *this;
  Tensor out = empty(shape_, dtype_);
  out.copy_from(*this);
  return out;
}

Tensor Tensor::clone() const {
  if (!defined()) throw Error(PL_ERR_INVALID_ARGUMENT, "Tensor::clone on an undefined tensor");
  Tensor out = storage_->acc.defined() ? empty(storage_->acc, device_, shape_, dtype_) : empty(shape_, dtype_);
  out.copy_from(*this);
  return out;
}

void Tensor::copy_from(const Tensor& src) {
  if (!defined() || !src.defined()) throw Error(PL_ERR_INVALID_ARGUMENT, "Tensor::copy_from with an undefined tensor");
  if (src.dtype_ != dtype_ || src.numel_ != numel_)
    throw Error(PL_ERR_INVALID_ARGUMENT, std::string("Tensor::copy_from: source is ") + pl_dtype_name(src.dtype_) +
                                             " " + shape_text(src.shape_) + ", destination is " +
                                             pl_dtype_name(dtype_) + " " + shape_text(shape_));
  if (nbytes() == 0 || src.data_ == data_) return;
  if (is_host() && src.is_host()) {
    std::memmove(data_, src.data_, nbytes());
    return;
  }
  // At least one side is on a device: its accelerator copies (it also handles the host side).
  const Accelerator& acc = !is_host() ? storage_->acc : src.storage_->acc;
  acc.copy(data_, device_, src.data_, src.device_, nbytes());
}

Tensor Tensor::reshape(Shape shape) const {
  if (!defined()) throw Error(PL_ERR_INVALID_ARGUMENT, "Tensor::reshape on an undefined tensor");
  int64_t n = checked_numel(shape);
  if (n != numel_)
    throw Error(PL_ERR_INVALID_ARGUMENT, "Tensor::reshape: shape " + shape_text(shape) + " has " + std::to_string(n) +
                                             " elements, the tensor " + std::to_string(numel_) + " (shape " +
                                             shape_text(shape_) + ")");
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::narrow(int64_t begin, int64_t count) const {
  if (!defined() || shape_.empty())
    throw Error(PL_ERR_INVALID_ARGUMENT, "Tensor::narrow needs a defined tensor with at least one dimension");
  if (begin < 0 || count < 0 || begin + count > shape_[0])
    throw Error(PL_ERR_INVALID_ARGUMENT, "Tensor::narrow(" + std::to_string(begin) + ", " + std::to_string(count) +
                                             "): out of range for dim 0 of shape " + shape_text(shape_));
  int64_t row = shape_[0] == 0 ? 0 : numel_ / shape_[0];
  Tensor t = *this;
  t.shape_[0] = count;
  t.numel_ = row * count;
  t.data_ = static_cast<char*>(data_) + static_cast<size_t>(begin * row) * pl_dtype_size(dtype_);
  return t;
}

}  // namespace pl
