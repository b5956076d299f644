// libFuzzer target for the daemon's TOML config file (LoadConfigFile,
// toml++ underneath): any file gives settings or an error naming the file,
// never a crash. Settings that load must survive `batchd --print-config`:
// ConfigToToml's output loads back to the same settings.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz/fuzz_util.h"
#include "server/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path =
      batchd::fuzz::WriteScratchFile("batchd.toml", data, size);
  batchd::DaemonConfig config;
  if (!batchd::LoadConfigFile(path, &config).ok()) return 0;
  const std::string printed = batchd::ConfigToToml(config);
  const std::string again_path = batchd::fuzz::WriteScratchFile(
      "printed.toml", reinterpret_cast<const uint8_t*>(printed.data()),
      printed.size());
  batchd::DaemonConfig again;
  if (absl::Status s = batchd::LoadConfigFile(again_path, &again); !s.ok()) {
    batchd::fuzz::Fail("--print-config wrote a file that does not load: " +
                       std::string(s.message()) + "\n" + printed);
  }
  if (batchd::ConfigToToml(again) != printed) {
    batchd::fuzz::Fail("settings changed through --print-config:\n" + printed +
                       "---\n" + batchd::ConfigToToml(again));
  }
  return 0;
}
