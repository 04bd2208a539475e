// Small problems every verify mode runs, as canonical parameter rows, so the parsing path is verified too.
#pragma once

#include <vector>

namespace dlbench::verify_cases {

using Row = std::vector<double>;

// Conv rows without the trailing mode (the kernels append 0, 1 and 2): plain, strided, asymmetric
// pads, dilations, grouped, depthwise, 1x1, non-square.
inline std::vector<Row> conv() {
    return {
        // N C  H  W  K kh kw  pads      strides dil  group
        {1, 3, 7, 7, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1},
        {2, 4, 9, 8, 6, 3, 3, 0, 1, 2, 0, 2, 2, 1, 1, 1},
        {1, 4, 8, 8, 4, 3, 2, 2, 0, 1, 1, 1, 2, 2, 1, 2},
        {2, 6, 7, 9, 6, 3, 3, 1, 2, 1, 0, 1, 1, 2, 2, 3},
        {1, 8, 6, 6, 8, 3, 3, 1, 1, 1, 1, 2, 1, 1, 1, 8},
        {2, 16, 5, 5, 8, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1, 1},
        {1, 3, 12, 10, 5, 7, 5, 3, 2, 3, 2, 2, 2, 1, 1, 1},
    };
}

// Gemm rows: M K N transA transB batch.
inline std::vector<Row> gemm() {
    return {
        {5, 7, 3, 0, 0, 1}, {5, 7, 3, 1, 0, 1}, {5, 7, 3, 0, 1, 1}, {5, 7, 3, 1, 1, 1},
        {4, 6, 9, 0, 0, 3}, {4, 6, 9, 1, 1, 2}, {33, 17, 65, 0, 1, 2}, {1, 64, 1, 0, 0, 1},
    };
}

// Pool rows without the trailing mode: N C H W kh kw pads strides.
inline std::vector<Row> pool() {
    return {
        {1, 3, 8, 8, 2, 2, 0, 0, 0, 0, 2, 2},
        {2, 4, 9, 7, 3, 3, 1, 1, 1, 1, 2, 2},
        {1, 2, 7, 8, 3, 2, 1, 0, 0, 1, 1, 2},
        {2, 3, 6, 6, 3, 3, 1, 1, 2, 2, 3, 3},
    };
}

// BatchNormalization rows without the trailing mode: N C H W epsilon momentum.
inline std::vector<Row> batchnorm() {
    return {{2, 3, 4, 5, 1e-5, 0.9}, {1, 8, 3, 3, 1e-3, 0.1}, {4, 2, 1, 1, 1e-5, 0.9}};
}

// Element-wise rows without the trailing mode: N C H W.
inline std::vector<Row> elementwise() { return {{2, 3, 4, 5}, {1, 1, 1, 7}, {3, 16, 5, 5}}; }

inline Row with_mode(Row row, int mode) {
    row.push_back(mode);
    return row;
}

} // namespace dlbench::verify_cases
