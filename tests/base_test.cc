// The shared base library: addresses, whole-file reads, byte formatting,
// group lookup, path confinement and protobuf's wire format (the log has
// log_test.cc, threads threads_test.cc).
#include <grp.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "base/address.h"
#include "base/files.h"
#include "base/format.h"
#include "base/groups.h"
#include "base/paths.h"
#include "base/test_hooks.h"
#include "base/wire_reader.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testutil.h"

namespace batchd {
namespace {

using ::testing::HasSubstr;

TEST(ParseAddress, SplitsUnixTcpAndPassesOtherFormsThrough) {
  Address a = ParseAddress("unix:///run/batchd/batchd.sock");
  EXPECT_EQ(a.scheme, Address::Scheme::kUnix);
  EXPECT_EQ(a.socket_path, "/run/batchd/batchd.sock");
  EXPECT_EQ(a.grpc_target, "unix:/run/batchd/batchd.sock");

  a = ParseAddress("unix:/tmp/s");
  EXPECT_EQ(a.scheme, Address::Scheme::kUnix);
  EXPECT_EQ(a.socket_path, "/tmp/s");
  EXPECT_EQ(a.grpc_target, "unix:/tmp/s");

  a = ParseAddress("tcp://127.0.0.1:7070");
  EXPECT_EQ(a.scheme, Address::Scheme::kTcp);
  EXPECT_EQ(a.host_port, "127.0.0.1:7070");
  EXPECT_EQ(a.grpc_target, "127.0.0.1:7070");
  EXPECT_TRUE(a.socket_path.empty());

  a = ParseAddress("localhost:7070");
  EXPECT_EQ(a.scheme, Address::Scheme::kOther);
  EXPECT_EQ(a.grpc_target, "localhost:7070");
}

TEST(ParseAddress, TheDefaultIsTheUnixSocketUnderRun) {
  const Address a = ParseAddress(kDefaultServerAddress);
  EXPECT_EQ(a.scheme, Address::Scheme::kUnix);
  EXPECT_EQ(a.socket_path, "/run/batchd/batchd.sock");
}

TEST(HostOf, IsThePartBeforeTheLastColon) {
  EXPECT_EQ(HostOf("127.0.0.1:80"), "127.0.0.1");
  EXPECT_EQ(HostOf("[::1]:80"), "[::1]");
  EXPECT_EQ(HostOf("noport"), "");
}

TEST(FreeLoopbackPort, GivesAPortThatCanBeBound) {
  const int port = FreeLoopbackPort();
  ASSERT_GT(port, 0);
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  close(fd);
}

TEST(UnixSocketAccepts, IsTrueOnlyWhileSomethingListens) {
  testutil::TempDir dir("base");
  const std::string path = dir.Path("s.sock");
  EXPECT_FALSE(UnixSocketAccepts(path));
  const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  snprintf(a.sun_path, sizeof(a.sun_path), "%s", path.c_str());
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  ASSERT_EQ(listen(fd, 1), 0);
  EXPECT_TRUE(UnixSocketAccepts(path));
  close(fd);
  EXPECT_FALSE(UnixSocketAccepts(path)) << "nothing accepts after close";
}

TEST(ReadFileToString, ReadsBinaryBytesWhole) {
  char path[] = "/tmp/batchd-base-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  std::string bytes(200000, 'x');
  bytes[7] = '\0';
  bytes[100] = '\n';
  ASSERT_EQ(write(fd, bytes.data(), bytes.size()), ssize_t(bytes.size()));
  close(fd);
  absl::StatusOr<std::string> read = ReadFileToString(path);
  unlink(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, bytes);
}

TEST(ReadFileToString, AMissingFileIsNotFoundNamingIt) {
  absl::StatusOr<std::string> read =
      ReadFileToString("/nonexistent/batchd-base-test");
  ASSERT_FALSE(read.ok());
  EXPECT_TRUE(absl::IsNotFound(read.status())) << read.status();
  EXPECT_THAT(std::string(read.status().message()),
              HasSubstr("/nonexistent/batchd-base-test"));
}

TEST(HumanBytes, BytesAreWholeAndLargerUnitsHaveOneDecimal) {
  EXPECT_EQ(HumanBytes(0), "0 B");
  EXPECT_EQ(HumanBytes(1023), "1023 B");
  EXPECT_EQ(HumanBytes(1024), "1.0 KiB");
  EXPECT_EQ(HumanBytes(1536), "1.5 KiB");
  EXPECT_EQ(HumanBytes(128.0 * 224 * 224 * 3), "18.4 MiB");
  EXPECT_EQ(HumanBytes(3.0 * (1ull << 30)), "3.0 GiB");
  EXPECT_EQ(HumanBytes(5.0 * (1ull << 40)), "5.0 TiB");
  // TiB is the largest unit.
  EXPECT_EQ(HumanBytes(double(1ull << 50)), "1024.0 TiB");
}

// Issue 27: names from the data tree and spec options reached the
// operator's terminal and the log raw (ESC, OSC 52, CR, LF).
TEST(Printable, EscapesWhatATerminalOrALogShipperWouldActOn) {
  EXPECT_EQ(Printable("train/shard-0 ok"), "train/shard-0 ok");
  EXPECT_EQ(Printable("caf\xc3\xa9 \xe6\x97\xa5"), "caf\xc3\xa9 \xe6\x97\xa5")
      << "printable UTF-8 is kept";
  EXPECT_EQ(Printable("a\x1b[2Jb"), "a\\x1b[2Jb");
  EXPECT_EQ(Printable("\x1b]52;c;aGk=\x07"), "\\x1b]52;c;aGk=\\x07");
  EXPECT_EQ(Printable("1\r\n2\t\v\f"), "1\\r\\n2\\t\\x0b\\x0c");
  EXPECT_EQ(Printable(std::string("a\0b", 3)), "a\\x00b");
  EXPECT_EQ(Printable("\x7f"), "\\x7f");
  EXPECT_EQ(Printable("back\\slash"), "back\\\\slash");
  // Invalid UTF-8: a stray continuation byte, a cut sequence, an overlong
  // '/', a surrogate.
  EXPECT_EQ(Printable("\x80x\xe6\x97"), "\\x80x\\xe6\\x97");
  EXPECT_EQ(Printable("\xc0\xaf"), "\\xc0\\xaf");
  EXPECT_EQ(Printable("\xed\xa0\x80"), "\\xed\\xa0\\x80");
  // C1 CSI, a right-to-left override, a line separator, a BOM.
  EXPECT_EQ(Printable("\xc2\x9b"
                      "31m"),
            "\\u009b31m");
  EXPECT_EQ(Printable("txt.\xe2\x80\xae"
                      "cod.exe"),
            "txt.\\u202ecod.exe");
  EXPECT_EQ(Printable("a\xe2\x80\xa8"
                      "b\xef\xbb\xbf"),
            "a\\u2028b\\ufeff");
}

TEST(ResolveGroup, TakesGidsAsTheyAreAndLooksUpNames) {
  EXPECT_EQ(*ResolveGroup("shm-group", "12345"), gid_t(12345));
  const group* root = getgrgid(0);
  ASSERT_NE(root, nullptr);
  absl::StatusOr<gid_t> gid = ResolveGroup("shm-group", root->gr_name);
  ASSERT_TRUE(gid.ok()) << gid.status();
  EXPECT_EQ(*gid, gid_t(0));
}

TEST(ResolveGroup, AnUnknownNameIsRefusedNamingTheFlag) {
  absl::StatusOr<gid_t> gid =
      ResolveGroup("socket-group", "no-such-group-batchd");
  ASSERT_FALSE(gid.ok());
  EXPECT_TRUE(absl::IsInvalidArgument(gid.status()));
  EXPECT_EQ(gid.status().message(),
            "--socket-group: no group named 'no-such-group-batchd'");
}

TEST(PathIsWithin, ComparesWholeComponents) {
  EXPECT_TRUE(PathIsWithin("/data", "/data"));
  EXPECT_TRUE(PathIsWithin("/data/train/a.JPEG", "/data"));
  EXPECT_FALSE(PathIsWithin("/data2", "/data"));
  EXPECT_FALSE(PathIsWithin("/dat", "/data"));
  EXPECT_FALSE(PathIsWithin("/etc/passwd", "/data"));
  EXPECT_FALSE(PathIsWithin("", "/data"));
}

TEST(PathIsWithin, EveryAbsolutePathIsWithinTheRootDirectory) {
  EXPECT_TRUE(PathIsWithin("/", "/"));
  EXPECT_TRUE(PathIsWithin("/etc/passwd", "/"));
  EXPECT_FALSE(PathIsWithin("relative", "/"));
  EXPECT_FALSE(PathIsWithin("", "/"));
}

// The one reader of protobuf's wire format: what the SentencePiece model
// parser and tf.train.Example read field by field.
TEST(WireReader, ReadFieldReadsEachWireTypeAndRefusesWhatIsCutShort) {
  // 1: varint 150; 2: fixed32 0x01020304; 3: bytes "hi"; 4: fixed64 7.
  const std::string msg(
      "\x08\x96\x01"
      "\x15\x04\x03\x02\x01"
      "\x1a\x02hi"
      "\x21\x07\x00\x00\x00\x00\x00\x00\x00",
      21);
  WireReader r(msg.data(), msg.size());
  WireField f;
  ASSERT_TRUE(r.ReadField(&f));
  EXPECT_EQ(f.number, 1u);
  EXPECT_EQ(f.wire, uint32_t(kWireVarint));
  EXPECT_EQ(f.value, 150u);
  ASSERT_TRUE(r.ReadField(&f));
  EXPECT_EQ(f.number, 2u);
  EXPECT_EQ(f.wire, uint32_t(kWireFixed32));
  EXPECT_EQ(f.value, 0x01020304u);
  ASSERT_TRUE(r.ReadField(&f));
  EXPECT_EQ(f.number, 3u);
  EXPECT_EQ(f.bytes, "hi");
  ASSERT_TRUE(r.ReadField(&f));
  EXPECT_EQ(f.number, 4u);
  EXPECT_EQ(f.value, 7u);
  EXPECT_TRUE(r.done());
  // Every prefix that cuts a field short is refused.
  for (size_t n : {size_t(2), size_t(5), size_t(11), size_t(20)}) {
    WireReader cut(msg.data(), n);
    bool ok = true;
    while (ok && !cut.done()) ok = cut.ReadField(&f);
    EXPECT_FALSE(ok) << n;
  }
  // Field 0 and the group wire types are malformed.
  for (const std::string bad :
       {std::string("\x00\x01", 2), std::string("\x0b")}) {
    WireReader g(bad.data(), bad.size());
    EXPECT_FALSE(g.ReadField(&f));
  }
}

// A hook variable left in a production environment changes nothing: it
// is read only with BATCHD_TEST_HOOKS=1.
TEST(TestHook, IsReadOnlyWithTestHooksOn) {
  setenv("BATCHD_TEST_SOME_HOOK", "7", 1);
  unsetenv("BATCHD_TEST_HOOKS");
  EXPECT_EQ(TestHook("BATCHD_TEST_SOME_HOOK"), nullptr);
  setenv("BATCHD_TEST_HOOKS", "0", 1);
  EXPECT_EQ(TestHook("BATCHD_TEST_SOME_HOOK"), nullptr);
  setenv("BATCHD_TEST_HOOKS", "1", 1);
  ASSERT_NE(TestHook("BATCHD_TEST_SOME_HOOK"), nullptr);
  EXPECT_STREQ(TestHook("BATCHD_TEST_SOME_HOOK"), "7");
  unsetenv("BATCHD_TEST_HOOKS");
  unsetenv("BATCHD_TEST_SOME_HOOK");
}

}  // namespace
}  // namespace batchd
