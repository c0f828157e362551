// `ridge bench compare A.json B.json`: the speedup of an optimization, B against A, with
// the noise band that repeated runs give. Each side is one result file of `ridge bench
// throughput --json`, `ridge bench serve --json` or `ridge roofline --json`, or several
// runs of the same: a JSON array of such objects, or one object per line (as `>>` appends).
//
// A ratio means little without the run-to-run spread: the band [min(B)/max(A),
// max(B)/min(A)] is the range of ratios any pairing of the runs could have shown, and a
// change is called only when 1 lies outside it.
#pragma once
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace ridge::tools {

// Which way is better for a metric; Unknown ones are compared only when asked for by name.
enum class Better { Lower, Higher, Unknown };
Better metric_direction(std::string_view name);

// One run's numeric metrics, in file order. Roofline files are flattened to
// "<phase>_b<batch>.step_ms", ".wall_ms", ".tok_per_s" and ".<op>_ms".
using BenchRun = std::vector<std::pair<std::string, double>>;
// Throws ridge::Error naming `where`.
std::vector<BenchRun> parse_bench_runs(const std::string& text, const std::string& where);
std::vector<BenchRun> load_bench_runs(const std::string& path);

double median(std::vector<double> v);  // of a non-empty set

struct MetricComparison {
  std::string name;
  Better better = Better::Unknown;
  size_t n_a = 0, n_b = 0;          // runs
  double median_a = 0, median_b = 0;
  double ratio = 0;                 // median B / median A
  double speedup = 0;               // > 1: B is better (ratio, or 1/ratio when lower is better)
  bool has_band = false;            // false with a single run on each side
  double band_lo = 0, band_hi = 0;  // of B/A: [min(B)/max(A), max(B)/min(A)]
  std::string verdict;              // faster | slower | within noise | higher | lower |
                                    // single run: no noise band
};

// Both sides non-empty, every value finite; A's values > 0 (a ratio needs them).
MetricComparison compare_metric(std::string name, Better better, const std::vector<double>& a,
                                const std::vector<double>& b);

// Every metric present in both sides (at least one run each) with a known direction, or
// exactly `only` (throws naming a metric missing from a side).
std::vector<MetricComparison> compare_runs(const std::vector<BenchRun>& a, const std::vector<BenchRun>& b,
                                           const std::vector<std::string>& only);

std::string compare_table(const std::vector<MetricComparison>& m, const std::string& a_name, size_t a_runs,
                          const std::string& b_name, size_t b_runs);
std::string compare_json(const std::vector<MetricComparison>& m, const std::string& a_name, size_t a_runs,
                         const std::string& b_name, size_t b_runs);

}  // namespace ridge::tools
