// Repetition timing shared by the native benchmarks: warm-up, then repeat until a minimum time and a
// minimum count are both reached (capped by a maximum count), then summarise the samples.
#pragma once

#include <chrono>
#include <functional>
#include <vector>

namespace dlbench {

struct Settings;

struct TimeStats {
    double median_ms = 0, min_ms = 0, max_ms = 0, mean_ms = 0, std_ms = 0, iqr_ms = 0;
    int reps = 0;
    bool budget_spent = false; // DLBENCH_OP_BUDGET_S ended the repetitions before the minima were met
};

// Median, extremes, mean, sample standard deviation and interquartile range (linear interpolation).
TimeStats summarize(std::vector<double> samples_ms);

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
