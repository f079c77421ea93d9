// The driver shared by the end-to-end test programs (test_e2e, test_hybrid): argument parsing,
// model loading, contexts, prompts and the cell listing (header-only).
//
//   PROGRAM MODEL.gguf TEST [common llama.cpp flags]
//
// Exit 0 = pass, 1 = the test failed, 2 = bad arguments, unknown test or no model.
#pragma once

#include "arg.h"
#include "common.h"
#include "llama-kv-plugin.h"
#include "llama.h"
#include "tool-common.h"

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

// Inside a `bool` test: on failure print the condition and a message, and return false.
#define CHECK(cond, ...)                                                    \
    do {                                                                    \
        if (!(cond)) {                                                      \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                   \
            fprintf(stderr, "\n");                                          \
            return false;                                                   \
        }                                                                   \
    } while (0)

namespace bkv_test {

// What every test gets: the parsed llama.cpp flags (without any --kv-compress spec) and the model.
struct env {
    common_params params;
    llama_model * model = nullptr;
    int n_vocab = 0;
};

struct ctx_deleter {
    void operator()(llama_context * c) const { llama_free(c); }
};
using ctx_ptr = std::unique_ptr<llama_context, ctx_deleter>;

inline int argmax(const float * v, int n) { return (int) (std::max_element(v, v + n) - v); }

// The first n tokens of a fixed English text repeated (with BOS), the same on every run.
inline std::vector<llama_token> prompt_tokens(env & e, int n) {
    const std::string text = "The history of the lighthouse keeper begins on a cold morning, when the ships were late. ";
    std::string s;
    while ((int) common_tokenize(llama_model_get_vocab(e.model), s, true).size() < n) {
        s += text;
    }
    auto t = common_tokenize(llama_model_get_vocab(e.model), s, true);
    t.resize(n);
    return t;
}

// The cells sequence `seq` holds, from llama.cpp's own listing (plugin attached): positions and
// cell indices, in the listing's order.
struct cell_list {
    std::vector<llama_pos> pos;
    std::vector<uint32_t> cell;
};

inline cell_list list_cells(llama_context * ctx, llama_seq_id seq) {
    cell_list l;
    const int32_t n = llama_kv_plugin_seq_cells(ctx, seq, nullptr, nullptr, 0, nullptr);
    l.pos.resize(std::max(n, 0));
    l.cell.resize(std::max(n, 0));
    uint32_t stream = 0;
    llama_kv_plugin_seq_cells(ctx, seq, l.pos.data(), l.cell.data(), n, &stream);
    return l;
}

// Runs `PROGRAM MODEL TEST [llama.cpp flags]`: parses the flags, initialises the backend with
// `log` as libllama's log callback, loads the model and calls `run(e, TEST)`, which returns the
// test's outcome, or nothing for an unknown TEST. Prints "ok TEST" or "FAILED TEST" and returns
// the exit code.
inline int run_main(int argc, char ** argv, ggml_log_callback log,
                    const std::function<std::optional<bool>(env &, const std::string &)> & run) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s MODEL TEST [llama.cpp flags]\n", argv[0]);
        return 2;
    }
    const std::string model_path = argv[1];
    const std::string test = argv[2];
    std::vector<char *> args = {argv[0], (char *) "-m", (char *) model_path.c_str()};
    for (int i = 3; i < argc; i++) {
        args.push_back(argv[i]);
    }
    env e;
    if (!common_params_parse((int) args.size(), args.data(), e.params, LLAMA_EXAMPLE_COMPLETION)) {
        return 2;
    }
    e.params.kv_compress_spec.clear();
    llama_backend_init();
    llama_log_set(log, nullptr);
    llama_model_params mp = common_model_params_to_llama(e.params);
    e.model = llama_model_load_from_file(model_path.c_str(), mp);
    if (!e.model) {
        fprintf(stderr, "cannot load %s\n", model_path.c_str());
        return 2;
    }
    e.n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(e.model));

    const std::optional<bool> ok = run(e, test);
    if (!ok) {
        fprintf(stderr, "unknown test '%s'\n", test.c_str());
        return 2;
    }
    llama_model_free(e.model);
    printf("%s %s\n", *ok ? "ok" : "FAILED", test.c_str());
    return *ok ? 0 : 1;
}

// The policy after the colon of `test` ("bounded_cells:recent"), else `fallback`.
inline std::string test_arg(const std::string & test, const std::string & fallback) {
    const size_t colon = test.find(':');
    return colon == std::string::npos ? fallback : test.substr(colon + 1);
}

}  // namespace bkv_test
