#!/usr/bin/python3
"""Why cortex_m evaluates on QNNPACK (include/versatil/libtorch/plan/backend_lowering.hpp): its
quantized conv, with the Cortex-M scheme (quint8 activations at full range, per-channel
symmetric qint8 weights in [-127, 127]), against the exact result (int32 accumulation, the
rescale in double, rounded once), on every CPU. oneDNN is measured beside it, on this CPU and
with its ISA capped below VNNI (ONEDNN_MAX_CPU_ISA), where its u8*s8 products saturate.
Passes when QNNPACK is within 1 LSB everywhere and runs per-channel linear weights; prints
every figure. Needs Debian's python3-torch (/usr/bin/python3).

  check_engine.py [--engine NAME]   (--engine: measure one engine and print its line)"""
import os
import subprocess
import sys

import torch

SHAPES = [(16, 16, 16), (16, 32, 1), (1, 16, 1), (32, 32, 1)]  # (in, out, groups): depthwise, pointwise-like, stem


def exact_conv(xq, wq, bias, scale, zero_point, groups):
    """The Cortex-M result: integer accumulation (exact in double), one rounding of the rescale."""
    x = xq.int_repr().double() - xq.q_zero_point()
    acc = torch.nn.functional.conv2d(x, wq.int_repr().double(), None, 1, 1, 1, groups)
    real = acc * xq.q_scale() * wq.q_per_channel_scales().double().view(1, -1, 1, 1) + bias.double().view(1, -1, 1, 1)
    return torch.clamp(torch.round(real / scale) + zero_point, 0, 255)


def measure(engine):
    torch.backends.quantized.engine = engine
    torch.manual_seed(0)
    worst, differing, total = 0, 0, 0
    for trial in range(20):
        cin, cout, groups = SHAPES[trial % len(SHAPES)]
        xq = torch.quantize_per_tensor(torch.randn(1, cin, 14, 14) * 2, 0.03, 121, torch.quint8)
        w = torch.randn(cout, cin // groups, 3, 3) * 0.3
        scales = (w.abs().amax(dim=(1, 2, 3)) / 127).double()
        wq = torch.quantize_per_channel(w, scales, torch.zeros(cout, dtype=torch.long), 0, torch.qint8)
        bias = torch.randn(cout)
        packed = torch.ops.quantized.conv2d_prepack(wq, bias, [1, 1], [1, 1], [1, 1], groups)
        y = torch.ops.quantized.conv2d(xq, packed, 0.05, 120)
        diff = (y.int_repr().double() - exact_conv(xq, wq, bias, 0.05, 120, groups)).abs()
        worst = max(worst, int(diff.max().item()))
        differing += int((diff > 0).sum().item())
        total += diff.numel()
    xl = torch.quantize_per_tensor(torch.randn(4, 32), 0.03, 128, torch.quint8)
    wl = torch.quantize_per_channel(torch.randn(10, 32) * 0.3, torch.linspace(0.005, 0.01, 10, dtype=torch.double),
                                    torch.zeros(10, dtype=torch.long), 0, torch.qint8)
    try:
        torch.ops.quantized.linear(xl, torch.ops.quantized.linear_prepack(wl, torch.randn(10)), 0.1, 128)
        linear = True
    except RuntimeError:
        linear = False
    return worst, differing, total, linear


def main():
    if "--engine" in sys.argv:
        worst, differing, total, linear = measure(sys.argv[sys.argv.index("--engine") + 1])
        print(worst, differing, total, int(linear))
        return
    ok = True
    for label, engine, isa in [("qnnpack", "qnnpack", None), ("onednn, this CPU", "onednn", None),
                               ("onednn, ISA capped at AVX2", "onednn", "AVX2"),
                               ("onednn, ISA capped at AVX512_CORE (no VNNI)", "onednn", "AVX512_CORE")]:
        env = dict(os.environ)
        if isa:
            env["ONEDNN_MAX_CPU_ISA"] = isa
        run = subprocess.run([sys.executable, __file__, "--engine", engine], env=env, capture_output=True, text=True)
        if run.returncode != 0:
            print(f"{label}: failed: {run.stderr.strip().splitlines()[-1:]}")
            ok = ok and engine != "qnnpack"
            continue
        worst, differing, total, linear = (int(v) for v in run.stdout.split())
        print(f"{label}: conv within {worst} LSB of exact ({differing} of {total} levels differ); "
              f"per-channel linear {'runs' if linear else 'refused'}")
        if engine == "qnnpack":
            ok = ok and worst <= 1 and linear == 1
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
