// cuDNN convolution benchmark on cuDNN's graph API (cudnn-frontend, the layer PyTorch uses): mode 0 forward,
// 1 backward data, 2 backward filter (no bias); float32 (IEEE or TF32 math, DLBENCH_FP32_MATH), float16 and
// bfloat16 (DLBENCH_DTYPE, float32 accumulation); DLBENCH_CUDNN_LAYOUT=nchw (default, as torch's contiguous
// tensors) or nhwc (channels-last, KRSC filters).
// Engine: DLBENCH_CUDNN_ALGO=heuristic (default: the first engine config of cuDNN's heuristics, mode A then
// the fallback list, that builds) or search (every engine config the heuristics list is built and timed
// here, the fastest kept); the choice is printed per id on stderr.
// fp32_math=ieee removes the engines cuDNN notes as using tensor cores (PyTorch's allow_tf32=False filter);
// engines that down-convert their inputs are never used (as in PyTorch).
// Asymmetric pads: the input is zero-padded once, outside the timed region, and the convolution runs
// unpadded on it (as ONNX Runtime's CUDA Conv does). The one translation unit that includes cudnn-frontend.
#include "cuda_utils.hpp"
#include "precision.hpp"
#include "shapes.hpp"
#include "verify_cases.hpp"

#define CUDNN_FRONTEND_SKIP_JSON_LIB
#include <cudnn_frontend.h>
// Graph::check_support() and build_plans(policy) without a handle: cudnn-frontend 1.13.0 and later (CMake
// checks the same minimum, DLBENCH_CUDNN_FRONTEND_MIN, and says so before compiling).
#if CUDNN_FRONTEND_VERSION < 11300
#error "cuda_conv needs cudnn-frontend 1.13.0 or later: pip install 'nvidia-cudnn-frontend>=1.13'"
#endif

#include <algorithm>
#include <iostream>
#include <limits>
#include <memory>
#include <unordered_map>
#include <vector>

namespace {

using namespace dlbench;
using namespace dlbench::cuda;
namespace fe = cudnn_frontend;

void check_fe(fe::error_t status, const std::string &what) {
    if (status.is_bad()) throw RowError(what + ": " + status.get_message());
}

cudnnHandle_t handle() {
    static cudnnHandle_t h = [] {
        cudnnHandle_t created = nullptr;
        cudnnStatus_t status = cudnnCreate(&created);
        if (status != CUDNN_STATUS_SUCCESS)
            throw FatalError(kExitLibraryError, std::string("cudnnCreate failed: ") + cudnnGetErrorString(status));
        return created;
    }();
    return h;
}

enum class AlgoChoice { heuristic, search };
enum class Layout { nchw, nhwc };

struct ConvSettings {
    AlgoChoice choice = AlgoChoice::heuristic;
    Layout layout = Layout::nchw;
    Precision precision;
};

ConvSettings &conv_settings() {
    static ConvSettings settings;
    return settings;
}

bool symmetric(const ConvShape &s) { return s.pad_top == s.pad_bottom && s.pad_left == s.pad_right; }

// The shape cuDNN sees: asymmetric pads become an explicitly zero-padded input.
ConvShape device_shape(const ConvShape &s) {
    if (symmetric(s)) return s;
    ConvShape d = s;
    d.h = s.h + s.pad_top + s.pad_bottom;
    d.w = s.w + s.pad_left + s.pad_right;
    d.pad_top = d.pad_bottom = d.pad_left = d.pad_right = 0;
    d.finish();
    return d;
}

reference::Tensor pad_input(const ConvShape &s, const ConvShape &d, const reference::Tensor &src) {
    if (symmetric(s)) return src;
    reference::Tensor padded(static_cast<size_t>(d.src_size()), 0.0f);
    for (dim nc = 0; nc < s.n * s.c; ++nc)
        for (dim y = 0; y < s.h; ++y)
            for (dim x = 0; x < s.w; ++x)
                padded[(nc * d.h + y + s.pad_top) * d.w + x + s.pad_left] = src[(nc * s.h + y) * s.w + x];
    return padded;
}

reference::Tensor crop_input(const ConvShape &s, const ConvShape &d, const reference::Tensor &padded) {
    if (symmetric(s)) return padded;
    reference::Tensor out(static_cast<size_t>(s.src_size()));
    for (dim nc = 0; nc < s.n * s.c; ++nc)
        for (dim y = 0; y < s.h; ++y)
            for (dim x = 0; x < s.w; ++x)
                out[(nc * s.h + y) * s.w + x] = padded[(nc * d.h + y + s.pad_top) * d.w + x + s.pad_left];
    return out;
}

// A 4-d tensor (a, b, c, d) stored as NCHW (a, b, c, d) or channels-last (a, c, d, b).
std::vector<int64_t> strides(const std::vector<int64_t> &dims, Layout layout) {
    const int64_t b = dims[1], c = dims[2], d = dims[3];
    if (layout == Layout::nchw) return {b * c * d, c * d, d, 1};
    return {b * c * d, 1, d * b, b};
}

// NCHW host data <-> the layout's order.
reference::Tensor to_layout(const reference::Tensor &t, const std::vector<int64_t> &dims, Layout layout, bool back) {
    if (layout == Layout::nchw) return t;
    const int64_t A = dims[0], B = dims[1], C = dims[2], D = dims[3];
    reference::Tensor out(t.size());
    for (int64_t a = 0; a < A; ++a)
        for (int64_t b = 0; b < B; ++b)
            for (int64_t c = 0; c < C; ++c)
                for (int64_t d = 0; d < D; ++d) {
                    const int64_t plain = ((a * B + b) * C + c) * D + d, last = ((a * C + c) * D + d) * B + b;
                    if (back)
                        out[plain] = t[last];
                    else
                        out[last] = t[plain];
                }
    return out;
}

fe::DataType_t io_type(DType dtype) {
    if (dtype == DType::f16) return fe::DataType_t::HALF;
    if (dtype == DType::bf16) return fe::DataType_t::BFLOAT16;
    return fe::DataType_t::FLOAT;
}

struct Dims {
    std::vector<int64_t> x, w, y;
};

Dims dims_of(const ConvShape &d) {
    return {{d.n, d.c, d.h, d.w}, {d.k, d.c / d.groups, d.kh, d.kw}, {d.n, d.k, d.oh, d.ow}};
}

// The convolution of one mode as a cuDNN graph with its engine chosen, its buffers and workspace.
struct ConvProblem {
    ConvShape shape, device;
    Dims dims;
    Precision precision;
    Layout layout = Layout::nchw;
    fe::graph::Graph graph;
    std::shared_ptr<fe::graph::Tensor_attributes> in_first, in_second, out;
    DeviceBytes first, second, result, workspace;
    int64_t plan = -1; // -1: the plan the heuristics build chose
    std::string label;

    // The device pointers by tensor uid, built once (after the operation graph gave the tensors their uids), so
    // a timed call does not rebuild it.
    mutable std::unordered_map<int64_t, void *> variant;

    void bind() {
        variant = {{in_first->get_uid(), first.get()}, {in_second->get_uid(), second.get()}, {out->get_uid(), result.get()}};
    }
    void launch() const {
        check_fe(plan < 0 ? graph.execute(handle(), variant, workspace.get())
                          : graph.execute_plan_at_index(handle(), variant, workspace.get(), plan),
                 "cuDNN graph execute");
    }
};

// The graph of mode s.mode: inputs (x, w), (dy, w), (x, dy) for modes 0, 1, 2.
void build_graph(ConvProblem &p) {
    const ConvShape &d = p.device;
    auto &g = p.graph;
    g.set_io_data_type(io_type(p.precision.dtype))
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    auto tensor = [&](const char *name, const std::vector<int64_t> &dims) {
        return g.tensor(fe::graph::Tensor_attributes().set_name(name).set_dim(dims).set_stride(strides(dims, p.layout)));
    };
    const std::vector<int64_t> pad = {d.pad_top, d.pad_left}, stride = {d.stride_h, d.stride_w},
                               dilation = {d.dilation_h, d.dilation_w};
    const Dims &dims = p.dims;
    if (d.mode == 0) {
        p.in_first = tensor("x", dims.x);
        p.in_second = tensor("w", dims.w);
        p.out = g.conv_fprop(p.in_first, p.in_second,
                             fe::graph::Conv_fprop_attributes().set_name("fprop").set_padding(pad).set_stride(stride).set_dilation(dilation));
        p.out->set_output(true).set_dim(dims.y).set_stride(strides(dims.y, p.layout));
    } else if (d.mode == 1) {
        p.in_first = tensor("dy", dims.y);
        p.in_second = tensor("w", dims.w);
        p.out = g.conv_dgrad(p.in_first, p.in_second,
                             fe::graph::Conv_dgrad_attributes().set_name("dgrad").set_padding(pad).set_stride(stride).set_dilation(dilation));
        p.out->set_output(true).set_dim(dims.x).set_stride(strides(dims.x, p.layout));
    } else {
        p.in_first = tensor("x", dims.x);
        p.in_second = tensor("dy", dims.y);
        p.out = g.conv_wgrad(p.in_second, p.in_first,
                             fe::graph::Conv_wgrad_attributes().set_name("wgrad").set_padding(pad).set_stride(stride).set_dilation(dilation));
        p.out->set_output(true).set_dim(dims.w).set_stride(strides(dims.w, p.layout));
    }
    check_fe(g.validate(), "cuDNN graph validation");
    check_fe(g.build_operation_graph(handle()), "cuDNN operation graph");
    check_fe(g.create_execution_plans({fe::HeurMode_t::A, fe::HeurMode_t::FALLBACK}), "cuDNN heuristics");
    std::vector<fe::NumericalNote_t> barred = {fe::NumericalNote_t::DOWN_CONVERT_INPUTS};
    if (p.precision.dtype == DType::f32 && !p.precision.tf32) barred.push_back(fe::NumericalNote_t::TENSOR_CORE);
    g.deselect_numeric_notes(barred);
    check_fe(g.check_support(), "no cuDNN engine supports this convolution in " + p.precision.label());
}

// Median milliseconds of a few calls of plan `index` (engine search), or infinity when it fails.
double time_plan(ConvProblem &p, int64_t index, void *workspace) {
    auto &variant = p.variant;
    cudaEvent_t start = nullptr, stop = nullptr;
    check_cuda(cudaEventCreate(&start), "cudaEventCreate");
    check_cuda(cudaEventCreate(&stop), "cudaEventCreate");
    std::vector<double> times;
    for (int i = 0; i < 7; ++i) {
        check_cuda(cudaEventRecord(start), "cudaEventRecord");
        bool ok = p.graph.execute_plan_at_index(handle(), variant, workspace, index).is_good();
        check_cuda(cudaEventRecord(stop), "cudaEventRecord");
        check_cuda(cudaEventSynchronize(stop), "engine search");
        float ms = 0;
        check_cuda(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
        if (!ok) {
            times.clear();
            break;
        }
        if (i >= 2) times.push_back(ms); // the first calls pay for loading the kernel
    }
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    if (times.empty()) return std::numeric_limits<double>::infinity();
    std::sort(times.begin(), times.end());
    return times[times.size() / 2];
}

const char *const kModeNames[] = {"forward", "backward-data", "backward-filter"};

// `first`/`second` on the host, NCHW, in the original (unpadded) shape and already in the dtype's values:
// (src, weights), (diff_dst, weights), (src, diff_dst) for modes 0, 1, 2.
std::unique_ptr<ConvProblem> prepare(const ConvShape &s, const reference::Tensor &first,
                                     const reference::Tensor &second, const ConvSettings &settings) {
    auto p = std::make_unique<ConvProblem>();
    p->shape = s;
    p->device = device_shape(s);
    p->dims = dims_of(p->device);
    p->precision = settings.precision;
    p->layout = settings.layout;
    const DType dtype = p->precision.dtype;
    const Dims &dims = p->dims;
    auto upload = [&](const reference::Tensor &t, const std::vector<int64_t> &shape) {
        return DeviceBytes(encode(dtype, to_layout(t, shape, p->layout, false)));
    };
    if (s.mode == 0) {
        p->first = upload(pad_input(s, p->device, first), dims.x);
        p->second = upload(second, dims.w);
        p->result = DeviceBytes(static_cast<size_t>(p->device.dst_size()) * p->precision.element_bytes());
    } else if (s.mode == 1) {
        p->first = upload(first, dims.y);
        p->second = upload(second, dims.w);
        p->result = DeviceBytes(static_cast<size_t>(p->device.src_size()) * p->precision.element_bytes());
    } else {
        p->first = upload(pad_input(s, p->device, first), dims.x);
        p->second = upload(second, dims.y);
        p->result = DeviceBytes(static_cast<size_t>(p->device.weights_size()) * p->precision.element_bytes());
    }
    build_graph(*p);
    p->bind();
    const bool search = settings.choice == AlgoChoice::search;
    int64_t bytes = 0;
    if (!search) {
        check_fe(p->graph.build_plans(fe::BuildPlanPolicy_t::HEURISTICS_CHOICE), "cuDNN plan build");
        check_fe(p->graph.get_workspace_size(bytes), "cuDNN workspace size");
        p->plan = -1; // the candidate the build chose
        std::string name;
        check_fe(p->graph.get_plan_name(name), "cuDNN plan name");
        p->label = name;
    } else {
        check_fe(p->graph.build_plans(fe::BuildPlanPolicy_t::ALL), "cuDNN plan build");
        // Candidates whose workspace fits half the free device memory are timed on one shared workspace.
        const double limit = 0.5 * available_device_bytes();
        int64_t largest = 0;
        std::vector<std::pair<int64_t, int64_t>> candidates; // (plan, workspace bytes)
        for (int64_t i = 0; i < p->graph.get_execution_plan_count(); ++i) {
            int64_t ws = 0;
            if (p->graph.get_workspace_size_plan_at_index(i, ws).is_bad() || double(ws) > limit) continue;
            candidates.emplace_back(i, ws);
            largest = std::max(largest, ws);
        }
        require(!candidates.empty(), "cuDNN built no engine config for this convolution");
        DeviceBytes shared(static_cast<size_t>(largest));
        double best = std::numeric_limits<double>::infinity();
        for (auto [index, ws] : candidates) {
            double ms = time_plan(*p, index, shared.get());
            if (ms < best) {
                best = ms;
                p->plan = index;
                bytes = ws;
            }
        }
        require(best < std::numeric_limits<double>::infinity(), "no cuDNN engine config ran for this convolution");
        check_fe(p->graph.get_plan_name_at_index(p->plan, p->label), "cuDNN plan name");
        p->label += " (fastest of " + std::to_string(candidates.size()) + " timed)";
    }
    p->workspace = DeviceBytes(static_cast<size_t>(bytes));
    p->label = std::string(kModeNames[s.mode]) + " " + p->label + (search ? " (search)" : " (heuristic)") + ", " +
               p->precision.label() + ", " + (p->layout == Layout::nchw ? "NCHW" : "NHWC") + ", workspace " +
               std::to_string(bytes) + " bytes" + (symmetric(s) ? "" : ", asymmetric pads applied to the input beforehand");
    return p;
}

std::pair<dim, dim> input_sizes(const ConvShape &s) {
    if (s.mode == 0) return {s.src_size(), s.weights_size()};
    if (s.mode == 1) return {s.dst_size(), s.weights_size()};
    return {s.src_size(), s.dst_size()};
}

// The result back on the host, NCHW, cropped to the original shape.
reference::Tensor fetch_result(const ConvProblem &p) {
    const Dims &dims = p.dims;
    const std::vector<int64_t> &shape = p.shape.mode == 0 ? dims.y : p.shape.mode == 1 ? dims.x : dims.w;
    reference::Tensor got = to_layout(decode(p.precision.dtype, p.result.download()), shape, p.layout, true);
    return p.shape.mode == 1 ? crop_input(p.shape, p.device, got) : got;
}

// Every verify problem in every mode, in the configured dtype, math and layout, against the naive
// reference computed on the same (rounded) inputs.
bool verify(const Settings &) {
    const ConvSettings &settings = conv_settings();
    const Tolerance tol = tolerance(settings.precision);
    bool ok = true;
    for (const auto &row : verify_cases::conv()) {
        for (int mode = 0; mode < 3; ++mode) {
            ConvShape s = parse_conv(Params(kConvParams, verify_cases::with_mode(row, mode)));
            auto [first_size, second_size] = input_sizes(s);
            auto first = rounded(settings.precision.dtype, reference::random_tensor(first_size, 1));
            auto second = rounded(settings.precision.dtype, reference::random_tensor(second_size, 2));
            std::unique_ptr<ConvProblem> p;
            try { // a case cuDNN refuses is a failure of this precision, reported with the others
                p = prepare(s, first, second, settings);
                p->launch();
                check_cuda(cudaDeviceSynchronize(), "convolution");
            } catch (const RowError &err) {
                std::cerr << "  cudnn conv " << s.describe() << " [" << settings.precision.label()
                          << "]: FAILED: " << err.what() << "\n";
                ok = false;
                continue;
            }
            reference::Tensor want = mode == 0   ? reference::conv_forward(s, first, second)
                                     : mode == 1 ? reference::conv_backward_data(s, first, second)
                                                 : reference::conv_backward_weights(s, first, second);
            ok = reference::compare("cudnn conv " + s.describe() + " [" + p->label + "]", fetch_result(*p), want,
                                    tol.rtol, tol.atol) &&
                 ok;
        }
    }
    return ok;
}

TimeStats measure(const Params &params, const Settings &settings) {
    ConvShape s = parse_conv(params);
    auto [first_size, second_size] = input_sizes(s);
    // padded input, weights, output on the device (the engine's workspace is checked by cudaMalloc);
    // float32 copies and their encoded bytes on the host
    ConvShape d = device_shape(s);
    const double elements = double(d.src_size() + d.weights_size() + d.dst_size());
    guard_memory(settings, double(conv_settings().precision.element_bytes()) * elements, available_device_bytes());
    guard_memory(settings, 4.0 * 3 * elements, available_host_bytes());
    auto p = prepare(s, rounded(conv_settings().precision.dtype, reference::random_tensor(first_size, 1)),
                     rounded(conv_settings().precision.dtype, reference::random_tensor(second_size, 2)),
                     conv_settings());
    std::cerr << "cuda_conv: id " << params.id() << ": " << p->label << "\n";
    return time_with_events(settings, [&] { p->launch(); });
}

std::string env_choice(const char *name, const std::string &fallback) {
    const char *raw = std::getenv(name);
    return raw == nullptr || *raw == '\0' ? fallback : raw;
}

void setup(const Settings &settings) {
    ConvSettings &conv = conv_settings();
    std::string choice = env_choice("DLBENCH_CUDNN_ALGO", "heuristic");
    if (choice == "heuristic") {
        conv.choice = AlgoChoice::heuristic;
    } else if (choice == "search") {
        conv.choice = AlgoChoice::search;
    } else {
        throw FatalError(kExitUsage, "DLBENCH_CUDNN_ALGO='" + choice + "' must be heuristic or search");
    }
    std::string layout = env_choice("DLBENCH_CUDNN_LAYOUT", "nchw");
    if (layout == "nchw") {
        conv.layout = Layout::nchw;
    } else if (layout == "nhwc") {
        conv.layout = Layout::nhwc;
    } else {
        throw FatalError(kExitUsage, "DLBENCH_CUDNN_LAYOUT='" + layout + "' must be nchw or nhwc");
    }
    if (std::getenv("DLBENCH_CUDNN_TF32") != nullptr)
        throw FatalError(kExitUsage, "DLBENCH_CUDNN_TF32 is gone: set DLBENCH_FP32_MATH=ieee|tf32|framework "
                                     "(fp32_math in the config)");
    // PyTorch's default lets cuDNN convolutions use TF32 (torch.backends.cudnn.allow_tf32 = True).
    conv.precision = precision_from(settings, /*framework_tf32=*/true);
    setup_gpu("cuda_conv", settings);
}

} // namespace

int main(int argc, char **argv) {
    KernelSpec spec;
    spec.name = "cuda_conv";
    spec.param_names = kConvParams;
    spec.setup = setup;
    spec.verify = verify;
    spec.measure = measure;
    return run_benchmark_main(argc, argv, spec);
}
