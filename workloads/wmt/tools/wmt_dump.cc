// Prints what the wmt workload makes of a data directory, one JSON object a
// line: eval splits print each pair's tokens (padding cut), the train split
// prints packed rows of one epoch in file order (no shuffle) with their
// cursors. Tests compare it with python3-sentencepiece; people use it to
// look at their data.
//
//   wmt_dump --data DIR [--split validation] [--rows N] [--option k=v]...
//            [--time]
// --time prints no rows, only how long the length pass and the filling of
// the rows took on one thread (index_threads=1 unless given).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "workloads/packed_schedule.h"
#include "workloads/wmt/wmt.h"

namespace {

int Usage() {
  fprintf(stderr,
          "usage: wmt_dump --data DIR [--split train|validation|test] "
          "[--rows N] [--option key=value]... [--time]\n");
  return 2;
}

// Reads element i of a tensor row as int64, whatever its dtype.
int64_t At(const batchd::TensorLayout& t, const std::vector<uint8_t>& row,
           size_t i) {
  if (t.dtype == batchd::DType::kInt64) {
    int64_t v;
    memcpy(&v, row.data() + 8 * i, 8);
    return v;
  }
  if (t.dtype == batchd::DType::kFloat32) {
    float v;
    memcpy(&v, row.data() + 4 * i, 4);
    return int64_t(v);
  }
  int32_t v;
  memcpy(&v, row.data() + 4 * i, 4);
  return v;
}

void PrintArray(const char* name, const batchd::TensorLayout& t,
                const std::vector<uint8_t>& row, size_t n, bool first) {
  printf("%s\"%s\": [", first ? "" : ", ", name);
  for (size_t i = 0; i < n; ++i) {
    printf(i == 0 ? "%lld" : ", %lld", (long long)At(t, row, i));
  }
  printf("]");
}

struct Args {
  batchd::WorkloadConfig config;
  uint64_t max_rows = UINT64_MAX;
  bool time_only = false;
};

// False on a usage error.
bool ParseArgs(int argc, char** argv, Args* args) {
  batchd::WorkloadConfig& config = args->config;
  config.split = "validation";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--time") {
      args->time_only = true;
      continue;
    }
    if (i + 1 >= argc) return false;
    const std::string v = argv[++i];
    if (a == "--data") {
      config.data_path = v;
    } else if (a == "--split") {
      config.split = v;
    } else if (a == "--rows") {
      args->max_rows = std::stoull(v);
    } else if (a == "--option") {
      const size_t eq = v.find('=');
      if (eq == std::string::npos) return false;
      config.options[v.substr(0, eq)] = v.substr(eq + 1);
    } else {
      return false;
    }
  }
  if (config.data_path.empty()) return false;
  if (args->time_only) config.options.emplace("index_threads", "1");
  return true;
}

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// One item's bytes of every tensor, where FillItem / FillRow write them.
struct ItemBuffers {
  explicit ItemBuffers(const std::vector<batchd::TensorLayout>& tensors)
      : rows(tensors.size()), out(tensors.size()) {
    for (size_t k = 0; k < tensors.size(); ++k) {
      rows[k].resize(tensors[k].ExampleBytes());
      out[k] = rows[k].data();
    }
  }
  std::vector<std::vector<uint8_t>> rows;
  std::vector<uint8_t*> out;
};

// The train split's rows of one epoch in file order, with their cursors
// (or, with --time, how long they took).
int DumpRows(const Args& args, const batchd::PackedWorkload& w,
             Clock::time_point t0, batchd::WorkloadCounters* counters) {
  const auto& tensors = w.tensors();
  ItemBuffers b(tensors);
  const size_t n = size_t(tensors[0].example_shape[0]);
  batchd::EpochOrder order;
  order.num_examples = w.num_examples();
  order.id_at = [](uint64_t p) { return p; };
  auto total = w.RowsInEpoch(order);
  if (!total.ok()) {
    fprintf(stderr, "wmt_dump: %s\n", total.status().ToString().c_str());
    return 1;
  }
  const Clock::time_point t1 = Clock::now();
  uint64_t tokens = 0;
  for (uint64_t r = 0; r < *total && r < args.max_rows; ++r) {
    absl::Status s = w.FillRow(order, r, b.out.data(), counters);
    absl::StatusOr<batchd::RowCursor> cursor = w.CursorOfRow(order, r);
    if (s.ok()) s = cursor.status();
    if (!s.ok()) {
      fprintf(stderr, "wmt_dump: row %llu: %s\n", (unsigned long long)r,
              s.ToString().c_str());
      return 1;
    }
    if (args.time_only) {
      for (size_t k = 0; k < 2; ++k) {
        for (size_t i = 0; i < n; ++i) tokens += At(tensors[k], b.rows[k], i) != 0;
      }
      continue;
    }
    printf("{\"window\": %llu, \"row\": %llu",
           (unsigned long long)cursor->window, (unsigned long long)cursor->row);
    for (size_t k = 0; k < tensors.size(); ++k) {
      PrintArray(tensors[k].name.c_str(), tensors[k], b.rows[k], n, false);
    }
    printf("}\n");
  }
  if (args.time_only) {
    const Clock::time_point t2 = Clock::now();
    const uint64_t filled = std::min<uint64_t>(*total, args.max_rows);
    printf(
        "pairs %llu: open + length pass %.3f s (%.0f pairs/s); "
        "%llu rows, %llu tokens in %.3f s: %.0f rows/s, %.0f tokens/s "
        "(one thread)\n",
        (unsigned long long)w.num_examples(), Seconds(t0, t1),
        w.num_examples() / Seconds(t0, t1), (unsigned long long)filled,
        (unsigned long long)tokens, Seconds(t1, t2), filled / Seconds(t1, t2),
        tokens / Seconds(t1, t2));
  }
  return 0;
}

// An eval split's pairs, padding cut.
int DumpPairs(const Args& args, const batchd::Workload& w,
              batchd::WorkloadCounters* counters) {
  const auto& tensors = w.tensors();
  ItemBuffers b(tensors);
  const size_t n = size_t(tensors[0].example_shape[0]);
  for (uint64_t i = 0; i < w.num_examples() && i < args.max_rows; ++i) {
    batchd::ItemRef ex;
    ex.id = ex.position = i;
    absl::Status s = w.FillItem(ex, b.out.data(), counters);
    if (!s.ok()) {
      fprintf(stderr, "wmt_dump: pair %llu: %s\n", (unsigned long long)i,
              s.ToString().c_str());
      return 1;
    }
    printf("{");
    for (size_t k = 0; k < 2; ++k) {
      size_t len = n;  // EOS ends every sequence, so padding is the 0 tail
      while (len > 0 && At(tensors[k], b.rows[k], len - 1) == 0) --len;
      PrintArray(tensors[k].name.c_str(), tensors[k], b.rows[k], len, k == 0);
    }
    printf("}\n");
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  if (!ParseArgs(argc, argv, &args)) return Usage();
  const Clock::time_point t0 = Clock::now();
  auto workload = batchd::CreateWorkload(batchd::kWmtWorkload, args.config);
  if (!workload.ok()) {
    fprintf(stderr, "wmt_dump: %s\n", workload.status().ToString().c_str());
    return 1;
  }
  batchd::WorkloadCounters counters;
  // The train workload packs rows; the eval workloads serve pairs.
  const auto* packed = dynamic_cast<const batchd::PackedWorkload*>(&**workload);
  const int rc = packed != nullptr ? DumpRows(args, *packed, t0, &counters)
                                   : DumpPairs(args, **workload, &counters);
  if (rc != 0) return rc;
  fprintf(stderr, "wmt_dump: skipped_examples=%llu decode_errors=%llu\n",
          (unsigned long long)counters.skipped_examples.load(),
          (unsigned long long)counters.decode_errors.load());
  return 0;
}
