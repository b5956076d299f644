// CRC32C (Castagnoli, reflected polynomial 0x82F63B78), as TFRecord files
// and the cache directory's entries carry it, and TFRecord's masked form:
// masked_crc32c(x) = ((crc >> 15) | (crc << 17)) + 0xa282ead8.
//
// Thread safety: functions only.
#ifndef BATCHD_BASE_CRC32C_H_
#define BATCHD_BASE_CRC32C_H_

#include <cstddef>
#include <cstdint>

namespace batchd {

// CRC32C of `n` bytes, continuing `crc` (0 to start).
uint32_t Crc32c(const void* data, size_t n, uint32_t crc = 0);
uint32_t MaskedCrc32c(const void* data, size_t n);

}  // namespace batchd

#endif  // BATCHD_BASE_CRC32C_H_
