// Test hooks: environment variables that bend the daemon's behaviour for a
// test (a claimed protocol version, a slowed length pass, a fixed crop).
// Each is read only through TestHook, which ignores it unless the process
// runs with BATCHD_TEST_HOOKS=1, so that a variable left in a production
// environment changes nothing.
//
// Thread safety: reads the environment; call it where nothing sets it.
#ifndef BATCHD_BASE_TEST_HOOKS_H_
#define BATCHD_BASE_TEST_HOOKS_H_

#include <cstdlib>
#include <cstring>

namespace batchd {

// Whether the process runs with BATCHD_TEST_HOOKS=1.
inline bool TestHooksEnabled() {
  const char* hooks = getenv("BATCHD_TEST_HOOKS");
  return hooks != nullptr && strcmp(hooks, "1") == 0;
}

// The value of the hook variable `name`; null when it is unset or test
// hooks are off.
inline const char* TestHook(const char* name) {
  return TestHooksEnabled() ? getenv(name) : nullptr;
}

}  // namespace batchd

#endif  // BATCHD_BASE_TEST_HOOKS_H_
