// Error handling shared by every dlbench native benchmark: one set of exit codes, two exception kinds.
#pragma once

#include <stdexcept>
#include <string>

namespace dlbench {

// Exit codes of every native benchmark executable (documented in native/README.md).
enum ExitCode : int {
    kExitOk = 0,              // every row ran, or failed rows were reported on stderr
    kExitVerifyMismatch = 1,  // verify mode: a kernel result differs from the naive reference
    kExitUsage = 2,           // bad command line or bad DLBENCH_* setting
    kExitInputUnreadable = 3, // the input CSV cannot be opened, or the output CSV cannot be written
    kExitNoDevice = 4,        // the kernel needs a device (GPU) that this machine does not have
    kExitLibraryError = 5,    // an unexpected failure inside a library outside any row
};

// A row the kernel cannot run (bad parameters, unsupported by the library): reported with its id,
// the rest of the input goes on.
class RowError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// A failure that ends the program with a specific exit code.
class FatalError : public std::runtime_error {
public:
    FatalError(int exit_code, const std::string &message)
        : std::runtime_error(message), exit_code_(exit_code) {}
    int exit_code() const { return exit_code_; }

private:
    int exit_code_;
};

// Throw RowError with `message` when `condition` is false.
inline void require(bool condition, const std::string &message) {
    if (!condition) throw RowError(message);
}

} // namespace dlbench
