// batchctl status: current rates between two answers, the text report, the
// rates' JSON and --watch's argument.
#include "tools/batchctl/status.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include "tests/batchctl_test_argv.h"

namespace batchd::batchctl {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

// An answer of daemon `pid` at `uptime` with one stream of the given ranks'
// (examples, bytes) counters.
v1::GetStatusResponse Answer(
    uint32_t pid, double uptime, const std::string& stream,
    const std::vector<std::pair<uint64_t, uint64_t>>& ranks) {
  v1::GetStatusResponse st;
  st.set_pid(pid);
  st.set_version("0.1.0");
  st.set_uptime_seconds(uptime);
  v1::StreamStatus* s = st.add_streams();
  s->mutable_spec()->set_name(stream);
  for (size_t r = 0; r < ranks.size(); ++r) {
    v1::RankStatus* rs = s->add_ranks();
    rs->set_rank(uint32_t(r));
    rs->set_examples(ranks[r].first);
    rs->set_bytes(ranks[r].second);
  }
  return st;
}

TEST(CurrentRates, AreTheCounterChangesOverTheDaemonsUptimeChange) {
  const std::optional<Rates> rates =
      CurrentRates(Answer(7, 10.0, "train", {{100, 1000}, {50, 500}}),
                   Answer(7, 12.0, "train", {{300, 3000}, {50, 500}}));
  ASSERT_TRUE(rates.has_value());
  EXPECT_EQ(rates->interval_seconds, 2.0);
  const StreamRates& sr = rates->streams.at(StreamId{0, "train"});
  EXPECT_EQ(sr.stream.examples_per_second, 100.0);
  EXPECT_EQ(sr.stream.bytes_per_second, 1000.0);
  EXPECT_EQ(sr.ranks.at(0).examples_per_second, 100.0);
  EXPECT_EQ(sr.ranks.at(1).examples_per_second, 0.0);  // stalled rank
}

TEST(CurrentRates, NeedTheSameDaemonAndTimePassing) {
  EXPECT_FALSE(
      CurrentRates(Answer(7, 10, "s", {{1, 1}}), Answer(8, 12, "s", {{2, 2}}))
          .has_value());  // restarted daemon
  EXPECT_FALSE(
      CurrentRates(Answer(7, 10, "s", {{1, 1}}), Answer(7, 10, "s", {{2, 2}}))
          .has_value());
}

TEST(CurrentRates, SkipNewStreamsAndStreamsThatStartedOver) {
  v1::GetStatusResponse prev = Answer(7, 10, "kept", {{100, 100}});
  *prev.add_streams() = Answer(7, 10, "reopened", {{500, 500}}).streams(0);
  v1::GetStatusResponse cur = Answer(7, 11, "kept", {{110, 110}});
  *cur.add_streams() = Answer(7, 11, "reopened", {{5, 5}}).streams(0);
  *cur.add_streams() = Answer(7, 11, "new", {{5, 5}}).streams(0);
  const std::optional<Rates> rates = CurrentRates(prev, cur);
  ASSERT_TRUE(rates.has_value());
  EXPECT_EQ(rates->streams.size(), 1u);
  EXPECT_EQ(rates->streams.at(StreamId{0, "kept"}).stream.examples_per_second,
            10.0);
}

TEST(CurrentRates, ARankThatAttachedMeanwhileCountsFromZero) {
  const std::optional<Rates> rates = CurrentRates(
      Answer(7, 10, "s", {{10, 10}}), Answer(7, 11, "s", {{10, 10}, {4, 40}}));
  ASSERT_TRUE(rates.has_value());
  EXPECT_EQ(rates->streams.at(StreamId{0, "s"}).ranks.at(1).bytes_per_second,
            40.0);
  EXPECT_EQ(rates->streams.at(StreamId{0, "s"}).stream.examples_per_second,
            4.0);
}

TEST(FormatStatus, PrintsTheDaemonLineAndARowPerRank) {
  v1::GetStatusResponse st = Answer(42, 75, "train", {{1000, 2048}, {0, 0}});
  st.set_threads(9);
  st.set_worker_threads(4);
  st.set_rss_bytes(3 << 20);
  st.set_ring_bytes(1 << 30);
  v1::StreamStatus* s = st.mutable_streams(0);
  s->mutable_spec()->set_workload("synthetic");
  (*s->mutable_spec()->mutable_options())["payload_bytes"] = "4096";
  (*s->mutable_spec()->mutable_options())["examples"] = "1000";
  s->mutable_ranks(0)->set_attached(true);
  s->mutable_ranks(0)->set_client_pid(1234);
  s->mutable_ranks(0)->set_ring_fill(3);
  s->mutable_ranks(0)->set_ring_slots(4);
  const std::string out = FormatStatus(st);
  EXPECT_THAT(out, ::testing::StartsWith(
                       "batchd 0.1.0  pid 42  up 1m15s  threads 9 (4 workers)"
                       "  rss 3.0 MiB  rings 1.0 GiB  streams 1\n"));
  EXPECT_THAT(out, HasSubstr("options examples=1000 payload_bytes=4096\n"));
  EXPECT_THAT(out, HasSubstr("  RANK  ATTACHED   PID"));
  EXPECT_THAT(out, HasSubstr("     0  yes       1234"));
  EXPECT_THAT(out, HasSubstr("     1  no           -"));  // no client pid
  EXPECT_THAT(out, HasSubstr("3/4"));
  EXPECT_THAT(out, Not(HasSubstr("DRAINING")));
  EXPECT_THAT(out, Not(HasSubstr("EXAMPLES/S")));
  st.set_draining(true);
  EXPECT_THAT(FormatStatus(st), HasSubstr("  DRAINING (no new streams"));
}

TEST(FormatStatus, WithRatesShowsTheCurrentOnesPerStreamAndRank) {
  const v1::GetStatusResponse prev = Answer(7, 10, "s", {{0, 0}});
  const v1::GetStatusResponse cur = Answer(7, 12, "s", {{50, 4096}});
  const std::optional<Rates> rates = CurrentRates(prev, cur);
  ASSERT_TRUE(rates.has_value());
  const std::string out = FormatStatus(cur, &*rates);
  EXPECT_THAT(out, HasSubstr("  25.0 examples/s  2.0 KiB/s over the last 2.0 s"
                             "  (since open: 0.0 examples/s)"));
  EXPECT_THAT(out, HasSubstr("EXAMPLES/S"));
  EXPECT_THAT(out, ::testing::ContainsRegex("  25.0\n$"));
  // A stream without a rate yet says its figures are since open.
  const std::optional<Rates> other =
      CurrentRates(Answer(7, 10, "other", {}), cur);
  ASSERT_TRUE(other.has_value());
  const std::string none = FormatStatus(cur, &*other);
  EXPECT_THAT(none, HasSubstr("/s since open  decode errors"));
  EXPECT_THAT(none, ::testing::ContainsRegex("  -\n$"));
}

TEST(FormatStatus, ShowsTheReadAheadBudgetAndEachReadAheadStream) {
  v1::GetStatusResponse st = Answer(42, 75, "train", {{10, 10}});
  v1::GetStatusResponse plain = st;
  st.set_readahead_bytes(256 << 20);
  st.set_readahead_threads(32);
  v1::ReadAheadStatus* ra = st.mutable_streams(0)->mutable_readahead();
  ra->set_depth_examples(96);
  ra->set_bytes_in_flight(3 << 20);
  ra->set_bytes_buffered(5 << 20);
  ra->set_budget_bytes(128 << 20);
  ra->set_hits(900);
  ra->set_sync_reads(12);
  ra->set_failed_reads(1);
  ra->set_io_wait_seconds(1.25);
  ra->set_min_steps_ahead(1);
  ra->set_max_steps_ahead(6);
  const std::string out = FormatStatus(st);
  EXPECT_THAT(out, HasSubstr("streams 1  read-ahead 256.0 MiB (32 I/O "
                             "threads)\n"));
  EXPECT_THAT(out, HasSubstr("  read-ahead  depth 96 examples  in flight "
                             "3.0 MiB  buffered 5.0 MiB of 128.0 MiB  hits "
                             "900  sync reads 12  failed 1  io wait 1.25 s  "
                             "steps ahead 1-6\n"));
  // Read-ahead off, and a stream that is not read ahead: no such lines.
  EXPECT_THAT(FormatStatus(plain), Not(HasSubstr("read-ahead")));
}

TEST(FormatStatus, ShowsWhatAStreamIsIndexingAndHowFar) {
  v1::GetStatusResponse st = Answer(42, 75, "train", {{0, 0}});
  v1::GetStatusResponse plain = st;
  v1::IndexingStatus* ix = st.mutable_streams(0)->mutable_indexing();
  ix->set_what("wmt lengths");
  ix->set_unit("pairs");
  ix->set_done(1200);
  ix->set_total(6000);
  ix->set_rate(300);
  ix->set_eta_seconds(16);
  EXPECT_THAT(FormatStatus(st),
              HasSubstr("\n  indexing wmt lengths 1200/6000 pairs (20%) "
                        "300/s ETA 16 s\n"));
  // Before the rate is known: no rate, no ETA.
  ix->set_rate(0);
  ix->set_eta_seconds(0);
  EXPECT_THAT(FormatStatus(st),
              HasSubstr("  indexing wmt lengths 1200/6000 pairs (20%)\n"));
  EXPECT_THAT(FormatStatus(plain), Not(HasSubstr("indexing")));
}

TEST(FormatStatus, SaysWhichStreamsShareFillsAndHowMany) {
  v1::GetStatusResponse st;
  st.set_share_window_bytes(512 << 20);
  st.set_share_held_bytes(3 << 20);
  st.set_share_groups(1);
  for (const char* name : {"a", "b", "c", "gone"}) {
    v1::StreamStatus* s = st.add_streams();
    s->mutable_spec()->set_name(name);
    s->set_share_group(std::string(name) == "c" ? 2 : 1);
    s->set_attached_ranks(std::string(name) == "gone" ? 0 : 1);
  }
  st.mutable_streams(0)->set_fills_made(25);
  st.mutable_streams(0)->set_fills_shared(75);
  const std::string text = FormatStatus(st);
  EXPECT_THAT(text, HasSubstr("share window 3.0 MiB of 512.0 MiB (1 groups "
                              "sharing)"));
  // a and b share; c is of another content; a stream with no rank
  // attached is not named.
  EXPECT_EQ(FormatSharing(st, st.streams(0)),
            "  fills  made 25  shared 75 (75%)  sharing with b\n");
  EXPECT_EQ(FormatSharing(st, st.streams(2)),
            "  fills  made 0  shared 0 (0%)  no other stream of the same "
            "content now\n");
  v1::StreamStatus off;
  EXPECT_EQ(FormatSharing(st, off), "");
}

TEST(RatesToJson, ListsStreamsWithTheirRanks) {
  const std::optional<Rates> rates =
      CurrentRates(Answer(7, 10, "s", {{0, 0}, {0, 0}}),
                   Answer(7, 11, "s", {{3, 30}, {1, 10}}));
  ASSERT_TRUE(rates.has_value());
  EXPECT_EQ(
      DumpJson(RatesToJson(*rates)),
      R"([{"stream":"s","owner_uid":0,"examples_per_second":4.0,)"
      R"("bytes_per_second":40.0,"ranks":[)"
      R"({"rank":0,"examples_per_second":3.0,"bytes_per_second":30.0},)"
      R"({"rank":1,"examples_per_second":1.0,"bytes_per_second":10.0}]}])");
}

// Issue 27: a directory name under the data root (a stream's data path)
// and an option value with ESC, OSC 52, CR or LF reached the operator's
// terminal raw: a cleared screen, a clipboard write, a forged line.
TEST(FormatStatus, EscapesControlCharactersFromPathsOptionsAndNames) {
  v1::GetStatusResponse st = Answer(42, 5, "train", {{0, 0}});
  st.set_version("0.1\x1b[2J");
  v1::StreamSpec* spec = st.mutable_streams(0)->mutable_spec();
  spec->set_workload("synthetic");
  spec->set_data("evil\x1b]52;c;cm0gLXJmIH4K\x07\r\nstream forged  owner 0");
  spec->set_split("train\xc2\x9b");
  (*spec->mutable_options())["examples"] = "\r\n12\x0b\x0c";
  (*spec->mutable_options())["k\x1b"] = "v";
  const std::string out = FormatStatus(st);
  for (char c : out) {
    EXPECT_TRUE(c == '\n' || (c >= 0x20 && c != 0x7f)) << int(uint8_t(c));
  }
  EXPECT_THAT(out,
              HasSubstr("data 'evil\\x1b]52;c;cm0gLXJmIH4K\\x07\\r\\nstream "
                        "forged  owner 0'"));
  EXPECT_THAT(out, HasSubstr("split train\\u009b"));
  EXPECT_THAT(out, HasSubstr("examples=\\r\\n12\\x0b\\x0c k\\x1b=v"));
  EXPECT_THAT(out, HasSubstr("batchd 0.1\\x1b[2J  pid 42"));
  EXPECT_THAT(out, Not(HasSubstr("\nstream forged")));
}

TEST(CurrentRates, KeepTwoOwnersStreamsOfOneNameApart) {
  v1::GetStatusResponse prev = Answer(7, 10, "train", {{100, 100}});
  *prev.add_streams() = Answer(7, 10, "train", {{500, 500}}).streams(0);
  prev.mutable_streams(1)->set_owner_uid(1000);
  v1::GetStatusResponse cur = Answer(7, 11, "train", {{110, 110}});
  *cur.add_streams() = Answer(7, 11, "train", {{530, 530}}).streams(0);
  cur.mutable_streams(1)->set_owner_uid(1000);
  const std::optional<Rates> rates = CurrentRates(prev, cur);
  ASSERT_TRUE(rates.has_value());
  EXPECT_EQ(rates->streams.at(StreamId{0, "train"}).stream.examples_per_second,
            10.0);
  EXPECT_EQ(
      rates->streams.at(StreamId{1000, "train"}).stream.examples_per_second,
      30.0);
}

TEST(FormatStatus, NamesEachStreamsOwnerAndEachOwnersUseAgainstItsQuotas) {
  v1::GetStatusResponse st = Answer(42, 75, "train", {{10, 10}});
  EXPECT_THAT(FormatStatus(st), Not(HasSubstr("owners (quotas")));
  st.mutable_streams(0)->set_owner_uid(1000);
  st.mutable_streams(0)->set_owner_known(true);
  *st.add_streams() = Answer(42, 75, "train", {{1, 1}}).streams(0);
  st.mutable_streams(1)->set_owner_uid(4294967295u);
  st.set_max_streams_per_uid(16);
  st.set_max_ring_bytes_per_uid(uint64_t(8) << 30);
  st.set_max_model_bytes_per_uid(0);
  v1::UidUsage* user = st.add_uids();
  user->set_uid(1000);
  user->set_known(true);
  user->set_streams(3);
  user->set_ring_bytes(uint64_t(3) << 20);
  v1::UidUsage* root = st.add_uids();
  root->set_uid(0);
  root->set_known(true);
  root->set_exempt(true);
  root->set_streams(20);
  const std::string out = FormatStatus(st);
  EXPECT_THAT(out, HasSubstr("\nstream train  owner 1000  workload"));
  EXPECT_THAT(out, HasSubstr("\nstream train  owner tcp  workload"));
  EXPECT_THAT(out, HasSubstr("owners (quotas per uid: streams 16, rings "
                             "8.0 GiB, models no limit; administrators "
                             "exempt)\n"));
  EXPECT_THAT(out,
              ::testing::ContainsRegex("  1000 +3/16 +3.0 MiB/8.0 GiB +0 B\n"));
  EXPECT_THAT(out, ::testing::ContainsRegex(
                       "  0 +20 +0 B +0 B +exempt \\(administrator\\)\n"));
}

class StatusArgsTest : public ::testing::Test {
 protected:
  void SetUp() override { unsetenv("BATCHD_SERVER"); }
};

TEST_F(StatusArgsTest, WatchTakesAnOptionalIntervalOfAtLeastATenth) {
  Argv plain{"status"};
  absl::StatusOr<StatusArgs> a = ParseStatusArgs(plain.argc(), plain.argv());
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_FALSE(a->watch);
  EXPECT_FALSE(a->json);

  Argv bare{"status", "--watch", "--json"};
  a = ParseStatusArgs(bare.argc(), bare.argv());
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_TRUE(a->watch && a->json);
  EXPECT_EQ(a->interval_seconds, 2);

  Argv fast{"status", "--watch=0.01"};
  a = ParseStatusArgs(fast.argc(), fast.argv());
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->interval_seconds, 0.1);

  Argv spaced{"status", "--watch", "5"};
  a = ParseStatusArgs(spaced.argc(), spaced.argv());
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->interval_seconds, 5);

  for (const char* bad : {"0", "-1", "soon", "86401"}) {
    Argv b{"status", std::string("--watch=") + bad};
    EXPECT_THAT(ParseStatusArgs(b.argc(), b.argv()).status().message(),
                HasSubstr("--watch wants seconds between 0 and 86400"))
        << bad;
  }
}

}  // namespace
}  // namespace batchd::batchctl
