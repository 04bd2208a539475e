// The statistics of native timing agree with dlbench's Python ones (dlbench/core/values.py): the ranks of
// the median's 95% interval, missing statistics for too few samples, convergence, and the stopping rules.
#include "protocol.hpp"
#include "timing.hpp"

#include <cmath>
#include <cstdio>
#include <utility>
#include <vector>

namespace {
int failures = 0;

void expect(bool ok, const char *what) {
    if (!ok) {
        std::fprintf(stderr, "FAILED: %s\n", what);
        ++failures;
    }
}
} // namespace

int main() {
    using dlbench::median_ci_ranks;
    // the same ranks as dlbench.core.values.median_ci_ranks
    const std::pair<size_t, std::pair<size_t, size_t>> known[] = {
        {6, {0, 5}},       {9, {1, 7}},       {20, {5, 14}},      {100, {39, 60}},
        {200, {85, 114}}, {201, {85, 115}}, {1000, {468, 531}}, {10000, {4901, 5098}},
    };
    for (const auto &[n, ranks] : known) {
        auto got = median_ci_ranks(n);
        expect(got && *got == ranks, "median_ci_ranks matches the Python table");
    }
    expect(!median_ci_ranks(5), "no interval of the median from 5 samples");

    auto one = dlbench::summarize({2.0}, 0.02);
    expect(one.reps == 1 && one.median_ms == 2.0 && !one.std_ms && !one.iqr_ms && !one.ci_low_ms,
           "one sample: median only, no spread, no interval");
    expect(!one.converged, "one sample never converges");

    auto flat = dlbench::summarize({1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0}, 0.02);
    expect(flat.converged && flat.ci_low_ms && *flat.ci_low_ms == 1.0, "identical samples converge");
    auto spread = dlbench::summarize({1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, 0.02);
    expect(!spread.converged && *spread.p10_ms == 1.9 && std::fabs(*spread.p90_ms - 9.1) < 1e-12,
           "a wide spread does not converge; p10/p90 interpolate");

    dlbench::Settings settings;
    settings.warmup = 0;
    settings.min_reps = 2;
    settings.min_time_s = 0.0;
    settings.max_reps = 100000;
    settings.max_time_s = 0.2;
    auto steady = dlbench::measure_repetitions(settings, [] { return 1.0; });
    expect(steady.converged && steady.reps < 20, "a steady operation stops as soon as it converges");
    int call = 0;
    auto noisy = dlbench::measure_repetitions(settings, [&] { return (++call % 2) ? 1.0 : 3.0; });
    expect(!noisy.converged && noisy.reps > 20, "an operation that cannot converge runs until max_time_s");
    if (failures == 0) std::fprintf(stderr, "timing statistics: all checks passed\n");
    return failures == 0 ? 0 : 1;
}
