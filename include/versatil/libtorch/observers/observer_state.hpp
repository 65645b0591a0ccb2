// The statistics an observer holds, by name and by kind: one schema that building observers and
// fake-quantizers (observers.hpp, fake_quantize.hpp) and merging them across processes
// (distributed/merge_observers.hpp, distributed/qat.hpp) both read.
#pragma once

#include "versatil/core/quantization_spec.hpp"

namespace versatil::libtorch::observer_state {

// The running range, as PyTorch's observers name it: 0-d per tensor, 1-d per channel (empty
// until the first batch). Every kind but the placeholder has one.
inline constexpr const char* min_val = "min_val";
inline constexpr const char* max_val = "max_val";
constexpr bool has_range(observer_kind kind) { return kind != observer_kind::placeholder; }

// The histogram of the histogram kinds: HistogramObserver's fixed bins over [min_val, max_val],
// or the entropy observer's grid, whose bins grow with the range (entropy_histogram.hpp).
inline constexpr const char* histogram = "histogram";
enum class histogram_layout { none, over_range, entropy_grid };
constexpr histogram_layout histogram_of(observer_kind kind) {
    if (kind == observer_kind::histogram_entropy) return histogram_layout::entropy_grid;
    return is_histogram(kind) ? histogram_layout::over_range : histogram_layout::none;
}

}  // namespace versatil::libtorch::observer_state
