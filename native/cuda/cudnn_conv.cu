// cuDNN convolution benchmark: mode 0 forward, 1 backward data, 2 backward filter (no bias), NCHW float32.
// Algorithm: DLBENCH_CUDNN_ALGO=heuristic (default, cudnnGet*_v7) or search (cudnnFind*, timed by cuDNN);
// the choice is printed per id on stderr. DLBENCH_CUDNN_TF32=1 (default, like torch's cuDNN default)
// allows TF32 tensor cores, 0 forbids them; verify mode always forbids them.
// cuDNN's legacy API takes symmetric pads only: for asymmetric pads the input is zero-padded once,
// outside the timed region, and the convolution runs unpadded on it (as ONNX Runtime's CUDA Conv does).
#include "cuda_utils.hpp"
#include "shapes.hpp"
#include "verify_cases.hpp"

#include <cudnn.h>

#include <iostream>
#include <memory>
#include <vector>

namespace {

using namespace dlbench;
using namespace dlbench::cuda;

void check_cudnn(cudnnStatus_t status, const std::string &what) {
    if (status != CUDNN_STATUS_SUCCESS) throw RowError(what + ": " + cudnnGetErrorString(status));
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

struct CudnnSettings {
    AlgoChoice choice = AlgoChoice::heuristic;
    bool tf32 = true;
};

CudnnSettings &cudnn_settings() {
    static CudnnSettings settings;
    return settings;
}

const char *const kForwardNames[] = {"IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT",
                                     "FFT",           "FFT_TILING",            "WINOGRAD", "WINOGRAD_NONFUSED"};
const char *const kBackwardDataNames[] = {"ALGO_0", "ALGO_1", "FFT", "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"};
const char *const kBackwardFilterNames[] = {"ALGO_0", "ALGO_1", "FFT", "ALGO_3", "WINOGRAD", "WINOGRAD_NONFUSED",
                                            "FFT_TILING"};

template <size_t N> std::string algo_name(const char *const (&names)[N], int algo) {
    return algo >= 0 && static_cast<size_t>(algo) < N ? names[algo] : "ALGO_" + std::to_string(algo);
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

struct Descriptors {
    cudnnTensorDescriptor_t x = nullptr, y = nullptr;
    cudnnFilterDescriptor_t w = nullptr;
    cudnnConvolutionDescriptor_t conv = nullptr;
    Descriptors(const ConvShape &d, bool tf32) {
        check_cudnn(cudnnCreateTensorDescriptor(&x), "cudnnCreateTensorDescriptor");
        check_cudnn(cudnnCreateTensorDescriptor(&y), "cudnnCreateTensorDescriptor");
        check_cudnn(cudnnCreateFilterDescriptor(&w), "cudnnCreateFilterDescriptor");
        check_cudnn(cudnnCreateConvolutionDescriptor(&conv), "cudnnCreateConvolutionDescriptor");
        auto i = [](dim v) { return static_cast<int>(v); };
        check_cudnn(cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, i(d.n), i(d.c), i(d.h), i(d.w)),
                    "input descriptor");
        check_cudnn(cudnnSetFilter4dDescriptor(w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, i(d.k), i(d.c / d.groups),
                                               i(d.kh), i(d.kw)),
                    "filter descriptor");
        check_cudnn(cudnnSetConvolution2dDescriptor(conv, i(d.pad_top), i(d.pad_left), i(d.stride_h), i(d.stride_w),
                                                    i(d.dilation_h), i(d.dilation_w), CUDNN_CROSS_CORRELATION,
                                                    CUDNN_DATA_FLOAT),
                    "convolution descriptor");
        check_cudnn(cudnnSetConvolutionGroupCount(conv, i(d.groups)), "group count");
        check_cudnn(cudnnSetConvolutionMathType(conv, tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH), "math type");
        int n = 0, c = 0, h = 0, wd = 0;
        check_cudnn(cudnnGetConvolution2dForwardOutputDim(conv, x, w, &n, &c, &h, &wd), "output size");
        require(n == d.n && c == d.k && h == d.oh && wd == d.ow,
                "cuDNN computes output " + std::to_string(h) + "x" + std::to_string(wd) + ", expected " +
                    std::to_string(d.oh) + "x" + std::to_string(d.ow));
        check_cudnn(cudnnSetTensor4dDescriptor(y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, c, h, wd), "output descriptor");
    }
    Descriptors(const Descriptors &) = delete;
    Descriptors &operator=(const Descriptors &) = delete;
    ~Descriptors() {
        cudnnDestroyTensorDescriptor(x);
        cudnnDestroyTensorDescriptor(y);
        cudnnDestroyFilterDescriptor(w);
        cudnnDestroyConvolutionDescriptor(conv);
    }
};

// Pick the first algorithm cuDNN ranks usable; `get` fills perf results (heuristic or search).
template <typename Perf, typename Get> Perf pick(Get &&get, int count, const std::string &what) {
    std::vector<Perf> results(static_cast<size_t>(count));
    int returned = 0;
    check_cudnn(get(count, &returned, results.data()), what);
    for (int i = 0; i < returned; ++i)
        if (results[i].status == CUDNN_STATUS_SUCCESS) return results[i];
    throw RowError(what + ": cuDNN offers no algorithm for this convolution");
}

struct ConvProblem {
    ConvShape shape, device;
    std::unique_ptr<Descriptors> desc;
    DeviceBuffer first, second, result; // inputs of the mode, and its output
    std::unique_ptr<DeviceBytes> workspace;
    int algo = 0;
    std::string algo_label;

    void launch() const {
        const float alpha = 1.0f, beta = 0.0f;
        const Descriptors &d = *desc;
        if (shape.mode == 0) {
            check_cudnn(cudnnConvolutionForward(handle(), &alpha, d.x, first.get(), d.w, second.get(), d.conv,
                                                static_cast<cudnnConvolutionFwdAlgo_t>(algo), workspace->get(),
                                                workspace->size(), &beta, d.y, result.get()),
                        "cudnnConvolutionForward");
        } else if (shape.mode == 1) {
            check_cudnn(cudnnConvolutionBackwardData(handle(), &alpha, d.w, second.get(), d.y, first.get(), d.conv,
                                                     static_cast<cudnnConvolutionBwdDataAlgo_t>(algo),
                                                     workspace->get(), workspace->size(), &beta, d.x, result.get()),
                        "cudnnConvolutionBackwardData");
        } else {
            check_cudnn(cudnnConvolutionBackwardFilter(handle(), &alpha, d.x, first.get(), d.y, second.get(), d.conv,
                                                       static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo),
                                                       workspace->get(), workspace->size(), &beta, d.w,
                                                       result.get()),
                        "cudnnConvolutionBackwardFilter");
        }
    }
};

// `first`/`second` on the host, in the original (unpadded) shape: (src, weights), (diff_dst, weights),
// (src, diff_dst) for modes 0, 1, 2.
ConvProblem prepare(const ConvShape &s, const reference::Tensor &first, const reference::Tensor &second, bool tf32) {
    ConvProblem p;
    p.shape = s;
    p.device = device_shape(s);
    const ConvShape &d = p.device;
    p.desc = std::make_unique<Descriptors>(d, tf32);
    const Descriptors &ds = *p.desc;
    const bool search = cudnn_settings().choice == AlgoChoice::search;
    size_t bytes = 0;
    if (s.mode == 0) {
        p.first = DeviceBuffer(pad_input(s, d, first));
        p.second = DeviceBuffer(second);
        p.result = DeviceBuffer(static_cast<size_t>(d.dst_size()));
        auto perf = pick<cudnnConvolutionFwdAlgoPerf_t>(
            [&](int n, int *got, cudnnConvolutionFwdAlgoPerf_t *out) {
                return search ? cudnnFindConvolutionForwardAlgorithm(handle(), ds.x, ds.w, ds.conv, ds.y, n, got, out)
                              : cudnnGetConvolutionForwardAlgorithm_v7(handle(), ds.x, ds.w, ds.conv, ds.y, n, got, out);
            },
            CUDNN_CONVOLUTION_FWD_ALGO_COUNT, "forward algorithm selection");
        p.algo = perf.algo;
        p.algo_label = "forward " + algo_name(kForwardNames, perf.algo);
        check_cudnn(cudnnGetConvolutionForwardWorkspaceSize(handle(), ds.x, ds.w, ds.conv, ds.y, perf.algo, &bytes),
                    "forward workspace size");
    } else if (s.mode == 1) {
        p.first = DeviceBuffer(first);
        p.second = DeviceBuffer(second);
        p.result = DeviceBuffer(static_cast<size_t>(d.src_size()));
        auto perf = pick<cudnnConvolutionBwdDataAlgoPerf_t>(
            [&](int n, int *got, cudnnConvolutionBwdDataAlgoPerf_t *out) {
                return search ? cudnnFindConvolutionBackwardDataAlgorithm(handle(), ds.w, ds.y, ds.conv, ds.x, n, got, out)
                              : cudnnGetConvolutionBackwardDataAlgorithm_v7(handle(), ds.w, ds.y, ds.conv, ds.x, n, got,
                                                                            out);
            },
            CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, "backward-data algorithm selection");
        p.algo = perf.algo;
        p.algo_label = "backward-data " + algo_name(kBackwardDataNames, perf.algo);
        check_cudnn(
            cudnnGetConvolutionBackwardDataWorkspaceSize(handle(), ds.w, ds.y, ds.conv, ds.x, perf.algo, &bytes),
            "backward-data workspace size");
    } else {
        p.first = DeviceBuffer(pad_input(s, d, first));
        p.second = DeviceBuffer(second);
        p.result = DeviceBuffer(static_cast<size_t>(d.weights_size()));
        auto perf = pick<cudnnConvolutionBwdFilterAlgoPerf_t>(
            [&](int n, int *got, cudnnConvolutionBwdFilterAlgoPerf_t *out) {
                return search ? cudnnFindConvolutionBackwardFilterAlgorithm(handle(), ds.x, ds.y, ds.conv, ds.w, n, got,
                                                                            out)
                              : cudnnGetConvolutionBackwardFilterAlgorithm_v7(handle(), ds.x, ds.y, ds.conv, ds.w, n,
                                                                              got, out);
            },
            CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, "backward-filter algorithm selection");
        p.algo = perf.algo;
        p.algo_label = "backward-filter " + algo_name(kBackwardFilterNames, perf.algo);
        check_cudnn(
            cudnnGetConvolutionBackwardFilterWorkspaceSize(handle(), ds.x, ds.y, ds.conv, ds.w, perf.algo, &bytes),
            "backward-filter workspace size");
    }
    p.workspace = std::make_unique<DeviceBytes>(bytes);
    p.algo_label += std::string(search ? " (search)" : " (heuristic)") + ", workspace " + std::to_string(bytes) +
                    " bytes" + (symmetric(s) ? "" : ", asymmetric pads applied to the input beforehand");
    return p;
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
            ConvShape s = parse_conv(Params(kConvParams, verify_cases::with_mode(row, mode)));
            auto [first_size, second_size] = input_sizes(s);
            auto first = reference::random_tensor(first_size, 1);
            auto second = reference::random_tensor(second_size, 2);
            ConvProblem p = prepare(s, first, second, /*tf32=*/false);
            p.launch();
            check_cuda(cudaDeviceSynchronize(), "convolution");
            reference::Tensor got = p.result.download(), want;
            if (mode == 0) {
                want = reference::conv_forward(s, first, second);
            } else if (mode == 1) {
                got = crop_input(s, p.device, got);
                want = reference::conv_backward_data(s, first, second);
            } else {
                want = reference::conv_backward_weights(s, first, second);
            }
            // FFT and Winograd algorithms round differently from a direct sum.
            ok = reference::compare("cudnn conv " + s.describe() + " [" + p.algo_label + "]", got, want, 1e-3, 1e-3) &&
                 ok;
        }
    }
    return ok;
}

TimeStats measure(const Params &params, const Settings &settings) {
    ConvShape s = parse_conv(params);
    auto [first_size, second_size] = input_sizes(s);
    // padded input, weights, output; the algorithm's workspace is checked by cudaMalloc
    ConvShape d = device_shape(s);
    const double elements = double(d.src_size() + d.weights_size() + d.dst_size());
    guard_memory(settings, 4.0 * elements, available_device_bytes());
    guard_memory(settings, 4.0 * 2 * elements, available_host_bytes());
    ConvProblem p = prepare(s, reference::random_tensor(first_size, 1), reference::random_tensor(second_size, 2),
                            cudnn_settings().tf32);
    std::cerr << "cuda_conv: id " << params.id() << ": " << p.algo_label << "\n";
    return time_with_events(settings, [&] { p.launch(); });
}

void setup(const Settings &settings) {
    const char *algo = std::getenv("DLBENCH_CUDNN_ALGO");
    std::string choice = algo == nullptr || *algo == '\0' ? "heuristic" : algo;
    if (choice == "heuristic") {
        cudnn_settings().choice = AlgoChoice::heuristic;
    } else if (choice == "search") {
        cudnn_settings().choice = AlgoChoice::search;
    } else {
        throw FatalError(kExitUsage, "DLBENCH_CUDNN_ALGO='" + choice + "' must be heuristic or search");
    }
    const char *tf32 = std::getenv("DLBENCH_CUDNN_TF32");
    std::string tf32_value = tf32 == nullptr || *tf32 == '\0' ? "1" : tf32;
    if (tf32_value != "0" && tf32_value != "1")
        throw FatalError(kExitUsage, "DLBENCH_CUDNN_TF32='" + tf32_value + "' must be 0 or 1");
    cudnn_settings().tf32 = tf32_value == "1";
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
