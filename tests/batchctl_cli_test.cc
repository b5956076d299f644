// batchctl's shared parsing: addresses, numbers, KEY=VALUE, the connection
// flags and the environment, and close's STREAM (names that start with '-').
#include "tools/batchctl/cli.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <fstream>

#include "tests/batchctl_test_argv.h"
#include "tests/testutil.h"
#include "tools/batchctl/close.h"

namespace batchd::batchctl {
namespace {

using ::testing::HasSubstr;

// Clears batchctl's environment for one test and restores nothing: the
// tests set what they need.
class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* v : {"BATCHD_SERVER", "BATCHD_TLS_CA", "BATCHD_TLS_CERT",
                          "BATCHD_TLS_KEY"}) {
      unsetenv(v);
    }
  }
};

absl::StatusOr<Connection> ParseConnection(Argv args,
                                           double default_timeout = 10) {
  std::unique_ptr<CLI::App> app = NewApp("test");
  ConnectionFlags flags(*app, default_timeout);
  if (absl::Status s = ParseArgs(*app, args.argc(), args.argv()); !s.ok()) {
    return s;
  }
  return flags.Resolve();
}

TEST_F(CliTest, GrpcTargetTranslatesUnixAndTcpAddresses) {
  EXPECT_EQ(*GrpcTarget("unix:///run/batchd/batchd.sock"),
            "unix:/run/batchd/batchd.sock");
  EXPECT_EQ(*GrpcTarget("tcp://127.0.0.1:7070"), "127.0.0.1:7070");
  EXPECT_EQ(*GrpcTarget("tcp://[::1]:7070"), "[::1]:7070");
  // gRPC's own forms pass through.
  EXPECT_EQ(*GrpcTarget("unix:/tmp/s"), "unix:/tmp/s");
  EXPECT_EQ(*GrpcTarget("localhost:7070"), "localhost:7070");
}

TEST_F(CliTest, GrpcTargetRefusesWhatItCannotReach) {
  EXPECT_THAT(GrpcTarget("unix://relative.sock").status().message(),
              HasSubstr("absolute path"));
  for (const char* bad : {"tcp://host", "tcp://host:0", "tcp://host:65536",
                          "tcp://:80", "tcp://host:http"}) {
    EXPECT_THAT(GrpcTarget(bad).status().message(), HasSubstr("host:port"))
        << bad;
  }
  EXPECT_FALSE(GrpcTarget("/run/batchd/batchd.sock").ok());
  EXPECT_FALSE(GrpcTarget("http://host:80").ok());
}

TEST_F(CliTest, UnsignedNumbersRefuseSignsAndWordsNamingTheFlag) {
  uint64_t n = 7;
  EXPECT_TRUE(ParseNumber("--steps", "12", &n).ok());
  EXPECT_EQ(n, 12u);
  for (const char* bad : {"-1", "", "ten", "1.5", "12x"}) {
    absl::Status s = ParseNumber("--steps", bad, &n);
    EXPECT_EQ(s.message(),
              absl::StrCat("--steps wants a number, not '", bad, "'"))
        << bad;
  }
  uint32_t slots = 0;
  EXPECT_FALSE(ParseNumber("--slots", "4294967296", &slots).ok());
  double d = 0;
  EXPECT_TRUE(ParseNumber("--timeout", "0.25", &d).ok());
  EXPECT_EQ(d, 0.25);
  EXPECT_FALSE(ParseNumber("--timeout", "soon", &d).ok());
}

TEST_F(CliTest, KeyValuesSplitAtTheFirstEqualsAndTheLastKeyWins) {
  absl::StatusOr<std::map<std::string, std::string>> kv =
      ParseKeyValues({"a=1", "url=x=y", "a=2", "empty="});
  ASSERT_TRUE(kv.ok()) << kv.status();
  EXPECT_EQ(*kv, (std::map<std::string, std::string>{
                     {"a", "2"}, {"url", "x=y"}, {"empty", ""}}));
  EXPECT_THAT(ParseKeyValues({"x"}).status().message(),
              HasSubstr("--option wants KEY=VALUE, not 'x'"));
  EXPECT_FALSE(ParseKeyValues({"=1"}).ok());
}

TEST_F(CliTest, HelpIsAskedOnlyBeforeDoubleDash) {
  Argv a{"close", "x", "--help"};
  EXPECT_TRUE(WantsHelp(a.argc(), a.argv()));
  Argv b{"close", "-h"};
  EXPECT_TRUE(WantsHelp(b.argc(), b.argv()));
  Argv c{"close", "--", "--help"};  // a stream named --help
  EXPECT_FALSE(WantsHelp(c.argc(), c.argv()));
}

TEST_F(CliTest, ServerComesFromTheFlagThenTheEnvironmentThenTheDefault) {
  EXPECT_EQ(ParseConnection({"t"})->address, kDefaultServerAddress);
  EXPECT_EQ(ParseConnection({"t"})->target, "unix:/run/batchd/batchd.sock");
  setenv("BATCHD_SERVER", "", 1);  // empty counts as unset
  EXPECT_EQ(ParseConnection({"t"})->address, kDefaultServerAddress);
  setenv("BATCHD_SERVER", "tcp://127.0.0.1:9", 1);
  EXPECT_EQ(ParseConnection({"t"})->target, "127.0.0.1:9");
  EXPECT_EQ(ParseConnection({"t", "--server", "unix:///a"})->target, "unix:/a");
  EXPECT_EQ(ParseConnection({"t", "--server=unix:///b"})->target, "unix:/b");
  // A repeated flag keeps its last value, as before CLI11.
  EXPECT_EQ(
      ParseConnection({"t", "--server", "unix:///a", "--server", "unix:///c"})
          ->target,
      "unix:/c");
}

TEST_F(CliTest, TimeoutHasTheCommandsDefaultAndMustBePositive) {
  EXPECT_EQ(ParseConnection({"t"}, 30)->timeout, 30);
  EXPECT_EQ(ParseConnection({"t", "--timeout", "2.5"})->timeout, 2.5);
  EXPECT_THAT(ParseConnection({"t", "--timeout", "0"}).status().message(),
              HasSubstr("--timeout must be positive"));
  EXPECT_THAT(ParseConnection({"t", "--timeout=-1"}).status().message(),
              HasSubstr("--timeout must be positive"));
  EXPECT_THAT(ParseConnection({"t", "--timeout", "x"}).status().message(),
              HasSubstr("--timeout wants a number, not 'x'"));
}

TEST_F(CliTest, UnknownFlagsMissingValuesAndStrayArgumentsAreErrors) {
  EXPECT_FALSE(ParseConnection({"t", "--frobnicate"}).ok());
  EXPECT_FALSE(ParseConnection({"t", "--server"}).ok());
  EXPECT_FALSE(ParseConnection({"t", "stray"}).ok());
  EXPECT_FALSE(ParseConnection({"t", "-x"}).ok());
}

TEST_F(CliTest, TlsFlagsAreRefusedForAUnixSocketButTheEnvironmentIsIgnored) {
  EXPECT_THAT(
      ParseConnection({"t", "--tls-ca", "/nonexistent"}).status().message(),
      HasSubstr("are for tcp:// addresses"));
  setenv("BATCHD_TLS_CA", "/nonexistent", 1);
  absl::StatusOr<Connection> c = ParseConnection({"t"});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->credentials, nullptr);
}

TEST_F(CliTest, TlsOverTcpNeedsTheRootsAndACompleteClientPair) {
  const std::string tcp = "tcp://127.0.0.1:7070";
  EXPECT_EQ(ParseConnection({"t", "--server", tcp})->credentials, nullptr);
  EXPECT_THAT(ParseConnection({"t", "--server", tcp, "--tls-cert", "c.pem"})
                  .status()
                  .message(),
              HasSubstr("need --tls-ca"));
  EXPECT_THAT(
      ParseConnection({"t", "--server", tcp, "--tls-ca", "/nonexistent/ca.pem"})
          .status()
          .message(),
      HasSubstr("--tls-ca /nonexistent/ca.pem: No such file"));

  testutil::TempDir dir("batchctl-cli");
  const std::string ca = dir.Path("ca.pem");
  testutil::WriteFile(ca, "-----BEGIN CERTIFICATE-----\n");
  EXPECT_THAT(
      ParseConnection({"t", "--server", tcp, "--tls-ca", ca, "--tls-cert", ca})
          .status()
          .message(),
      HasSubstr("go together"));
  absl::StatusOr<Connection> c =
      ParseConnection({"t", "--server", tcp, "--tls-ca", ca});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_NE(c->credentials, nullptr);
  // The environment supplies what the flags do not.
  setenv("BATCHD_TLS_CA", ca.c_str(), 1);
  c = ParseConnection({"t", "--server", tcp});
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_NE(c->credentials, nullptr);
}

absl::StatusOr<std::string> CloseName(Argv args) {
  absl::StatusOr<CloseArgs> a = ParseCloseArgs(args.argc(), args.argv());
  if (!a.ok()) return a.status();
  return a->stream;
}

TEST_F(CliTest, CloseTakesOneStreamAnywhereAmongTheFlags) {
  EXPECT_EQ(*CloseName({"close", "train"}), "train");
  EXPECT_EQ(*CloseName({"close", "train", "--server", "unix:///s"}), "train");
  EXPECT_EQ(*CloseName({"close", "--timeout", "3", "train"}), "train");
  EXPECT_THAT(CloseName({"close"}).status().message(),
              HasSubstr("which stream?"));
  EXPECT_THAT(CloseName({"close", "a", "b"}).status().message(),
              HasSubstr("unexpected argument 'b'"));
  EXPECT_THAT(CloseName({"close", "a", "--all"}).status().message(),
              HasSubstr("unknown flag '--all'"));
}

TEST_F(CliTest, CloseTakesNamesThatStartWithADashAfterDoubleDash) {
  EXPECT_EQ(*CloseName({"close", "--", "-name"}), "-name");
  EXPECT_EQ(*CloseName({"close", "--", "--name"}), "--name");
  EXPECT_EQ(*CloseName({"close", "--server", "unix:///s", "--", "--server"}),
            "--server");
  EXPECT_EQ(*CloseName({"close", "--", "--help"}), "--help");
  // A single dash never starts a batchctl flag: as before, the name.
  EXPECT_EQ(*CloseName({"close", "-name"}), "-name");
  EXPECT_EQ(*CloseName({"close", "-name", "--server", "unix:///s"}), "-name");
  EXPECT_FALSE(CloseName({"close", "-a", "-b"}).ok());
  EXPECT_FALSE(CloseName({"close", "--", "a", "b"}).ok());
  // Without "--", a double dash is a flag.
  EXPECT_FALSE(CloseName({"close", "--name"}).ok());
}

TEST_F(CliTest, CloseTakesAnOwnerUidOrTcp) {
  Argv plain{"close", "train"};
  absl::StatusOr<CloseArgs> a = ParseCloseArgs(plain.argc(), plain.argv());
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_FALSE(a->owner_uid.has_value());
  Argv owner{"close", "train", "--owner", "1000", "--json"};
  a = ParseCloseArgs(owner.argc(), owner.argv());
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->owner_uid, 1000u);
  EXPECT_TRUE(a->json);
  Argv tcp{"close", "--owner=tcp", "train"};
  a = ParseCloseArgs(tcp.argc(), tcp.argv());
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->owner_uid, kAnonymousOwner);
  for (const char* bad : {"-1", "root", "4294967296", ""}) {
    Argv b{"close", "train", "--owner", bad};
    EXPECT_THAT(ParseCloseArgs(b.argc(), b.argv()).status().message(),
                HasSubstr("--owner wants a uid or tcp"))
        << bad;
  }
}

std::vector<std::string> Reordered(Argv args) {
  absl::StatusOr<std::vector<std::string>> r =
      CommandFirst(args.argc(), args.argv());
  EXPECT_TRUE(r.ok()) << r.status();
  return r.value_or(std::vector<std::string>{});
}

TEST_F(CliTest, GlobalFlagsBeforeTheCommandMoveRightAfterIt) {
  using V = std::vector<std::string>;
  EXPECT_EQ(Reordered({"batchctl", "status", "--json"}),
            (V{"batchctl", "status", "--json"}));
  EXPECT_EQ(
      Reordered(
          {"batchctl", "--server", "unix:///s", "--json", "status", "--watch"}),
      (V{"batchctl", "status", "--server", "unix:///s", "--json", "--watch"}));
  EXPECT_EQ(
      Reordered({"batchctl", "--timeout=3", "--tls-ca", "ca.pem", "--tls-cert",
                 "c.pem", "--tls-key", "k.pem", "close", "--", "--name"}),
      (V{"batchctl", "close", "--timeout=3", "--tls-ca", "ca.pem", "--tls-cert",
         "c.pem", "--tls-key", "k.pem", "--", "--name"}));
  // A value that looks like a command or a flag is the flag's value.
  EXPECT_EQ(Reordered({"batchctl", "--server", "status", "version"}),
            (V{"batchctl", "version", "--server", "status"}));
  // Help asks no daemon: the global flags before it go.
  EXPECT_EQ(Reordered({"batchctl", "--server", "unix:///s", "--help"}),
            (V{"batchctl", "--help"}));
  EXPECT_EQ(Reordered({"batchctl", "--json", "help", "status"}),
            (V{"batchctl", "help", "status"}));
  EXPECT_EQ(Reordered({"batchctl", "--timeout", "1", "--version"}),
            (V{"batchctl", "--version"}));
}

TEST_F(CliTest, OnlyGlobalFlagsMayComeBeforeTheCommand) {
  auto error = [](Argv args) {
    return std::string(
        CommandFirst(args.argc(), args.argv()).status().message());
  };
  EXPECT_THAT(error({"batchctl", "--watch", "status"}),
              HasSubstr("'--watch' before the command is not a global flag"));
  EXPECT_THAT(error({"batchctl", "--owner=1", "close", "x"}),
              HasSubstr("'--owner' before the command"));
  EXPECT_THAT(error({"batchctl", "-x", "status"}), HasSubstr("'-x'"));
  EXPECT_THAT(error({"batchctl", "--server"}),
              HasSubstr("--server needs a value"));
  EXPECT_THAT(error({"batchctl", "--json"}), HasSubstr("no command given"));
  for (const char* flag : {"--server", "--timeout", "--tls-ca", "--tls-cert",
                           "--tls-key", "--json", "--server=x"}) {
    EXPECT_TRUE(IsGlobalFlag(flag)) << flag;
  }
  EXPECT_FALSE(IsGlobalFlag("--watch"));
  EXPECT_FALSE(IsGlobalFlag("--json=1"));
}

}  // namespace
}  // namespace batchd::batchctl
