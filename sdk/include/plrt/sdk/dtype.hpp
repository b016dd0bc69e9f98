// pl::dtype_of<T>(): the PL_DType of a C++ element type.
#pragma once

#include <plrt/pl_tensor.h>

#include <cstdint>

namespace pl {

template <class T>
constexpr PL_DType dtype_of();
template <>
constexpr PL_DType dtype_of<float>() {
  return PL_F32;
}
template <>
constexpr PL_DType dtype_of<double>() {
  return PL_F64;
}
template <>
constexpr PL_DType dtype_of<int32_t>() {
  return PL_I32;
}
template <>
constexpr PL_DType dtype_of<int64_t>() {
  return PL_I64;
}
template <>
constexpr PL_DType dtype_of<uint8_t>() {
  return PL_U8;
}

}  // namespace pl
