// oneDNN matmul benchmark for Gemm/MatMul: C[b] = op(A[b]) @ op(B[b]) with strided batches; a transposed
// operand is described by its strides, so no transpose is ever materialised.
#include "onednn_utils.hpp"
#include "shapes.hpp"
#include "verify_cases.hpp"

namespace {

using namespace dlbench;
using namespace dlbench::onednn;
using dims = dnnl::memory::dims;

struct MatmulProblem {
    dnnl::primitive primitive;
    std::unordered_map<int, dnnl::memory> args;
    dnnl::memory result;
};

// A stored MxK (KxM when transposed), B stored KxN (NxK when transposed), batches contiguous.
dnnl::memory::desc a_desc(const GemmShape &s) {
    dims strides = s.trans_a ? dims{s.m * s.k, 1, s.m} : dims{s.m * s.k, s.k, 1};
    return {{s.batch, s.m, s.k}, dt::f32, strides};
}
dnnl::memory::desc b_desc(const GemmShape &s) {
    dims strides = s.trans_b ? dims{s.k * s.n, 1, s.k} : dims{s.k * s.n, s.n, 1};
    return {{s.batch, s.k, s.n}, dt::f32, strides};
}

dnnl::memory filled(const dnnl::memory::desc &desc, const reference::Tensor &values) {
    dnnl::memory mem(desc, cpu_engine());
    std::memcpy(mem.get_data_handle(), values.data(), values.size() * sizeof(float));
    return mem;
}

MatmulProblem prepare(const GemmShape &s, const reference::Tensor &a, const reference::Tensor &b) {
    try {
        dnnl::memory::desc c_desc({s.batch, s.m, s.n}, dt::f32, tag::abc);
        dnnl::matmul::desc desc(a_desc(s), b_desc(s), c_desc);
        dnnl::matmul::primitive_desc pd(desc, cpu_engine());
        MatmulProblem p;
        p.result = zeros(pd.dst_desc());
        p.primitive = dnnl::matmul(pd);
        p.args = {{DNNL_ARG_SRC, filled(pd.src_desc(), a)},
                  {DNNL_ARG_WEIGHTS, filled(pd.weights_desc(), b)},
                  {DNNL_ARG_DST, p.result}};
        return p;
    } catch (const dnnl::error &err) {
        rethrow_as_row_error(err, "matmul " + s.describe());
    }
}

bool verify(const Settings &) {
    bool ok = true;
    for (const auto &row : verify_cases::gemm()) {
        GemmShape s = parse_gemm(Params(kGemmParams, row));
        auto a = reference::random_tensor(s.batch * s.m * s.k, 3);
        auto b = reference::random_tensor(s.batch * s.k * s.n, 4);
        MatmulProblem p = prepare(s, a, b);
        p.primitive.execute(cpu_stream(), p.args);
        cpu_stream().wait();
        const auto *data = static_cast<const float *>(p.result.get_data_handle());
        reference::Tensor got(data, data + s.batch * s.m * s.n);
        ok = reference::compare("matmul " + s.describe(), got, reference::gemm(s, a, b)) && ok;
    }
    return ok;
}

TimeStats measure(const Params &params, const Settings &settings) {
    GemmShape s = parse_gemm(params);
    guard_memory(settings, 4.0 * 2 * double(s.batch) * double(s.m * s.k + s.k * s.n + s.m * s.n),
                 available_host_bytes());
    MatmulProblem p = prepare(s, reference::random_tensor(s.batch * s.m * s.k, 3),
                              reference::random_tensor(s.batch * s.k * s.n, 4));
    return time_primitive(settings, p.primitive, p.args);
}

} // namespace

int main(int argc, char **argv) {
    KernelSpec spec;
    spec.name = "onednn_gemm";
    spec.param_names = kGemmParams;
    spec.setup = [](const Settings &settings) { setup_cpu("onednn_gemm", settings); };
    spec.verify = verify;
    spec.measure = measure;
    return run_benchmark_main(argc, argv, spec);
}
