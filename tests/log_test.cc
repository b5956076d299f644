// The daemon's log lines: key=value fields, quoting, the level threshold,
// and repeated warnings folded.
#include "base/log.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace batchd {
namespace {

// Runs `f` with stderr sent to a file; returns the lines written.
template <typename F>
std::vector<std::string> CaptureStderr(F f) {
  char path[] = "/tmp/batchd-log-XXXXXX";
  const int fd = mkstemp(path);
  fflush(stderr);
  const int saved = dup(2);
  dup2(fd, 2);
  f();
  fflush(stderr);
  dup2(saved, 2);
  close(saved);
  close(fd);
  std::ifstream in(path);
  std::vector<std::string> lines;
  std::string line;
  while (std::getline(in, line)) lines.push_back(line);
  unlink(path);
  return lines;
}

// The one line `f` logs at level info; a test failure (and "") when it
// logs another number of lines.
template <typename F>
std::string OneLineLogged(F f) {
  SetLogLevel("info");
  const std::vector<std::string> lines = CaptureStderr(f);
  EXPECT_EQ(lines.size(), 1u);
  return lines.size() == 1 ? lines[0] : "";
}

TEST(LogTest, WritesKeyValueFieldsWithQuoting) {
  const std::string line = OneLineLogged([] {
    Log(LogLevel::kInfo, "ready", {{"pid", "12"}, {"msg", "two words"}});
  });
  EXPECT_EQ(line.rfind("batchd: ts=", 0), 0u) << line;
  EXPECT_NE(line.find(" level=info event=ready pid=12 msg=\"two words\""),
            std::string::npos)
      << line;
}

TEST(LogTest, RepeatedWarningsAreFoldedOthersPass) {
  SetLogLevel("info");
  auto lines = CaptureStderr([] {
    for (int i = 0; i < 5; ++i) {
      Log(LogLevel::kWarn, "decode_error", {{"file", "a.JPEG"}});
    }
    Log(LogLevel::kWarn, "decode_error", {{"file", "b.JPEG"}});
    for (int i = 0; i < 3; ++i) Log(LogLevel::kInfo, "tick");
  });
  int a = 0, b = 0, tick = 0;
  for (const std::string& l : lines) {
    a += l.find("file=a.JPEG") != std::string::npos;
    b += l.find("file=b.JPEG") != std::string::npos;
    tick += l.find("event=tick") != std::string::npos;
  }
  EXPECT_EQ(a, 1) << "five identical warnings within 10 s make one line";
  EXPECT_EQ(b, 1) << "another message is not folded into the first";
  EXPECT_EQ(tick, 3) << "info lines are never folded";
}

TEST(LogTest, KeyedWarningsAreFoldedPerKeyWhateverTheirFields) {
  SetLogLevel("info");
  auto lines = CaptureStderr([] {
    for (int i = 0; i < 5; ++i) {
      LogKeyed(LogLevel::kWarn, "stream-1", "decode_error",
               {{"file", std::to_string(i) + ".JPEG"}});
    }
    LogKeyed(LogLevel::kWarn, "stream-2", "decode_error", {{"file", "x.JPEG"}});
    // A plain Log of the same event and fields is a key of its own.
    Log(LogLevel::kWarn, "decode_error", {{"file", "1.JPEG"}});
    for (int i = 0; i < 3; ++i) {
      LogKeyed(LogLevel::kInfo, "stream-1", "indexing", {{"n", "1"}});
    }
  });
  int first = 0, other_files = 0, second = 0, indexing = 0;
  for (const std::string& l : lines) {
    first += l.find("file=0.JPEG") != std::string::npos;
    other_files += l.find("file=1.JPEG") != std::string::npos;
    second += l.find("file=x.JPEG") != std::string::npos;
    indexing += l.find("event=indexing") != std::string::npos;
    EXPECT_NE(l.find(" level="), std::string::npos) << l;
  }
  EXPECT_EQ(first, 1) << "the first warning of a key is written";
  EXPECT_EQ(other_files, 1)
      << "later ones of the same key are folded although their files differ; "
         "only the plain Log line names 1.JPEG";
  EXPECT_EQ(second, 1) << "another key is not folded into the first";
  EXPECT_EQ(indexing, 3) << "info lines are never folded";
}

// Issue 27: ESC, BEL and CR in a value (a path under the data root) were
// written raw: a terminal tailing the log acted on them, and shippers that
// split at CR made two events of one.
TEST(LogTest, ValuesAreEscapedSoThatALineIsOneEventAndInert) {
  const std::string line = OneLineLogged([] {
    Log(LogLevel::kInfo, "decode_error",
        {{"file", "a\x1b]52;c;eA==\x07\rlevel=error event=forged\n.JPEG"},
         {"msg", "say \"hi\" \\ \xff"}});
  });
  for (char c : line) {
    EXPECT_TRUE(uint8_t(c) >= 0x20 && c != 0x7f) << int(uint8_t(c));
  }
  EXPECT_NE(line.find(" file=\"a\\x1b]52;c;eA==\\x07\\rlevel=error "
                      "event=forged\\n.JPEG\""),
            std::string::npos)
      << line;
  EXPECT_NE(line.find(" msg=\"say \\\"hi\\\" \\\\ \\xff\""), std::string::npos)
      << line;
}

TEST(LogTest, LevelThresholdDropsLowerLevels) {
  SetLogLevel("warn");
  auto lines = CaptureStderr([] {
    Log(LogLevel::kInfo, "hidden");
    Log(LogLevel::kError, "shown_error", {{"k", "v"}});
  });
  SetLogLevel("info");
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_NE(lines[0].find("level=error event=shown_error k=v"),
            std::string::npos);
}

}  // namespace
}  // namespace batchd
