// C++ new/delete and std::vector under `farmem run`.
#include <dlfcn.h>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <numeric>
#include <vector>

int main() {
    auto is_far = reinterpret_cast<int (*)(const void *)>(dlsym(RTLD_DEFAULT, "fm_is_far"));
    if (!is_far) {
        std::puts("shim not preloaded");
        return 1;
    }
    const size_t n = 32u << 20;  // 256 MiB of uint64_t
    std::vector<uint64_t> v(n);
    std::iota(v.begin(), v.end(), 1);
    auto arr = std::make_unique<double[]>(n / 2);
    for (size_t i = 0; i < n / 2; i++) arr[i] = 0.5 * (double)i;
    uint64_t s = std::accumulate(v.begin(), v.end(), uint64_t{0});
    double d = 0;
    for (size_t i = 0; i < n / 2; i++) d += arr[i];
    bool ok = is_far(v.data()) && is_far(arr.get()) && s == (uint64_t)n * (n + 1) / 2 &&
              d == 0.5 * ((double)(n / 2) * (double)(n / 2 - 1) / 2);
    std::printf("vector far=%d new[] far=%d sums %s\n", is_far(v.data()), is_far(arr.get()), ok ? "ok" : "FAILED");
    return ok ? 0 : 1;
}
