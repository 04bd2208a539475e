// The dlbench executable protocol: settings, input parsing, output writing and the per-row loop.
#include "protocol.hpp"

#include <cerrno>
#include <cstring>
#include <cmath>
#include <cstdlib>
#include <exception>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <limits>
#include <optional>
#include <sstream>

namespace dlbench {

namespace {

std::string trim(const std::string &text) {
    const char *space = " \t\r\n";
    auto first = text.find_first_not_of(space);
    if (first == std::string::npos) return "";
    auto last = text.find_last_not_of(space);
    return text.substr(first, last - first + 1);
}

bool parse_double(const std::string &text, double &out) {
    std::string field = trim(text);
    if (field.empty()) return false;
    errno = 0;
    char *end = nullptr;
    out = std::strtod(field.c_str(), &end);
    return errno == 0 && end == field.c_str() + field.size() && std::isfinite(out);
}

bool parse_id(const std::string &text, long long &out) {
    std::string field = trim(text);
    if (field.empty()) return false;
    errno = 0;
    char *end = nullptr;
    out = std::strtoll(field.c_str(), &end, 10);
    return errno == 0 && end == field.c_str() + field.size();
}

long long env_integer(const char *name, long long fallback, long long minimum) {
    const char *raw = std::getenv(name);
    if (raw == nullptr || trim(raw).empty()) return fallback;
    long long value = 0;
    if (!parse_id(raw, value) || value < minimum)
        throw FatalError(kExitUsage, std::string(name) + "='" + raw + "' is not an integer >= " +
                                         std::to_string(minimum));
    return value;
}

double env_real(const char *name, double fallback) {
    const char *raw = std::getenv(name);
    if (raw == nullptr || trim(raw).empty()) return fallback;
    double value = 0;
    if (!parse_double(raw, value) || value < 0)
        throw FatalError(kExitUsage, std::string(name) + "='" + raw + "' is not a number >= 0");
    return value;
}

std::string env_word(const char *name, const std::string &fallback) {
    const char *raw = std::getenv(name);
    if (raw == nullptr || trim(raw).empty()) return fallback;
    return trim(raw);
}

std::vector<std::string> split(const std::string &line) {
    std::vector<std::string> fields;
    std::stringstream stream(line);
    std::string field;
    while (std::getline(stream, field, ','))
        fields.push_back(field);
    if (!line.empty() && line.back() == ',') fields.emplace_back();
    return fields;
}

const char *kOutputHeader = "id,ms,min,max,mean,std,iqr,reps,p10,p90,ci_low,ci_high,converged\n";

// An optional statistic as a cell: empty when unknown (never a made-up 0).
std::string cell(const std::optional<double> &value, std::ostream &format) {
    if (!value) return "";
    std::ostringstream text;
    text.copyfmt(format);
    text << *value;
    return text.str();
}

void print_usage(const KernelSpec &spec) {
    std::cerr << "usage: " << spec.name << " [--verify] [input.csv]\n"
              << "  input rows: id";
    for (const auto &name : spec.param_names)
        std::cerr << "," << name;
    std::cerr << "\n  output: <input stem>_out.csv with " << kOutputHeader
              << "         <input stem>_samples.csv with id,ms per timed repetition\n"
              << "  settings: DLBENCH_WARMUP, DLBENCH_MIN_REPS, DLBENCH_MAX_REPS, DLBENCH_MIN_TIME_S,\n"
              << "            DLBENCH_TARGET_REL_CI, DLBENCH_MAX_TIME_S,\n"
              << "            DLBENCH_THREADS, DLBENCH_DEVICE, DLBENCH_DTYPE, DLBENCH_FP32_MATH,\n"
              << "            DLBENCH_VERIFY=1,"
              << "            DLBENCH_OP_BUDGET_S, DLBENCH_MEMORY_FRACTION, DLBENCH_CACHES=hot\n";
}

} // namespace

Settings Settings::from_env() {
    Settings s;
    s.warmup = static_cast<int>(env_integer("DLBENCH_WARMUP", s.warmup, 0));
    s.min_reps = static_cast<int>(env_integer("DLBENCH_MIN_REPS", s.min_reps, 1));
    s.max_reps = static_cast<int>(env_integer("DLBENCH_MAX_REPS", s.max_reps, 1));
    if (s.max_reps < s.min_reps)
        throw FatalError(kExitUsage, "DLBENCH_MAX_REPS (" + std::to_string(s.max_reps) +
                                         ") is below DLBENCH_MIN_REPS (" + std::to_string(s.min_reps) + ")");
    s.min_time_s = env_real("DLBENCH_MIN_TIME_S", s.min_time_s);
    s.target_rel_ci = env_real("DLBENCH_TARGET_REL_CI", s.target_rel_ci);
    if (!(s.target_rel_ci > 0.0 && s.target_rel_ci <= 1.0))
        throw FatalError(kExitUsage, "DLBENCH_TARGET_REL_CI=" + std::to_string(s.target_rel_ci) +
                                         " must be a fraction in (0, 1]");
    s.max_time_s = env_real("DLBENCH_MAX_TIME_S", s.max_time_s);
    s.threads = static_cast<int>(env_integer("DLBENCH_THREADS", s.threads, 0));
    s.op_budget_s = env_real("DLBENCH_OP_BUDGET_S", s.op_budget_s);
    s.memory_fraction = env_real("DLBENCH_MEMORY_FRACTION", s.memory_fraction);
    if (!(s.memory_fraction > 0.0 && s.memory_fraction <= 1.0))
        throw FatalError(kExitUsage, "DLBENCH_MEMORY_FRACTION=" + std::to_string(s.memory_fraction) +
                                         " must be a fraction in (0, 1]");
    s.device = env_word("DLBENCH_DEVICE", s.device);
    s.dtype = env_word("DLBENCH_DTYPE", s.dtype);
    s.caches = env_word("DLBENCH_CACHES", s.caches);
    s.fp32_math = env_word("DLBENCH_FP32_MATH", s.fp32_math);
    if (s.fp32_math != "ieee" && s.fp32_math != "tf32" && s.fp32_math != "framework")
        throw FatalError(kExitUsage, "DLBENCH_FP32_MATH='" + s.fp32_math +
                                         "' must be ieee, tf32 or framework (fp32_math in the config)");
    if (s.caches != "hot")
        throw FatalError(kExitUsage, "DLBENCH_CACHES='" + s.caches +
                                         "': the native kernels time with hot caches only; measure with "
                                         "caches=hot (measure.caches, evaluate.caches) or with the torch backend");
    std::string verify = env_word("DLBENCH_VERIFY", "0");
    if (verify != "0" && verify != "1")
        throw FatalError(kExitUsage, "DLBENCH_VERIFY='" + verify + "' must be 0 or 1");
    s.verify = verify == "1";
    return s;
}

std::vector<InputRow> read_input(const std::string &path, const std::string &program) {
    std::ifstream in(path);
    if (!in)
        throw FatalError(kExitInputUnreadable, "cannot read input file '" + path + "': " + std::strerror(errno));
    std::vector<InputRow> rows;
    std::string line;
    int lineno = 0;
    while (std::getline(in, line)) {
        ++lineno;
        if (trim(line).empty()) continue;
        auto fields = split(line);
        InputRow row;
        row.line = lineno;
        if (!parse_id(fields[0], row.id)) {
            std::cerr << program << ": " << path << ":" << lineno << ": id '" << trim(fields[0])
                      << "' is not an integer; line skipped\n";
            continue;
        }
        bool ok = true;
        for (size_t i = 1; i < fields.size() && ok; ++i) {
            double value = 0;
            ok = parse_double(fields[i], value);
            if (!ok)
                std::cerr << program << ": id " << row.id << ": " << path << ":" << lineno << ": parameter "
                          << i << " '" << trim(fields[i]) << "' is not a number; no result for this id\n";
            row.values.push_back(value);
        }
        if (ok) rows.push_back(std::move(row));
    }
    if (in.bad()) throw FatalError(kExitInputUnreadable, "error while reading input file '" + path + "'");
    return rows;
}

double available_host_bytes() {
    std::ifstream meminfo("/proc/meminfo");
    std::string key;
    double kib = 0;
    std::string unit;
    while (meminfo >> key >> kib >> unit)
        if (key == "MemAvailable:") return kib * 1024.0;
    return 1e300;
}

namespace {
std::string human_bytes(double bytes) {
    const char *units[] = {"GiB", "MiB", "KiB"};
    const double factors[] = {1073741824.0, 1048576.0, 1024.0};
    std::ostringstream out;
    out << std::fixed << std::setprecision(1);
    for (int i = 0; i < 3; ++i)
        if (bytes >= factors[i]) {
            out << bytes / factors[i] << " " << units[i];
            return out.str();
        }
    out << std::setprecision(0) << bytes << " B";
    return out.str();
}
} // namespace

void guard_memory(const Settings &settings, double needed, double free_bytes) {
    if (needed <= settings.memory_fraction * free_bytes) return;
    std::ostringstream why;
    why << "needs " << human_bytes(needed) << ", over " << std::setprecision(3) << settings.memory_fraction * 100
        << "% of the " << human_bytes(free_bytes) << " free; skipped";
    throw RowError(why.str());
}

std::string output_path_for(const std::string &input_path) {
    auto slash = input_path.find_last_of('/');
    std::string dir = slash == std::string::npos ? "" : input_path.substr(0, slash + 1);
    std::string file = slash == std::string::npos ? input_path : input_path.substr(slash + 1);
    auto dot = file.find_last_of('.');
    std::string stem = (dot == std::string::npos || dot == 0) ? file : file.substr(0, dot);
    return dir + stem + "_out.csv";
}

std::string samples_path_for(const std::string &input_path) {
    std::string out = output_path_for(input_path);
    return out.substr(0, out.size() - std::string("_out.csv").size()) + "_samples.csv";
}

Params::Params(const std::vector<std::string> &names, const std::vector<double> &values, long long id)
    : names_(names), values_(values), id_(id) {}

double Params::lookup(const std::string &name) const {
    for (size_t i = 0; i < names_.size(); ++i)
        if (names_[i] == name) return values_.at(i);
    throw RowError("kernel asked for unknown parameter '" + name + "'");
}

std::int64_t Params::integer(const std::string &name) const {
    double value = lookup(name);
    if (value != std::floor(value) || std::fabs(value) > 9.0e15)
        throw RowError(name + "=" + std::to_string(value) + " is not an integer");
    return static_cast<std::int64_t>(value);
}

std::int64_t Params::positive(const std::string &name) const {
    auto value = integer(name);
    if (value < 1) throw RowError(name + "=" + std::to_string(value) + " must be >= 1");
    return value;
}

std::int64_t Params::non_negative(const std::string &name) const {
    auto value = integer(name);
    if (value < 0) throw RowError(name + "=" + std::to_string(value) + " must be >= 0");
    return value;
}

double Params::real(const std::string &name) const { return lookup(name); }

int run_benchmark_main(int argc, char **argv, const KernelSpec &spec) {
    try {
        bool verify_flag = false;
        std::string input_path;
        for (int i = 1; i < argc; ++i) {
            std::string arg = argv[i];
            if (arg == "--verify") {
                verify_flag = true;
            } else if (arg == "-h" || arg == "--help") {
                print_usage(spec);
                return kExitOk;
            } else if (!arg.empty() && arg[0] == '-') {
                print_usage(spec);
                throw FatalError(kExitUsage, "unknown option '" + arg + "'");
            } else if (input_path.empty()) {
                input_path = arg;
            } else {
                print_usage(spec);
                throw FatalError(kExitUsage, "more than one input file ('" + input_path + "', '" + arg + "')");
            }
        }
        Settings settings = Settings::from_env();
        settings.verify = settings.verify || verify_flag;
        if (!settings.verify && input_path.empty()) {
            print_usage(spec);
            throw FatalError(kExitUsage, "no input file given");
        }
        if (spec.setup) spec.setup(settings);
        if (settings.verify) {
            if (!spec.verify(settings)) {
                std::cerr << spec.name << ": verify: MISMATCH against the naive reference\n";
                return kExitVerifyMismatch;
            }
            std::cerr << spec.name << ": verify: all cases match the naive reference\n";
            if (input_path.empty()) return kExitOk;
        }
        auto rows = read_input(input_path, spec.name);
        std::string output_path = output_path_for(input_path);
        std::ofstream out(output_path);
        if (!out)
            throw FatalError(kExitInputUnreadable,
                             "cannot write output file '" + output_path + "': " + std::strerror(errno));
        std::string samples_path = samples_path_for(input_path);
        std::ofstream samples_out(samples_path);
        if (!samples_out)
            throw FatalError(kExitInputUnreadable,
                             "cannot write samples file '" + samples_path + "': " + std::strerror(errno));
        out << kOutputHeader << std::flush;
        out << std::setprecision(std::numeric_limits<double>::max_digits10);
        samples_out << "id,ms\n" << std::setprecision(7); // far below timer noise, half the size
        for (const auto &row : rows) {
            try {
                if (row.values.size() != spec.param_names.size())
                    throw RowError("expected " + std::to_string(spec.param_names.size()) +
                                   " parameters after the id, got " + std::to_string(row.values.size()));
                Params params(spec.param_names, row.values, row.id);
                TimeStats s = spec.measure(params, settings);
                if (s.budget_spent)
                    std::cerr << spec.name << ": id " << row.id << ": time budget of " << settings.op_budget_s
                              << " s spent after " << s.reps << " repetitions (min_reps " << settings.min_reps
                              << "); the measurement is kept\n";
                // Flushed per row so the rows finished before a timeout survive; samples first, so a row
                // that is read always has its samples.
                for (double sample : s.samples_ms)
                    samples_out << row.id << "," << sample << "\n";
                samples_out << std::flush;
                out << row.id << "," << s.median_ms << "," << s.min_ms << "," << s.max_ms << "," << s.mean_ms
                    << "," << cell(s.std_ms, out) << "," << cell(s.iqr_ms, out) << "," << s.reps << ","
                    << cell(s.p10_ms, out) << "," << cell(s.p90_ms, out) << "," << cell(s.ci_low_ms, out) << ","
                    << cell(s.ci_high_ms, out) << "," << (s.ci_low_ms ? (s.converged ? "1" : "0") : "") << "\n"
                    << std::flush;
            } catch (const FatalError &) {
                throw;
            } catch (const std::exception &err) {
                std::cerr << spec.name << ": id " << row.id << " (input line " << row.line
                          << "): " << err.what() << "; no result for this id\n";
            }
        }
        return kExitOk;
    } catch (const FatalError &err) {
        std::cerr << spec.name << ": error: " << err.what() << "\n";
        return err.exit_code();
    } catch (const std::exception &err) {
        std::cerr << spec.name << ": unexpected error: " << err.what() << "\n";
        return kExitLibraryError;
    }
}

} // namespace dlbench
