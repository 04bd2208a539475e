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

constexpr double kZ95 = 1.959963984540054;
constexpr double kAlphaHalf = 0.025;
} // namespace

std::optional<std::pair<size_t, size_t>> median_ci_ranks(size_t n) {
    if (n < 6) return std::nullopt;
    if (n <= 200) {
        // largest k with P(Binomial(n, 1/2) <= k - 1) <= 2.5%: the interval is (x_(k), x_(n-k+1)), 1-based
        double cumulative = 0.0;
        double log_half_n = static_cast<double>(n) * std::log(0.5);
        size_t k = 0;
        for (;; ++k) {
            double log_comb = std::lgamma(n + 1.0) - std::lgamma(k + 1.0) - std::lgamma(n - k + 1.0);
            cumulative += std::exp(log_comb + log_half_n);
            if (cumulative > kAlphaHalf) break;
        }
        if (k < 1) return std::nullopt;
        return std::make_pair(k - 1, n - k);
    }
    double half = kZ95 * std::sqrt(static_cast<double>(n)) / 2.0;
    auto first = static_cast<long long>(std::floor(static_cast<double>(n) / 2.0 - half)) - 1;
    size_t lo = first < 0 ? 0 : static_cast<size_t>(first);
    return std::make_pair(lo, n - 1 - lo);
}

TimeStats summarize(std::vector<double> samples_ms, double target_rel_ci) {
    TimeStats stats;
    if (samples_ms.empty()) return stats;
    stats.samples_ms = samples_ms;
    std::sort(samples_ms.begin(), samples_ms.end());
    const size_t n = samples_ms.size();
    const double count = static_cast<double>(n);
    stats.reps = static_cast<int>(n);
    stats.min_ms = samples_ms.front();
    stats.max_ms = samples_ms.back();
    stats.median_ms = quantile(samples_ms, 0.5);
    stats.mean_ms = std::accumulate(samples_ms.begin(), samples_ms.end(), 0.0) / count;
    if (n > 1) {
        double squares = 0.0;
        for (double s : samples_ms)
            squares += (s - stats.mean_ms) * (s - stats.mean_ms);
        stats.std_ms = std::sqrt(squares / (count - 1.0));
        stats.iqr_ms = quantile(samples_ms, 0.75) - quantile(samples_ms, 0.25);
        stats.p10_ms = quantile(samples_ms, 0.1);
        stats.p90_ms = quantile(samples_ms, 0.9);
    }
    if (auto ranks = median_ci_ranks(n)) {
        stats.ci_low_ms = samples_ms[ranks->first];
        stats.ci_high_ms = samples_ms[ranks->second];
        if (stats.median_ms > 0) {
            double half = std::max(stats.median_ms - *stats.ci_low_ms, *stats.ci_high_ms - stats.median_ms);
            stats.converged = half / stats.median_ms <= target_rel_ci;
        }
    }
    return stats;
}

TimeStats measure_repetitions(const Settings &settings, const std::function<double()> &one_rep) {
    using clock = std::chrono::steady_clock;
    const auto started = clock::now();
    auto seconds_since = [](clock::time_point since) {
        return std::chrono::duration<double>(clock::now() - since).count();
    };
    auto spent = [&] { return settings.op_budget_s > 0 && seconds_since(started) >= settings.op_budget_s; };
    for (int i = 0; i < settings.warmup && !spent(); ++i)
        one_rep();
    std::vector<double> samples;
    double timed_ms = 0.0;
    bool budget_spent = false;
    const double min_time_ms = settings.min_time_s * 1000.0;
    const auto repeating_since = clock::now();
    size_t next_check = static_cast<size_t>(std::max(settings.min_reps, 1));
    while (static_cast<int>(samples.size()) < settings.max_reps) {
        if (!samples.empty() && spent()) {
            budget_spent = true;
            break;
        }
        double ms = one_rep();
        samples.push_back(ms);
        timed_ms += ms;
        if (static_cast<int>(samples.size()) < settings.min_reps || timed_ms < min_time_ms) continue;
        if (samples.size() >= next_check) {
            // checked at counts growing by 10%: sorting every sample after each call would cost more than a
            // microsecond kernel
            next_check = std::max(samples.size() + 1, static_cast<size_t>(static_cast<double>(samples.size()) * 1.1));
            if (summarize(samples, settings.target_rel_ci).converged) break;
        }
        if (seconds_since(repeating_since) >= settings.max_time_s) break;
    }
    TimeStats stats = summarize(std::move(samples), settings.target_rel_ci);
    stats.budget_spent = budget_spent;
    return stats;
}

} // namespace dlbench
