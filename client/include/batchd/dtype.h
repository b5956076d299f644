// The element types of batch tensors, defined once: the codes the
// shared-memory protocol writes in each TensorDesc (ring/shm_layout.h),
// the client's API and the server's names all come from this table. The
// torch and Python bindings map DType to their own types and read names and
// sizes here.
#ifndef BATCHD_DTYPE_H_
#define BATCHD_DTYPE_H_

#include <cstddef>
#include <cstdint>

namespace batchd {

// Values are protocol codes: never renumber one.
enum class DType : uint32_t {
  kUInt8 = 1,
  kInt32 = 2,
  kInt64 = 3,
  kFloat32 = 4,
  kUInt64 = 5,
};

struct DTypeInfo {
  DType dtype;
  const char* name;  // numpy's name
  size_t size;       // bytes of one element
};

inline constexpr DTypeInfo kDTypes[] = {
    {DType::kUInt8, "uint8", 1},   {DType::kInt32, "int32", 4},
    {DType::kInt64, "int64", 8},   {DType::kFloat32, "float32", 4},
    {DType::kUInt64, "uint64", 8},
};

// The entry of protocol code `code`; null when no DType has it.
inline const DTypeInfo* FindDType(uint32_t code) {
  for (const DTypeInfo& d : kDTypes) {
    if (uint32_t(d.dtype) == code) return &d;
  }
  return nullptr;
}

// "float32", ...; "unknown" for a value outside the table.
inline const char* DTypeName(DType dtype) {
  const DTypeInfo* d = FindDType(uint32_t(dtype));
  return d == nullptr ? "unknown" : d->name;
}

// Bytes of one element; 0 for a value outside the table.
inline size_t DTypeSize(DType dtype) {
  const DTypeInfo* d = FindDType(uint32_t(dtype));
  return d == nullptr ? 0 : d->size;
}

}  // namespace batchd

#endif  // BATCHD_DTYPE_H_
