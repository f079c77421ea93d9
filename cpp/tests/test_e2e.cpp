// End-to-end tests of BeaconKV inside the patched llama.cpp.
//
//   test_e2e MODEL.gguf TEST [common llama.cpp flags, e.g. -ctk q8_0 -fa on]
//
// TEST: detached_vs_none | budget_covers_all | bounded_cells | query_capture | iswa_global_only |
//       archive_swap_in | archive_run | ...
// Exit 0 = pass; failures print what differed. Driven by tests/e2e.rs (cargo test --features e2e).

#include "arg.h"
#include "beaconkv.h"
#include "common.h"
#include "kv-compress.h"
#include "llama-kv-plugin.h"
#include "llama.h"
#include "tool-common.h"

#include "driver.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

namespace {

using namespace bkv_test;

// spec empty: no plugin at all (plain llama.cpp).
ctx_ptr make_ctx(env & e, const std::string & spec, uint32_t n_ctx,
                 ggml_backend_sched_eval_callback cb = nullptr, void * cb_data = nullptr) {
    return ctx_ptr(bkv_tools::make_context(e.model, e.params, spec, n_ctx, cb, cb_data));
}

// n tokens of sequence 0, in calls of at most n_batch tokens (compression clamps n_batch)
bool decode(llama_context * ctx, const llama_token * t, int n) {
    const int n_batch = (int) llama_n_batch(ctx);
    for (int i = 0; i < n; i += n_batch) {
        const int k = std::min(n_batch, n - i);
        if (llama_decode(ctx, llama_batch_get_one(const_cast<llama_token *>(t + i), k)) != 0) {
            return false;
        }
    }
    return true;
}

// Greedy generation of n tokens after a prompt; returns the tokens and all logits rows.
struct gen_result {
    std::vector<llama_token> tokens;
    std::vector<std::vector<float>> logits;
};

bool generate(env & e, llama_context * ctx, const std::vector<llama_token> & prompt, int n, gen_result & out,
              const std::function<bool(int step)> & after_step = nullptr) {
    if (!decode(ctx, prompt.data(), (int) prompt.size())) {
        return false;
    }
    for (int i = 0; i < n; i++) {
        const float * l = llama_get_logits_ith(ctx, -1);
        out.logits.emplace_back(l, l + e.n_vocab);
        llama_token t = argmax(l, e.n_vocab);
        out.tokens.push_back(t);
        if (!decode(ctx, &t, 1)) {
            return false;
        }
        if (after_step && !after_step(i)) {
            return false;
        }
    }
    return true;
}

// 1. A context with the plugin attached and policy none computes bit-identical logits to a
//    context without the plugin.
bool test_detached_vs_none(env & e) {
    auto prompt = prompt_tokens(e, 48);
    ctx_ptr plain = make_ctx(e, "", 512);
    ctx_ptr none = make_ctx(e, "prompt=inside,policy=none", 512);
    CHECK(plain && none, "context creation failed");
    CHECK(common_kv_compress_get(none.get()) != nullptr, "plugin not attached");
    gen_result a, b;
    CHECK(generate(e, plain.get(), prompt, 96, a), "decode failed (plain)");
    CHECK(generate(e, none.get(), prompt, 96, b), "decode failed (none)");
    for (size_t i = 0; i < a.logits.size(); i++) {
        CHECK(std::memcmp(a.logits[i].data(), b.logits[i].data(), sizeof(float) * e.n_vocab) == 0,
              "logits differ at step %zu", i);
    }
    return true;
}

// 2. A budget that covers the whole run never evicts: output identical to uncompressed.
bool test_budget_covers_all(env & e) {
    auto prompt = prompt_tokens(e, 40);
    ctx_ptr plain = make_ctx(e, "", 1024);
    ctx_ptr big = make_ctx(e, "prompt=inside,policy=beacon,budget=512,min=448", 1024);
    CHECK(plain && big, "context creation failed");
    gen_result a, b;
    CHECK(generate(e, plain.get(), prompt, 200, a), "decode failed (plain)");
    CHECK(generate(e, big.get(), prompt, 200, b), "decode failed (beacon)");
    CHECK(a.tokens == b.tokens, "generated tokens differ");
    for (size_t i = 0; i < a.logits.size(); i++) {
        CHECK(std::memcmp(a.logits[i].data(), b.logits[i].data(), sizeof(float) * e.n_vocab) == 0,
              "logits differ at step %zu", i);
    }
    beaconkv_stats st{};
    beaconkv_get_stats(common_kv_compress_get(big.get()), 0, &st);
    CHECK(st.evicted == 0, "evicted %llu cells below budget", (unsigned long long) st.evicted);
    return true;
}

// 3. Budget B, 8*B generated tokens: cells never exceed B beside the kept prompt (the default
//    prompt=keep; none with prompt=inside), positions run past the physical cells, evicted
//    positions are really gone from llama.cpp's own cell listing. `policy` may carry more keys
//    ("beacon,prompt=inside").
bool test_bounded_cells(env & e, const std::string & policy) {
    const int budget = 64;
    const std::string spec = "policy=" + policy + ",budget=64,min=48,window=16,beacons=8,recent=8";
    auto prompt = prompt_tokens(e, 24);
    const bool keep = policy.find("prompt=inside") == std::string::npos;
    const int limit = budget + (keep ? (int) prompt.size() : 0);
    // the ubatch is clamped to the physical cache's slack (max(budget/8, 32) = 32)
    e.params.n_batch = e.params.n_ubatch = 64;
    ctx_ptr ctx = make_ctx(e, spec, 8192);
    CHECK(ctx, "context creation failed");
    const uint32_t physical = llama_kv_plugin_n_cells(ctx.get());
    CHECK(physical > 0 && physical < 8192, "physical cells %u not below the logical context", physical);
    std::set<llama_pos> gone;
    std::set<llama_pos> present;
    int32_t max_cells = 0;
    gen_result g;
    bool ok = generate(e, ctx.get(), prompt, 8 * budget + 37, g, [&](int) {
        cell_list l = list_cells(ctx.get(), 0);
        max_cells = std::max<int32_t>(max_cells, (int32_t) l.pos.size());
        std::set<llama_pos> now(l.pos.begin(), l.pos.end());
        for (llama_pos p : present) {
            if (!now.count(p)) {
                gone.insert(p);
            }
        }
        for (llama_pos p : now) {
            if (gone.count(p)) {
                fprintf(stderr, "evicted position %d reappeared\n", p);
                return false;
            }
        }
        present = now;
        return (int32_t) l.pos.size() <= limit;
    });
    CHECK(ok, "decode failed or cells exceeded %d (max seen %d)", limit, max_cells);
    const llama_pos pos_max = llama_memory_seq_pos_max(llama_get_memory(ctx.get()), 0);
    CHECK(pos_max >= (llama_pos) physical, "positions (%d) never ran past the physical cells (%u)", pos_max,
          physical);
    // The protected prefix (the kept prompt; with prompt=inside at most prefix_max = budget/4 cells
    // of it) is kept, and so is the newest token.
    cell_list l = list_cells(ctx.get(), 0);
    CHECK(!l.pos.empty() && l.pos.back() == pos_max, "newest position missing");
    if (policy != "random") {
        for (int p = 0; p < std::min<int>((int) prompt.size(), keep ? budget : budget / 4); p++) {
            CHECK(std::find(l.pos.begin(), l.pos.end(), p) != l.pos.end(), "prompt position %d evicted", p);
        }
    }
    beaconkv_stats st{};
    beaconkv_get_stats(common_kv_compress_get(ctx.get()), 0, &st);
    const uint64_t total = prompt.size() + g.tokens.size();
    CHECK(st.evicted + l.pos.size() == total, "evicted %llu + in use %zu != tokens %llu",
          (unsigned long long) st.evicted, l.pos.size(), (unsigned long long) total);
    CHECK(gone.size() == st.evicted, "llama.cpp lost %zu positions, plugin evicted %llu", gone.size(),
          (unsigned long long) st.evicted);
    CHECK(st.compress_events > 0, "no compression event");
    printf("bounded_cells %s: max cells %d, physical %u, pos_max %d, evicted %llu in %llu events\n",
           policy.c_str(), max_cells, physical, pos_max, (unsigned long long) st.evicted,
           (unsigned long long) st.compress_events);
    return true;
}

// 4. The queries the plugin reads are the attention queries the graph computed.
struct q_capture {
    std::map<int, std::vector<float>> q;  // layer -> last "Qcur-<il>" values seen
    std::map<int, std::vector<int64_t>> ne;
};

bool capture_cb(struct ggml_tensor * t, bool ask, void * ud) {
    if (std::strncmp(t->name, "Qcur-", 5) != 0) {
        return false;
    }
    if (ask) {
        return true;
    }
    auto * cap = (q_capture *) ud;
    const int il = std::atoi(t->name + 5);
    if (t->type != GGML_TYPE_F32 || !ggml_is_contiguous(t)) {
        return true;
    }
    std::vector<float> v(ggml_nelements(t));
    ggml_backend_tensor_get(t, v.data(), 0, ggml_nbytes(t));
    cap->q[il] = v;  // the last Qcur node of a layer is the one attention consumes
    cap->ne[il] = {t->ne[0], t->ne[1], t->ne[2]};
    return true;
}

bool test_query_capture(env & e) {
    q_capture cap;
    ctx_ptr ctx = make_ctx(e, "prompt=inside,policy=beacon,budget=256", 512, capture_cb, &cap);
    CHECK(ctx, "context creation failed");
    auto prompt = prompt_tokens(e, 8);
    CHECK(decode(ctx.get(), prompt.data(), (int) prompt.size()), "decode failed");
    const int n_layers = llama_kv_plugin_n_layers(ctx.get());
    CHECK(n_layers > 0, "no layers");
    double max_diff = 0;
    for (int i = 0; i < n_layers; i++) {
        llama_kv_plugin_layer layer{};
        CHECK(llama_kv_plugin_get_layer(ctx.get(), i, &layer) == 0, "get_layer %d", i);
        CHECK(cap.q.count(layer.il), "no Qcur captured by the eval callback for layer %d", layer.il);
        const std::vector<float> & ref = cap.q[layer.il];
        const int row = layer.n_head * layer.head_dim;
        CHECK((int) ref.size() == row * (int) prompt.size(), "Qcur size %zu", ref.size());
        std::vector<float> got(row);
        for (int tok = 0; tok < (int) prompt.size(); tok++) {
            uint32_t r = tok;  // n_tokens <= q_capacity: token i sits in row i
            CHECK(llama_kv_plugin_read_rows(ctx.get(), i, 1, 0, &r, 1, got.data()) == 1, "read_rows");
            for (int k = 0; k < row; k++) {
                max_diff = std::max(max_diff, (double) std::fabs(got[k] - ref[tok * row + k]));
            }
        }
    }
    CHECK(max_diff == 0.0, "captured queries differ from the graph's Qcur by %g", max_diff);
    printf("query_capture: %d layers, exact\n", n_layers);
    return true;
}

// 5. iSWA (Gemma 3): only the global layers' cache is compressed; output stays close to the
//    uncompressed run (teacher-forced top-1 agreement).
bool test_iswa_global_only(env & e) {
    const int n_layer = llama_model_n_layer(e.model);
    ctx_ptr plain = make_ctx(e, "", 2048);
    ctx_ptr comp = make_ctx(e, "prompt=inside,policy=beacon,budget=160,min=128,window=32", 2048);
    CHECK(plain && comp, "context creation failed");
    const int n_evictable = llama_kv_plugin_n_layers(comp.get());
    CHECK(n_evictable > 0 && n_evictable < n_layer, "evictable layers %d of %d: expected only global ones",
          n_evictable, n_layer);
    auto prompt = prompt_tokens(e, 32);
    gen_result ref;
    CHECK(generate(e, plain.get(), prompt, 400, ref), "decode failed (plain)");
    // teacher forcing: feed the reference tokens to the compressed context
    CHECK(decode(comp.get(), prompt.data(), (int) prompt.size()), "decode failed");
    int agree = 0;
    for (size_t i = 0; i < ref.tokens.size(); i++) {
        agree += argmax(llama_get_logits_ith(comp.get(), -1), e.n_vocab) == argmax(ref.logits[i].data(), e.n_vocab);
        CHECK(decode(comp.get(), &ref.tokens[i], 1), "decode failed at %zu", i);
        CHECK(list_cells(comp.get(), 0).pos.size() <= 160, "global cells exceed budget");
    }
    const double rate = (double) agree / ref.tokens.size();
    printf("iswa_global_only: %d of %d layers evictable, top-1 agreement %.3f\n", n_evictable, n_layer, rate);
    CHECK(rate >= 0.6, "agreement %.3f too low", rate);
    return true;
}

// 6. Several sequences in one context, decoded in one batch per step the way llama-server does it.
//    Every sequence stays within its budget; a fork (seq_cp) shares cells, and evicting them from
//    one sequence never takes them from the other; removing every sequence leaves no cell in use.
struct multi_result {
    double tok_s = 0;
    int32_t max_cells = 0;
};

bool run_multi(env & e, const std::string & spec, int n_seq, int n_gen, bool unified, bool fork, int budget,
               multi_result & res) {
    e.params.n_parallel = n_seq;
    e.params.kv_unified = unified;
    e.params.n_batch = e.params.n_ubatch = 64;
    ctx_ptr ctx = make_ctx(e, spec, (uint32_t) (n_seq * (n_gen + 128)));
    CHECK(ctx, "context creation failed");
    llama_context * c = ctx.get();
    const beaconkv_context * bkv = common_kv_compress_get(c);
    llama_memory_t mem = llama_get_memory(c);
    const int n_active = fork ? n_seq - 1 : n_seq;  // with fork, the last sequence is forked from seq 0
    std::vector<llama_token> last(n_seq);
    std::vector<llama_pos> next_pos(n_seq, 0);
    for (int s = 0; s < n_active; s++) {
        auto prompt = prompt_tokens(e, 16 + 4 * s);
        const size_t n_batch = llama_n_batch(c);
        llama_batch b = llama_batch_init((int) n_batch, 0, 1);
        for (size_t i0 = 0; i0 < prompt.size(); i0 += n_batch) {
            bkv_tools::batch_clear(b);
            for (size_t i = i0; i < std::min(prompt.size(), i0 + n_batch); i++) {
                bkv_tools::batch_add(b, prompt[i], (llama_pos) i, {s}, i + 1 == prompt.size());
            }
            CHECK(llama_decode(c, b) == 0, "prompt decode failed for seq %d", s);
        }
        last[s] = argmax(llama_get_logits_ith(c, -1), e.n_vocab);
        next_pos[s] = (llama_pos) prompt.size();
        llama_batch_free(b);
    }
    int active = n_active;
    llama_batch b = llama_batch_init(n_seq, 0, 1);
    std::set<llama_pos> forked_prev;
    uint64_t forked_events_prev = 0;
    const auto t0 = std::chrono::steady_clock::now();
    uint64_t n_decoded = 0;
    for (int step = 0; step < n_gen; step++) {
        if (fork && step == n_gen / 3) {
            // fork seq 0 into the last sequence: both now hold the same cells
            llama_memory_seq_cp(mem, 0, n_seq - 1, -1, -1);
            last[n_seq - 1] = last[0];
            next_pos[n_seq - 1] = next_pos[0];
            active = n_seq;
            cell_list a = list_cells(c, 0), f = list_cells(c, n_seq - 1);
            CHECK(a.pos == f.pos, "fork: positions differ (%zu vs %zu)", a.pos.size(), f.pos.size());
        }
        bkv_tools::batch_clear(b);
        for (int s = 0; s < active; s++) {
            bkv_tools::batch_add(b, last[s], next_pos[s]++, {s}, true);
        }
        CHECK(llama_decode(c, b) == 0, "decode failed at step %d", step);
        n_decoded += active;
        for (int s = 0; s < active; s++) {
            last[s] = argmax(llama_get_logits_ith(c, s), e.n_vocab);
            const int32_t n = bkv_tools::seq_cells(c, s);
            res.max_cells = std::max(res.max_cells, n);
            CHECK(budget <= 0 || n <= budget, "seq %d holds %d cells > budget %d at step %d", s, n, budget, step);
        }
        if (fork && active == n_seq && bkv) {
            // the fork loses positions only through its own compression passes
            cell_list f = list_cells(c, n_seq - 1);
            std::set<llama_pos> now(f.pos.begin(), f.pos.end());
            beaconkv_stats st{};
            beaconkv_get_stats(bkv, n_seq - 1, &st);
            if (st.compress_events == forked_events_prev) {
                for (llama_pos p : forked_prev) {
                    CHECK(now.count(p), "fork lost position %d although it was not compressed", p);
                }
            }
            forked_prev = now;
            forked_events_prev = st.compress_events;
        }
    }
    res.tok_s = n_decoded / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    llama_batch_free(b);
    for (int s = 0; s < n_seq; s++) {
        llama_memory_seq_rm(mem, s, -1, -1);
    }
    for (int s = 0; s < n_seq; s++) {
        CHECK(bkv_tools::seq_cells(c, s) == 0, "seq %d still holds cells after removal", s);
        CHECK(llama_memory_seq_pos_max(mem, s) == -1, "seq %d still has positions", s);
        if (bkv) {
            beaconkv_stats st{};
            beaconkv_get_stats(bkv, s, &st);
            CHECK(st.cells_in_use == 0 && st.n_tokens == 0, "plugin kept state of removed seq %d", s);
        }
    }
    return true;
}

bool test_multi_seq(env & e, bool unified) {
    multi_result r;
    const bool ok = run_multi(e, "prompt=inside,policy=beacon,budget=64,min=48,window=16,beacons=8,recent=8", 4, 400, unified,
                              /*fork=*/true, 64, r);
    printf("multi_seq %s: max cells per seq %d\n", unified ? "unified" : "split", r.max_cells);
    return ok;
}

// Load: n_seq sequences x n_gen tokens in one context, compressed (budget) and uncompressed;
// prints throughput. BEACONKV_LOAD="n_seq,n_gen,budget" overrides the CI-sized default.
bool test_load(env & e) {
    int n_seq = 8, n_gen = 300, budget = 64, n_gen_plain = -1;
    if (const char * v = getenv("BEACONKV_LOAD")) {  // "n_seq,n_gen,budget[,n_gen of the uncompressed run]"
        sscanf(v, "%d,%d,%d,%d", &n_seq, &n_gen, &budget, &n_gen_plain);
    }
    if (n_gen_plain < 0) {
        n_gen_plain = n_gen;
    }
    const std::string spec = "prompt=inside,policy=beacon,budget=" + std::to_string(budget) + ",window=" +
                             std::to_string(std::min(64, budget / 4));
    multi_result comp, plain;
    // one stream per sequence (llama-server's layout when slots are not unified): each sequence
    // attends only to its own cells
    CHECK(run_multi(e, spec, n_seq, n_gen, false, false, budget, comp), "compressed run failed");
    CHECK(run_multi(e, "", n_seq, n_gen_plain, false, false, 0, plain), "uncompressed run failed");
    printf("load: %d seqs x %d tokens: beacon budget %d: %.1f tok/s (max %d cells/seq); "
           "none (%d tokens): %.1f tok/s (max %d)\n",
           n_seq, n_gen, budget, comp.tok_s, comp.max_cells, n_gen_plain, plain.tok_s, plain.max_cells);
    return true;
}

// 7. A prompt far longer than the budget is compressed chunk by chunk (cells bounded after every
//    call); with too few physical cells for one chunk, decode fails with a message (no crash).
bool test_long_prompt(env & e) {
    e.params.n_batch = e.params.n_ubatch = 128;
    auto prompt = prompt_tokens(e, 1500);
    {
        ctx_ptr ctx = make_ctx(e, "prompt=inside,policy=beacon,budget=96,window=16,prefix=8", 4096);
        CHECK(ctx, "context creation failed");
        for (size_t i = 0; i < prompt.size(); i += 128) {
            const int n = (int) std::min<size_t>(128, prompt.size() - i);
            CHECK(decode(ctx.get(), &prompt[i], n), "chunk at %zu failed", i);
            CHECK(bkv_tools::seq_cells(ctx.get(), 0) <= 96, "cells above budget after chunk %zu", i);
        }
    }
    {
        // prompt=keep (the default), room 96: the prompt's first 96 cells stay whole, the rest of
        // it is compressed within the budget beside them
        ctx_ptr ctx = make_ctx(e, "policy=beacon,budget=96,window=16", 4096);
        CHECK(ctx, "context creation failed");
        for (size_t i = 0; i < prompt.size(); i += 128) {
            const int n = (int) std::min<size_t>(128, prompt.size() - i);
            CHECK(decode(ctx.get(), &prompt[i], n), "chunk at %zu failed", i);
            CHECK(bkv_tools::seq_cells(ctx.get(), 0) <= 2 * 96, "cells above budget + room after chunk %zu", i);
        }
        const auto kept = list_cells(ctx.get(), 0).pos;
        for (int p = 0; p < 96; p++) {
            CHECK(std::find(kept.begin(), kept.end(), p) != kept.end(), "kept prompt position %d evicted", p);
        }
    }
    {
        // physical cells (--kv-cells 16) below one chunk (n_batch 32): a clean failure
        common_params p = e.params;
        p.kv_cells = 16;
        ctx_ptr ctx(bkv_tools::make_context(e.model, p, "prompt=inside,policy=beacon,budget=32,window=8", 4096));
        CHECK(ctx, "context creation failed");
        const int chunk = (int) llama_n_batch(ctx.get());
        CHECK((int) llama_kv_plugin_n_cells(ctx.get()) < chunk, "physical cells %u, chunk %d",
              llama_kv_plugin_n_cells(ctx.get()), chunk);
        const int ret = llama_decode(ctx.get(), llama_batch_get_one(prompt.data(), chunk));
        CHECK(ret == 1, "decode of a chunk larger than the cells returned %d, expected 1 (no slot)", ret);
        CHECK(bkv_tools::seq_cells(ctx.get(), 0) == 0, "a failed decode left cells behind");
        CHECK(decode(ctx.get(), prompt.data(), 16), "the context is unusable after the failure");
    }
    printf("long_prompt: %zu tokens through 96 cells\n", prompt.size());
    return true;
}

// 8. State: a compressed sequence saved with llama.cpp's state API (plus the plugin's own state)
//    and loaded into a fresh context continues with the same tokens as the uninterrupted run.
bool test_state_roundtrip(env & e, bool with_plugin_state) {
    const char * spec_env = getenv("BEACONKV_STATE_SPEC");  // for investigating
    const std::string spec = spec_env ? spec_env : "prompt=inside,policy=beacon,budget=64,min=48,window=16,beacons=8,recent=8";
    e.params.n_batch = e.params.n_ubatch = 64;
    auto prompt = prompt_tokens(e, 24);
    ctx_ptr a = make_ctx(e, spec, 4096);
    CHECK(a, "context creation failed");
    gen_result first;
    CHECK(generate(e, a.get(), prompt, 200, first), "decode failed");
    // save: llama.cpp's sequence state, then the plugin's
    std::vector<uint8_t> kv(llama_state_seq_get_size(a.get(), 0));
    CHECK(llama_state_seq_get_data(a.get(), kv.data(), kv.size(), 0) == kv.size(), "state_seq_get_data");
    const beaconkv_context * pa = common_kv_compress_get(a.get());
    std::vector<uint8_t> plug(beaconkv_seq_state_size(pa, 0));
    CHECK(!plug.empty() && beaconkv_seq_state_get(pa, 0, plug.data(), plug.size()) == (int64_t) plug.size(),
          "beaconkv_seq_state_get: %s", beaconkv_last_error(pa));
    const std::vector<float> last_logits = first.logits.back();
    // the uninterrupted run goes on
    auto continue_greedy = [&](llama_context * c, std::vector<float> logits, int n, std::vector<llama_token> & out) {
        for (int i = 0; i < n; i++) {
            llama_token t = argmax(logits.data(), e.n_vocab);
            out.push_back(t);
            if (!decode(c, &t, 1)) {
                return false;
            }
            const float * l = llama_get_logits_ith(c, -1);
            logits.assign(l, l + e.n_vocab);
            if (!spec_env && bkv_tools::seq_cells(c, 0) > 64) {
                return false;
            }
        }
        return true;
    };
    // first.tokens.back() was sampled and decoded already; continue from its logits
    const float * l = llama_get_logits_ith(a.get(), -1);
    std::vector<float> a_logits(l, l + e.n_vocab);
    std::vector<llama_token> rest_a, rest_b;
    if (getenv("BEACONKV_STATE_DEBUG")) {
        auto pa_ = list_cells(a.get(), 0).pos;
        fprintf(stderr, "A at save: %zu cells:", pa_.size());
        for (auto p : pa_) fprintf(stderr, " %d", p);
        fprintf(stderr, "\n");
    }
    // a new turn first (a multi-token batch in the decode phase), then greedy decoding
    const auto turn = prompt_tokens(e, 40);
    auto after_turn = [&](llama_context * c, std::vector<float> & logits) {
        if (!decode(c, turn.data(), (int) turn.size())) {
            return false;
        }
        const float * lt = llama_get_logits_ith(c, -1);
        logits.assign(lt, lt + e.n_vocab);
        if (getenv("BEACONKV_STATE_DEBUG")) {
            auto p_ = list_cells(c, 0).pos;
            fprintf(stderr, "after the turn: %zu cells:", p_.size());
            for (auto p : p_) fprintf(stderr, " %d", p);
            fprintf(stderr, "\nlogits %.6f %.6f %.6f\n", logits[0], logits[1], logits[2]);
        }
        return true;
    };
    std::vector<float> a_turn_logits;
    CHECK(after_turn(a.get(), a_turn_logits), "uninterrupted turn failed");
    CHECK(continue_greedy(a.get(), a_turn_logits, 300, rest_a), "uninterrupted run failed");

    ctx_ptr b = make_ctx(e, spec, 4096);
    CHECK(b, "context creation failed");
    CHECK(llama_state_seq_set_data(b.get(), kv.data(), kv.size(), 0) == kv.size(), "state_seq_set_data");
    beaconkv_context * pb = common_kv_compress_get(b.get());
    if (with_plugin_state) {
        CHECK(beaconkv_seq_state_set(pb, 0, plug.data(), plug.size()) == BEACONKV_OK, "beaconkv_seq_state_set: %s",
              beaconkv_last_error(pb));
    }
    if (getenv("BEACONKV_STATE_DEBUG")) {
        auto pb_ = list_cells(b.get(), 0).pos;
        fprintf(stderr, "B after restore: %zu cells:", pb_.size());
        for (auto p : pb_) fprintf(stderr, " %d", p);
        fprintf(stderr, "\n");
    }
    std::vector<float> b_turn_logits;
    CHECK(after_turn(b.get(), b_turn_logits), "restored turn failed");
    CHECK(continue_greedy(b.get(), b_turn_logits, 300, rest_b), "restored run failed");
    int same = 0;
    while (same < (int) rest_a.size() && rest_a[same] == rest_b[same]) {
        same++;
    }
    printf("state_roundtrip (%s plugin state): %d of %zu continued tokens identical\n",
           with_plugin_state ? "with" : "without", same, rest_a.size());
    if (with_plugin_state) {
        CHECK(same == (int) rest_a.size(), "restored run diverged at token %d", same);
        // a corrupted blob is refused and changes nothing
        std::vector<uint8_t> bad = plug;
        bad[0] ^= 0xff;
        CHECK(beaconkv_seq_state_set(pb, 0, bad.data(), bad.size()) == BEACONKV_ERR_INVALID, "bad magic accepted");
        CHECK(beaconkv_seq_state_set(pb, 0, plug.data(), plug.size() / 2) == BEACONKV_ERR_INVALID,
              "truncated state accepted");
    }
    (void) last_logits;
    return true;
}

// 9. Speculative decoding the way llama-server does it: a draft context (made from the same
//    params, so it gets its own plugin) proposes tokens, the compressed target verifies them in
//    one batch, rejected tokens are rolled back with llama_memory_seq_rm in both. Each context
//    evicts only its own cells; the output is the target's greedy choice at every position.
bool test_speculative(env & e) {
    const std::string spec = "prompt=inside,policy=beacon,budget=64,min=48,window=16,beacons=8,recent=8";
    e.params.n_batch = e.params.n_ubatch = 64;
    ctx_ptr tgt = make_ctx(e, spec, 4096);
    ctx_ptr dft = make_ctx(e, spec, 4096);
    CHECK(tgt && dft, "context creation failed");
    auto prompt = prompt_tokens(e, 20);
    CHECK(decode(tgt.get(), prompt.data(), (int) prompt.size()), "target prompt");
    CHECK(decode(dft.get(), prompt.data(), (int) prompt.size()), "draft prompt");
    llama_token last = argmax(llama_get_logits_ith(tgt.get(), -1), e.n_vocab);
    llama_pos pos = (llama_pos) prompt.size();
    const int k = 4;
    int generated = 0, accepted_total = 0, rounds = 0;
    llama_batch b = llama_batch_init(k + 1, 0, 1);
    while (generated < 400) {
        // draft k tokens greedily
        std::vector<llama_token> draft;
        llama_token t = last;
        for (int i = 0; i < k; i++) {
            CHECK(llama_decode(dft.get(), llama_batch_get_one(&t, 1)) == 0, "draft decode");
            t = argmax(llama_get_logits_ith(dft.get(), -1), e.n_vocab);
            draft.push_back(t);
        }
        // verify [last, d0..d(k-1)] in one target batch
        bkv_tools::batch_clear(b);
        bkv_tools::batch_add(b, last, pos, {0}, true);
        for (int i = 0; i < k; i++) {
            bkv_tools::batch_add(b, draft[i], pos + 1 + i, {0}, true);
        }
        CHECK(llama_decode(tgt.get(), b) == 0, "target verify decode");
        int n_acc = 0;
        llama_token next = argmax(llama_get_logits_ith(tgt.get(), 0), e.n_vocab);
        while (n_acc < k && draft[n_acc] == next) {
            n_acc++;
            next = argmax(llama_get_logits_ith(tgt.get(), n_acc), e.n_vocab);
        }
        // keep last + accepted drafts; roll back the rest in both contexts
        pos += 1 + n_acc;
        CHECK(llama_memory_seq_rm(llama_get_memory(tgt.get()), 0, pos, -1), "target rollback");
        CHECK(llama_memory_seq_rm(llama_get_memory(dft.get()), 0, pos, -1), "draft rollback");
        CHECK(llama_memory_seq_pos_max(llama_get_memory(tgt.get()), 0) == pos - 1, "target tail");
        CHECK(llama_memory_seq_pos_max(llama_get_memory(dft.get()), 0) <= pos - 1, "draft tail");
        if (n_acc == k) {
            // the draft never saw its last accepted token: feed it so both stay aligned
            CHECK(llama_decode(dft.get(), llama_batch_get_one(&draft[k - 1], 1)) == 0, "draft catch-up");
        }
        CHECK(bkv_tools::seq_cells(tgt.get(), 0) <= 64, "target cells above budget");
        CHECK(bkv_tools::seq_cells(dft.get(), 0) <= 64, "draft cells above budget");
        last = next;
        generated += 1 + n_acc;
        accepted_total += n_acc;
        rounds++;
    }
    llama_batch_free(b);
    beaconkv_stats st_t{}, st_d{};
    beaconkv_get_stats(common_kv_compress_get(tgt.get()), 0, &st_t);
    beaconkv_get_stats(common_kv_compress_get(dft.get()), 0, &st_d);
    CHECK(st_t.pos_max < pos && st_t.compress_events > 0 && st_d.compress_events > 0, "plugin state off");
    printf("speculative: %d tokens in %d rounds, %.2f drafts accepted per round; target evicted %llu, draft %llu\n",
           generated, rounds, (double) accepted_total / rounds, (unsigned long long) st_t.evicted,
           (unsigned long long) st_d.evicted);
    return true;
}

// 10. The copy path (read_rows through ggml_backend_tensor_get, what device and remote buffers
//     need without score_keys) and the backend path (the scores as a ggml graph on K's own backend,
//     read=backend) make exactly the decisions of the direct path, with either scorer; prints their
//     cost per compression. On the CPU the backend path runs ggml's CPU kernels (other summation
//     order than the library's): a kept set that differs would show a tie broken otherwise.
bool test_copy_path(env & e) {
    for (const char * score : {"prob", "logit"}) {
        const std::string spec = std::string("prompt=inside,policy=beacon,budget=64,min=48,window=16,beacons=8,recent=8,score=") + score;
        e.params.n_batch = e.params.n_ubatch = 64;
        ctx_ptr direct  = make_ctx(e, spec, 4096);
        ctx_ptr copy    = make_ctx(e, spec + ",read=copy", 4096);
        ctx_ptr backend = make_ctx(e, spec + ",read=backend", 4096);
        CHECK(direct && copy && backend, "context creation failed");
        char path[128] = { 0 };
        beaconkv_scoring_path(common_kv_compress_get(backend.get()), path, sizeof(path));
        CHECK(std::string(path).rfind("backend (", 0) == 0, "read=backend scores %s", path);
        beaconkv_scoring_path(common_kv_compress_get(direct.get()), path, sizeof(path));
        // read=auto: in place where K is host memory (-ngl 0), on K's backend elsewhere (a GPU run)
        CHECK(std::string(path).rfind("in place (", 0) == 0 || std::string(path).rfind("backend (", 0) == 0,
              "read=auto scores %s", path);
        auto prompt = prompt_tokens(e, 24);
        for (llama_context * c : {direct.get(), copy.get(), backend.get()}) {
            CHECK(decode(c, prompt.data(), (int) prompt.size()), "prompt");
        }
        for (int i = 0; i < 400; i++) {
            llama_token t = argmax(llama_get_logits_ith(direct.get(), -1), e.n_vocab);
            CHECK(t == argmax(llama_get_logits_ith(copy.get(), -1), e.n_vocab), "%s: copy: tokens differ at step %d", score, i);
            CHECK(t == argmax(llama_get_logits_ith(backend.get(), -1), e.n_vocab), "%s: backend: tokens differ at step %d", score, i);
            CHECK(decode(direct.get(), &t, 1) && decode(copy.get(), &t, 1) && decode(backend.get(), &t, 1), "decode");
            const auto kept = list_cells(direct.get(), 0).pos;
            CHECK(kept == list_cells(copy.get(), 0).pos, "%s: copy: kept positions differ at %d", score, i);
            CHECK(kept == list_cells(backend.get(), 0).pos, "%s: backend: kept positions differ at %d", score, i);
        }
        beaconkv_stats a{}, b{}, c{};
        beaconkv_get_stats(common_kv_compress_get(direct.get()), 0, &a);
        beaconkv_get_stats(common_kv_compress_get(copy.get()), 0, &b);
        beaconkv_get_stats(common_kv_compress_get(backend.get()), 0, &c);
        CHECK(a.compress_events > 0 && a.compress_events == b.compress_events && a.compress_events == c.compress_events,
              "events %llu vs %llu vs %llu", (unsigned long long) a.compress_events,
              (unsigned long long) b.compress_events, (unsigned long long) c.compress_events);
        printf("copy_path (score=%s): identical decisions; per compression %.3f ms direct, %.3f ms copy, %.3f ms backend; "
               "capture %.3f vs %.3f ms/token\n", score, a.ms_score / a.compress_events, b.ms_score / b.compress_events,
               c.ms_score / c.compress_events, a.ms_capture / a.n_tokens, b.ms_capture / b.n_tokens);
    }
    return true;
}

}  // namespace

// 11. The archive's host callbacks (read_kv, seq_place, write_kv): K and V rows of positions 16..48
//     are read out of their cells, the cells are evicted, the positions are placed again in cells
//     that never held them and the rows written there, as the cache's own bytes (format 0) or as F32
//     rows the host converts (format 1). The next token's logits equal those of a context that never
//     evicted (up to float summation order); without the writes they differ.
bool test_archive_swap_in(env & e) {
    const int n_prompt = 96;
    auto prompt = prompt_tokens(e, n_prompt);
    const llama_token next = prompt[7];
    std::vector<float> ref;
    const char * names[] = {"reference", "rows as bytes", "rows as f32", "rows not written"};
    for (int mode = 0; mode < 4; mode++) {
        ctx_ptr ctx = make_ctx(e, "prompt=inside,policy=none", 512);
        CHECK(ctx, "context creation failed");
        CHECK(decode(ctx.get(), prompt.data(), n_prompt), "prompt decode failed");
        if (mode > 0) {
            cell_list l = list_cells(ctx.get(), 0);
            std::vector<uint32_t> cells;
            std::vector<llama_pos> pos;
            for (size_t i = 0; i < l.pos.size(); i++) {
                if (l.pos[i] >= 16 && l.pos[i] < 48) {
                    cells.push_back(l.cell[i]);
                    pos.push_back(l.pos[i]);
                }
            }
            const int32_t n = (int32_t) cells.size();
            CHECK(n == 32, "expected 32 cells, found %d", n);
            const int32_t nl = llama_kv_plugin_n_layers(ctx.get());
            std::vector<std::vector<uint8_t>> K(nl), V(nl);
            std::vector<llama_kv_plugin_layer> L(nl);
            for (int32_t li = 0; li < nl; li++) {
                CHECK(llama_kv_plugin_get_layer(ctx.get(), li, &L[li]) == 0, "get_layer %d", li);
                K[li].resize(ggml_row_size((ggml_type) L[li].k_type, L[li].n_head_kv * L[li].head_dim) * n);
                V[li].resize(ggml_row_size((ggml_type) L[li].v_type, L[li].v_dim) * n);
                CHECK(llama_kv_plugin_read_kv(ctx.get(), li, 0, cells.data(), n, K[li].data(), V[li].data()) == n,
                      "read_kv layer %d", li);
            }
            CHECK(llama_kv_plugin_seq_evict(ctx.get(), 0, cells.data(), n) == n, "evict");
            CHECK(list_cells(ctx.get(), 0).pos.size() == (size_t) n_prompt - n, "cells not freed");
            // the freed cells are taken by placeholder positions first, so the real ones land in cells that
            // never held their rows (reverse order: position pos[n-1-j] goes to the j-th placed cell)
            std::vector<llama_pos> dummy(n);
            std::vector<uint32_t> dummy_cells(n);
            for (int j = 0; j < n; j++) {
                dummy[j] = 10000 + j;
            }
            CHECK(llama_kv_plugin_seq_place(ctx.get(), 0, dummy.data(), n, dummy_cells.data()) == n, "placeholders");
            std::vector<llama_pos> rpos(pos.rbegin(), pos.rend());
            std::vector<uint32_t> placed(n);
            CHECK(llama_kv_plugin_seq_place(ctx.get(), 0, rpos.data(), n, placed.data()) == n, "seq_place");
            CHECK(llama_memory_seq_rm(llama_get_memory(ctx.get()), 0, 10000, -1), "placeholders not removed");
            for (int j = 0; j < n; j++) {
                CHECK(std::find(cells.begin(), cells.end(), placed[j]) == cells.end(), "cell %u reused", placed[j]);
            }
            for (int32_t li = 0; mode < 3 && li < nl; li++) {
                const size_t kr = K[li].size() / n, vr = V[li].size() / n;
                const int64_t kd = (int64_t) L[li].n_head_kv * L[li].head_dim, vd = L[li].v_dim;
                std::vector<uint8_t> k(K[li].size()), v(V[li].size());
                std::vector<float> kf(kd * n), vf(vd * n);
                for (int j = 0; j < n; j++) { // row of rpos[j] = row n-1-j of what was read
                    memcpy(k.data() + j * kr, K[li].data() + (n - 1 - j) * kr, kr);
                    memcpy(v.data() + j * vr, V[li].data() + (n - 1 - j) * vr, vr);
                }
                if (mode == 1) {
                    CHECK(llama_kv_plugin_write_kv(ctx.get(), li, 0, placed.data(), n, 0, k.data(), v.data()) == n,
                          "write_kv layer %d", li);
                    continue;
                }
                const auto to_f32 = [](ggml_type t, const uint8_t * src, float * dst, int64_t ne) {
                    if (t == GGML_TYPE_F32) {
                        memcpy(dst, src, ne * sizeof(float));
                    } else {
                        ggml_get_type_traits(t)->to_float(src, dst, ne);
                    }
                };
                for (int j = 0; j < n; j++) {
                    to_f32((ggml_type) L[li].k_type, k.data() + j * kr, kf.data() + j * kd, kd);
                    to_f32((ggml_type) L[li].v_type, v.data() + j * vr, vf.data() + j * vd, vd);
                }
                CHECK(llama_kv_plugin_write_kv(ctx.get(), li, 0, placed.data(), n, 1, kf.data(), vf.data()) == n,
                      "write_kv (f32) layer %d", li);
            }
        }
        CHECK(decode(ctx.get(), &next, 1), "decode of the next token failed");
        const float * lg = llama_get_logits_ith(ctx.get(), -1);
        if (mode == 0) {
            ref.assign(lg, lg + e.n_vocab);
            continue;
        }
        double diff = 0, scale = 0;
        for (int i = 0; i < e.n_vocab; i++) {
            diff = std::max(diff, (double) std::fabs(lg[i] - ref[i]));
            scale = std::max(scale, (double) std::fabs(ref[i]));
        }
        const bool same_top = argmax(lg, e.n_vocab) == argmax(ref.data(), e.n_vocab);
        printf("archive_swap_in %s: max |logit diff| %.3g (logits up to %.3g), same top-1 %d\n", names[mode], diff,
               scale, (int) same_top);
        if (mode < 3) {
            CHECK(diff <= 2e-3 * std::max(1.0, scale) && same_top, "%s: logits differ by %g", names[mode], diff);
        } else {
            CHECK(diff > 1e-2 * std::max(1.0, scale), "%s: logits should differ (diff %g)", names[mode], diff);
        }
    }
    return true;
}

// 12. A long generation with the archive on: cells stay within the budget, every token is in the
//     cache, evicted or archived, recalled positions come back at their own positions, no position
//     is held twice.
bool test_archive_run(env & e) {
    const int budget = 64;
    const std::string spec = "prompt=inside,policy=beacon,budget=64,min=48,window=16,beacons=8,recent=8,archive=256,page=8,recall_every=1";
    auto prompt = prompt_tokens(e, 24);
    ctx_ptr ctx = make_ctx(e, spec, 8192);
    CHECK(ctx, "context creation failed");
    int32_t max_cells = 0;
    gen_result g;
    bool ok = generate(e, ctx.get(), prompt, 8 * budget, g, [&](int) {
        cell_list l = list_cells(ctx.get(), 0);
        max_cells = std::max<int32_t>(max_cells, (int32_t) l.pos.size());
        std::set<llama_pos> uniq(l.pos.begin(), l.pos.end());
        return uniq.size() == l.pos.size() && (int32_t) l.pos.size() <= budget;
    });
    CHECK(ok, "decode failed, a position held twice, or cells exceeded the budget (max seen %d)", max_cells);
    beaconkv_stats st{};
    beaconkv_get_stats(common_kv_compress_get(ctx.get()), 0, &st);
    cell_list l = list_cells(ctx.get(), 0);
    const uint64_t total = prompt.size() + g.tokens.size();
    // every cell evicted went to the archive (or was dropped from it when full); recalled ones came back
    CHECK(st.evicted + l.pos.size() == total + st.recalled, "evicted %llu + in use %zu != tokens %llu + recalled %llu",
          (unsigned long long) st.evicted, l.pos.size(), (unsigned long long) total, (unsigned long long) st.recalled);
    CHECK(st.archived + st.archive_dropped + l.pos.size() == total, "archived %llu + dropped %llu + in use %zu != %llu",
          (unsigned long long) st.archived, (unsigned long long) st.archive_dropped, l.pos.size(),
          (unsigned long long) total);
    CHECK(st.archived > 0 && st.archived <= 256 && st.archive_bytes > 0, "archive holds %llu cells",
          (unsigned long long) st.archived);
    printf("archive_run: max cells %d, evicted %llu, recalled %llu, archived %llu (%.1f KiB), dropped %llu\n", max_cells,
           (unsigned long long) st.evicted, (unsigned long long) st.recalled, (unsigned long long) st.archived,
           st.archive_bytes / 1024.0, (unsigned long long) st.archive_dropped);
    return true;
}

// 13. Token ids reach the plugin: a passage, text that repeats nothing of it, then the passage
//     again, one token per call. The passage is evicted (to the archive) during the gap, and once
//     recall_match (8) of its tokens have come again, its positions come back into the cache.
bool test_archive_recall_by_tokens(env & e) {
    const std::string spec =
        "prompt=inside,policy=beacon,budget=64,min=48,window=16,beacons=8,recent=8,archive=512,page=8,recall_every=1";
    ctx_ptr ctx = make_ctx(e, spec, 8192);
    CHECK(ctx, "context creation failed");
    // the passage: ids 100..131; the gap: 200 other ids, none twice; then the passage again
    std::vector<llama_token> text;
    for (int i = 0; i < 32; i++) text.push_back(100 + i);
    for (llama_token id = 3; id < e.n_vocab && (int) text.size() < 232; id++) {
        if (id < 100 || id >= 132) text.push_back(id);
    }
    CHECK((int) text.size() == 232, "the vocabulary has too few ids (%d)", e.n_vocab);
    const int repeat_at = (int) text.size();
    for (int i = 0; i < 32; i++) text.push_back(100 + i);
    CHECK(decode(ctx.get(), text.data(), 8), "prompt");
    auto passage_held = [&]() {
        cell_list l = list_cells(ctx.get(), 0);
        int n = 0;
        for (llama_pos p : l.pos) n += p >= 8 && p < 32;  // the first 8 are the protected prompt
        return std::make_pair(n, (int) l.pos.size());
    };
    int before = -1, most = 0;
    for (int t = 8; t < (int) text.size(); t++) {
        CHECK(decode(ctx.get(), &text[t], 1), "decode at %d", t);
        const auto [held, cells] = passage_held();
        CHECK(cells <= 64, "%d cells at %d", cells, t);
        if (t == repeat_at - 1) {
            before = held;
        } else if (t >= repeat_at) {
            most = std::max(most, held);
        }
    }
    beaconkv_stats st{};
    beaconkv_get_stats(common_kv_compress_get(ctx.get()), 0, &st);
    printf("archive_recall_by_tokens: passage cells held before the repeat %d of 24, at most %d during it; recalled %llu\n",
           before, most, (unsigned long long) st.recalled);
    CHECK(before < 8, "%d of the passage's 24 cells were still held before it returned", before);
    CHECK(st.recalled >= 16 && most >= 16, "recalled %llu, at most %d of 24 passage cells held",
          (unsigned long long) st.recalled, most);
    return true;
}

// 14. A user turn that quotes how an evicted passage began (4 tokens = recall_match / 2, at the
//     turn's end, after words of its own): the quoted phrase and the page after it are back in
//     the cache once the turn is decoded (tests/archive.rs shows they come back before it is
//     computed).
bool test_archive_recall_at_batch_start(env & e) {
    const std::string spec =
        "prompt=inside,policy=beacon,budget=64,min=48,window=16,beacons=8,recent=8,archive=512,page=8";
    ctx_ptr ctx = make_ctx(e, spec, 8192);
    CHECK(ctx, "context creation failed");
    CHECK(e.n_vocab > 256, "the vocabulary has too few ids (%d)", e.n_vocab);
    // 8 prompt tokens, the passage (ids 100..131 at positions 8..39), 200 other ids, none twice
    std::vector<llama_token> text;
    for (int i = 0; i < 8; i++) text.push_back(240 + i);
    for (int i = 0; i < 32; i++) text.push_back(100 + i);
    for (llama_token id = 3; (int) text.size() < 240; id++) {
        if (id < 100 || id >= 132) text.push_back(id);
    }
    CHECK(decode(ctx.get(), text.data(), 8), "prompt");
    for (size_t t = 8; t < text.size(); t++) {
        CHECK(decode(ctx.get(), &text[t], 1), "decode at %zu", t);
    }
    // the quoted phrase: ids 110..113 at positions 18..21; it and the page after: 18..29
    auto held = [&]() {
        cell_list l = list_cells(ctx.get(), 0);
        int n = 0;
        for (llama_pos p : l.pos) n += p >= 18 && p < 30;
        return std::make_pair(n, (int) l.pos.size());
    };
    const int before = held().first;
    std::vector<llama_token> turn = {250, 251, 252, 253, 254, 255, 110, 111, 112, 113};
    CHECK(decode(ctx.get(), turn.data(), (int) turn.size()), "the turn");
    const auto [after, cells] = held();
    beaconkv_stats st{};
    beaconkv_get_stats(common_kv_compress_get(ctx.get()), 0, &st);
    printf("archive_recall_at_batch_start: quoted phrase and page held before the turn %d of 12, after it %d; "
           "recalled %llu; %d cells\n", before, after, (unsigned long long) st.recalled, cells);
    CHECK(before < 4, "%d of the 12 cells were still held before the turn", before);
    CHECK(after == 12, "%d of the 12 cells held after the turn", after);
    CHECK(cells <= 64, "%d cells", cells);
    return true;
}

bool test_score_keys(bkv_test::env & e); // test_e2e_scoring.cpp

int main(int argc, char ** argv) {
    const ggml_log_callback log = [](ggml_log_level level, const char * text, void *) {
        if (level >= GGML_LOG_LEVEL_WARN) {
            fputs(text, stderr);
        }
    };
    return bkv_test::run_main(argc, argv, log, [](bkv_test::env & e, const std::string & test) -> std::optional<bool> {
        if (test == "detached_vs_none") {
            return test_detached_vs_none(e);
        } else if (test == "budget_covers_all") {
            return test_budget_covers_all(e);
        } else if (test.rfind("bounded_cells", 0) == 0) {
            return test_bounded_cells(e, bkv_test::test_arg(test, "beacon"));
        } else if (test == "query_capture") {
            return test_query_capture(e);
        } else if (test == "multi_seq:unified" || test == "multi_seq:split") {
            return test_multi_seq(e, test == "multi_seq:unified");
        } else if (test == "state_roundtrip") {
            return test_state_roundtrip(e, true) && test_state_roundtrip(e, false);
        } else if (test == "copy_path") {
            return test_copy_path(e);
        } else if (test == "score_keys") {
            return test_score_keys(e);
        } else if (test == "speculative") {
            return test_speculative(e);
        } else if (test == "load") {
            return test_load(e);
        } else if (test == "long_prompt") {
            return test_long_prompt(e);
        } else if (test == "archive_swap_in") {
            return test_archive_swap_in(e);
        } else if (test == "archive_run") {
            return test_archive_run(e);
        } else if (test == "archive_recall_by_tokens") {
            return test_archive_recall_by_tokens(e);
        } else if (test == "archive_recall_at_batch_start") {
            return test_archive_recall_at_batch_start(e);
        } else if (test == "iswa_global_only") {
            return test_iswa_global_only(e);
        }
        return std::nullopt;
    });
}
