"""PyTorch's matmul for one bf16 shape, timed the way bench/probes/gemm_algos times the
cuBLASLt candidates: cold (after 300 ms idle) and hot (after `ms` of back-to-back
GEMMs), one GEMM per timed iteration with a host sync between.
Usage: python3 torch_gemm_hot.py M N K [ms]"""
import statistics
import sys
import time

import torch

m, n, k = (int(x) for x in sys.argv[1:4])
sustain_ms = float(sys.argv[4]) if len(sys.argv) > 4 else 300
# Uniform in [-scale, scale), drawn in fp32, as overlapd fills its inputs: torch.rand
# straight in bf16 has low-entropy mantissas that draw less power and run faster.
a = (torch.rand(m, k, device="cuda") * 2 - 1).to(torch.bfloat16)
b = ((torch.rand(k, n, device="cuda") * 2 - 1) * 0.01).to(torch.bfloat16)
c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)


def timed(iters):
    t = []
    for _ in range(iters):
        start.record()
        torch.matmul(a, b, out=c)
        end.record()
        torch.cuda.synchronize()
        t.append(start.elapsed_time(end))
    return statistics.median(t)


torch.matmul(a, b, out=c)
torch.cuda.synchronize()
time.sleep(0.3)
cold = timed(3)
t0 = time.time()
while (time.time() - t0) * 1e3 < sustain_ms:
    for _ in range(10):
        torch.matmul(a, b, out=c)
    torch.cuda.synchronize()
hot = timed(20)
print(f"torch {m}x{n}x{k}: cold {cold:.3f} ms, hot {hot:.3f} ms, {2 * m * n * k / hot / 1e9:.0f} TF/s")
