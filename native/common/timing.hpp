// Repetition timing shared by the native benchmarks: warm-up, then repeat until a minimum time and a
// minimum count are both reached, then on until the median is known to DLBENCH_TARGET_REL_CI (95%
// confidence interval of the median) or DLBENCH_MAX_TIME_S of repeating ends (capped by a maximum count),
// then summarise the samples. The same rules as dlbench/backends/timing.py.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <utility>
#include <vector>

namespace dlbench {

struct Settings;

struct TimeStats {
    // median and min always exist; the rest is empty when the samples do not allow it (one sample has no
    // spread; fewer than 6 have no 95% interval of the median) and written as an empty cell.
    double median_ms = 0, min_ms = 0, max_ms = 0, mean_ms = 0;
    std::optional<double> std_ms, iqr_ms, p10_ms, p90_ms, ci_low_ms, ci_high_ms;
    int reps = 0;
    bool converged = false;    // the interval of the median is within settings.target_rel_ci
    bool budget_spent = false; // DLBENCH_OP_BUDGET_S ended the repetitions before the minima were met
    std::vector<double> samples_ms; // the raw samples, in the order they were taken
};

// 0-based ranks (lo, hi) of the order statistics bracketing the median with at least 95% confidence
// (binomial; normal approximation above 200 samples); nothing below 6 samples.
std::optional<std::pair<size_t, size_t>> median_ci_ranks(size_t n);

// Every statistic the samples allow; `converged` against `target_rel_ci` (the interval's half-width
// relative to the median).
TimeStats summarize(std::vector<double> samples_ms, double target_rel_ci);

// Run `one_rep` settings.warmup times untimed, then repeatedly; `one_rep` returns the milliseconds of
// one repetition (it times itself, so device kernels can use device events). A spent op_budget_s cuts
// the warm-up and the repetitions short, but one timed repetition is always taken.
TimeStats measure_repetitions(const Settings &settings, const std::function<double()> &one_rep);

// Milliseconds a host-synchronous callable takes, by the steady clock.
template <typename F> double wall_ms(F &&work) {
    auto start = std::chrono::steady_clock::now();
    work();
    auto stop = std::chrono::steady_clock::now();
    return std::chrono::duration<double, std::milli>(stop - start).count();
}

} // namespace dlbench
