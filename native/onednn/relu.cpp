// oneDNN ReLU (eltwise) benchmark: mode 0 forward, 1 backward (gradient from the forward input). NCHW.
#include "onednn_utils.hpp"
#include "shapes.hpp"
#include "verify_cases.hpp"

namespace {

using namespace dlbench;
using namespace dlbench::onednn;
using dims = dnnl::memory::dims;

struct ReluProblem {
    dnnl::primitive primitive;
    std::unordered_map<int, dnnl::memory> args;
    dnnl::memory result;
};

ReluProblem prepare(const ElementwiseShape &s, const reference::Tensor &src, const reference::Tensor &diff_dst) {
    dims data_dims{s.n, s.c, s.h, s.w};
    dnnl::memory::desc md(data_dims, dt::f32, tag::nchw);
    auto &eng = cpu_engine();
    try {
        ReluProblem p;
        auto src_mem = plain_memory(data_dims, tag::nchw, src);
        if (s.mode == 0) {
            dnnl::eltwise_forward::desc desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::eltwise_relu, md,
                                             0.0f);
            dnnl::eltwise_forward::primitive_desc pd(desc, eng);
            p.result = zeros(pd.dst_desc());
            p.primitive = dnnl::eltwise_forward(pd);
            p.args = {{DNNL_ARG_SRC, src_mem}, {DNNL_ARG_DST, p.result}};
            return p;
        }
        dnnl::eltwise_forward::desc fwd_desc(dnnl::prop_kind::forward_training, dnnl::algorithm::eltwise_relu, md,
                                             0.0f);
        dnnl::eltwise_forward::primitive_desc fwd_pd(fwd_desc, eng);
        dnnl::eltwise_backward::desc bwd_desc(dnnl::algorithm::eltwise_relu, md, md, 0.0f);
        dnnl::eltwise_backward::primitive_desc bwd_pd(bwd_desc, eng, fwd_pd);
        p.result = zeros(bwd_pd.diff_src_desc());
        p.primitive = dnnl::eltwise_backward(bwd_pd);
        p.args = {{DNNL_ARG_SRC, src_mem},
                  {DNNL_ARG_DIFF_DST, plain_memory(data_dims, tag::nchw, diff_dst)},
                  {DNNL_ARG_DIFF_SRC, p.result}};
        return p;
    } catch (const dnnl::error &err) {
        rethrow_as_row_error(err, "relu");
    }
}

bool verify(const Settings &) {
    bool ok = true;
    for (const auto &row : verify_cases::elementwise()) {
        for (int mode = 0; mode < 2; ++mode) {
            ElementwiseShape s = parse_elementwise(Params(kElementwiseParams, verify_cases::with_mode(row, mode)));
            auto src = reference::random_tensor(s.size(), 13), diff_dst = reference::random_tensor(s.size(), 14);
            ReluProblem p = prepare(s, src, diff_dst);
            p.primitive.execute(cpu_stream(), p.args);
            cpu_stream().wait();
            const auto *data = static_cast<const float *>(p.result.get_data_handle());
            reference::Tensor got(data, data + s.size());
            auto want = mode == 0 ? reference::relu_forward(src) : reference::relu_backward(src, diff_dst);
            ok = reference::compare("relu N" + std::to_string(s.n) + " C" + std::to_string(s.c) + " H" +
                                        std::to_string(s.h) + " W" + std::to_string(s.w) + " mode" +
                                        std::to_string(mode),
                                    got, want, 0.0, 0.0) &&
                 ok;
        }
    }
    return ok;
}

TimeStats measure(const Params &params, const Settings &settings) {
    ElementwiseShape s = parse_elementwise(params);
    guard_memory(settings, 4.0 * 5 * double(s.size()), available_host_bytes());
    ReluProblem p = prepare(s, reference::random_tensor(s.size(), 13), reference::random_tensor(s.size(), 14));
    return time_primitive(settings, p.primitive, p.args);
}

} // namespace

int main(int argc, char **argv) {
    KernelSpec spec;
    spec.name = "onednn_relu";
    spec.param_names = kElementwiseParams;
    spec.setup = [](const Settings &settings) { setup_cpu("onednn_relu", settings); };
    spec.verify = verify;
    spec.measure = measure;
    return run_benchmark_main(argc, argv, spec);
}
