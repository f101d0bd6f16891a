import numpy as np, time
n = 64 * 2**20  # 512 MiB of float64
rng = np.random.default_rng(7)
a = rng.random(n)
s0 = a.sum()
t = time.time()
a.sort()
b = np.cumsum(a[::-1])          # a second large array, streamed
dt = time.time() - t
ok = bool(np.all(a[1:] >= a[:-1])) and abs(a.sum() - s0) < 1e-6 * s0 and abs(b[-1] - s0) < 1e-6 * s0
print(f"numpy sort+cumsum seconds={dt:.2f} ok={ok}")
