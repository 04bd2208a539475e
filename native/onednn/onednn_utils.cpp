// Shared oneDNN plumbing for the CPU benchmarks.
#include "onednn_utils.hpp"

#include <omp.h>

namespace dlbench::onednn {

dnnl::engine &cpu_engine() {
    static dnnl::engine engine(dnnl::engine::kind::cpu, 0);
    return engine;
}

dnnl::stream &cpu_stream() {
    static dnnl::stream stream(cpu_engine());
    return stream;
}

void setup_cpu(const std::string &program, const Settings &settings) {
    if (settings.device != "cpu" && settings.device != "auto")
        throw FatalError(kExitUsage, program + " runs on the CPU; DLBENCH_DEVICE='" + settings.device + "'");
    if (settings.dtype != "float32")
        throw FatalError(kExitUsage,
                         program + " supports DLBENCH_DTYPE=float32 only, got '" + settings.dtype + "'");
    if (settings.threads > 0) omp_set_num_threads(settings.threads);
}

dnnl::memory plain_memory(const dnnl::memory::dims &dims, tag layout, const reference::Tensor &values) {
    dnnl::memory mem({dims, dt::f32, layout}, cpu_engine());
    std::memcpy(mem.get_data_handle(), values.data(), values.size() * sizeof(float));
    return mem;
}

dnnl::memory in_layout(const dnnl::memory &source, const dnnl::memory::desc &desc) {
    if (source.get_desc() == desc) return source;
    dnnl::memory target(desc, cpu_engine());
    dnnl::reorder(source, target).execute(cpu_stream(), const_cast<dnnl::memory &>(source), target);
    cpu_stream().wait();
    return target;
}

reference::Tensor to_plain(const dnnl::memory &source, const dnnl::memory::dims &dims, tag layout) {
    dnnl::memory plain({dims, dt::f32, layout}, cpu_engine());
    dnnl::reorder(source, plain).execute(cpu_stream(), const_cast<dnnl::memory &>(source), plain);
    cpu_stream().wait();
    const auto *data = static_cast<const float *>(plain.get_data_handle());
    return reference::Tensor(data, data + plain.get_desc().get_size() / sizeof(float));
}

dnnl::memory zeros(const dnnl::memory::desc &desc) {
    dnnl::memory mem(desc, cpu_engine());
    std::memset(mem.get_data_handle(), 0, desc.get_size());
    return mem;
}

void run_steps(const std::vector<Step> &steps) {
    auto &stream = cpu_stream();
    for (const auto &step : steps)
        step.primitive.execute(stream, step.args);
    stream.wait();
}

TimeStats time_steps(const Settings &settings, const std::vector<Step> &steps) {
    return measure_repetitions(settings, [&] { return wall_ms([&] { run_steps(steps); }); });
}

dnnl::memory convert(const dnnl::memory &source, const dnnl::memory::desc &desc, std::vector<Step> *timed) {
    if (timed == nullptr) return in_layout(source, desc);
    if (source.get_desc() == desc) return source;
    dnnl::memory target = zeros(desc);
    timed->push_back({dnnl::reorder(source, target), {{DNNL_ARG_FROM, source}, {DNNL_ARG_TO, target}}});
    return target;
}

TimeStats time_primitive(const Settings &settings, dnnl::primitive &prim,
                         const std::unordered_map<int, dnnl::memory> &args) {
    auto &stream = cpu_stream();
    return measure_repetitions(settings, [&] {
        return wall_ms([&] {
            prim.execute(stream, args);
            stream.wait();
        });
    });
}

void rethrow_as_row_error(const dnnl::error &err, const std::string &what) {
    throw RowError("oneDNN cannot run " + what + ": " + err.what() + " (status " + std::to_string(err.status) + ")");
}

} // namespace dlbench::onednn
