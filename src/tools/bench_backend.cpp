#include "tools/bench_backend.h"

#include <algorithm>
#include <chrono>
#include <random>

namespace ridge {

std::vector<BackendKernelResult> bench_backend_matmul(kernels::Backend& be, const std::vector<KernelShape>& shapes,
                                                      const std::vector<DType>& types, const std::vector<int64_t>& ms,
                                                      int64_t ring_bytes, double seconds) {
  using clock = std::chrono::steady_clock;
  std::vector<BackendKernelResult> out;
  for (const KernelShape& sh : shapes)
    for (DType t : types) {
      const int64_t wb = row_bytes(t, sh.k) * sh.n_out;
      const int64_t copies = std::clamp<int64_t>((ring_bytes + wb - 1) / wb, 1, 64);
      std::vector<std::vector<uint8_t>> host;  // the backend keeps its copies by these addresses
      std::vector<kernels::WeightView> ws;
      host.push_back(random_rows(t, sh.k, sh.n_out, 1));
      for (int64_t c = 1; c < copies; ++c) host.push_back(host.front());
      for (const auto& h : host) ws.push_back({t, sh.k, sh.n_out, h.data()});
      for (int64_t m : ms) {
        std::vector<float> xh(size_t(m * sh.k));
        std::mt19937 g(7);
        std::uniform_real_distribution<float> u(-1.f, 1.f);
        for (float& v : xh) v = u(g);
        float* x = be.alloc(m * sh.k);
        float* y = be.alloc(m * sh.n_out);
        be.from_host(x, xh);
        for (const auto& w : ws) be.matmul(w, x, m, y);  // uploads, warm-up
        be.sync();
        std::vector<double> rounds;
        for (int r = 0; r < 5; ++r) {
          int64_t n = 0;
          const auto t0 = clock::now();
          double el = 0;
          while (el < seconds / 5) {
            for (int i = 0; i < 16; ++i, ++n) be.matmul(ws[size_t(n % copies)], x, m, y);
            be.sync();
            el = std::chrono::duration<double>(clock::now() - t0).count();
          }
          rounds.push_back(el / double(n));
        }
        std::sort(rounds.begin(), rounds.end());
        const double s = rounds[rounds.size() / 2];
        const double bytes = double(wb) + 4.0 * double(m) * double(sh.k + sh.n_out);
        out.push_back({sh.name, t, m, sh.k, sh.n_out, s * 1e6, bytes / s / 1e9,
                       2.0 * double(m) * double(sh.k) * double(sh.n_out) / s / 1e12});
        be.free(x);
        be.free(y);
      }
    }
  return out;
}

}  // namespace ridge
