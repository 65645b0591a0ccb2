#!/usr/bin/env python3
"""LSTM and GRU, dynamic: versatil-quantize against PyTorch's quantize_dynamic({LSTM, GRU, Linear},
qint8) on the same model, engine and input, in Debian's python3-torch: output SQNR against the float
model, and median latency of 30 runs at 1 thread (both scripted, batch 1, 32 steps). Speed is
measured here, never asserted. Usage: benchmarks/recurrent.py BUILD/tools/versatil-quantize"""
import sys
import statistics, subprocess, tempfile, time
import torch
from torch import nn
from torch.ao.quantization import quantize_dynamic
torch.set_num_threads(1); torch.manual_seed(0)
scratch = tempfile.mkdtemp()
class M(nn.Module):
    def __init__(s, kind):
        super().__init__()
        s.rnn, s.head = getattr(nn, kind)(64, 128, num_layers=2, batch_first=True), nn.Linear(128, 10)
    def forward(s, x):
        y, _ = s.rnn(x); return s.head(y)
def sqnr(a, b): return (10 * torch.log10(a.pow(2).sum() / (a - b).pow(2).sum())).item()
def lat(m, x):
    ts = []
    with torch.no_grad():
        for _ in range(5): m(x)
        for _ in range(30):
            t = time.perf_counter(); m(x); ts.append((time.perf_counter() - t) * 1e3)
    return statistics.median(ts)
for kind in ['LSTM', 'GRU']:
  for target, engine in [('xnnpack:dynamic', 'qnnpack'), ('x86_inductor:dynamic', 'onednn')]:
    m = M(kind).eval(); x = torch.randn(1, 32, 64); calib = torch.randn(4, 32, 64)
    torch.jit.script(m).save(scratch + '/b.pt')
    class D(nn.Module):
        def __init__(s): super().__init__(); s.register_buffer('calib', calib); s.register_buffer('test', calib)
        def forward(s): return None
    torch.jit.script(D()).save(scratch + '/bd.pt')
    subprocess.run([sys.argv[1], '--model', scratch + '/b.pt', '--data', scratch + '/bd.pt', '--target', '=' + target,
                    '--no-per-layer', '--out', scratch + '/bq.pt'], capture_output=True, check=True)
    torch.backends.quantized.engine = engine
    ours = torch.jit.load(scratch + '/bq.pt')
    theirs = torch.jit.script(quantize_dynamic(m, {nn.LSTM, nn.GRU, nn.Linear}, dtype=torch.qint8))
    with torch.no_grad(): f = m(x); o = ours(x); t = theirs(x)
    print(f"{kind} {target}: SQNR versatil {sqnr(f, o):.2f} dB, quantize_dynamic {sqnr(f, t):.2f} dB; "
          f"latency ms versatil {lat(ours, x):.3f}, quantize_dynamic(scripted) {lat(theirs, x):.3f}, "
          f"float {lat(torch.jit.script(m), x):.3f}")
