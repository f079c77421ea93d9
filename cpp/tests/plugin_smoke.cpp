// plugin_smoke: wiring test of the patched llama.cpp + libbeaconkv (through common's --kv-* glue).
//
//   plugin_smoke MODEL.gguf [N_GEN=300] [BUDGET=64] [extra --kv-* args...]
//
// Loads the model with KV compression on (budget BUDGET, policy streaming unless overridden), decodes a prompt
// and N_GEN greedy tokens one by one, and checks after every llama_decode, through llama_kv_plugin_seq_cells:
//   - the sequence holds at most BUDGET cells (the plugin compresses at the end of each decode call),
//   - positions are unique and sorted, the newest position is present,
//   - a position that was evicted never comes back;
// and at the end that the positions ran past the number of physical KV cells.

#include "arg.h"
#include "common.h"
#include "kv-compress.h"
#include "llama.h"
#include "llama-kv-plugin.h"

#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#define CHECK(cond, ...) do { if (!(cond)) { fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); fprintf(stderr, __VA_ARGS__); fprintf(stderr, "\n"); return 1; } } while (0)

int main(int argc, char ** argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s MODEL.gguf [N_GEN=300] [BUDGET=64] [--kv-* args...]\n", argv[0]);
        return 2;
    }
    const std::string model_path = argv[1];
    const int n_gen  = argc > 2 ? atoi(argv[2]) : 300;
    const int budget = argc > 3 ? atoi(argv[3]) : 64;

    // build a command line for common's parser, exactly as a tool would get it
    std::vector<std::string> args = {
        "plugin_smoke", "-m", model_path, "-c", "4096", "-b", "64", "-ub", "64", "-t", "2",
        "--kv-compress", "streaming", "--kv-budget", std::to_string(budget), "--kv-prefix", "4",
    };
    for (int i = 4; i < argc; ++i) {
        args.push_back(argv[i]);
    }
    std::vector<char *> cargv;
    for (auto & a : args) {
        cargv.push_back(a.data());
    }

    common_params params;
    if (!common_params_parse((int) cargv.size(), cargv.data(), params, LLAMA_EXAMPLE_COMMON)) {
        return 1;
    }
    params.warmup = false;

    common_init();
    llama_backend_init();

    // a rejected flag value must stop startup with a message naming the flag
    {
        common_params bad;
        bool threw = false;
        try {
            common_kv_compress_append(bad, "--kv-budget", "budget=notanumber");
        } catch (const std::invalid_argument & e) {
            threw = std::string(e.what()).find("--kv-budget") != std::string::npos;
            fprintf(stderr, "expected rejection: %s\n", e.what());
        }
        CHECK(threw, "invalid --kv-budget was accepted");
    }

    const uint32_t n_cells_phys = common_kv_compress_cells(params, nullptr);
    fprintf(stderr, "spec '%s', physical cells %u\n", params.kv_compress_spec.c_str(), n_cells_phys);

    auto init = common_init_from_params(params);
    llama_context * ctx = init->context();
    const llama_model * model = init->model();
    CHECK(ctx && model, "failed to load %s", model_path.c_str());
    CHECK(common_kv_compress_get(ctx) != nullptr, "plugin not attached");
    CHECK(llama_kv_plugin_n_layers(ctx) > 0, "no layers");
    CHECK(llama_n_ctx(ctx) >= 4096, "logical n_ctx %u", llama_n_ctx(ctx));

    const llama_vocab * vocab = llama_model_get_vocab(model);
    const int n_vocab = llama_vocab_n_tokens(vocab);

    std::vector<llama_token> prompt = common_tokenize(ctx, "The quick brown fox jumps over the lazy dog. Once upon a time, in a land far away, there lived a", true);
    fprintf(stderr, "prompt: %zu tokens\n", prompt.size());

    std::set<llama_pos> evicted;
    std::set<llama_pos> prev;
    int n_past = 0;
    int max_cells = 0;

    auto check_cells = [&](const char * when) -> int {
        const int32_t n = llama_kv_plugin_seq_cells(ctx, 0, nullptr, nullptr, 0, nullptr);
        CHECK(n >= 0, "seq_cells failed");
        std::vector<llama_pos> pos(n);
        std::vector<uint32_t>  cells(n);
        uint32_t stream = 99;
        CHECK(llama_kv_plugin_seq_cells(ctx, 0, pos.data(), cells.data(), n, &stream) == n, "seq_cells count changed");
        CHECK(stream == 0, "stream %u", stream);
        CHECK(n <= budget, "%s: %d cells > budget %d (n_past %d)", when, n, budget, n_past);
        max_cells = std::max(max_cells, n);
        std::set<llama_pos> cur;
        for (int i = 0; i < n; ++i) {
            CHECK(i == 0 || pos[i] > pos[i-1], "positions not sorted/unique");
            CHECK(!evicted.count(pos[i]), "evicted position %d is back", pos[i]);
            cur.insert(pos[i]);
        }
        CHECK(n > 0 && pos[n-1] == n_past - 1, "newest position %d != %d", n > 0 ? pos[n-1] : -1, n_past - 1);
        for (llama_pos p : prev) {
            if (!cur.count(p)) {
                evicted.insert(p);
            }
        }
        prev = cur;
        return 0;
    };

    // prompt (may be split by n_batch)
    for (size_t i = 0; i < prompt.size(); i += params.n_batch) {
        const int n = (int) std::min<size_t>(params.n_batch, prompt.size() - i);
        CHECK(llama_decode(ctx, llama_batch_get_one(prompt.data() + i, n)) == 0, "prompt decode failed");
        n_past += n;
        if (check_cells("prompt")) return 1;
    }

    std::string out;
    for (int t = 0; t < n_gen; ++t) {
        const float * logits = llama_get_logits_ith(ctx, -1);
        llama_token best = 0;
        for (int v = 1; v < n_vocab; ++v) {
            if (logits[v] > logits[best]) best = v;
        }
        out += common_token_to_piece(ctx, best);
        int rc = llama_decode(ctx, llama_batch_get_one(&best, 1));
        CHECK(rc == 0, "decode failed at token %d (rc %d)", t, rc);
        n_past++;
        if (check_cells("gen")) return 1;
    }

    // the public seq_rm path notifies the plugin (the stub logs it)
    llama_memory_seq_rm(llama_get_memory(ctx), 0, n_past - 1, -1);
    n_past--;
    if (check_cells("seq_rm")) return 1;

    fprintf(stderr, "generated: %.200s...\n", out.c_str());
    fprintf(stderr, "n_past %d, max cells %d, evicted %zu positions, physical cells %u\n", n_past, max_cells, evicted.size(), n_cells_phys);
    CHECK(n_cells_phys > 0 && (uint32_t) n_past > n_cells_phys, "positions (%d) did not run past the physical cells (%u)", n_past, n_cells_phys);
    CHECK(!evicted.empty(), "nothing evicted");

    fprintf(stderr, "plugin_smoke: OK\n");
    return 0;
}
