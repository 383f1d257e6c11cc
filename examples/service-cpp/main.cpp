// A C++ service using libkiln with the on-disk cache on: it loads a model,
// warms the specializations it will serve (compiled by the first process,
// loaded from the cache by every later one), then answers requests of
// several batch sizes from several threads at once.
//
//   service MODEL [--cache-dir DIR] [--requests N]
//
// It prints, per warmed specialization, whether the cache had it, and a
// checksum of all outputs (the same in every process).
#include <kiln/kiln.hpp>

#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

namespace {

// A deterministic request: batch items of 8x8 "images".
kiln::Tensor request(int64_t batch, int seed) {
  std::vector<float> values(size_t(batch * 64));
  for (size_t i = 0; i < values.size(); ++i) values[i] = float((i * 7 + size_t(seed) * 13) % 17);
  return kiln::Tensor::from_vector(kiln::DType::Float32, {batch, 1, 8, 8}, values);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s MODEL [--cache-dir DIR] [--requests N]\n", argv[0]);
    return 2;
  }
  kiln::RuntimeOptions options;
  options.threads = 2;
  int requests = 16;
  for (int i = 2; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--cache-dir"))
      options.cache_dir = argv[i + 1];
    else if (!std::strcmp(argv[i], "--requests"))
      requests = std::atoi(argv[i + 1]);
  }
  try {
    kiln::Runtime runtime(options);
    kiln::Model model = kiln::Model::load(runtime, argv[1]);
    const std::string input = model.inputs().at(0).name;

    // Warm start: the batch sizes this service expects.
    for (int64_t batch : {1, 4, 8}) {
      const kiln::SpecializationStats s = model.prepare({{input, {batch, 1, 8, 8}}});
      std::printf("batch %lld: %s (cache: %s)\n", static_cast<long long>(batch),
                  s.cache == kiln::CacheOutcome::Hit ? "loaded" : "compiled", kiln::cache_outcome_name(s.cache));
    }

    // Requests from two threads; concurrent runs of one model are safe.
    std::vector<double> sums(2, 0);
    std::vector<std::thread> workers;
    for (int t = 0; t < 2; ++t)
      workers.emplace_back([&, t] {
        for (int r = t; r < requests; r += 2) {
          const int64_t batch = r % 3 == 0 ? 8 : r % 3 == 1 ? 4 : 1;
          const kiln::Tensor out = model.run({{input, request(batch, r)}})[0];
          for (int64_t i = 0; i < out.numel(); ++i) sums[size_t(t)] += double(out.data_as<float>()[i]) * double(i % 10 + 1);
        }
      });
    for (auto& w : workers) w.join();
    std::printf("checksum %.6f\n", sums[0] + sums[1]);
    runtime.wait_for_cache();
    return 0;
  } catch (const kiln::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
