// criteo_parse_bench: the criteo1tb line parse alone (criteo_line.h's
// ParseLine, as a stream's parser calls it), over the lines of the files
// given, for profiles and instruction counts (valgrind --tool=callgrind
// counts the same on a busy machine) of the hot loop without the daemon.
// Prints one JSON line: lines parsed, CPU seconds, ns a line, and a
// checksum of the values (so that nothing is optimised away).
//
//   criteo_parse_bench [--passes N] [--max-lines N] FILE...
#include <time.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "workloads/criteo1tb/criteo_line.h"

namespace {

double CpuSeconds() {
  timespec t;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

}  // namespace

int main(int argc, char** argv) {
  int passes = 1;
  uint64_t max_lines = UINT64_MAX;
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--passes" && i + 1 < argc) {
      passes = atoi(argv[++i]);
    } else if (a == "--max-lines" && i + 1 < argc) {
      max_lines = strtoull(argv[++i], nullptr, 10);
    } else {
      files.push_back(a);
    }
  }
  if (files.empty() || passes < 1) {
    fprintf(stderr,
            "usage: criteo_parse_bench [--passes N] [--max-lines N] FILE...\n");
    return 2;
  }
  std::string text;
  for (const std::string& f : files) {
    std::ifstream in(f, std::ios::binary);
    if (!in) {
      fprintf(stderr, "criteo_parse_bench: cannot read %s\n", f.c_str());
      return 1;
    }
    std::ostringstream s;
    s << in.rdbuf();
    text += s.str();
  }
  // The lines' bounds, up to max_lines.
  std::vector<std::pair<size_t, size_t>> lines;
  for (size_t at = 0; at < text.size() && lines.size() < max_lines;) {
    const void* nl = memchr(text.data() + at, '\n', text.size() - at);
    const size_t end =
        nl ? size_t(static_cast<const char*>(nl) - text.data()) : text.size();
    lines.emplace_back(at, end - at);
    at = end + 1;
  }
  batchd::criteo::ParsedLine p;
  uint64_t sum = 0, bad = 0;
  const double t0 = CpuSeconds();
  for (int pass = 0; pass < passes; ++pass) {
    for (const auto& [at, size] : lines) {
      if (batchd::criteo::ParseLine(text.data() + at, size, &p) !=
          batchd::criteo::LineError::kNone) {
        ++bad;
        continue;
      }
      uint32_t bits;
      std::memcpy(&bits, &p.dense[4], 4);
      sum += bits + p.ids[0] + p.ids[20];
    }
  }
  const double cpu = CpuSeconds() - t0;
  const double n = double(lines.size()) * passes;
  printf(
      "{\"lines\": %.0f, \"bad\": %llu, \"cpu_s\": %.3f, \"ns_per_line\": "
      "%.1f, \"checksum\": %llu}\n",
      n, (unsigned long long)bad, cpu, 1e9 * cpu / n, (unsigned long long)sum);
  return 0;
}
