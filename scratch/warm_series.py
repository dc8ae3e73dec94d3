import time, torch
m, k, n = 8192, 8192, 10240
a = ((torch.rand(m, k, device="cuda") * 2 - 1) * 448).to(torch.float8_e4m3fn)
w = ((torch.rand(n, k, device="cuda") * 2 - 1) * 448).to(torch.float8_e4m3fn)
sa = torch.full((), 1 / 448, device="cuda"); sw = torch.full((), 1 / 448 / 90.5, device="cuda")
run = lambda: torch._scaled_mm(a, w.t(), scale_a=sa, scale_b=sw, out_dtype=torch.bfloat16)
run(); torch.cuda.synchronize()
for rest in (15, 3):
    time.sleep(rest)
    t0 = time.time(); out = []
    while time.time() - t0 < 8:
        e0 = torch.cuda.Event(enable_timing=True); e1 = torch.cuda.Event(enable_timing=True)
        e0.record()
        for _ in range(100): run()
        e1.record(); e1.synchronize()
        out.append((time.time() - t0, e0.elapsed_time(e1) / 100))
    print(f"after {rest} s idle:", " ".join(f"{t:.1f}s:{ms:.3f}" for t, ms in out))
