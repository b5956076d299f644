// Path confinement; see paths.h.
#include "base/paths.h"

namespace batchd {

bool PathIsWithin(const std::string& path, const std::string& root) {
  if (root == "/") return !path.empty() && path[0] == '/';
  return path == root ||
         (path.size() > root.size() &&
          path.compare(0, root.size(), root) == 0 && path[root.size()] == '/');
}

}  // namespace batchd
