// Times llama.cpp's own tokenizer (llama_tokenize, vocabulary only, no weights) on a file, to
// compare with ridge's `Tokenizer::encode` (crates/ridge-tokenizer/examples/encode_bench.rs).
// Report only; nothing in the test suite depends on it.
//
// Build and run (LLAMA = a llama.cpp checkout with build/bin holding libllama.so):
//   g++ -O2 -std=c++17 tools/reference/llama_tokenize_bench.cpp -I$LLAMA/include \
//       -I$LLAMA/ggml/include -L$LLAMA/build/bin -lllama -lggml -lggml-base -o /tmp/ltb
//   LD_LIBRARY_PATH=$LLAMA/build/bin /tmp/ltb MODEL.gguf TEXT_FILE
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "llama.h"

static void quiet(enum ggml_log_level, const char *, void *) {}

int main(int argc, char ** argv) {
    if (argc < 3) {
        std::fprintf(stderr, "usage: %s MODEL.gguf TEXT_FILE\n", argv[0]);
        return 1;
    }
    llama_log_set(quiet, nullptr);
    llama_backend_init();
    auto params = llama_model_default_params();
    params.vocab_only = true;
    auto t0 = std::chrono::steady_clock::now();
    llama_model * model = llama_model_load_from_file(argv[1], params);
    if (!model) {
        std::fprintf(stderr, "cannot load %s\n", argv[1]);
        return 1;
    }
    auto t1 = std::chrono::steady_clock::now();
    const llama_vocab * vocab = llama_model_get_vocab(model);
    std::ifstream in(argv[2], std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string text = ss.str();
    std::vector<llama_token> ids(text.size() + 16);
    int n = 0;
    const int iters = 5;
    double best = 1e9;
    for (int i = 0; i < iters; i++) {
        auto a = std::chrono::steady_clock::now();
        n = llama_tokenize(vocab, text.data(), (int32_t) text.size(), ids.data(), (int32_t) ids.size(), true, true);
        auto b = std::chrono::steady_clock::now();
        best = std::min(best, std::chrono::duration<double>(b - a).count());
    }
    std::printf("vocab load %.1f ms; encode %zu bytes -> %d tokens: %.1f ms (best of %d, %.2f MB/s)\n",
                std::chrono::duration<double>(t1 - t0).count() * 1e3, text.size(), n, best * 1e3, iters,
                text.size() / best / 1e6);
    llama_model_free(model);
    return 0;
}
