// Plain-loop references: slow, obvious, double accumulation.
#include "reference.hpp"

#include <algorithm>
#include <cmath>
#include <iostream>
#include <limits>

namespace dlbench::reference {

Tensor random_tensor(dim size, std::uint32_t seed) {
    Tensor out(static_cast<size_t>(size));
    std::uint32_t state = seed * 2654435761u + 12345u;
    for (auto &v : out) {
        state = state * 1664525u + 1013904223u;
        v = static_cast<float>(state >> 8) / static_cast<float>(1u << 24) * 2.0f - 1.0f;
    }
    return out;
}

namespace {
// Index helpers for NCHW tensors and grouped weights.
inline dim at4(dim a, dim b, dim c, dim d, dim nb, dim nc, dim nd) { return ((a * nb + b) * nc + c) * nd + d; }

// Visit every (output position, input position, weight) triple of the convolution.
template <typename F> void for_each_tap(const ConvShape &s, F &&visit) {
    const dim cg = s.c / s.groups, kg = s.k / s.groups;
    for (dim n = 0; n < s.n; ++n)
        for (dim k = 0; k < s.k; ++k) {
            const dim g = k / kg;
            for (dim oy = 0; oy < s.oh; ++oy)
                for (dim ox = 0; ox < s.ow; ++ox)
                    for (dim ci = 0; ci < cg; ++ci)
                        for (dim i = 0; i < s.kh; ++i) {
                            const dim iy = oy * s.stride_h - s.pad_top + i * s.dilation_h;
                            if (iy < 0 || iy >= s.h) continue;
                            for (dim j = 0; j < s.kw; ++j) {
                                const dim ix = ox * s.stride_w - s.pad_left + j * s.dilation_w;
                                if (ix < 0 || ix >= s.w) continue;
                                visit(at4(n, k, oy, ox, s.k, s.oh, s.ow), at4(n, g * cg + ci, iy, ix, s.c, s.h, s.w),
                                      at4(k, ci, i, j, cg, s.kh, s.kw));
                            }
                        }
        }
}
} // namespace

Tensor conv_forward(const ConvShape &s, const Tensor &src, const Tensor &weights) {
    std::vector<double> acc(static_cast<size_t>(s.dst_size()), 0.0);
    for_each_tap(s, [&](dim d, dim x, dim w) { acc[d] += double(src[x]) * weights[w]; });
    return Tensor(acc.begin(), acc.end());
}

Tensor conv_backward_data(const ConvShape &s, const Tensor &diff_dst, const Tensor &weights) {
    std::vector<double> acc(static_cast<size_t>(s.src_size()), 0.0);
    for_each_tap(s, [&](dim d, dim x, dim w) { acc[x] += double(diff_dst[d]) * weights[w]; });
    return Tensor(acc.begin(), acc.end());
}

Tensor conv_backward_weights(const ConvShape &s, const Tensor &src, const Tensor &diff_dst) {
    std::vector<double> acc(static_cast<size_t>(s.weights_size()), 0.0);
    for_each_tap(s, [&](dim d, dim x, dim w) { acc[w] += double(diff_dst[d]) * src[x]; });
    return Tensor(acc.begin(), acc.end());
}

Tensor gemm(const GemmShape &s, const Tensor &a, const Tensor &b) {
    Tensor c(static_cast<size_t>(s.batch * s.m * s.n));
    for (dim bt = 0; bt < s.batch; ++bt) {
        const float *pa = a.data() + bt * s.m * s.k;
        const float *pb = b.data() + bt * s.k * s.n;
        float *pc = c.data() + bt * s.m * s.n;
        for (dim i = 0; i < s.m; ++i)
            for (dim j = 0; j < s.n; ++j) {
                double acc = 0.0;
                for (dim p = 0; p < s.k; ++p) {
                    double va = s.trans_a ? pa[p * s.m + i] : pa[i * s.k + p];
                    double vb = s.trans_b ? pb[j * s.k + p] : pb[p * s.n + j];
                    acc += va * vb;
                }
                pc[i * s.n + j] = static_cast<float>(acc);
            }
    }
    return c;
}

namespace {
// Visit each pooling window: output index, then the list of input indices inside the unpadded input.
template <typename F> void for_each_window(const PoolShape &s, F &&visit) {
    std::vector<dim> taps;
    for (dim nc = 0; nc < s.n * s.c; ++nc)
        for (dim oy = 0; oy < s.oh; ++oy)
            for (dim ox = 0; ox < s.ow; ++ox) {
                taps.clear();
                for (dim i = 0; i < s.kh; ++i) {
                    dim iy = oy * s.stride_h - s.pad_top + i;
                    if (iy < 0 || iy >= s.h) continue;
                    for (dim j = 0; j < s.kw; ++j) {
                        dim ix = ox * s.stride_w - s.pad_left + j;
                        if (ix < 0 || ix >= s.w) continue;
                        taps.push_back((nc * s.h + iy) * s.w + ix);
                    }
                }
                visit((nc * s.oh + oy) * s.ow + ox, taps);
            }
}
} // namespace

Tensor pool_forward(const PoolShape &s, bool max_pool, const Tensor &src) {
    Tensor dst(static_cast<size_t>(s.dst_size()), 0.0f);
    for_each_window(s, [&](dim o, const std::vector<dim> &taps) {
        if (max_pool) {
            float best = -std::numeric_limits<float>::infinity();
            for (dim t : taps)
                best = std::max(best, src[t]);
            dst[o] = best;
        } else {
            double sum = 0.0;
            for (dim t : taps)
                sum += src[t];
            dst[o] = taps.empty() ? 0.0f : static_cast<float>(sum / static_cast<double>(taps.size()));
        }
    });
    return dst;
}

Tensor pool_backward(const PoolShape &s, bool max_pool, const Tensor &src, const Tensor &diff_dst) {
    std::vector<double> acc(static_cast<size_t>(s.src_size()), 0.0);
    for_each_window(s, [&](dim o, const std::vector<dim> &taps) {
        if (taps.empty()) return;
        if (max_pool) {
            dim best = taps.front();
            for (dim t : taps)
                if (src[t] > src[best]) best = t;
            acc[best] += diff_dst[o];
        } else {
            for (dim t : taps)
                acc[t] += diff_dst[o] / static_cast<double>(taps.size());
        }
    });
    return Tensor(acc.begin(), acc.end());
}

BatchNormResult batchnorm_forward(const BatchNormShape &s, const Tensor &src, const Tensor &scale,
                                  const Tensor &shift, const Tensor *mean, const Tensor *variance) {
    BatchNormResult r;
    const dim hw = s.h * s.w, count = s.n * hw;
    r.dst.resize(src.size());
    r.mean.resize(static_cast<size_t>(s.c));
    r.variance.resize(static_cast<size_t>(s.c));
    for (dim c = 0; c < s.c; ++c) {
        double m = 0.0, v = 0.0;
        if (mean != nullptr) {
            m = (*mean)[c];
            v = (*variance)[c];
        } else {
            for (dim n = 0; n < s.n; ++n)
                for (dim i = 0; i < hw; ++i)
                    m += src[(n * s.c + c) * hw + i];
            m /= static_cast<double>(count);
            for (dim n = 0; n < s.n; ++n)
                for (dim i = 0; i < hw; ++i) {
                    double d = src[(n * s.c + c) * hw + i] - m;
                    v += d * d;
                }
            v /= static_cast<double>(count);
        }
        r.mean[c] = static_cast<float>(m);
        r.variance[c] = static_cast<float>(v);
        double inv = 1.0 / std::sqrt(v + s.epsilon);
        for (dim n = 0; n < s.n; ++n)
            for (dim i = 0; i < hw; ++i) {
                dim idx = (n * s.c + c) * hw + i;
                r.dst[idx] = static_cast<float>(scale[c] * (src[idx] - m) * inv + shift[c]);
            }
    }
    return r;
}

BatchNormResult batchnorm_backward(const BatchNormShape &s, const Tensor &src, const Tensor &diff_dst,
                                   const Tensor &scale, const Tensor &mean, const Tensor &variance) {
    BatchNormResult r;
    const dim hw = s.h * s.w;
    const double count = static_cast<double>(s.n * hw);
    r.dst.resize(src.size());
    r.diff_scale.resize(static_cast<size_t>(s.c));
    r.diff_shift.resize(static_cast<size_t>(s.c));
    for (dim c = 0; c < s.c; ++c) {
        double inv = 1.0 / std::sqrt(double(variance[c]) + s.epsilon);
        double sum_dy = 0.0, sum_dy_xhat = 0.0;
        for (dim n = 0; n < s.n; ++n)
            for (dim i = 0; i < hw; ++i) {
                dim idx = (n * s.c + c) * hw + i;
                sum_dy += diff_dst[idx];
                sum_dy_xhat += diff_dst[idx] * (src[idx] - mean[c]) * inv;
            }
        r.diff_scale[c] = static_cast<float>(sum_dy_xhat);
        r.diff_shift[c] = static_cast<float>(sum_dy);
        for (dim n = 0; n < s.n; ++n)
            for (dim i = 0; i < hw; ++i) {
                dim idx = (n * s.c + c) * hw + i;
                double xhat = (src[idx] - mean[c]) * inv;
                r.dst[idx] = static_cast<float>(scale[c] * inv *
                                                (diff_dst[idx] - sum_dy / count - xhat * sum_dy_xhat / count));
            }
    }
    return r;
}

Tensor relu_forward(const Tensor &src) {
    Tensor dst(src.size());
    for (size_t i = 0; i < src.size(); ++i)
        dst[i] = src[i] > 0.0f ? src[i] : 0.0f;
    return dst;
}

Tensor relu_backward(const Tensor &src, const Tensor &diff_dst) {
    Tensor diff_src(src.size());
    for (size_t i = 0; i < src.size(); ++i)
        diff_src[i] = src[i] > 0.0f ? diff_dst[i] : 0.0f;
    return diff_src;
}

bool compare(const std::string &what, const Tensor &got, const Tensor &want, double rtol, double atol) {
    if (got.size() != want.size()) {
        std::cerr << "  " << what << ": MISMATCH: " << got.size() << " values, expected " << want.size() << "\n";
        return false;
    }
    double worst = 0.0;
    size_t worst_at = 0, bad = 0;
    for (size_t i = 0; i < got.size(); ++i) {
        double err = std::fabs(double(got[i]) - double(want[i]));
        double allowed = atol + rtol * std::fabs(double(want[i]));
        if (!(err <= allowed)) ++bad; // also counts NaN
        if (!(err <= worst)) {
            worst = err;
            worst_at = i;
        }
    }
    std::cerr << "  " << what << ": " << (bad == 0 ? "ok" : "MISMATCH") << ", max abs error " << worst;
    if (!got.empty()) std::cerr << " at " << worst_at << " (got " << got[worst_at] << ", want " << want[worst_at] << ")";
    if (bad != 0) std::cerr << ", " << bad << " of " << got.size() << " values out of tolerance";
    std::cerr << "\n";
    return bad == 0;
}

} // namespace dlbench::reference
