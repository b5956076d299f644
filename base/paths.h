// Path confinement: whether a resolved path lies in a directory tree. The
// daemon confines data paths to --data-root and the data readers confine
// every open to the data root with it.
//
// Thread safety: pure functions.
#ifndef BATCHD_BASE_PATHS_H_
#define BATCHD_BASE_PATHS_H_

#include <string>

namespace batchd {

// True when `path` is `root` or lies beneath it, comparing whole components
// ("/data2" is not within "/data"). Both must be absolute and normalised
// (realpath's output, no trailing '/' except the root "/" itself); nothing
// is resolved here.
bool PathIsWithin(const std::string& path, const std::string& root);

}  // namespace batchd

#endif  // BATCHD_BASE_PATHS_H_
