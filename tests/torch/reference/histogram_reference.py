"""Reference qparams of PyTorch's HistogramObserver for tests/torch/observers.cpp.

Run with Debian's python3-torch (1.13, the same build as libtorch-dev, so torch.manual_seed +
torch.randn give the C++ test the same data):

    /usr/bin/python3 tests/torch/reference/histogram_reference.py

Each case prints the checksum of its data (the C++ test checks it, so a change of random
stream fails loudly instead of comparing different data), the qparams of the stock 1.13
observer and of 1.13 with the histc-range fix that versatil ports: 1.13 passes
int(min_val) / int(max_val) to torch.histc, which truncates the histogram's range toward zero
and drops the values outside it (PyTorch 2.0 passes the float bounds).
"""
import torch
from torch.ao.quantization.observer import HistogramObserver


class FixedHistogramObserver(HistogramObserver):
    """1.13's forward with float histc bounds (PyTorch 2.0's fix); nothing else changed."""

    def forward(self, x_orig):
        if x_orig.numel() == 0:
            return x_orig
        x = x_orig.detach()
        min_val = self.min_val
        max_val = self.max_val
        same_values = min_val.item() == max_val.item()
        is_uninitialized = min_val == float("inf") and max_val == float("-inf")
        if is_uninitialized or same_values:
            min_val, max_val = torch.aminmax(x)
            self.min_val.resize_(min_val.shape)
            self.min_val.copy_(min_val)
            self.max_val.resize_(max_val.shape)
            self.max_val.copy_(max_val)
            torch.histc(x, self.bins, min=min_val.item(), max=max_val.item(), out=self.histogram)
        else:
            new_min, new_max = torch.aminmax(x)
            combined_min = torch.min(new_min, min_val)
            combined_max = torch.max(new_max, max_val)
            combined_min, combined_max, downsample_rate, start_idx = self._adjust_min_max(
                combined_min, combined_max, self.upsample_rate)
            combined_histogram = torch.histc(x, self.bins, min=combined_min.item(), max=combined_max.item())
            if combined_min == min_val and combined_max == max_val:
                combined_histogram += self.histogram
            else:
                combined_histogram = self._combine_histograms(
                    combined_histogram, self.histogram, self.upsample_rate, downsample_rate, start_idx,
                    self.bins)
            self.histogram.detach_().resize_(combined_histogram.shape)
            self.histogram.copy_(combined_histogram)
            self.min_val.detach_().resize_(combined_min.shape)
            self.min_val.copy_(combined_min)
            self.max_val.detach_().resize_(combined_max.shape)
            self.max_val.copy_(combined_max)
        return x_orig


def normal():
    torch.manual_seed(0)
    return [torch.randn(4096) * 1.3 + 0.2]


def skewed_with_outliers():
    torch.manual_seed(1)
    return [torch.cat([torch.randn(8192).abs().pow(3), torch.tensor([40.0, -2.5])])]


def growing():
    torch.manual_seed(2)
    return [torch.randn(1024) * (1 + k) + 0.5 * k for k in range(4)]


def integer_bounds():
    # min and max are integers, so 1.13's int() truncation changes nothing here.
    torch.manual_seed(3)
    return [torch.cat([torch.randn(2000).clamp(-3.9, 3.9), torch.tensor([-4.0, 5.0])])]


def constant():
    return [torch.full([100], 2.5)]


def constant_then_two_values():
    # A constant first batch is forgotten: the next batch restarts the histogram.
    return [torch.full([8], -3.0), torch.tensor([0.0, 1.0])]


SPECS = {
    "quint8_affine": dict(dtype=torch.quint8, qscheme=torch.per_tensor_affine, quant_min=0, quant_max=255),
    "quint8_symmetric": dict(dtype=torch.quint8, qscheme=torch.per_tensor_symmetric, quant_min=0, quant_max=255),
    "qint8_symmetric": dict(dtype=torch.qint8, qscheme=torch.per_tensor_symmetric, quant_min=-128, quant_max=127),
    "qint8_affine": dict(dtype=torch.qint8, qscheme=torch.per_tensor_affine, quant_min=-128, quant_max=127),
}

CASES = [
    ("normal", normal, "quint8_affine"),
    ("normal", normal, "quint8_symmetric"),
    ("skewed_with_outliers", skewed_with_outliers, "qint8_symmetric"),
    ("skewed_with_outliers", skewed_with_outliers, "quint8_affine"),
    ("growing", growing, "quint8_affine"),
    ("growing", growing, "qint8_affine"),
    ("integer_bounds", integer_bounds, "quint8_affine"),
    ("constant", constant, "quint8_affine"),
    ("constant_then_two_values", constant_then_two_values, "quint8_affine"),
]


def qparams(cls, batches, spec):
    # eps as versatil's default (torchao's 2**-12); explicit quant_min/quant_max, as torchao
    # passes them (so a quint8 symmetric zero point is (0 + 255) // 2 = 127).
    observer = cls(eps=2.0 ** -12, **SPECS[spec])
    for batch in batches:
        observer(batch)
    scale, zero_point = observer.calculate_qparams()
    return float(scale), int(zero_point)


def main():
    print("// {data, spec, checksum, scale, zero_point}  (stock 1.13: scale, zero_point)")
    for name, make, spec in CASES:
        batches = make()
        checksum = sum(float(b.double().sum()) for b in batches)
        fixed = qparams(FixedHistogramObserver, batches, spec)
        stock = qparams(HistogramObserver, batches, spec)
        print('{"%s", "%s", %.17g, %.9gF, %d},  // stock 1.13: %.9g, %d%s'
              % (name, spec, checksum, fixed[0], fixed[1], stock[0], stock[1],
                 "" if stock == fixed else "  (differs: histc int bounds)"))


if __name__ == "__main__":
    main()
