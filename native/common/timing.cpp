// Repetition timing and sample statistics.
#include "timing.hpp"

#include "protocol.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace dlbench {

namespace {
double quantile(const std::vector<double> &sorted, double q) {
    if (sorted.empty()) return 0.0;
    double pos = q * static_cast<double>(sorted.size() - 1);
    auto lower = static_cast<size_t>(std::floor(pos));
    size_t upper = std::min(lower + 1, sorted.size() - 1);
    double frac = pos - static_cast<double>(lower);
    return sorted[lower] + frac * (sorted[upper] - sorted[lower]);
}
} // namespace

TimeStats summarize(std::vector<double> samples_ms) {
    TimeStats stats;
    if (samples_ms.empty()) return stats;
    std::sort(samples_ms.begin(), samples_ms.end());
    const double count = static_cast<double>(samples_ms.size());
    stats.reps = static_cast<int>(samples_ms.size());
    stats.min_ms = samples_ms.front();
    stats.max_ms = samples_ms.back();
    stats.median_ms = quantile(samples_ms, 0.5);
    stats.mean_ms = std::accumulate(samples_ms.begin(), samples_ms.end(), 0.0) / count;
    double squares = 0.0;
    for (double s : samples_ms)
        squares += (s - stats.mean_ms) * (s - stats.mean_ms);
    stats.std_ms = samples_ms.size() > 1 ? std::sqrt(squares / (count - 1.0)) : 0.0;
    stats.iqr_ms = quantile(samples_ms, 0.75) - quantile(samples_ms, 0.25);
    return stats;
}

TimeStats measure_repetitions(const Settings &settings, const std::function<double()> &one_rep) {
    const auto started = std::chrono::steady_clock::now();
    auto spent = [&] {
        if (settings.op_budget_s <= 0) return false;
        std::chrono::duration<double> elapsed = std::chrono::steady_clock::now() - started;
        return elapsed.count() >= settings.op_budget_s;
    };
    for (int i = 0; i < settings.warmup && !spent(); ++i)
        one_rep();
    std::vector<double> samples;
    double timed_ms = 0.0;
    bool budget_spent = false;
    const double min_time_ms = settings.min_time_s * 1000.0;
    while (static_cast<int>(samples.size()) < settings.max_reps &&
           (static_cast<int>(samples.size()) < settings.min_reps || timed_ms < min_time_ms)) {
        if (!samples.empty() && spent()) {
            budget_spent = true;
            break;
        }
        double ms = one_rep();
        samples.push_back(ms);
        timed_ms += ms;
    }
    TimeStats stats = summarize(std::move(samples));
    stats.budget_spent = budget_spent;
    return stats;
}

} // namespace dlbench
