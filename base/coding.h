// The byte encodings that batchd's files share: fixed-width little-endian
// integers (TFRecord framing, cache entry headers and values) and LEB128
// varints with length-prefixed strings (cache values, protobuf's wire
// format). One definition for every reader and writer, so that a format
// shared by a writer and a reader cannot drift apart. Header-only and pure:
// every function is thread-safe.
#ifndef BATCHD_BASE_CODING_H_
#define BATCHD_BASE_CODING_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/strings/string_view.h"

namespace batchd {

// Little-endian loads and stores of p[0..3] / p[0..7], whatever the host's
// byte order and p's alignment.
inline uint32_t LoadLE32(const uint8_t* p) {
  return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 |
         uint32_t(p[3]) << 24;
}
inline uint64_t LoadLE64(const uint8_t* p) {
  return uint64_t(LoadLE32(p)) | uint64_t(LoadLE32(p + 4)) << 32;
}
inline uint32_t LoadLE32(const char* p) {
  return LoadLE32(reinterpret_cast<const uint8_t*>(p));
}
inline uint64_t LoadLE64(const char* p) {
  return LoadLE64(reinterpret_cast<const uint8_t*>(p));
}
inline void StoreLE32(uint32_t v, uint8_t* p) {
  for (int i = 0; i < 4; ++i) p[i] = uint8_t(v >> (8 * i));
}
inline void StoreLE64(uint64_t v, uint8_t* p) {
  for (int i = 0; i < 8; ++i) p[i] = uint8_t(v >> (8 * i));
}
inline void StoreLE32(uint32_t v, char* p) {
  StoreLE32(v, reinterpret_cast<uint8_t*>(p));
}
inline void StoreLE64(uint64_t v, char* p) {
  StoreLE64(v, reinterpret_cast<uint8_t*>(p));
}

// Appends v as a LEB128 varint (7 bits a byte, low bits first; 1-10 bytes).
inline void AppendVarint(uint64_t v, std::string* out) {
  while (v >= 0x80) {
    out->push_back(char(uint8_t(v) | 0x80));
    v >>= 7;
  }
  out->push_back(char(uint8_t(v)));
}

// Appends s's length as a varint, then s.
inline void AppendString(absl::string_view s, std::string* out) {
  AppendVarint(s.size(), out);
  out->append(s.data(), s.size());
}

// Consumes a varint from *in. False when *in ends inside it or it runs past
// ten bytes; bits beyond the 64th are dropped (see WireReader for the strict
// form protobuf parsers use).
inline bool ReadVarint(absl::string_view* in, uint64_t* v) {
  *v = 0;
  for (int shift = 0; shift < 64 && !in->empty(); shift += 7) {
    const uint8_t b = uint8_t(in->front());
    in->remove_prefix(1);
    *v |= uint64_t(b & 0x7f) << shift;
    if ((b & 0x80) == 0) return true;
  }
  return false;
}

// Consumes a varint length and that many bytes from *in; *s views them.
// False when *in is shorter than the length says.
inline bool ReadString(absl::string_view* in, absl::string_view* s) {
  uint64_t n;
  if (!ReadVarint(in, &n) || n > in->size()) return false;
  *s = in->substr(0, n);
  in->remove_prefix(n);
  return true;
}

}  // namespace batchd

#endif  // BATCHD_BASE_CODING_H_
