// cuBLASLt GEMM benchmark for Gemm/MatMul: C[b] = op(A[b]) @ op(B[b]) on row-major data, computed as
// C^T = op(B)^T op(A)^T in cuBLASLt's column-major view, strided batches, the algorithm of cuBLASLt's
// heuristics (the first it ranks, with a 32 MiB workspace as PyTorch gives it on Hopper).
// float32 with IEEE math (CUBLAS_COMPUTE_32F) or TF32 (CUBLAS_COMPUTE_32F_FAST_TF32) per DLBENCH_FP32_MATH
// (framework: IEEE, PyTorch's default for matmul), float16 and bfloat16 with float32 accumulation.
#include "cuda_utils.hpp"
#include "precision.hpp"
#include "shapes.hpp"
#include "verify_cases.hpp"

#include <cublasLt.h>

#include <iostream>
#include <memory>

namespace {

using namespace dlbench;
using namespace dlbench::cuda;

constexpr size_t kWorkspaceBytes = size_t(32) << 20;

void check_lt(cublasStatus_t status, const std::string &what) {
    if (status != CUBLAS_STATUS_SUCCESS)
        throw RowError(what + ": " + cublasLtGetStatusName(status) + " (" + cublasLtGetStatusString(status) + ")");
}

cublasLtHandle_t handle() {
    static cublasLtHandle_t h = [] {
        cublasLtHandle_t created = nullptr;
        cublasStatus_t status = cublasLtCreate(&created);
        if (status != CUBLAS_STATUS_SUCCESS)
            throw FatalError(kExitLibraryError, std::string("cublasLtCreate failed: ") + cublasLtGetStatusString(status));
        return created;
    }();
    return h;
}

Precision &gemm_precision() {
    static Precision precision;
    return precision;
}

cudaDataType_t data_type(DType dtype) {
    if (dtype == DType::f16) return CUDA_R_16F;
    if (dtype == DType::bf16) return CUDA_R_16BF;
    return CUDA_R_32F;
}

// A column-major matrix layout: rows x cols, leading dimension rows, `batch` of them `stride` elements apart.
struct Layout {
    cublasLtMatrixLayout_t desc = nullptr;
    Layout(cudaDataType_t type, dim rows, dim cols, dim batch, dim stride) {
        check_lt(cublasLtMatrixLayoutCreate(&desc, type, static_cast<uint64_t>(rows), static_cast<uint64_t>(cols),
                                            static_cast<int64_t>(rows)),
                 "cublasLtMatrixLayoutCreate");
        const int32_t count = static_cast<int32_t>(batch);
        const int64_t offset = static_cast<int64_t>(stride);
        check_lt(cublasLtMatrixLayoutSetAttribute(desc, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)),
                 "batch count");
        check_lt(cublasLtMatrixLayoutSetAttribute(desc, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &offset,
                                                  sizeof(offset)),
                 "batch stride");
    }
    Layout(const Layout &) = delete;
    Layout &operator=(const Layout &) = delete;
    ~Layout() { cublasLtMatrixLayoutDestroy(desc); }
};

struct MatmulDesc {
    cublasLtMatmulDesc_t desc = nullptr;
    MatmulDesc(cublasComputeType_t compute, cublasOperation_t op_a, cublasOperation_t op_b) {
        check_lt(cublasLtMatmulDescCreate(&desc, compute, CUDA_R_32F), "cublasLtMatmulDescCreate");
        check_lt(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)), "transa");
        check_lt(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)), "transb");
    }
    MatmulDesc(const MatmulDesc &) = delete;
    MatmulDesc &operator=(const MatmulDesc &) = delete;
    ~MatmulDesc() { cublasLtMatmulDescDestroy(desc); }
};

struct Preference {
    cublasLtMatmulPreference_t desc = nullptr;
    explicit Preference(size_t workspace) {
        check_lt(cublasLtMatmulPreferenceCreate(&desc), "cublasLtMatmulPreferenceCreate");
        const uint64_t bytes = workspace;
        check_lt(cublasLtMatmulPreferenceSetAttribute(desc, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &bytes,
                                                      sizeof(bytes)),
                 "workspace preference");
    }
    Preference(const Preference &) = delete;
    Preference &operator=(const Preference &) = delete;
    ~Preference() { cublasLtMatmulPreferenceDestroy(desc); }
};

struct GemmProblem {
    GemmShape s;
    Precision precision;
    DeviceBytes a, b, c, workspace;
    // cuBLASLt's "A" is our B, its "B" our A (see the file comment)
    std::unique_ptr<Layout> lt_a, lt_b, lt_c;
    std::unique_ptr<MatmulDesc> op;
    cublasLtMatmulHeuristicResult_t choice{};
    std::string label;

    void launch() const {
        const float alpha = 1.0f, beta = 0.0f;
        check_lt(cublasLtMatmul(handle(), op->desc, &alpha, b.get(), lt_a->desc, a.get(), lt_b->desc, &beta, c.get(),
                                lt_c->desc, c.get(), lt_c->desc, &choice.algo, workspace.get(), workspace.size(), nullptr),
                 "cublasLtMatmul " + s.describe());
    }
};

std::unique_ptr<GemmProblem> prepare(const GemmShape &s, const reference::Tensor &a, const reference::Tensor &b,
                                     const Precision &precision) {
    const dim int_max = 2147483647;
    require(s.m <= int_max && s.n <= int_max && s.k <= int_max && s.batch <= int_max,
            "cuBLASLt dimensions must fit a 32-bit int: " + s.describe());
    auto p = std::make_unique<GemmProblem>();
    p->s = s;
    p->precision = precision;
    p->a = DeviceBytes(encode(precision.dtype, a));
    p->b = DeviceBytes(encode(precision.dtype, b));
    p->c = DeviceBytes(static_cast<size_t>(s.batch * s.m * s.n) * precision.element_bytes());
    const cudaDataType_t type = data_type(precision.dtype);
    // Row-major B (K x N, or N x K transposed) is column-major N x K (K x N); likewise A.
    p->lt_a = std::make_unique<Layout>(type, s.trans_b ? s.k : s.n, s.trans_b ? s.n : s.k, s.batch, s.k * s.n);
    p->lt_b = std::make_unique<Layout>(type, s.trans_a ? s.m : s.k, s.trans_a ? s.k : s.m, s.batch, s.m * s.k);
    p->lt_c = std::make_unique<Layout>(type, s.n, s.m, s.batch, s.m * s.n);
    const cublasComputeType_t compute = precision.tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    p->op = std::make_unique<MatmulDesc>(compute, s.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N,
                                         s.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N);
    Preference preference(kWorkspaceBytes);
    int returned = 0;
    check_lt(cublasLtMatmulAlgoGetHeuristic(handle(), p->op->desc, p->lt_a->desc, p->lt_b->desc, p->lt_c->desc,
                                            p->lt_c->desc, preference.desc, 1, &p->choice, &returned),
             "cublasLtMatmulAlgoGetHeuristic");
    require(returned > 0 && p->choice.state == CUBLAS_STATUS_SUCCESS,
            "cuBLASLt's heuristics offer no algorithm for " + s.describe() + " in " + precision.label());
    p->workspace = DeviceBytes(p->choice.workspaceSize);
    int32_t algo_id = -1, tile = -1;
    size_t written = 0;
    cublasLtMatmulAlgoConfigGetAttribute(&p->choice.algo, CUBLASLT_ALGO_CONFIG_ID, &algo_id, sizeof(algo_id), &written);
    cublasLtMatmulAlgoConfigGetAttribute(&p->choice.algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof(tile), &written);
    p->label = "cuBLASLt heuristic algo " + std::to_string(algo_id) + " tile " + std::to_string(tile) + ", " +
               precision.label() + ", workspace " + std::to_string(p->choice.workspaceSize) + " bytes";
    return p;
}

bool verify(const Settings &) {
    const Precision &precision = gemm_precision();
    const Tolerance tol = tolerance(precision);
    bool ok = true;
    for (const auto &row : verify_cases::gemm()) {
        GemmShape s = parse_gemm(Params(kGemmParams, row));
        auto a = rounded(precision.dtype, reference::random_tensor(s.batch * s.m * s.k, 3));
        auto b = rounded(precision.dtype, reference::random_tensor(s.batch * s.k * s.n, 4));
        std::unique_ptr<GemmProblem> p;
        try { // a case cuBLASLt refuses is a failure of this precision, reported with the others
            p = prepare(s, a, b, precision);
            p->launch();
            check_cuda(cudaDeviceSynchronize(), "gemm");
        } catch (const RowError &err) {
            std::cerr << "  cublasLt gemm " << s.describe() << " [" << precision.label() << "]: FAILED: " << err.what()
                      << "\n";
            ok = false;
            continue;
        }
        ok = reference::compare("cublasLt gemm " + s.describe() + " [" + p->label + "]",
                                decode(precision.dtype, p->c.download()), reference::gemm(s, a, b), tol.rtol,
                                tol.atol) &&
             ok;
    }
    return ok;
}

TimeStats measure(const Params &params, const Settings &settings) {
    GemmShape s = parse_gemm(params);
    const Precision &precision = gemm_precision();
    const double elements = double(s.batch) * double(s.m * s.k + s.k * s.n + s.m * s.n);
    guard_memory(settings, double(precision.element_bytes()) * elements + double(kWorkspaceBytes),
                 available_device_bytes());
    guard_memory(settings, 4.0 * 2 * elements, available_host_bytes());
    auto p = prepare(s, rounded(precision.dtype, reference::random_tensor(s.batch * s.m * s.k, 3)),
                     rounded(precision.dtype, reference::random_tensor(s.batch * s.k * s.n, 4)), precision);
    std::cerr << "cuda_gemm: id " << params.id() << ": " << p->label << "\n";
    return time_with_events(settings, [&] { p->launch(); });
}

void setup(const Settings &settings) {
    // PyTorch's default keeps matmuls in IEEE float32 (torch.backends.cuda.matmul.allow_tf32 = False).
    gemm_precision() = precision_from(settings, /*framework_tf32=*/false);
    setup_gpu("cuda_gemm", settings);
}

} // namespace

int main(int argc, char **argv) {
    KernelSpec spec;
    spec.name = "cuda_gemm";
    spec.param_names = kGemmParams;
    spec.setup = setup;
    spec.verify = verify;
    spec.measure = measure;
    return run_benchmark_main(argc, argv, spec);
}
