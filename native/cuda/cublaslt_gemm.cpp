// cuBLAS GEMM benchmark for Gemm/MatMul: C[b] = op(A[b]) @ op(B[b]) on row-major data via
// cublasSgemmStridedBatched (computing C^T = op(B)^T op(A)^T in cuBLAS's column-major view).
// FP32 with cuBLAS's default (pedantic-free, no TF32) math, like torch's default for matmul.
#include "cuda_utils.hpp"
#include "shapes.hpp"
#include "verify_cases.hpp"

#include <cublas_v2.h>

namespace {

using namespace dlbench;
using namespace dlbench::cuda;

void check_cublas(cublasStatus_t status, const std::string &what) {
    if (status != CUBLAS_STATUS_SUCCESS) throw RowError(what + ": " + cublasGetStatusName(status) + " (" + cublasGetStatusString(status) + ")");
}

cublasHandle_t handle() {
    static cublasHandle_t h = [] {
        cublasHandle_t created = nullptr;
        cublasStatus_t status = cublasCreate(&created);
        if (status != CUBLAS_STATUS_SUCCESS)
            throw FatalError(kExitLibraryError, std::string("cublasCreate failed: ") + cublasGetStatusString(status));
        return created;
    }();
    return h;
}

struct GemmProblem {
    GemmShape s;
    DeviceBuffer a, b, c;
    void launch() const {
        const float alpha = 1.0f, beta = 0.0f;
        // Row-major X stored RxC is column-major X^T (ld C). See the file comment for the mapping.
        cublasOperation_t op_b = s.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
        cublasOperation_t op_a = s.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
        int ldb = static_cast<int>(s.trans_b ? s.k : s.n);
        int lda = static_cast<int>(s.trans_a ? s.m : s.k);
        check_cublas(cublasSgemmStridedBatched(handle(), op_b, op_a, static_cast<int>(s.n), static_cast<int>(s.m),
                                               static_cast<int>(s.k), &alpha, b.get(), ldb, s.k * s.n, a.get(), lda,
                                               s.m * s.k, &beta, c.get(), static_cast<int>(s.n), s.m * s.n,
                                               static_cast<int>(s.batch)),
                     "cublasSgemmStridedBatched " + s.describe());
    }
};

GemmProblem prepare(const GemmShape &s, const reference::Tensor &a, const reference::Tensor &b) {
    const dim int_max = 2147483647;
    require(s.m <= int_max && s.n <= int_max && s.k <= int_max && s.batch <= int_max,
            "cuBLAS dimensions must fit a 32-bit int: " + s.describe());
    return GemmProblem{s, DeviceBuffer(a), DeviceBuffer(b), DeviceBuffer(static_cast<size_t>(s.batch * s.m * s.n))};
}

bool verify(const Settings &) {
    bool ok = true;
    for (const auto &row : verify_cases::gemm()) {
        GemmShape s = parse_gemm(Params(kGemmParams, row));
        auto a = reference::random_tensor(s.batch * s.m * s.k, 3);
        auto b = reference::random_tensor(s.batch * s.k * s.n, 4);
        GemmProblem p = prepare(s, a, b);
        p.launch();
        check_cuda(cudaDeviceSynchronize(), "gemm");
        ok = reference::compare("cublas gemm " + s.describe(), p.c.download(), reference::gemm(s, a, b)) && ok;
    }
    return ok;
}

TimeStats measure(const Params &params, const Settings &settings) {
    GemmShape s = parse_gemm(params);
    const double elements = double(s.batch) * double(s.m * s.k + s.k * s.n + s.m * s.n);
    guard_memory(settings, 4.0 * elements, available_device_bytes());
    guard_memory(settings, 4.0 * elements, available_host_bytes());
    GemmProblem p = prepare(s, reference::random_tensor(s.batch * s.m * s.k, 3),
                            reference::random_tensor(s.batch * s.k * s.n, 4));
    return time_with_events(settings, [&] { p.launch(); });
}

} // namespace

int main(int argc, char **argv) {
    KernelSpec spec;
    spec.name = "cuda_gemm";
    spec.param_names = kGemmParams;
    spec.setup = [](const Settings &settings) { setup_gpu("cuda_gemm", settings); };
    spec.verify = verify;
    spec.measure = measure;
    return run_benchmark_main(argc, argv, spec);
}
