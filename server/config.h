// The daemon's settings: one table of flags, each also a key of the TOML
// config file (the flag's name without dashes: `data-root = "/data"`).
// Defaults, then the file named by --config, then the command line.
#ifndef BATCHD_SERVER_CONFIG_H_
#define BATCHD_SERVER_CONFIG_H_

#include <sys/types.h>

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "base/address.h"
#include "server/core_options.h"

namespace batchd {

// The cache directory used when --cache-dir is not given: systemd's
// $CACHE_DIRECTORY (CacheDirectory=) when set; /var/cache/batchd for root;
// else $XDG_CACHE_HOME/batchd or $HOME/.cache/batchd; "" (no cache) when
// none of these can be named.
std::string DefaultCacheDir();

struct DaemonConfig {
  CoreOptions core;
  // --cache-dir: indexes and token lengths persisted across restarts
  // (storage/cache_dir.h); "" turns the cache off.
  std::string cache_dir = DefaultCacheDir();
  // Whether cache_dir was given (flag or file): an unusable cache directory
  // is then an error at start; the default one only a warning.
  bool cache_dir_given = false;
  std::string listen = kDefaultServerAddress;
  std::string shm_group;       // name or gid; resolved into core.shm_group
  std::string admin_group;     // name or gid; resolved into core.admin_gid
  unsigned socket_mode = 0660;
  std::string socket_group;
  bool allow_remote = false;
  std::string tls_cert, tls_key, tls_client_ca;
  std::string metrics_listen;  // host:port; empty = no metrics endpoint
  std::string log_level = "info";
  // Connections to the unix socket (server/peer.h): at once over all
  // users (0: auto, from the file-descriptor limit), of one uid, and how
  // long one may send nothing (0: no limit).
  int max_connections = 0;
  int max_connections_per_uid = 128;
  double connection_idle_seconds = 30;
  // --allow-shared-socket-dir: a sticky world-writable socket directory
  // (/tmp) is accepted; refused otherwise.
  bool allow_shared_socket_dir = false;
};

struct ParsedArgs {
  bool help = false;
  bool version = false;
  bool print_config = false;
};

// Applies --config FILE (wherever it stands) and then every flag. Errors
// name the flag or the file, line and key.
absl::Status ParseArgs(int argc, char** argv, DaemonConfig* config,
                       ParsedArgs* parsed);
absl::Status LoadConfigFile(const std::string& path, DaemonConfig* config);
// The merged settings as a config file.
std::string ConfigToToml(const DaemonConfig& config);
std::string Usage();

// A TCP listen address, "HOST:PORT" or "[IPV6]:PORT", checked and resolved
// into the numeric addresses to bind ("IP:PORT", "[IPV6]:PORT"), so that
// what is bound is what was checked. Refuses anything but one host and a
// decimal port: civetweb's lists ("127.0.0.1:1,2" binds 0.0.0.0:2),
// "+PORT", "PORTs" / "PORTr", a bare port or empty host (every interface).
// Unless allow_remote, every address the host resolves to must be loopback
// (127.0.0.0/8, ::1, ::ffff:127.0.0.0/104): a name that merely starts with
// "127." is resolved, not trusted. `flag` names the flag in errors.
absl::StatusOr<std::vector<std::string>> ResolveListenAddress(
    const std::string& flag, const std::string& host_port, bool allow_remote);

}  // namespace batchd

#endif  // BATCHD_SERVER_CONFIG_H_
