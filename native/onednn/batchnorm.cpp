// oneDNN batch normalization benchmark: mode 0 forward training (batch statistics), 1 backward (scale and
// shift gradients too), 2 forward inference (running statistics). Scale and shift are always used, as in
// ONNX BatchNormalization. momentum is accepted; the running-average update (C values) is not timed.
#include "onednn_utils.hpp"
#include "shapes.hpp"
#include "verify_cases.hpp"

namespace {

using namespace dlbench;
using namespace dlbench::onednn;
using dims = dnnl::memory::dims;
using flags = dnnl::normalization_flags;

struct BatchNormProblem {
    dnnl::primitive primitive;
    std::unordered_map<int, dnnl::memory> args;
};

struct BatchNormData {
    reference::Tensor src, diff_dst, scale, shift, mean, variance;
    explicit BatchNormData(const BatchNormShape &s)
        : src(reference::random_tensor(s.size(), 7)), diff_dst(reference::random_tensor(s.size(), 8)),
          scale(reference::random_tensor(s.c, 9)), shift(reference::random_tensor(s.c, 10)),
          mean(reference::random_tensor(s.c, 11)), variance(reference::random_tensor(s.c, 12)) {
        for (auto &v : variance)
            v = v + 1.5f; // positive
    }
};

BatchNormProblem prepare(const BatchNormShape &s, const BatchNormData &d) {
    dims data_dims{s.n, s.c, s.h, s.w}, channel_dims{s.c};
    dnnl::memory::desc data_md(data_dims, dt::f32, tag::nchw);
    auto &eng = cpu_engine();
    const float epsilon = static_cast<float>(s.epsilon);
    auto channel = [&](const reference::Tensor &values) { return plain_memory(channel_dims, tag::a, values); };
    try {
        BatchNormProblem p;
        auto src = plain_memory(data_dims, tag::nchw, d.src);
        if (s.mode == 2) {
            dnnl::batch_normalization_forward::desc desc(dnnl::prop_kind::forward_inference, data_md, epsilon,
                                                         flags::use_global_stats | flags::use_scale |
                                                             flags::use_shift);
            dnnl::batch_normalization_forward::primitive_desc pd(desc, eng);
            p.primitive = dnnl::batch_normalization_forward(pd);
            p.args = {{DNNL_ARG_SRC, src},           {DNNL_ARG_MEAN, channel(d.mean)},
                      {DNNL_ARG_VARIANCE, channel(d.variance)}, {DNNL_ARG_SCALE, channel(d.scale)},
                      {DNNL_ARG_SHIFT, channel(d.shift)},       {DNNL_ARG_DST, zeros(pd.dst_desc())}};
            return p;
        }
        dnnl::batch_normalization_forward::desc fwd_desc(dnnl::prop_kind::forward_training, data_md, epsilon,
                                                         flags::use_scale | flags::use_shift);
        dnnl::batch_normalization_forward::primitive_desc fwd_pd(fwd_desc, eng);
        auto mean = zeros(fwd_pd.mean_desc()), variance = zeros(fwd_pd.variance_desc());
        auto dst = zeros(fwd_pd.dst_desc());
        std::unordered_map<int, dnnl::memory> fwd_args = {
            {DNNL_ARG_SRC, src},           {DNNL_ARG_SCALE, channel(d.scale)}, {DNNL_ARG_SHIFT, channel(d.shift)},
            {DNNL_ARG_MEAN, mean},         {DNNL_ARG_VARIANCE, variance},      {DNNL_ARG_DST, dst}};
        if (s.mode == 0) {
            p.primitive = dnnl::batch_normalization_forward(fwd_pd);
            p.args = fwd_args;
            return p;
        }
        // Backward needs the batch statistics of a forward-training pass: run it once, untimed.
        dnnl::batch_normalization_forward(fwd_pd).execute(cpu_stream(), fwd_args);
        cpu_stream().wait();
        dnnl::batch_normalization_backward::desc bwd_desc(dnnl::prop_kind::backward, data_md, data_md, epsilon,
                                                          flags::use_scale | flags::use_shift);
        dnnl::batch_normalization_backward::primitive_desc bwd_pd(bwd_desc, eng, fwd_pd);
        p.primitive = dnnl::batch_normalization_backward(bwd_pd);
        p.args = {{DNNL_ARG_SRC, src},
                  {DNNL_ARG_MEAN, mean},
                  {DNNL_ARG_VARIANCE, variance},
                  {DNNL_ARG_DIFF_DST, plain_memory(data_dims, tag::nchw, d.diff_dst)},
                  {DNNL_ARG_SCALE, fwd_args.at(DNNL_ARG_SCALE)},
                  {DNNL_ARG_DIFF_SRC, zeros(bwd_pd.diff_src_desc())},
                  {DNNL_ARG_SHIFT, fwd_args.at(DNNL_ARG_SHIFT)},
                  {DNNL_ARG_DIFF_SCALE, zeros(bwd_pd.query_md(dnnl::query::exec_arg_md, DNNL_ARG_DIFF_SCALE))},
                  {DNNL_ARG_DIFF_SHIFT, zeros(bwd_pd.query_md(dnnl::query::exec_arg_md, DNNL_ARG_DIFF_SHIFT))}};
        return p;
    } catch (const dnnl::error &err) {
        rethrow_as_row_error(err, "batch normalization N" + std::to_string(s.n) + " C" + std::to_string(s.c) +
                                      " H" + std::to_string(s.h) + " W" + std::to_string(s.w));
    }
}

reference::Tensor contents(const dnnl::memory &mem) {
    const auto *data = static_cast<const float *>(mem.get_data_handle());
    return reference::Tensor(data, data + mem.get_desc().get_size() / sizeof(float));
}

bool verify(const Settings &) {
    bool ok = true;
    for (const auto &row : verify_cases::batchnorm()) {
        for (int mode = 0; mode < 3; ++mode) {
            BatchNormShape s = parse_batchnorm(Params(kBatchNormParams, verify_cases::with_mode(row, mode)));
            BatchNormData d(s);
            BatchNormProblem p = prepare(s, d);
            p.primitive.execute(cpu_stream(), p.args);
            cpu_stream().wait();
            std::string what = "batchnorm N" + std::to_string(s.n) + " C" + std::to_string(s.c) + " H" +
                               std::to_string(s.h) + " W" + std::to_string(s.w) + " mode" + std::to_string(mode);
            if (mode == 0) {
                auto want = reference::batchnorm_forward(s, d.src, d.scale, d.shift, nullptr, nullptr);
                ok = reference::compare(what + " dst", contents(p.args.at(DNNL_ARG_DST)), want.dst) && ok;
                ok = reference::compare(what + " mean", contents(p.args.at(DNNL_ARG_MEAN)), want.mean) && ok;
                ok = reference::compare(what + " variance", contents(p.args.at(DNNL_ARG_VARIANCE)), want.variance) &&
                     ok;
            } else if (mode == 2) {
                auto want = reference::batchnorm_forward(s, d.src, d.scale, d.shift, &d.mean, &d.variance);
                ok = reference::compare(what + " dst", contents(p.args.at(DNNL_ARG_DST)), want.dst) && ok;
            } else {
                auto mean = contents(p.args.at(DNNL_ARG_MEAN)), variance = contents(p.args.at(DNNL_ARG_VARIANCE));
                auto want = reference::batchnorm_backward(s, d.src, d.diff_dst, d.scale, mean, variance);
                ok = reference::compare(what + " diff_src", contents(p.args.at(DNNL_ARG_DIFF_SRC)), want.dst, 1e-3,
                                        1e-3) &&
                     ok;
                ok = reference::compare(what + " diff_scale", contents(p.args.at(DNNL_ARG_DIFF_SCALE)),
                                        want.diff_scale, 1e-3, 1e-3) &&
                     ok;
                ok = reference::compare(what + " diff_shift", contents(p.args.at(DNNL_ARG_DIFF_SHIFT)),
                                        want.diff_shift, 1e-3, 1e-3) &&
                     ok;
            }
        }
    }
    return ok;
}

TimeStats measure(const Params &params, const Settings &settings) {
    BatchNormShape s = parse_batchnorm(params);
    guard_memory(settings, 4.0 * 6 * double(s.size()), available_host_bytes());
    BatchNormData d(s);
    BatchNormProblem p = prepare(s, d);
    return time_primitive(settings, p.primitive, p.args);
}

} // namespace

int main(int argc, char **argv) {
    KernelSpec spec;
    spec.name = "onednn_batchnorm";
    spec.param_names = kBatchNormParams;
    spec.setup = [](const Settings &settings) { setup_cpu("onednn_batchnorm", settings); };
    spec.verify = verify;
    spec.measure = measure;
    return run_benchmark_main(argc, argv, spec);
}
