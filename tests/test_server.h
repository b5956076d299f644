// Starts a real batchd daemon in a child process for a test: its own socket,
// data root and shared-memory prefix, so tests never collide with each other
// or with a daemon of the machine.
#ifndef BATCHD_TESTS_TEST_SERVER_H_
#define BATCHD_TESTS_TEST_SERVER_H_

#include <dirent.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "base/address.h"
#include "tests/testutil.h"

namespace batchd {
namespace testing {

// Path of the daemon binary (set by CMake; BATCHD_TEST_DAEMON overrides it,
// e.g. to show that a test fails against an older daemon).
inline std::string DaemonPath() {
  const char* other = getenv("BATCHD_TEST_DAEMON");
  return other != nullptr && *other != '\0' ? other : BATCHD_DAEMON_PATH;
}

// The body and headers of GET `path` from 127.0.0.1:`port` (HTTP/1.1,
// "Connection: close"); empty when nothing accepts there.
inline std::string HttpGet(int port, const std::string& path) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    close(fd);
    return "";
  }
  const std::string req = "GET " + path +
                          " HTTP/1.1\r\nHost: localhost\r\nConnection: "
                          "close\r\n\r\n";
  if (write(fd, req.data(), req.size()) < 0) return "";
  std::string resp;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) resp.append(buf, size_t(n));
  close(fd);
  return resp;
}

// A fresh directory for a daemon's socket and files (testutil.h).
inline std::string MakeTempDir() { return testutil::MakeTempDir("test"); }

using ::batchd::UnixSocketAccepts;  // base/address.h

// Names of /dev/shm entries that start with `prefix`.
inline std::vector<std::string> ShmEntries(const std::string& prefix) {
  std::vector<std::string> out;
  DIR* d = opendir("/dev/shm");
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    if (strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0) {
      out.emplace_back(e->d_name);
    }
  }
  closedir(d);
  return out;
}

class TestServer {
 public:
  // `tag` makes the socket and shm prefix unique within the test binary.
  explicit TestServer(const std::string& tag, std::string dir = "")
      : dir_(dir.empty() ? MakeTempDir() : dir) {
    socket_ = dir_ + "/" + tag + ".sock";
    prefix_ = "bdt" + std::to_string(getpid()) + tag;
  }
  // A daemon killed -9 cannot unlink its rings: they go here (the prefix is
  // this server's alone).
  ~TestServer() {
    Stop();
    if (killed_) {
      for (const std::string& name : Segments()) {
        shm_unlink(("/" + name).c_str());
      }
    }
  }

  // Starts the daemon with extra flags and waits until its socket accepts.
  // Returns false if it exited instead.
  bool Start(std::vector<std::string> extra = {}, int threads = 2) {
    std::vector<std::string> args = {DaemonPath(),
                                     "--listen",
                                     "unix://" + socket_,
                                     "--data-root",
                                     dir_,
                                     "--shm-prefix",
                                     prefix_,
                                     "--threads",
                                     std::to_string(threads)};
    args.insert(args.end(), extra.begin(), extra.end());
    pid_ = fork();
    if (pid_ == 0) {
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    for (int i = 0; i < 1000; ++i) {
      if (UnixSocketAccepts(socket_)) return true;
      int status;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return false;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }

  // Runs a daemon (with `extra` flags) that is expected to refuse to
  // start; returns its exit status and its stderr in `err`. Kills it after
  // 10 s if it does start.
  int RunExpectingExit(std::string* err, std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {
        DaemonPath(),   "--listen", "unix://" + socket_, "--data-root", dir_,
        "--shm-prefix", prefix_};
    args.insert(args.end(), extra.begin(), extra.end());
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    int fds[2];
    if (pipe(fds) != 0) return -1;
    const pid_t pid = fork();
    if (pid == 0) {
      dup2(fds[1], 2);
      close(fds[0]);
      execv(argv[0], argv.data());
      _exit(127);
    }
    close(fds[1]);
    int status = -1;
    for (int i = 0; i < 1000; ++i) {
      if (waitpid(pid, &status, WNOHANG) == pid) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
      if (i == 999) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
      }
    }
    char buf[4096];
    ssize_t n;
    while ((n = read(fds[0], buf, sizeof(buf))) > 0) err->append(buf, n);
    close(fds[0]);
    return status;
  }

  // SIGTERM and wait; returns the exit status (or -1).
  int Stop() {
    if (pid_ <= 0) return -1;
    kill(pid_, SIGTERM);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return status;
  }
  // kill -9 and reap.
  void Kill9() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    int status;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    killed_ = true;
  }

  pid_t pid() const { return pid_; }
  const std::string& dir() const { return dir_; }
  std::string address() const { return "unix://" + socket_; }
  const std::string& socket_path() const { return socket_; }
  const std::string& prefix() const { return prefix_; }
  std::vector<std::string> Segments() const {
    return ShmEntries(prefix_ + ".");
  }

 private:
  std::string dir_, socket_, prefix_;
  pid_t pid_ = -1;
  bool killed_ = false;  // a daemon of this server was killed -9
};

}  // namespace testing
}  // namespace batchd

#endif  // BATCHD_TESTS_TEST_SERVER_H_
