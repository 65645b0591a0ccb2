// TensorRT's entropy calibration (NVIDIA pytorch-quantization's HistogramCalibrator and its
// _compute_amax_entropy) as compiled code for the entropy observer (observers.hpp): a histogram
// whose bins have a fixed width, and the KL-divergence search for the clip over it.
//
// Why not HistogramObserver's histogram: that one keeps 2048 bins over the running range and
// resamples the counts onto a coarser grid each time a batch widens it, spreading each old bin
// evenly over the new ones. The tails the KL search weighs are then made up by the resampling,
// and they depend on the order the batches came in (one process's entropy range moved from
// 11.0 to 28.4 dB SQNR over six orders of the same batches). TensorRT instead sets the bin width
// once and, when a batch exceeds the range, appends bins of the same width: counts are never
// resampled. Here the width is moreover a power of two, the smallest that holds the range seen
// in at most `entropy_max_bins` bins, and when the range outgrows it the width doubles as often
// as needed by adding whole pairs of bins. Bins are anchored at 0 (bin k holds [k w, (k + 1) w)),
// so a value's bin is floor(x / width) whatever the order it came in (each doubling maps
// floor(x / w) to floor(x / 2w) exactly): the histogram, and the clip searched on it, depends
// only on the values seen, the same for every batch order, and histograms of several processes
// rebin exactly to the widest one's width and sum to one process's
// (distributed/merge_observers.hpp). TensorRT's width is the first batch's max / 2048, which
// leaves its result dependent on which batch comes first; the price of the power of two is
// 1025..2049 bins over the range seen instead of TensorRT's 2048 or more.
//
// What is histogrammed is x itself, not TensorRT's |x|: TensorRT's int8 is symmetric, a grid
// [-amax, amax] whose error is the same for x and -x, while the backends here quantize
// activations affine, a grid of all the levels over [lo, hi] (0 included). In that grid's own
// coordinate, x - lo, an activation is one-signed and the clip of its top is TensorRT's unsigned
// search exactly; the bottom is the same search on hi - x. For a ReLU output (lo = 0) that is
// TensorRT's unsigned calibration itself. Folding to |x| instead (tried first) clipped the
// normalised Fashion-MNIST input at 0.81 of its 2.02: half its values are the background at
// -0.81, which |x| puts in the middle of the positive tail.
//
// Counts are float64: exact integers to 2^53 (float32 stops counting at 2^24, which a ReLU's
// zero bin passes on a few thousand images).
#pragma once

#include <torch/script.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <tuple>
#include <vector>

#include "versatil/libtorch/observers/observer_ops.hpp"

namespace versatil::libtorch::observer_ops {

inline constexpr std::int64_t entropy_max_bins = 2048;

// TensorRT's defaults: the first clip tried is bin 128, then every bin (stride 1).
inline constexpr std::int64_t entropy_start_bin = 128;

// The width of the bins for a range `extent` > 0 wide: the smallest power of two w with
// extent < entropy_max_bins * w.
inline double entropy_bin_width(double extent) {
    int exponent = 0;
    (void)std::frexp(extent / static_cast<double>(entropy_max_bins), &exponent);  // in [2^(e-1), 2^e)
    return std::ldexp(1.0, exponent);
}

// The bins for everything in [min, max] and 0 (the affine grid always holds 0): bins `first` to
// `first + bins - 1` of `width`. Only zeros seen: one bin of width 0 that counts them. A range
// that is not finite: no bins.
struct entropy_grid {
    double width = 0.0;
    std::int64_t first = 0;
    std::int64_t bins = 0;
};

inline entropy_grid entropy_grid_of(double min, double max) {
    const double lo = std::min(min, 0.0);
    const double hi = std::max(max, 0.0);
    const double extent = hi - lo;
    if (!std::isfinite(extent)) return {};
    if (extent == 0.0) return {0.0, 0, 1};
    const double width = entropy_bin_width(extent);
    const auto first = static_cast<std::int64_t>(std::floor(lo / width));
    return {width, first, static_cast<std::int64_t>(std::floor(hi / width)) - first + 1};
}

inline std::vector<double> histogram_counts(const at::Tensor& histogram) {
    const at::Tensor values = histogram.to(at::kDouble).contiguous();
    return {values.data_ptr<double>(), values.data_ptr<double>() + values.numel()};
}

// floor(k / factor) for factor > 0, as Python's //.
inline std::int64_t floor_div(std::int64_t k, std::int64_t factor) {
    return k >= 0 ? k / factor : -((-k + factor - 1) / factor);
}

// `counts` on grid `from` as counts on grid `to`, whose width is a power-of-two multiple of
// from's (or the same) and whose bins cover from's: bin k of width w lands in bin
// floor(k / factor), whole bins summed, so exact. From the zero-width grid, its count of zeros
// lands in the bin of 0.
inline std::vector<double> rebin(const std::vector<double>& counts, const entropy_grid& from, const entropy_grid& to) {
    std::vector<double> out(static_cast<std::size_t>(to.bins), 0.0);
    if (out.empty()) return out;
    const std::int64_t zero_bin = to.width == 0.0 ? 0 : -to.first;
    const auto factor = from.width == 0.0 ? std::int64_t{1} : static_cast<std::int64_t>(to.width / from.width);
    for (std::size_t i = 0; i < counts.size(); ++i) {
        if (counts[i] == 0.0) continue;
        const std::int64_t target = from.width == 0.0 || to.width == 0.0
                                        ? zero_bin
                                        : floor_div(from.first + static_cast<std::int64_t>(i), factor) - to.first;
        out[static_cast<std::size_t>(std::clamp<std::int64_t>(target, 0, to.bins - 1))] += counts[i];
    }
    return out;
}

// The entropy observer's forward: the running min / max (as MinMaxObserver's: the clip is
// taken inside it, and it sets the grid) and the histogram of x on the grid of that range
// (entropy_grid_of). A range that is not finite leaves the histogram as it was (the qparams
// then take the range as is).
inline std::tuple<at::Tensor, at::Tensor, at::Tensor> observe_entropy_histogram(const at::Tensor& x,
                                                                                const at::Tensor& min_val,
                                                                                const at::Tensor& max_val,
                                                                                const at::Tensor& histogram) {
    if (x.numel() == 0) return {min_val, max_val, histogram};
    auto [new_min, new_max] = observe_min_max(x, min_val, max_val, -1);
    const entropy_grid grid = entropy_grid_of(new_min.item<double>(), new_max.item<double>());
    if (grid.bins == 0) return {new_min, new_max, histogram};
    const entropy_grid old_grid = is_unobserved(min_val, max_val)
                                      ? entropy_grid{}
                                      : entropy_grid_of(min_val.item<double>(), max_val.item<double>());
    std::vector<double> counts = rebin(histogram_counts(histogram), old_grid, grid);
    const at::Tensor values = x.detach().to(at::kFloat).contiguous();
    const float* data = values.data_ptr<float>();
    const double inverse = grid.width == 0.0 ? 0.0 : 1.0 / grid.width;  // a power of two: x * inverse is exact
    for (std::int64_t i = 0; i < values.numel(); ++i) {
        if (std::isnan(data[i])) continue;
        const auto bin = static_cast<std::int64_t>(std::floor(static_cast<double>(data[i]) * inverse)) - grid.first;
        counts[static_cast<std::size_t>(bin)] += 1.0;
    }
    return {new_min, new_max, at::tensor(counts, at::kDouble)};
}

// pytorch-quantization's _compute_amax_entropy (stride 1, start_bin entropy_start_bin) on a
// histogram of a one-signed quantity (|x| in TensorRT, x - lo or hi - x here): for each candidate
// clip of i bins, P is the first i bins with everything beyond added to the last, Q is the first i
// bins merged into `levels` levels (bin j in level floor(j * levels / i), numpy's digitize on
// linspace(0, i, levels + 1) exactly, since levels is a power of two) and spread back evenly over
// each level's non-empty bins; the clip with the smallest KL(P || Q) wins, the last one on ties
// (infinite where P has mass Q lacks). Bin 0's count is replaced by bin 1's first. Returns i: the
// clip is i bins. Fewer bins than start_bin: no clip (TensorRT would fail on an empty search).
// `start_bin` above TensorRT's 128 leaves out the clips that would cut into the other side of 0
// (entropy_range).
inline std::int64_t entropy_clip_bins(std::vector<double> bins, std::int64_t levels,
                                      std::int64_t start_bin = entropy_start_bin) {
    const auto count = static_cast<std::int64_t>(bins.size());
    if (count < std::max<std::int64_t>(start_bin, 2)) return count;
    bins[0] = bins[1];
    std::vector<double> suffix(static_cast<std::size_t>(count) + 1, 0.0);  // sum of bins[i:]
    for (std::int64_t i = count - 1; i >= 0; --i)
        suffix[static_cast<std::size_t>(i)] =
            suffix[static_cast<std::size_t>(i + 1)] + bins[static_cast<std::size_t>(i)];
    const double p_total = suffix[0];
    double best = std::numeric_limits<double>::infinity();
    std::int64_t best_i = count;
    std::vector<double> level_sum(static_cast<std::size_t>(levels));
    std::vector<std::int64_t> level_nonzero(static_cast<std::size_t>(levels));
    const auto level_of = [levels](std::int64_t j, std::int64_t i) { return static_cast<std::size_t>(j * levels / i); };
    for (std::int64_t i = start_bin; i <= count; ++i) {
        std::fill(level_sum.begin(), level_sum.end(), 0.0);
        std::fill(level_nonzero.begin(), level_nonzero.end(), 0);
        for (std::int64_t j = 0; j < i; ++j)
            if (bins[static_cast<std::size_t>(j)] != 0.0) {
                level_sum[level_of(j, i)] += bins[static_cast<std::size_t>(j)];
                ++level_nonzero[level_of(j, i)];
            }
        // Q's total: each level's sum is spread over its non-empty bins, so Q sums to P's
        // first i bins.
        double q_total = 0.0;
        for (const double sum : level_sum) q_total += sum;
        const double outliers = suffix[static_cast<std::size_t>(i)];
        double divergence = 0.0;
        for (std::int64_t j = 0; j < i; ++j) {
            const double p = bins[static_cast<std::size_t>(j)] + (j == i - 1 ? outliers : 0.0);
            if (p == 0.0) continue;
            if (bins[static_cast<std::size_t>(j)] == 0.0) {  // Q is 0 here
                divergence = std::numeric_limits<double>::infinity();
                break;
            }
            const std::size_t level = level_of(j, i);
            const double q = level_sum[level] / static_cast<double>(level_nonzero[level]);
            const double p_norm = p / p_total;
            divergence += p_norm * std::log(p_norm / (q / q_total));
        }
        if (divergence <= best) {
            best = divergence;
            best_i = i;
        }
    }
    return best_i;
}

}  // namespace versatil::libtorch::observer_ops
