// The dlbench executable protocol for native benchmarks: settings from DLBENCH_* variables, input rows
// `id,p1,p2,...`, output `<stem>_out.csv` with `id,ms,min,max,mean,std,iqr,reps,p10,p90,ci_low,ci_high,
// converged` (empty cells where a statistic is unknown), the raw samples in `<stem>_samples.csv`
// (`id,ms`, one row per repetition), per-row error reports.
#pragma once

#include "error.hpp"
#include "timing.hpp"

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace dlbench {

struct Settings {
    int warmup = 3;
    int min_reps = 10;
    int max_reps = 1000;
    double min_time_s = 0.2;
    double target_rel_ci = 0.02; // repeat until the median's 95% interval is within +-this fraction...
    double max_time_s = 1.0;     // ...or this many seconds of repeating end (the row is then unstable)
    int threads = 0; // 0: the library's default
    std::string device = "cpu";
    std::string dtype = "float32";
    std::string fp32_math = "framework"; // float32 math on GPUs: ieee, tf32, framework (PyTorch's default)
    bool verify = false;
    double op_budget_s = 0.0;     // seconds one row may spend in warm-up and repetitions; 0: no limit
    double memory_fraction = 0.8; // skip a row needing more than this fraction of the free memory
    std::string caches = "hot";   // only "hot": "cold" (rotating tensor copies) is the torch kernels' alone

    // Read DLBENCH_* variables; a malformed value is a FatalError(kExitUsage) naming the variable.
    static Settings from_env();
};

struct InputRow {
    long long id = 0;
    std::vector<double> values;
    int line = 0;
};

// Parse the input CSV. Unreadable file: FatalError(kExitInputUnreadable). A line that is not numbers is
// reported on stderr (with its id when the id parses) and skipped.
std::vector<InputRow> read_input(const std::string &path, const std::string &program);

// `<dir>/<stem>_out.csv` for `<dir>/<stem>.csv`.
std::string output_path_for(const std::string &input_path);

// `<dir>/<stem>_samples.csv` for `<dir>/<stem>.csv`.
std::string samples_path_for(const std::string &input_path);

// A row's parameters by descriptor name; accessors throw RowError naming the parameter.
class Params {
public:
    Params(const std::vector<std::string> &names, const std::vector<double> &values, long long id = -1);
    long long id() const { return id_; } // the input row's id (-1 for built-in verify problems)
    std::int64_t integer(const std::string &name) const; // must be integral
    std::int64_t positive(const std::string &name) const; // integral and >= 1
    std::int64_t non_negative(const std::string &name) const;
    double real(const std::string &name) const;

private:
    double lookup(const std::string &name) const;
    const std::vector<std::string> &names_;
    const std::vector<double> &values_;
    long long id_;
};

// What a benchmark executable is: its parameter descriptors and three hooks.
struct KernelSpec {
    std::string name;                      // used in messages, e.g. "onednn_conv"
    std::vector<std::string> param_names;  // the canonical descriptors, in order
    std::function<void(const Settings &)> setup;     // threads, device check; may throw FatalError
    std::function<bool(const Settings &)> verify;    // small problems vs a naive reference
    std::function<TimeStats(const Params &, const Settings &)> measure; // may throw RowError
};

// Bytes that can be allocated on the host now (MemAvailable), or a huge number when unknown.
double available_host_bytes();

// RowError "needs X, over F% of the Y free; skipped" when `needed` exceeds the fraction of `free_bytes`.
void guard_memory(const Settings &settings, double needed, double free_bytes);

// The whole program: `exe [--verify] [input.csv]`. Returns the process exit code.
int run_benchmark_main(int argc, char **argv, const KernelSpec &spec);

} // namespace dlbench
