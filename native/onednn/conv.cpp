// oneDNN convolution benchmark: mode 0 forward, 1 backward data, 2 backward weights (no bias).
// Layouts are oneDNN's preferred ones (format_tag::any). DLBENCH_ONEDNN_LAYOUT selects what is timed:
//   blocked (default): the primitive only; NCHW data is reordered once, outside the timing, as a network
//                      kept in blocked layouts between operators would run it;
//   plain:             reorders of the NCHW/OIHW inputs into the preferred layouts and of the result back
//                      are timed with the primitive, as torch's eager F.conv2d on NCHW tensors does per call.
#include "onednn_utils.hpp"
#include "shapes.hpp"
#include "verify_cases.hpp"

#include <cstdlib>
#include <iostream>

namespace {

using namespace dlbench;
using namespace dlbench::onednn;
using dims = dnnl::memory::dims;

enum class Layout { blocked, plain };

Layout &layout_setting() {
    static Layout layout = Layout::blocked;
    return layout;
}

struct ConvProblem {
    std::vector<Step> steps; // the timed work: [input reorders,] the convolution[, result reorder]
    dnnl::memory result;     // dst, diff_src or diff_weights in the primitive's layout
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
ConvProblem prepare(const ConvShape &s, const reference::Tensor &first, const reference::Tensor &second,
                    Layout layout) {
    ConvGeometry g(s);
    auto &eng = cpu_engine();
    try {
        dnnl::convolution_forward::desc fwd_desc(dnnl::prop_kind::forward_training,
                                                 dnnl::algorithm::convolution_direct, any(g.src),
                                                 any(g.weights), any(g.dst), g.strides, g.dilations, g.pad_l,
                                                 g.pad_r);
        dnnl::convolution_forward::primitive_desc fwd_pd(fwd_desc, eng);
        ConvProblem p;
        std::vector<Step> *timed = layout == Layout::plain ? &p.steps : nullptr;
        dims result_dims;
        tag result_tag = tag::nchw;
        if (s.mode == 0) {
            auto src = convert(plain_memory(g.src, tag::nchw, first), fwd_pd.src_desc(), timed);
            auto weights = convert(plain_memory(g.weights, g.weights_tag, second), fwd_pd.weights_desc(), timed);
            p.result = zeros(fwd_pd.dst_desc());
            result_dims = g.dst;
            p.steps.push_back({dnnl::convolution_forward(fwd_pd),
                               {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_DST, p.result}}});
        } else if (s.mode == 1) {
            dnnl::convolution_backward_data::desc bwd_desc(dnnl::algorithm::convolution_direct, any(g.src),
                                                           any(g.weights), any(g.dst), g.strides, g.dilations,
                                                           g.pad_l, g.pad_r);
            dnnl::convolution_backward_data::primitive_desc bwd_pd(bwd_desc, eng, fwd_pd);
            auto diff_dst = convert(plain_memory(g.dst, tag::nchw, first), bwd_pd.diff_dst_desc(), timed);
            auto weights = convert(plain_memory(g.weights, g.weights_tag, second), bwd_pd.weights_desc(), timed);
            p.result = zeros(bwd_pd.diff_src_desc());
            result_dims = g.src;
            p.steps.push_back(
                {dnnl::convolution_backward_data(bwd_pd),
                 {{DNNL_ARG_DIFF_DST, diff_dst}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_DIFF_SRC, p.result}}});
        } else {
            dnnl::convolution_backward_weights::desc bwd_desc(dnnl::algorithm::convolution_direct, any(g.src),
                                                              any(g.weights), any(g.dst), g.strides,
                                                              g.dilations, g.pad_l, g.pad_r);
            dnnl::convolution_backward_weights::primitive_desc bwd_pd(bwd_desc, eng, fwd_pd);
            auto src = convert(plain_memory(g.src, tag::nchw, first), bwd_pd.src_desc(), timed);
            auto diff_dst = convert(plain_memory(g.dst, tag::nchw, second), bwd_pd.diff_dst_desc(), timed);
            p.result = zeros(bwd_pd.diff_weights_desc());
            result_dims = g.weights;
            result_tag = g.weights_tag;
            p.steps.push_back(
                {dnnl::convolution_backward_weights(bwd_pd),
                 {{DNNL_ARG_SRC, src}, {DNNL_ARG_DIFF_DST, diff_dst}, {DNNL_ARG_DIFF_WEIGHTS, p.result}}});
        }
        if (timed != nullptr) {
            dnnl::memory::desc plain_desc(result_dims, dt::f32, result_tag);
            if (p.result.get_desc() != plain_desc) {
                dnnl::memory plain_result = zeros(plain_desc);
                p.steps.push_back(
                    {dnnl::reorder(p.result, plain_result), {{DNNL_ARG_FROM, p.result}, {DNNL_ARG_TO, plain_result}}});
            }
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
    for (Layout layout : {Layout::blocked, Layout::plain})
    for (const auto &row : verify_cases::conv()) {
        for (int mode = 0; mode < 3; ++mode) {
            auto values = verify_cases::with_mode(row, mode);
            ConvShape s = parse_conv(Params(kConvParams, values));
            auto [first_size, second_size] = input_sizes(s);
            auto first = reference::random_tensor(first_size, 1);
            auto second = reference::random_tensor(second_size, 2);
            ConvProblem p = prepare(s, first, second, layout);
            run_steps(p.steps);
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
            std::string what = "conv " + s.describe() + (layout == Layout::plain ? " plain" : " blocked");
            ok = reference::compare(what, got, want) && ok;
        }
    }
    return ok;
}

TimeStats measure(const Params &params, const Settings &settings) {
    ConvShape s = parse_conv(params);
    auto [first_size, second_size] = input_sizes(s);
    // host copies, plain oneDNN memories, blocked copies (and the plain result when timed)
    guard_memory(settings, 4.0 * 3 * double(s.src_size() + s.weights_size() + s.dst_size()), available_host_bytes());
    ConvProblem p = prepare(s, reference::random_tensor(first_size, 1), reference::random_tensor(second_size, 2),
                            layout_setting());
    return time_steps(settings, p.steps);
}

} // namespace

int main(int argc, char **argv) {
    KernelSpec spec;
    spec.name = "onednn_conv";
    spec.param_names = kConvParams;
    spec.setup = [](const Settings &settings) {
        setup_cpu("onednn_conv", settings);
        const char *raw = std::getenv("DLBENCH_ONEDNN_LAYOUT");
        std::string layout = raw == nullptr || *raw == '\0' ? "blocked" : raw;
        if (layout != "blocked" && layout != "plain")
            throw FatalError(kExitUsage, "DLBENCH_ONEDNN_LAYOUT='" + layout + "' must be blocked or plain");
        layout_setting() = layout == "plain" ? Layout::plain : Layout::blocked;
    };
    spec.verify = verify;
    spec.measure = measure;
    return run_benchmark_main(argc, argv, spec);
}
