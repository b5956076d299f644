// What ring.cc and ring_reader.cc share and nobody else needs: the owner of
// a segment's mapping, and the segment name as Boost.Interprocess takes it.
#ifndef BATCHD_CLIENT_RING_INTERNAL_H_
#define BATCHD_CLIENT_RING_INTERNAL_H_

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

}  // namespace batchd

#endif  // BATCHD_CLIENT_RING_INTERNAL_H_
