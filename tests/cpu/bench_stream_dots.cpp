// Benchmark, not a test (no ctest entry): the one-token decode kernels streaming their rows from
// memory, against the plain streaming sum the bandwidth probe of `journey bench` reads with, in one
// run. Where bench_block_dots times the instructions in cache and `journey bench` the whole engine,
// this says whether a kernel by itself keeps the memory busy: the same 2 threads, each its half of
// a matrix far larger than the caches (512 MB by default), as decode's static split gives them.
//
//   probe     ReadBandwidthProbe (journey bench's ceiling): one sequential sum per thread
//   one call  each thread's half of the rows in one call (dot_rows, dot_row_groups), each read of
//             the matrix against a probe read of the same size right after it (median of 8 pairs)
//   products  the rows cut into products of --product-mb, one parallel region each (decode's
//             shape: a barrier after every product), each thread its half of each product
//
// usage: bench_stream_dots [--in 2048] [--mb 512] [--product-mb 6] [--threads 2]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "cpu/bench.h"
#include "cpu/huge_pages.h"
#include "cpu/kernels.h"
#include "cpu/typed_linear.h"
#include "quant/quantize.h"

#ifdef _OPENMP
#include <omp.h>
#endif

using namespace journey;

namespace {

double seconds_now() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

int main(int argc, char** argv) {
  int64_t in = 2048, mb = 512, product_mb = 6, threads = 2;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--in")) in = std::atoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--mb")) mb = std::atoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--product-mb")) product_mb = std::atoll(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--threads")) threads = std::atoll(argv[i + 1]);
    else return std::fprintf(stderr, "usage: %s [--in 2048] [--mb 512] [--product-mb 6] [--threads 2]\n", argv[0]), 2;
  }
  if (in <= 0 || in % 256 != 0 || mb < 64 || product_mb < 1 || threads < 1)
    return std::fprintf(stderr, "--in a positive multiple of 256, --mb >= 64, --product-mb >= 1, --threads >= 1\n"), 2;
  const cpu::kernels::Isa isa = cpu::kernels::best_isa();
  const cpu::kernels::KernelTable& k = cpu::kernels::table(isa);
  if (!k.dot_rows) return std::fprintf(stderr, "no fused decode dots on %s\n", std::string(cpu::kernels::isa_name(isa)).c_str()), 77;
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(in)), w(static_cast<size_t>(64 * in));  // one token; 64 distinct rows, repeated
  for (float& v : x) v = normal(rng);
  for (float& v : w) v = normal(rng);
  ReadBandwidthProbe probe(int(threads), size_t(4 * mb) << 20);  // parts of `mb` (measure_part(p, 4))
  std::printf("isa %s, in %lld, %lld threads, %lld MB per matrix, products of %lld MB; probe: GB/s (best of 4 full reads),\n"
              "the others: the kernel's GB/s over a probe read of the same size right after it, median of 8 pairs\n",
              std::string(cpu::kernels::isa_name(isa)).c_str(), (long long)in, (long long)threads, (long long)mb,
              (long long)product_mb);
  std::printf("%-6s %8s %10s %10s %10s %10s\n", "type", "probe", "one call", "products", "grp call", "grp prod");
  for (DType type : {DType::Q8_0, DType::Q4_0, DType::Q4_K, DType::Q6_K}) {
    if (!cpu::kernels::has_fused_dot(type, isa)) continue;
    const int64_t row_bytes = dtype_bytes_for(type, in);
    const int64_t rows = (int64_t(mb) << 20) / row_bytes / 64 * 64;
    HugePageVector<uint8_t> stored(size_t(rows * row_bytes));
    std::vector<uint8_t> distinct(size_t(64 * row_bytes));
    for (int r = 0; r < 64; ++r) quant::quantize(type, w.data() + r * in, distinct.data() + r * row_bytes, in);
#pragma omp parallel for num_threads(int(threads)) schedule(static)
    for (int64_t r = 0; r < rows; ++r) std::memcpy(stored.data() + r * row_bytes, distinct.data() + r % 64 * row_bytes, size_t(row_bytes));
    const bool groups = k.dot_row_groups && cpu::kernels::has_row_group_dot(type, isa);
    HugePageVector<uint8_t> grouped(groups ? stored.size() : 0);
    if (groups) cpu::kernels::rows_to_groups(type, cpu::kernels::group_layout(isa), stored.data(), rows, in, grouped.data());
    cpu::QuantizedInput qx;
    qx.quantize(x.data(), 1, in, dtype_block_size(type) == 256 ? 256 : 32);
    const cpu::kernels::QuantizedActivations x0{qx.q.data(), qx.dx.data(), qx.gsum.data(), qx.xs.data()};
    std::vector<float> y(static_cast<size_t>(rows));
    const int64_t G = cpu::kernels::kGroupRows;
    // rows [begin, end) (multiples of 8 where grouped) by the stored or the grouped kernel
    auto dot_range = [&](bool from_groups, int64_t begin, int64_t end) {
      if (end <= begin) return;
      if (from_groups)
        k.dot_row_groups(type, grouped.data() + begin / G * G * row_bytes, (end - begin) / G, x0, in, y.data() + begin);
      else
        k.dot_rows(type, stored.data() + begin * row_bytes, size_t(row_bytes), end - begin, x0, in, y.data() + begin);
    };
    // One read of the matrix by the kernel, then a part of the probe's buffer (as large as the
    // matrix, read once), 8 times: the median of kernel GB/s / probe GB/s over the pairs, each pair
    // a few milliseconds apart (the VM's bandwidth drifts within seconds; a best-of-N on either
    // side would compare different moments).
    auto paired = [&](bool from_groups, int64_t product_rows) {
      std::vector<double> ratios;
      for (int pass = 0; pass < 8; ++pass) {
        const double t0 = seconds_now();
        for (int64_t p0 = 0; p0 < rows; p0 += product_rows) {
          const int64_t p1 = std::min(rows, p0 + product_rows);
#pragma omp parallel num_threads(int(threads))
          {
            int id = 0, count = 1;
#ifdef _OPENMP
            id = omp_get_thread_num(), count = omp_get_num_threads();
#endif
            const int64_t span = (p1 - p0 + count * 16 - 1) / (count * 16) * 16;  // 16-row blocks, as split_rows
            dot_range(from_groups, std::min(p1, p0 + id * span), std::min(p1, p0 + (id + 1) * span));
          }
        }
        const double kernel_gb_s = double(rows * row_bytes) / (seconds_now() - t0) / 1e9;
        ratios.push_back(kernel_gb_s / probe.measure_part(pass, 4));
      }
      std::sort(ratios.begin(), ratios.end());
      return 0.5 * (ratios[3] + ratios[4]);
    };
    const int64_t product_rows = std::max<int64_t>(16, ((int64_t(product_mb) << 20) / row_bytes) / 16 * 16);
    const double bandwidth = probe.measure();
    const double one = paired(false, rows), products = paired(false, product_rows);
    const double grp_one = groups ? paired(true, rows) : -1, grp_products = groups ? paired(true, product_rows) : -1;
    auto cell = [](double v) { return v < 0 ? std::string("-") : std::to_string(100 * v).substr(0, 5) + "%"; };
    std::printf("%-6s %8.1f %10s %10s %10s %10s\n", std::string(dtype_name(type)).c_str(), bandwidth, cell(one).c_str(),
                cell(products).c_str(), cell(grp_one).c_str(), cell(grp_products).c_str());
    std::fflush(stdout);
  }
}
