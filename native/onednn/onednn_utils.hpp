// Shared oneDNN plumbing for the CPU benchmarks: engine and stream, thread setup, memory transfer, and
// the timed execution loop (only `execute` + `stream.wait()` is inside the timed region).
#pragma once

#include "protocol.hpp"
#include "reference.hpp"

#include <oneapi/dnnl/dnnl.hpp>

#include <cstring>
#include <string>
#include <unordered_map>
#include <vector>

namespace dlbench::onednn {

using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;

dnnl::engine &cpu_engine();
dnnl::stream &cpu_stream();

// DLBENCH_THREADS -> omp_set_num_threads; only float32 is supported.
void setup_cpu(const std::string &program, const Settings &settings);

// A plain (user-layout) f32 memory holding `values`.
dnnl::memory plain_memory(const dnnl::memory::dims &dims, tag layout, const reference::Tensor &values);
// `source` in the layout `desc` asks for (a reorder when the layouts differ; never timed).
dnnl::memory in_layout(const dnnl::memory &source, const dnnl::memory::desc &desc);
// The contents of `source` as a plain tensor of `dims`/`layout`.
reference::Tensor to_plain(const dnnl::memory &source, const dnnl::memory::dims &dims, tag layout);
// A zero-filled memory of `desc`.
dnnl::memory zeros(const dnnl::memory::desc &desc);

// One primitive execution; a timed repetition runs a list of them, then waits for the stream.
struct Step {
    dnnl::primitive primitive;
    std::unordered_map<int, dnnl::memory> args;
};
void run_steps(const std::vector<Step> &steps);
TimeStats time_steps(const Settings &settings, const std::vector<Step> &steps);

// `source` in the layout `desc` asks for. With `timed` null the reorder (if any) runs now; otherwise
// it is appended to `timed`, to run inside every repetition.
dnnl::memory convert(const dnnl::memory &source, const dnnl::memory::desc &desc, std::vector<Step> *timed);

// Time `prim.execute(stream, args)` + `stream.wait()` with the protocol's repetition rules.
TimeStats time_primitive(const Settings &settings, dnnl::primitive &prim,
                         const std::unordered_map<int, dnnl::memory> &args);

// Turn a oneDNN error during primitive creation into a row error naming the problem.
[[noreturn]] void rethrow_as_row_error(const dnnl::error &err, const std::string &what);

} // namespace dlbench::onednn
