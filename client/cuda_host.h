// Page-locking ("pinning") host memory with the CUDA runtime the process
// has loaded, without linking CUDA: the one implementation behind
// Loader::RegisterPinned / UnregisterPinned, which the libtorch adapter and
// the Python module (through its binding) both call. Thread-safe.
#ifndef BATCHD_CLIENT_CUDA_HOST_H_
#define BATCHD_CLIENT_CUDA_HOST_H_

#include <cstddef>

#include "absl/status/status.h"

namespace batchd {

// cudaHostRegister(address, bytes, 0) in the CUDA runtime already in the
// process (torch's, whatever its file is called: a wheel may rename it),
// else one found by its usual names. FailedPrecondition, saying why, where
// there is no runtime, no driver or no device.
absl::Status CudaHostRegister(void* address, size_t bytes);
// cudaHostUnregister(address): before the memory is unmapped, or a later
// mapping at the same address could not be registered.
absl::Status CudaHostUnregister(void* address);

}  // namespace batchd

#endif  // BATCHD_CLIENT_CUDA_HOST_H_
