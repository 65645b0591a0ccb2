"""Reference clips of TensorRT's entropy calibration for tests/torch/calibration.cpp.

Run with Debian's python3 (python3-torch 1.13, the same build as libtorch-dev, so
torch.manual_seed + torch.randn give the C++ test the same data; numpy and scipy as Debian
ships them):

    /usr/bin/python3 tests/torch/reference/entropy_reference.py

The search is a numpy port of NVIDIA pytorch-quantization's _compute_amax_entropy (TensorRT's
tools/pytorch-quantization, calib/histogram.py: stride 1, start_bin 128, bins[0] replaced by
bins[1], scipy's KL divergence, the last minimum), unsigned 8 bits (256 levels). It runs on the
histogram versatil's entropy observer keeps (entropy_histogram.hpp): x in bins of a power-of-two
width w, the smallest with hi - lo < 2048 w where lo = min(min x, 0) and hi = max(max x, 0),
anchored at 0 (bin k is [k w, (k + 1) w)), from floor(lo / w) to floor(hi / w). The top clip is
the search on those bins from the lowest up (the affine grid's coordinate x - lo), where the
tensor has positive values; the bottom clip the search on them from the highest down (hi - x),
where it has negative ones; each only among clips on its own side of 0 (start_bin raised to the
bin of 0 where that is past 128). Each case prints the checksum of its data (the C++ test checks it,
so a change of random stream fails loudly instead of comparing different data), the width, the
first bin, the bin count, the number of values and the range [bottom, top] within [min, max].

For comparison only, each case also prints TensorRT's own amax: pytorch-quantization's
collection (HistogramCalibrator.collect with torch_hist, ported below: |x|, 2048 bins over the
first batch's max |x|, bins of that width appended when a later batch exceeds it) and its search
for its own quantizer (signed when both signs are seen), for the batches in order and reversed.
That width depends on which batch comes first, so its clip can depend on the order.
"""
import math

import numpy as np
import scipy.stats
import torch


def compute_amax_entropy(hist, edges, num_bits, unsigned, stride=1, start_bin=128):
    """pytorch-quantization's _compute_amax_entropy, vectorized: the same P, Q and KL per clip."""
    bins = np.array(hist, dtype=np.int64)
    bins[0] = bins[1]
    levels = 1 << (num_bits - 1 + int(unsigned))
    divergences = []
    for i in range(start_bin, len(bins) + 1, stride):
        level = np.digitize(np.arange(i), np.linspace(0, i, num=levels + 1)) - 1
        level[bins[:i] == 0] = -1
        kept = level != -1
        # Q: each level's count spread evenly over its non-empty bins (in bin order, as the loop).
        sums = np.bincount(level[kept], weights=bins[:i][kept].astype(np.float64), minlength=levels)
        nonempty = np.bincount(level[kept], minlength=levels)
        q = np.zeros(i, dtype=np.float64)
        q[kept] = sums[level[kept]] / nonempty[level[kept]]
        # P: the first i bins, everything beyond added to the last.
        p = np.array(bins[:i])
        p[-1] += np.sum(bins[i:])
        divergences.append(scipy.stats.entropy(p, q))
    divergences = np.array(divergences)
    last_argmin = len(divergences) - 1 - np.argmin(divergences[::-1])
    return float(edges[last_argmin * stride + start_bin])


def versatil_range(batches):
    """The entropy observer's histogram of every value (order-free by construction) and range."""
    values = torch.cat([b.flatten() for b in batches]).double().numpy()
    low, high = float(values.min()), float(values.max())
    lo, hi = min(low, 0.0), max(high, 0.0)
    _, exponent = math.frexp((hi - lo) / 2048)  # (hi - lo) / 2048 in [2^(e-1), 2^e)
    width = math.ldexp(1.0, exponent)
    first = math.floor(lo / width)
    count = math.floor(hi / width) - first + 1
    hist = np.bincount((np.floor(values / width) - first).astype(np.int64), minlength=count)
    top, bottom = high, low
    if high > 0:  # clips at or above 0: from the bin of 0 on, if that is past bin 128
        top = min(high, compute_amax_entropy(hist, (first + np.arange(count + 1)) * width, 8, unsigned=True,
                                             start_bin=max(128, -first)))
    if low < 0:  # clips at or below 0
        bottom = max(low, compute_amax_entropy(hist[::-1], (first + count - np.arange(count + 1)) * width, 8,
                                               unsigned=True, start_bin=max(128, first + count)))
    return width, first, count, int(hist.sum()), bottom, top


def tensorrt_collect(batches):
    """HistogramCalibrator.collect (torch_hist=True, num_bins 2048), ported."""
    hist, edges, num_bins = None, None, 2048
    for batch in batches:
        x = batch.abs().float()
        x_max = x.max()
        if hist is None:
            hist = torch.histc(x, bins=num_bins, min=0, max=x_max)
            edges = torch.linspace(0, x_max, num_bins + 1)
        else:
            if x_max > edges[-1]:
                width = edges[1] - edges[0]
                num_bins = int((x_max / width).ceil().item())
                edges = torch.arange(0, x_max + width, width)
            grown = torch.histc(x, bins=num_bins, min=0, max=edges[-1])
            grown[:hist.numel()] += hist
            hist = grown
    return hist.int().numpy(), edges.numpy()


def relu_growing():
    torch.manual_seed(11)
    return [torch.randn(16384).relu() * s for s in (1.0, 2.5, 0.7)]


def heavy_tailed():
    torch.manual_seed(12)
    batches = []
    for s in (0.5, 1.0, 3.0):
        a = torch.randn(16384)
        b = torch.randn(16384)
        batches.append(a * b.exp() * s)
    return batches


def signed_normal():
    torch.manual_seed(13)
    return [torch.randn(16384) * 2 + 0.5]


CASES = [("relu_growing", relu_growing), ("heavy_tailed", heavy_tailed), ("signed_normal", signed_normal)]


def main():
    print("// {data, checksum, bin width, first bin, bins, values, bottom, top}  (TensorRT's own amax: "
          "in order, reversed)")
    for name, make in CASES:
        batches = make()
        checksum = sum(float(b.double().sum()) for b in batches)
        signed = min(float(b.min()) for b in batches) < 0 < max(float(b.max()) for b in batches)
        width, first, count, values, bottom, top = versatil_range(batches)
        own = [compute_amax_entropy(*tensorrt_collect(order), 8, unsigned=not signed)
               for order in (batches, batches[::-1])]
        print('{"%s", %.17g, %.17g, %d, %d, %d, %.17g, %.17g},  // TensorRT: %.9g, %.9g'
              % (name, checksum, width, first, count, values, bottom, top, own[0], own[1]))


if __name__ == "__main__":
    main()
