// A bounds-checked reader of protobuf's wire format, for the few messages
// batchd parses without libprotobuf (tf.train.Example, a SentencePiece
// ModelProto): varints, fixed32/64 and length-delimited fields. Groups
// (wire types 3 and 4) never occur in those messages and are malformed here.
//
// WireReader is a cursor over bytes it does not own (they must outlive it);
// one thread at a time.
#ifndef BATCHD_BASE_WIRE_READER_H_
#define BATCHD_BASE_WIRE_READER_H_

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "base/coding.h"

namespace batchd {

enum WireType : uint32_t {
  kWireVarint = 0,
  kWireFixed64 = 1,
  kWireLengthDelimited = 2,
  kWireFixed32 = 5,
};

// One field as ReadField reads it.
struct WireField {
  uint32_t number = 0;
  uint32_t wire = 0;       // WireType
  uint64_t value = 0;      // varint and fixed fields (fixed32 in the low bits)
  std::string_view bytes;  // length-delimited fields: the payload
};

class WireReader {
 public:
  WireReader(const char* p, size_t n)
      : begin_(reinterpret_cast<const uint8_t*>(p)), p_(begin_), end_(p_ + n) {}

  bool done() const { return p_ == end_; }
  // Bytes consumed so far, for errors that name an offset.
  size_t offset() const { return size_t(p_ - begin_); }

  // A varint of at most ten bytes whose tenth carries only bit 63.
  bool ReadVarint(uint64_t* v) {
    uint64_t result = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p_ == end_) return false;
      const uint8_t b = *p_++;
      if (shift == 63 && b > 1) return false;
      result |= uint64_t(b & 0x7f) << shift;
      if ((b & 0x80) == 0) {
        *v = result;
        return true;
      }
    }
    return false;
  }

  // Reads a tag; field 0, tags over 32 bits and the group wire types are
  // malformed.
  bool ReadTag(uint32_t* field, uint32_t* wire) {
    uint64_t tag;
    if (!ReadVarint(&tag) || tag > 0xffffffffu) return false;
    *field = uint32_t(tag >> 3);
    *wire = uint32_t(tag & 7);
    return *field != 0 &&
           (*wire == kWireVarint || *wire == kWireFixed64 ||
            *wire == kWireLengthDelimited || *wire == kWireFixed32);
  }

  // A length-delimited payload; *data views it.
  bool ReadBytes(const char** data, size_t* n) {
    uint64_t len;
    if (!ReadVarint(&len) || len > uint64_t(end_ - p_)) return false;
    *data = reinterpret_cast<const char*>(p_);
    *n = size_t(len);
    p_ += len;
    return true;
  }

  bool ReadFixed32(uint32_t* v) {
    if (size_t(end_ - p_) < 4) return false;
    *v = LoadLE32(p_);
    p_ += 4;
    return true;
  }
  bool ReadFixed64(uint64_t* v) {
    if (size_t(end_ - p_) < 8) return false;
    *v = LoadLE64(p_);
    p_ += 8;
    return true;
  }

  // A tag and its value, whatever its wire type.
  bool ReadField(WireField* f) {
    if (!ReadTag(&f->number, &f->wire)) return false;
    switch (f->wire) {
      case kWireVarint:
        return ReadVarint(&f->value);
      case kWireFixed64:
        return ReadFixed64(&f->value);
      case kWireFixed32: {
        uint32_t v;
        if (!ReadFixed32(&v)) return false;
        f->value = v;
        return true;
      }
      case kWireLengthDelimited: {
        const char* d;
        size_t n;
        if (!ReadBytes(&d, &n)) return false;
        f->bytes = std::string_view(d, n);
        return true;
      }
      default:
        return false;
    }
  }

  // Skips the value of a field of wire type `wire`.
  bool Skip(uint32_t wire) {
    uint64_t v;
    uint32_t v32;
    const char* d;
    size_t n;
    switch (wire) {
      case kWireVarint:
        return ReadVarint(&v);
      case kWireFixed64:
        return ReadFixed64(&v);
      case kWireFixed32:
        return ReadFixed32(&v32);
      case kWireLengthDelimited:
        return ReadBytes(&d, &n);
      default:
        return false;
    }
  }

 private:
  const uint8_t* const begin_;
  const uint8_t* p_;
  const uint8_t* const end_;
};

}  // namespace batchd

#endif  // BATCHD_BASE_WIRE_READER_H_
