// oneDNN pooling benchmark, built twice: onednn_maxpool (DLBENCH_POOL_MAX=1) and onednn_avgpool
// (average excluding padding, ONNX's count_include_pad=0). Mode 0 forward (inference), 1 backward
// (the forward-training pass that records the max positions runs once, untimed). NCHW layout.
#include "onednn_utils.hpp"
#include "shapes.hpp"
#include "verify_cases.hpp"

#ifndef DLBENCH_POOL_MAX
#error "define DLBENCH_POOL_MAX to 1 (MaxPool) or 0 (AveragePool)"
#endif

namespace {

using namespace dlbench;
using namespace dlbench::onednn;
using dims = dnnl::memory::dims;

constexpr bool kMax = DLBENCH_POOL_MAX != 0;
const char *const kName = kMax ? "onednn_maxpool" : "onednn_avgpool";
const auto kAlgorithm = kMax ? dnnl::algorithm::pooling_max : dnnl::algorithm::pooling_avg_exclude_padding;

struct PoolProblem {
    dnnl::primitive primitive;
    std::unordered_map<int, dnnl::memory> args;
    dnnl::memory result; // dst (mode 0) or diff_src (mode 1)
};

// `first` is src (mode 0) or src and `second` diff_dst (mode 1).
PoolProblem prepare(const PoolShape &s, const reference::Tensor &src, const reference::Tensor &diff_dst) {
    dims src_dims{s.n, s.c, s.h, s.w}, dst_dims{s.n, s.c, s.oh, s.ow};
    dims strides{s.stride_h, s.stride_w}, kernel{s.kh, s.kw};
    dims pad_l{s.pad_top, s.pad_left}, pad_r{s.pad_bottom, s.pad_right};
    dnnl::memory::desc src_md(src_dims, dt::f32, tag::nchw), dst_md(dst_dims, dt::f32, tag::nchw);
    auto &eng = cpu_engine();
    try {
        PoolProblem p;
        auto src_mem = plain_memory(src_dims, tag::nchw, src);
        if (s.mode == 0) {
            dnnl::pooling_forward::desc desc(dnnl::prop_kind::forward_inference, kAlgorithm, src_md, dst_md,
                                             strides, kernel, pad_l, pad_r);
            dnnl::pooling_forward::primitive_desc pd(desc, eng);
            p.result = zeros(pd.dst_desc());
            p.primitive = dnnl::pooling_forward(pd);
            p.args = {{DNNL_ARG_SRC, src_mem}, {DNNL_ARG_DST, p.result}};
            return p;
        }
        dnnl::pooling_forward::desc fwd_desc(dnnl::prop_kind::forward_training, kAlgorithm, src_md, dst_md,
                                             strides, kernel, pad_l, pad_r);
        dnnl::pooling_forward::primitive_desc fwd_pd(fwd_desc, eng);
        auto workspace = zeros(fwd_pd.workspace_desc());
        auto dst = zeros(fwd_pd.dst_desc());
        dnnl::pooling_forward(fwd_pd).execute(
            cpu_stream(), {{DNNL_ARG_SRC, src_mem}, {DNNL_ARG_DST, dst}, {DNNL_ARG_WORKSPACE, workspace}});
        cpu_stream().wait();
        dnnl::pooling_backward::desc bwd_desc(kAlgorithm, src_md, dst_md, strides, kernel, pad_l, pad_r);
        dnnl::pooling_backward::primitive_desc bwd_pd(bwd_desc, eng, fwd_pd);
        p.result = zeros(bwd_pd.diff_src_desc());
        p.primitive = dnnl::pooling_backward(bwd_pd);
        p.args = {{DNNL_ARG_DIFF_DST, plain_memory(dst_dims, tag::nchw, diff_dst)},
                  {DNNL_ARG_DIFF_SRC, p.result},
                  {DNNL_ARG_WORKSPACE, workspace}};
        return p;
    } catch (const dnnl::error &err) {
        rethrow_as_row_error(err, std::string(kMax ? "max" : "average") + " pooling " + s.describe());
    }
}

const float *data_of(const dnnl::memory &mem) { return static_cast<const float *>(mem.get_data_handle()); }

bool verify(const Settings &) {
    bool ok = true;
    for (const auto &row : verify_cases::pool()) {
        for (int mode = 0; mode < 2; ++mode) {
            PoolShape s = parse_pool(Params(kPoolParams, verify_cases::with_mode(row, mode)));
            auto src = reference::random_tensor(s.src_size(), 5);
            auto diff_dst = reference::random_tensor(s.dst_size(), 6);
            PoolProblem p = prepare(s, src, diff_dst);
            p.primitive.execute(cpu_stream(), p.args);
            cpu_stream().wait();
            reference::Tensor want = mode == 0 ? reference::pool_forward(s, kMax, src)
                                               : reference::pool_backward(s, kMax, src, diff_dst);
            reference::Tensor got(data_of(p.result), data_of(p.result) + want.size());
            ok = reference::compare(std::string(kName) + " " + s.describe(), got, want) && ok;
        }
    }
    return ok;
}

TimeStats measure(const Params &params, const Settings &settings) {
    PoolShape s = parse_pool(params);
    guard_memory(settings, 4.0 * 3 * double(s.src_size() + 2 * s.dst_size()), available_host_bytes());
    PoolProblem p = prepare(s, reference::random_tensor(s.src_size(), 5), reference::random_tensor(s.dst_size(), 6));
    return time_primitive(settings, p.primitive, p.args);
}

} // namespace

int main(int argc, char **argv) {
    KernelSpec spec;
    spec.name = kName;
    spec.param_names = kPoolParams;
    spec.setup = [](const Settings &settings) { setup_cpu(kName, settings); };
    spec.verify = verify;
    spec.measure = measure;
    return run_benchmark_main(argc, argv, spec);
}
