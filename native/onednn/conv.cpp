// oneDNN convolution benchmark: mode 0 forward, 1 backward data, 2 backward weights (no bias).
// Layouts are oneDNN's preferred ones (format_tag::any); user NCHW data is reordered outside the timing,
// as torch's mkldnn path keeps tensors in blocked layouts between operators.
#include "onednn_utils.hpp"
#include "shapes.hpp"
#include "verify_cases.hpp"

#include <iostream>

namespace {

using namespace dlbench;
using namespace dlbench::onednn;
using dims = dnnl::memory::dims;

struct ConvProblem {
    dnnl::primitive primitive;
    std::unordered_map<int, dnnl::memory> args;
    dnnl::memory result; // dst, diff_src or diff_weights
};

struct ConvGeometry {
    dims src, weights, dst, strides, dilations, pad_l, pad_r;
    tag weights_tag;
    explicit ConvGeometry(const ConvShape &s)
        : src{s.n, s.c, s.h, s.w}, dst{s.n, s.k, s.oh, s.ow}, strides{s.stride_h, s.stride_w},
          dilations{s.dilation_h - 1, s.dilation_w - 1}, pad_l{s.pad_top, s.pad_left},
          pad_r{s.pad_bottom, s.pad_right} {
        if (s.groups > 1) {
            weights = {s.groups, s.k / s.groups, s.c / s.groups, s.kh, s.kw};
            weights_tag = tag::goihw;
        } else {
            weights = {s.k, s.c, s.kh, s.kw};
            weights_tag = tag::oihw;
        }
    }
};

dnnl::memory::desc any(const dims &d) { return {d, dt::f32, tag::any}; }

// `first` and `second` are the plain inputs of the mode: (src, weights), (diff_dst, weights), (src, diff_dst).
ConvProblem prepare(const ConvShape &s, const reference::Tensor &first, const reference::Tensor &second) {
    ConvGeometry g(s);
    auto &eng = cpu_engine();
    try {
        dnnl::convolution_forward::desc fwd_desc(dnnl::prop_kind::forward_training,
                                                 dnnl::algorithm::convolution_direct, any(g.src),
                                                 any(g.weights), any(g.dst), g.strides, g.dilations, g.pad_l,
                                                 g.pad_r);
        dnnl::convolution_forward::primitive_desc fwd_pd(fwd_desc, eng);
        ConvProblem p;
        if (s.mode == 0) {
            auto src = in_layout(plain_memory(g.src, tag::nchw, first), fwd_pd.src_desc());
            auto weights = in_layout(plain_memory(g.weights, g.weights_tag, second), fwd_pd.weights_desc());
            p.result = zeros(fwd_pd.dst_desc());
            p.primitive = dnnl::convolution_forward(fwd_pd);
            p.args = {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_DST, p.result}};
        } else if (s.mode == 1) {
            dnnl::convolution_backward_data::desc bwd_desc(dnnl::algorithm::convolution_direct, any(g.src),
                                                           any(g.weights), any(g.dst), g.strides, g.dilations,
                                                           g.pad_l, g.pad_r);
            dnnl::convolution_backward_data::primitive_desc bwd_pd(bwd_desc, eng, fwd_pd);
            auto diff_dst = in_layout(plain_memory(g.dst, tag::nchw, first), bwd_pd.diff_dst_desc());
            auto weights = in_layout(plain_memory(g.weights, g.weights_tag, second), bwd_pd.weights_desc());
            p.result = zeros(bwd_pd.diff_src_desc());
            p.primitive = dnnl::convolution_backward_data(bwd_pd);
            p.args = {{DNNL_ARG_DIFF_DST, diff_dst}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_DIFF_SRC, p.result}};
        } else {
            dnnl::convolution_backward_weights::desc bwd_desc(dnnl::algorithm::convolution_direct, any(g.src),
                                                              any(g.weights), any(g.dst), g.strides,
                                                              g.dilations, g.pad_l, g.pad_r);
            dnnl::convolution_backward_weights::primitive_desc bwd_pd(bwd_desc, eng, fwd_pd);
            auto src = in_layout(plain_memory(g.src, tag::nchw, first), bwd_pd.src_desc());
            auto diff_dst = in_layout(plain_memory(g.dst, tag::nchw, second), bwd_pd.diff_dst_desc());
            p.result = zeros(bwd_pd.diff_weights_desc());
            p.primitive = dnnl::convolution_backward_weights(bwd_pd);
            p.args = {{DNNL_ARG_SRC, src}, {DNNL_ARG_DIFF_DST, diff_dst}, {DNNL_ARG_DIFF_WEIGHTS, p.result}};
        }
        return p;
    } catch (const dnnl::error &err) {
        rethrow_as_row_error(err, "convolution " + s.describe());
    }
}

std::pair<dim, dim> input_sizes(const ConvShape &s) {
    if (s.mode == 0) return {s.src_size(), s.weights_size()};
    if (s.mode == 1) return {s.dst_size(), s.weights_size()};
    return {s.src_size(), s.dst_size()};
}

bool verify(const Settings &) {
    bool ok = true;
    for (const auto &row : verify_cases::conv()) {
        for (int mode = 0; mode < 3; ++mode) {
            auto values = verify_cases::with_mode(row, mode);
            ConvShape s = parse_conv(Params(kConvParams, values));
            auto [first_size, second_size] = input_sizes(s);
            auto first = reference::random_tensor(first_size, 1);
            auto second = reference::random_tensor(second_size, 2);
            ConvProblem p = prepare(s, first, second);
            p.primitive.execute(cpu_stream(), p.args);
            cpu_stream().wait();
            ConvGeometry g(s);
            reference::Tensor got, want;
            if (mode == 0) {
                got = to_plain(p.result, g.dst, tag::nchw);
                want = reference::conv_forward(s, first, second);
            } else if (mode == 1) {
                got = to_plain(p.result, g.src, tag::nchw);
                want = reference::conv_backward_data(s, first, second);
            } else {
                got = to_plain(p.result, g.weights, g.weights_tag);
                want = reference::conv_backward_weights(s, first, second);
            }
            ok = reference::compare("conv " + s.describe(), got, want) && ok;
        }
    }
    return ok;
}

TimeStats measure(const Params &params, const Settings &settings) {
    ConvShape s = parse_conv(params);
    auto [first_size, second_size] = input_sizes(s);
    ConvProblem p = prepare(s, reference::random_tensor(first_size, 1), reference::random_tensor(second_size, 2));
    return time_primitive(settings, p.primitive, p.args);
}

} // namespace

int main(int argc, char **argv) {
    KernelSpec spec;
    spec.name = "onednn_conv";
    spec.param_names = kConvParams;
    spec.setup = [](const Settings &settings) { setup_cpu("onednn_conv", settings); };
    spec.verify = verify;
    spec.measure = measure;
    return run_benchmark_main(argc, argv, spec);
}
