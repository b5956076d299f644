// What ring.cc and ring_reader.cc share and nobody else needs: the owner of
// a segment's mapping, the segment name as Boost.Interprocess takes it, and
// the POSIX ACL that gives a ring to its client's uid alone.
#ifndef BATCHD_RING_RING_INTERNAL_H_
#define BATCHD_RING_RING_INTERNAL_H_

#include <boost/interprocess/mapped_region.hpp>
#include <cstdint>
#include <string>
#include <utility>

namespace batchd {

class Mapping {
 public:
  explicit Mapping(boost::interprocess::mapped_region region)
      : region_(std::move(region)) {}
  uint8_t* base() const { return static_cast<uint8_t*>(region_.get_address()); }
  size_t size() const { return region_.get_size(); }

 private:
  boost::interprocess::mapped_region region_;
};

// "/batchd.1000.job.0.x" -> "batchd.1000.job.0.x" (shm_open's name).
inline std::string BareSegmentName(const std::string& name) {
  return name.empty() || name[0] != '/' ? name : name.substr(1);
}

// A POSIX access ACL as the kernel stores it in the xattr
// "system.posix_acl_access" (linux/posix_acl_xattr.h): a little-endian u32
// version, then entries of (u16 tag, u16 permissions rwx = 4|2|1, u32 id).
inline constexpr char kAclXattr[] = "system.posix_acl_access";
inline constexpr uint32_t kAclXattrVersion = 2;
inline constexpr uint16_t kAclUserObj = 0x01;
inline constexpr uint16_t kAclUser = 0x02;
inline constexpr uint16_t kAclGroupObj = 0x04;
inline constexpr uint16_t kAclGroup = 0x08;
inline constexpr uint16_t kAclMask = 0x10;
inline constexpr uint16_t kAclOther = 0x20;
inline constexpr uint16_t kAclWrite = 0x02;
inline constexpr uint32_t kAclUndefinedId = 0xFFFFFFFFu;

}  // namespace batchd

#endif  // BATCHD_RING_RING_INTERNAL_H_
