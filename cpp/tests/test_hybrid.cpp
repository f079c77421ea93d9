// End-to-end tests of BeaconKV on hybrid models (attention + recurrent layers: Gated DeltaNet,
// short convolution, Mamba) inside the patched llama.cpp. The cases test_e2e already has
// (bounded cells, fork, state save/restore, none vs detached, ...) are run on hybrid models by
// tests/hybrid.rs through test_e2e; this driver adds what only hybrid memory needs.
//
//   test_hybrid MODEL.gguf TEST [common llama.cpp flags, e.g. -t 2 -fa on]
//
// TEST:
//   recurrent_untouched[:POLICY]  lockstep with an uncompressed context on the same tokens: the
//                                 recurrent state stays bit-identical while attention cells are
//                                 evicted (model with its attention layers last)
//   direct_evict                  llama_kv_plugin_seq_evict of every cell: the newest stays, the
//                                 recurrent state and the sequence's positions are unchanged
//   rollback_rs                   speculative verification + seq_rm of rejected drafts through the
//                                 recurrent-state snapshots (llama_context_params.n_rs_seq)
//   rollback_ckpt                 the same through recurrent-state checkpoints (PARTIAL_ONLY state,
//                                 what llama-server does for models without n_rs_seq)
//   fork:unified | fork:split     seq_cp of a compressed sequence: both continue identically
//   refused                       a layout the plugin refuses: one warning, full cache, output
//                                 bit-identical to a context without the plugin
// Exit 0 = pass; failures print what differed. Driven by tests/hybrid.rs.

#include "arg.h"
#include "beaconkv.h"
#include "common.h"
#include "kv-compress.h"
#include "llama-kv-plugin.h"
#include "llama.h"
#include "tool-common.h"

#include "driver.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

namespace {

using namespace bkv_test;

// libllama's warnings, kept for the refusal test (and echoed to stderr)
std::mutex g_log_mutex;
std::vector<std::string> g_warnings;

// bkv_tools::make_context with `n_rs_seq` recurrent-state snapshots per sequence (rollback).
ctx_ptr make_ctx(env & e, const std::string & spec, uint32_t n_ctx, uint32_t n_rs_seq = 0) {
    return ctx_ptr(bkv_tools::make_context(e.model, e.params, spec, n_ctx, nullptr, nullptr, n_rs_seq));
}

bool decode(llama_context * ctx, const llama_token * t, int n) {
    return llama_decode(ctx, llama_batch_get_one(const_cast<llama_token *>(t), n)) == 0;
}

// Positions and cell indices of the attention cells `seq` holds (plugin attached).
std::vector<llama_pos> attn_positions(llama_context * ctx, llama_seq_id seq) { return list_cells(ctx, seq).pos; }

std::vector<uint32_t> attn_cells(llama_context * ctx, llama_seq_id seq) { return list_cells(ctx, seq).cell; }

// The recurrent part of a hybrid memory's sequence state (LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY:
// the recurrent cells' positions and their conv/SSM states; no attention cells, no plugin block),
// as a checkpoint (restore_recurrent) ...
std::vector<uint8_t> recurrent_checkpoint(llama_context * ctx, llama_seq_id seq) {
    const auto flags = LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY;
    std::vector<uint8_t> buf(llama_state_seq_get_size_ext(ctx, seq, flags));
    const size_t n = llama_state_seq_get_data_ext(ctx, buf.data(), buf.size(), seq, flags);
    buf.resize(n);
    return buf;
}

// ... and for comparisons: without the 8-byte header (magic, seq id), so that two sequences'
// states compare equal when their cells and conv/SSM states are
std::vector<uint8_t> recurrent_state(llama_context * ctx, llama_seq_id seq) {
    auto buf = recurrent_checkpoint(ctx, seq);
    buf.erase(buf.begin(), buf.begin() + std::min<size_t>(8, buf.size()));
    return buf;
}

bool restore_recurrent(llama_context * ctx, llama_seq_id seq, const std::vector<uint8_t> & s) {
    return llama_state_seq_set_data_ext(ctx, s.data(), s.size(), seq, LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY) == s.size();
}

beaconkv_stats stats_of(llama_context * ctx, llama_seq_id seq) {
    beaconkv_stats st{};
    beaconkv_get_stats(common_kv_compress_get(ctx), seq, &st);
    return st;
}

// The recurrent state only equals that of an uncompressed run when no recurrent layer reads an
// attention layer's output: the attention layers must be the last layers of the model.
bool attention_is_last(env & e, llama_context * ctx) {
    if (getenv("BEACONKV_SKIP_LAYOUT_CHECK")) {  // for investigating: shows the state comparison has teeth
        return true;
    }
    const int n_layer = llama_model_n_layer(e.model);
    const int n_att = llama_kv_plugin_n_layers(ctx);
    CHECK(n_att > 0 && n_att < n_layer, "%d evictable layers of %d: not a hybrid model", n_att, n_layer);
    for (int i = 0; i < n_att; i++) {
        llama_kv_plugin_layer L{};
        CHECK(llama_kv_plugin_get_layer(ctx, i, &L) == 0, "get_layer %d", i);
        CHECK(L.il >= n_layer - n_att, "attention layer %d is followed by a recurrent layer: this test needs a "
              "model whose attention layers come last (make_tiny_hybrid_gguf.py ARCH --layers 4 / lfm2 --layers 3)", L.il);
    }
    return true;
}

// 1. Eviction never touches the recurrent state. A compressed and an uncompressed context are fed
//    the same tokens (the uncompressed run's greedy choice) for 8x the budget; the attention
//    layers come last, so the recurrent state depends only on the tokens: it must stay
//    bit-identical while the compressed context evicts attention cells. The newest attention cell
//    is never evicted and both memories report the same newest position.
bool test_recurrent_untouched(env & e, const std::string & policy) {
    const int budget = 64;
    const std::string spec = "prompt=inside,policy=" + policy + ",budget=64,min=48,window=16,beacons=8,recent=8";
    e.params.n_batch = e.params.n_ubatch = 64;
    ctx_ptr comp = make_ctx(e, spec, 8192);
    ctx_ptr plain = make_ctx(e, "", 8192);
    CHECK(comp && plain, "context creation failed");
    if (!attention_is_last(e, comp.get())) {
        return false;
    }
    CHECK(llama_kv_plugin_n_cells(comp.get()) < 8192, "physical cells %u", llama_kv_plugin_n_cells(comp.get()));
    auto prompt = prompt_tokens(e, 24);
    CHECK(decode(comp.get(), prompt.data(), (int) prompt.size()) && decode(plain.get(), prompt.data(), (int) prompt.size()),
          "prompt decode failed");
    llama_memory_t mc = llama_get_memory(comp.get());
    llama_memory_t mp = llama_get_memory(plain.get());
    const int n_gen = 8 * budget + 37;
    int max_cells = 0;
    std::set<llama_pos> gone;
    std::vector<uint8_t> prev_state;
    int state_changes = 0;
    for (int i = 0; i < n_gen; i++) {
        llama_token t = argmax(llama_get_logits_ith(plain.get(), -1), e.n_vocab);
        CHECK(decode(comp.get(), &t, 1) && decode(plain.get(), &t, 1), "decode failed at step %d", i);
        const llama_pos pos = (llama_pos) prompt.size() + i;
        const auto rec = recurrent_state(comp.get(), 0);
        CHECK(rec.size() > 1024, "recurrent state of %zu bytes", rec.size());
        state_changes += rec != prev_state;
        prev_state = rec;
        CHECK(rec == recurrent_state(plain.get(), 0),
              "recurrent state differs from the uncompressed run after token %d (pos %d)", i, pos);
        CHECK(llama_memory_seq_pos_max(mc, 0) == pos && llama_memory_seq_pos_max(mp, 0) == pos,
              "newest position %d / %d, expected %d", llama_memory_seq_pos_max(mc, 0), llama_memory_seq_pos_max(mp, 0), pos);
        auto ap = attn_positions(comp.get(), 0);
        max_cells = std::max(max_cells, (int) ap.size());
        CHECK((int) ap.size() <= budget, "%zu attention cells > budget %d at step %d", ap.size(), budget, i);
        CHECK(!ap.empty() && ap.back() == pos, "the newest attention cell (pos %d) is missing", pos);
        for (llama_pos p = 0; p < pos; p++) {
            if (!std::binary_search(ap.begin(), ap.end(), p)) {
                gone.insert(p);
            }
        }
    }
    beaconkv_stats st = stats_of(comp.get(), 0);
    CHECK(state_changes == n_gen, "the recurrent state changed in %d of %d steps", state_changes, n_gen);
    CHECK(st.compress_events > 0 && st.evicted > 0, "nothing was evicted");
    CHECK(gone.size() == st.evicted, "llama.cpp lost %zu positions, the plugin evicted %llu", gone.size(),
          (unsigned long long) st.evicted);
    printf("recurrent_untouched %s: %d tokens, max %d attention cells, %llu evicted in %llu passes; recurrent state "
           "bit-identical to the uncompressed run at every step\n",
           policy.c_str(), n_gen, max_cells, (unsigned long long) st.evicted, (unsigned long long) st.compress_events);
    return true;
}

// 2. The host's eviction call itself: asked to evict every cell of a sequence, it keeps the
//    newest (the recurrent part rolls back from it), leaves the recurrent state and the
//    sequence's positions alone, and the sequence continues at the right position.
bool test_direct_evict(env & e) {
    e.params.n_batch = e.params.n_ubatch = 64;
    ctx_ptr ctx = make_ctx(e, "prompt=inside,policy=beacon,budget=64,min=48,window=16", 4096);
    CHECK(ctx, "context creation failed");
    auto prompt = prompt_tokens(e, 24);
    CHECK(decode(ctx.get(), prompt.data(), (int) prompt.size()), "prompt");
    for (int i = 0; i < 10; i++) {
        llama_token t = argmax(llama_get_logits_ith(ctx.get(), -1), e.n_vocab);
        CHECK(decode(ctx.get(), &t, 1), "decode");
    }
    llama_memory_t mem = llama_get_memory(ctx.get());
    const llama_pos pmax = llama_memory_seq_pos_max(mem, 0);
    const llama_pos pmin = llama_memory_seq_pos_min(mem, 0);
    const auto rec = recurrent_state(ctx.get(), 0);
    auto cells = attn_cells(ctx.get(), 0);
    CHECK((int) cells.size() == pmax + 1, "%zu cells for positions 0..%d", cells.size(), pmax);
    const int32_t n = llama_kv_plugin_seq_evict(ctx.get(), 0, cells.data(), (int32_t) cells.size());
    CHECK(n == (int32_t) cells.size() - 1, "evicted %d of %zu cells (expected all but the newest)", n, cells.size());
    auto left = attn_positions(ctx.get(), 0);
    CHECK(left.size() == 1 && left[0] == pmax, "left %zu cells, first at %d", left.size(), left.empty() ? -1 : left[0]);
    CHECK(recurrent_state(ctx.get(), 0) == rec, "eviction changed the recurrent state");
    CHECK(llama_memory_seq_pos_max(mem, 0) == pmax, "newest position %d -> %d", pmax, llama_memory_seq_pos_max(mem, 0));
    CHECK(llama_memory_seq_pos_min(mem, 0) == pmin, "oldest position %d -> %d", pmin, llama_memory_seq_pos_min(mem, 0));
    // evicting the newest cell alone is refused the same way
    uint32_t newest = attn_cells(ctx.get(), 0)[0];
    CHECK(llama_kv_plugin_seq_evict(ctx.get(), 0, &newest, 1) == 0, "the newest cell was evicted");
    // the next token (llama_batch_get_one: position from the memory) lands right after it
    llama_token t = argmax(llama_get_logits_ith(ctx.get(), -1), e.n_vocab);
    CHECK(decode(ctx.get(), &t, 1), "decode after the eviction failed");
    left = attn_positions(ctx.get(), 0);
    CHECK(left.size() == 2 && left[1] == pmax + 1, "next token at %d, expected %d", left.back(), pmax + 1);
    CHECK(llama_memory_seq_pos_max(mem, 0) == pmax + 1, "memory's newest position %d", llama_memory_seq_pos_max(mem, 0));
    llama_kv_plugin_layer L{};
    CHECK(llama_kv_plugin_get_layer(ctx.get(), 0, &L) == 0, "get_layer");
    printf("direct_evict: %zu of %zu cells evicted, newest kept, recurrent state unchanged (%d evictable layers, first "
           "il %d, head_dim %d, %d/%d heads, rope mode %d over %d dims)\n",
           cells.size() - 1, cells.size(), llama_kv_plugin_n_layers(ctx.get()), L.il, L.head_dim, L.n_head, L.n_head_kv,
           L.rope_mode, L.rope_n_dims);
    return true;
}

// 3./4. Speculative decoding on a hybrid target: [last, d0..d3] verified in one batch, the
//    rejected drafts removed again. Two contexts run the same operations: A with the plugin, B
//    without. The drafter is a third context that gets A's sequence state (llama.cpp's and the
//    plugin's) every round and decodes token by token; one draft is corrupted at a varying
//    index, so every rollback length occurs.
//    rs:   rollback by llama_memory_seq_rm through the recurrent snapshots (n_rs_seq = 4);
//    ckpt: the recurrent state is saved (PARTIAL_ONLY) before the verification, restored after a
//          rejection, the whole verified batch is removed and the accepted tokens replayed (what
//          llama-server does when the target cannot roll back by itself).
//    With a budget that covers the run, A's logits equal B's bit for bit (the plugin changes
//    nothing); with budget 64 and 8x as many tokens: cells bounded, no rolled-back position
//    left, the newest position right, and (attention layers last) A's recurrent state equals
//    B's after every round.
bool run_rollback(env & e, bool rs, int budget, bool covers_all) {
    const int k = 4;
    const std::string spec = "prompt=inside,policy=beacon,budget=" + std::to_string(budget) + ",window=16,beacons=8,recent=8";
    e.params.n_batch = e.params.n_ubatch = 64;
    const int n_gen = covers_all ? 300 : 8 * budget + 37;
    auto prompt = prompt_tokens(e, 20);

    const uint32_t n_rs = rs ? k : 0;
    ctx_ptr a = make_ctx(e, spec, 4096, n_rs);
    ctx_ptr b = make_ctx(e, "", 4096, n_rs);
    // the drafter: a copy of A's sequence (llama.cpp's state + the plugin's), decoding token by token
    ctx_ptr d = make_ctx(e, spec, 4096);
    CHECK(a && b && d, "context creation failed");
    CHECK(llama_n_rs_seq(a.get()) == n_rs, "n_rs_seq %u (the architecture cannot roll back its recurrent state?)",
          llama_n_rs_seq(a.get()));
    if (!attention_is_last(e, a.get())) {
        return false;
    }
    llama_memory_t ma = llama_get_memory(a.get());
    llama_memory_t mb = llama_get_memory(b.get());
    CHECK(decode(a.get(), prompt.data(), (int) prompt.size()) && decode(b.get(), prompt.data(), (int) prompt.size()) &&
              decode(d.get(), prompt.data(), (int) prompt.size()),
          "prompt");
    if (!rs) {
        // without snapshots, removing the newest tokens is refused and changes nothing
        const auto cells = attn_positions(a.get(), 0);
        const auto rec = recurrent_state(a.get(), 0);
        const beaconkv_stats st0 = stats_of(a.get(), 0);
        CHECK(!llama_memory_seq_rm(ma, 0, (llama_pos) prompt.size() - 2, -1), "partial seq_rm accepted without snapshots");
        CHECK(attn_positions(a.get(), 0) == cells && recurrent_state(a.get(), 0) == rec, "a refused seq_rm changed the memory");
        const beaconkv_stats st1 = stats_of(a.get(), 0);
        CHECK(st1.pos_max == st0.pos_max && st1.n_tokens == st0.n_tokens, "a refused seq_rm reached the plugin");
    }

    llama_token last = argmax(llama_get_logits_ith(a.get(), -1), e.n_vocab);
    llama_pos pos = (llama_pos) prompt.size();
    llama_batch batch = llama_batch_init(k + 1, 0, 1);
    std::unique_ptr<llama_batch, void (*)(llama_batch *)> batch_guard(&batch, [](llama_batch * bb) { llama_batch_free(*bb); });
    int generated = 0, rounds = 0, rolled_back_rounds = 0, rolled_back_after_eviction = 0;
    std::vector<int> hist(k + 1, 0), hist_evicted(k + 1, 0);
    uint32_t lcg = 12345;
    auto fill = [&](const std::vector<llama_token> & toks, llama_pos p0) {
        bkv_tools::batch_clear(batch);
        for (size_t i = 0; i < toks.size(); i++) {
            bkv_tools::batch_add(batch, toks[i], p0 + (llama_pos) i, {0}, true);
        }
    };
    while (generated < n_gen) {
        lcg = lcg * 1103515245u + 12345u;
        const int corrupt_at = (int) ((lcg >> 16) % (k + 1));  // k: no corruption
        std::vector<llama_token> draft(k);
        {
            std::vector<uint8_t> st(llama_state_seq_get_size(a.get(), 0));
            CHECK(llama_state_seq_get_data(a.get(), st.data(), st.size(), 0) == st.size(), "state of A");
            CHECK(llama_state_seq_set_data(d.get(), st.data(), st.size(), 0) == st.size(), "state into the drafter: %s",
                  beaconkv_last_error(common_kv_compress_get(d.get())));
            llama_token t = last;
            for (int i = 0; i < k; i++) {
                bkv_tools::batch_clear(batch);
                bkv_tools::batch_add(batch, t, pos + i, {0}, true);
                CHECK(llama_decode(d.get(), batch) == 0, "draft decode");
                t = argmax(llama_get_logits_ith(d.get(), -1), e.n_vocab);
                draft[i] = i == corrupt_at ? (t + 1) % e.n_vocab : t;
            }
        }
        std::vector<llama_token> verify = {last};
        verify.insert(verify.end(), draft.begin(), draft.end());

        std::vector<uint8_t> ckpt_a, ckpt_b;
        if (!rs) {
            ckpt_a = recurrent_checkpoint(a.get(), 0);
            ckpt_b = recurrent_checkpoint(b.get(), 0);
        }
        fill(verify, pos);
        CHECK(llama_decode(a.get(), batch) == 0 && llama_decode(b.get(), batch) == 0, "verify decode (round %d)", rounds);
        if (covers_all) {
            for (int i = 0; i <= k; i++) {
                CHECK(std::memcmp(llama_get_logits_ith(a.get(), i), llama_get_logits_ith(b.get(), i),
                                  sizeof(float) * e.n_vocab) == 0,
                      "logits of draft %d differ from the uncompressed context (round %d)", i, rounds);
            }
        }
        int n_acc = 0;
        llama_token next = argmax(llama_get_logits_ith(a.get(), 0), e.n_vocab);
        while (n_acc < k && draft[n_acc] == next) {
            n_acc++;
            next = argmax(llama_get_logits_ith(a.get(), n_acc), e.n_vocab);
        }
        hist[n_acc]++;
        hist_evicted[n_acc] += stats_of(a.get(), 0).evicted > 0;
        const llama_pos new_pos = pos + 1 + n_acc;  // first position to drop
        if (n_acc < k) {
            rolled_back_rounds++;
            rolled_back_after_eviction += stats_of(a.get(), 0).evicted > 0;
            if (rs) {
                CHECK(llama_memory_seq_rm(ma, 0, new_pos, -1), "rollback of %d tokens refused (round %d)", k - n_acc, rounds);
                CHECK(llama_memory_seq_rm(mb, 0, new_pos, -1), "rollback refused by the uncompressed context");
            } else {
                CHECK(restore_recurrent(a.get(), 0, ckpt_a) && restore_recurrent(b.get(), 0, ckpt_b), "checkpoint restore");
                CHECK(llama_memory_seq_rm(ma, 0, pos, -1) && llama_memory_seq_rm(mb, 0, pos, -1),
                      "removing the verified batch failed (round %d)", rounds);
                CHECK(llama_memory_seq_pos_max(ma, 0) == pos - 1, "after the restore: newest position %d, expected %d",
                      llama_memory_seq_pos_max(ma, 0), pos - 1);
                std::vector<llama_token> replay(verify.begin(), verify.begin() + 1 + n_acc);
                fill(replay, pos);
                CHECK(llama_decode(a.get(), batch) == 0 && llama_decode(b.get(), batch) == 0, "replay decode");
                if (covers_all) {
                    CHECK(std::memcmp(llama_get_logits_ith(a.get(), n_acc), llama_get_logits_ith(b.get(), n_acc),
                                      sizeof(float) * e.n_vocab) == 0,
                          "replayed logits differ from the uncompressed context (round %d)", rounds);
                }
                next = argmax(llama_get_logits_ith(a.get(), n_acc), e.n_vocab);
            }
        }
        // invariants after the round
        CHECK(llama_memory_seq_pos_max(ma, 0) == new_pos - 1 && llama_memory_seq_pos_max(mb, 0) == new_pos - 1,
              "newest position %d / %d, expected %d (round %d)", llama_memory_seq_pos_max(ma, 0),
              llama_memory_seq_pos_max(mb, 0), new_pos - 1, rounds);
        auto ap = attn_positions(a.get(), 0);
        CHECK((int) ap.size() <= budget, "%zu cells > budget %d (round %d)", ap.size(), budget, rounds);
        CHECK(!ap.empty() && ap.back() == new_pos - 1, "newest attention cell at %d, expected %d (round %d)",
              ap.empty() ? -1 : ap.back(), new_pos - 1, rounds);
        CHECK(recurrent_state(a.get(), 0) == recurrent_state(b.get(), 0),
              "recurrent state differs from the uncompressed context after round %d (%d of %d drafts accepted)", rounds,
              n_acc, k);
        beaconkv_stats st = stats_of(a.get(), 0);
        CHECK(st.pos_max < new_pos, "plugin still counts position %d after the rollback to %d", st.pos_max, new_pos - 1);
        last = next;
        pos = new_pos;
        generated += 1 + n_acc;
        rounds++;
    }
    beaconkv_stats st = stats_of(a.get(), 0);
    CHECK(covers_all ? st.evicted == 0 : st.compress_events > 0, "evicted %llu in %llu passes",
          (unsigned long long) st.evicted, (unsigned long long) st.compress_events);
    CHECK(hist[0] > 0 && hist[k] > 0 && rolled_back_rounds > 0, "no variety of acceptance: %d/%d/%d/%d/%d", hist[0],
          hist[1], hist[2], hist[3], hist[4]);
    if (!covers_all) {
        for (int i = 0; i <= k; i++) {
            CHECK(hist_evicted[i] > 0, "no round accepting %d drafts after the first eviction", i);
        }
    }
    printf("rollback_%s budget %d: %d tokens in %d rounds, accepted 0..4 drafts: %d/%d/%d/%d/%d rounds (after the "
           "first eviction %d/%d/%d/%d/%d), %d rollbacks (%d after evictions), %llu cells evicted in %llu passes%s\n",
           rs ? "rs" : "ckpt", budget, generated, rounds, hist[0], hist[1], hist[2], hist[3], hist[4], hist_evicted[0],
           hist_evicted[1], hist_evicted[2], hist_evicted[3], hist_evicted[4], rolled_back_rounds, rolled_back_after_eviction, (unsigned long long) st.evicted,
           (unsigned long long) st.compress_events, covers_all ? ", logits bit-identical to the uncompressed context" : "");
    return true;
}

bool test_rollback(env & e, bool rs) {
    return run_rollback(e, rs, 1024, true) && run_rollback(e, rs, 64, false);
}

// 5. Fork: a compressed sequence is copied (seq_cp) into a second one; fed the same tokens in
//    one batch, both keep the same positions, the same recurrent state and (split streams) the
//    same logits bit for bit, within the budget; then they diverge, stay bounded, and removing
//    the fork leaves the original untouched.
bool test_fork(env & e, bool unified) {
    const int budget = 64;
    // one unified stream: the method's logit scores, a max over dot products that both slots compute
    // alike; the default probability scores add a softmax sum whose order follows the slots, so a
    // near-tie can split the fork's kept positions on the first pass (then they stay apart)
    const std::string spec = std::string("prompt=inside,policy=beacon,budget=64,min=48,window=16,beacons=8,recent=8") +
                             (unified ? ",score=logit" : "");
    e.params.n_parallel = 2;
    e.params.kv_unified = unified;
    e.params.n_batch = e.params.n_ubatch = 64;
    ctx_ptr ctx = make_ctx(e, spec, 2 * 4096);
    CHECK(ctx, "context creation failed");
    llama_context * c = ctx.get();
    llama_memory_t mem = llama_get_memory(c);
    auto prompt = prompt_tokens(e, 24);
    llama_batch b = llama_batch_init(64, 0, 2);
    std::unique_ptr<llama_batch, void (*)(llama_batch *)> guard(&b, [](llama_batch * bb) { llama_batch_free(*bb); });
    bkv_tools::batch_clear(b);
    for (size_t i = 0; i < prompt.size(); i++) {
        bkv_tools::batch_add(b, prompt[i], (llama_pos) i, {0}, i + 1 == prompt.size());
    }
    CHECK(llama_decode(c, b) == 0, "prompt");
    llama_pos pos = (llama_pos) prompt.size();
    llama_token t = argmax(llama_get_logits_ith(c, -1), e.n_vocab);
    for (int i = 0; i < 2 * budget; i++, pos++) {
        bkv_tools::batch_clear(b);
        bkv_tools::batch_add(b, t, pos, {0}, true);
        CHECK(llama_decode(c, b) == 0, "decode");
        t = argmax(llama_get_logits_ith(c, -1), e.n_vocab);
    }
    CHECK(stats_of(c, 0).compress_events > 0, "seq 0 was never compressed before the fork");
    llama_memory_seq_cp(mem, 0, 1, -1, -1);
    CHECK(attn_positions(c, 0) == attn_positions(c, 1), "fork: positions differ");
    CHECK(recurrent_state(c, 0) == recurrent_state(c, 1), "fork: recurrent state differs");
    CHECK(llama_memory_seq_pos_max(mem, 1) == pos - 1, "fork: newest position %d", llama_memory_seq_pos_max(mem, 1));

    // the same tokens for both
    double max_diff = 0;  // relative to the largest logit
    int same_pos_steps = 0, same_argmax = 0;
    const int n_same = 3 * budget;
    for (int i = 0; i < n_same; i++, pos++) {
        bkv_tools::batch_clear(b);
        bkv_tools::batch_add(b, t, pos, {0}, true);
        bkv_tools::batch_add(b, t, pos, {1}, true);
        CHECK(llama_decode(c, b) == 0, "decode (step %d)", i);
        const float * l0 = llama_get_logits_ith(c, 0);
        const float * l1 = llama_get_logits_ith(c, 1);
        double scale = 0;
        for (int v = 0; v < e.n_vocab; v++) {
            scale = std::max(scale, (double) std::fabs(l0[v]));
        }
        for (int v = 0; v < e.n_vocab; v++) {
            max_diff = std::max(max_diff, (double) std::fabs(l0[v] - l1[v]) / std::max(scale, 1e-6));
        }
        same_argmax += argmax(l0, e.n_vocab) == argmax(l1, e.n_vocab);
        if (!unified) {
            CHECK(std::memcmp(l0, l1, sizeof(float) * e.n_vocab) == 0, "logits of the fork differ at step %d", i);
        }
        const auto p0 = attn_positions(c, 0), p1 = attn_positions(c, 1);
        CHECK((int) p0.size() <= budget && (int) p1.size() <= budget, "%zu / %zu cells > budget", p0.size(), p1.size());
        same_pos_steps += p0 == p1;
        if (!unified) {
            CHECK(p0 == p1, "kept positions differ at step %d", i);
            CHECK(recurrent_state(c, 0) == recurrent_state(c, 1), "recurrent states differ at step %d", i);
        }
        t = argmax(l0, e.n_vocab);
    }
    // one unified stream: the two sequences' new cells sit in different slots, so attention sums in
    // another order (SIMD lanes); the logits agree to rounding, not bit for bit
    CHECK(same_pos_steps * 10 >= n_same * 9, "kept positions differ in %d of %d steps", n_same - same_pos_steps, n_same);
    CHECK(max_diff < 1e-2 && same_argmax == n_same, "logits of the fork differ by %g (relative), same top-1 in %d of %d",
          max_diff, same_argmax, n_same);
    const beaconkv_stats s0 = stats_of(c, 0), s1 = stats_of(c, 1);
    CHECK(s1.compress_events > 0, "the fork was never compressed");

    // diverge
    llama_token u = (t + 7) % e.n_vocab;
    for (int i = 0; i < budget; i++, pos++) {
        bkv_tools::batch_clear(b);
        bkv_tools::batch_add(b, t, pos, {0}, true);
        bkv_tools::batch_add(b, u, pos, {1}, true);
        CHECK(llama_decode(c, b) == 0, "decode (diverged, step %d)", i);
        t = argmax(llama_get_logits_ith(c, 0), e.n_vocab);
        u = argmax(llama_get_logits_ith(c, 1), e.n_vocab);
        CHECK(bkv_tools::seq_cells(c, 0) <= budget && bkv_tools::seq_cells(c, 1) <= budget, "cells above budget");
    }
    CHECK(recurrent_state(c, 0) != recurrent_state(c, 1), "diverged sequences share their recurrent state");
    const auto keep = attn_positions(c, 0);
    const auto keep_rec = recurrent_state(c, 0);
    CHECK(llama_memory_seq_rm(mem, 1, -1, -1), "seq_rm of the fork");
    CHECK(bkv_tools::seq_cells(c, 1) == 0 && llama_memory_seq_pos_max(mem, 1) == -1, "the fork left cells behind");
    CHECK(attn_positions(c, 0) == keep && recurrent_state(c, 0) == keep_rec, "removing the fork changed seq 0");
    const beaconkv_stats s1_after = stats_of(c, 1);
    CHECK(s1_after.cells_in_use == 0 && s1_after.n_tokens == 0, "plugin kept state of the removed fork");
    bkv_tools::batch_clear(b);
    bkv_tools::batch_add(b, t, pos, {0}, true);
    CHECK(llama_decode(c, b) == 0, "seq 0 cannot continue after the fork was removed");
    printf("fork %s: %d steps on the same tokens: same kept positions in %d, same top-1 in %d, logits max relative diff "
           "%g; %llu / %llu compression passes\n",
           unified ? "unified" : "split", n_same, same_pos_steps, same_argmax, max_diff, (unsigned long long) s0.compress_events,
           (unsigned long long) s1.compress_events);
    return true;
}

// 6. A layout the plugin refuses (hybrid iSWA without a global attention layer, recurrent-only):
//    through common_init_from_params, as every tool: exactly one libllama warning naming the
//    reason, no plugin, a full-size cache (the context is recreated with the user's batch sizes),
//    and greedy output bit-identical to a context made without the plugin, for 8x the budget.
bool test_refused(env & e) {
    common_params p = e.params;
    p.n_ctx = 4096;
    p.kv_compress_spec = "prompt=inside,policy=beacon,budget=64,window=16";
    {
        std::lock_guard<std::mutex> lock(g_log_mutex);
        g_warnings.clear();
    }
    common_init_result_ptr init = common_init_from_params(p);
    llama_context * ctx = init ? init->context() : nullptr;
    CHECK(ctx, "common_init_from_params failed");
    std::vector<std::string> refusals;
    {
        std::lock_guard<std::mutex> lock(g_log_mutex);
        for (const auto & w : g_warnings) {
            if (w.find("KV plugin not attached") != std::string::npos) {
                refusals.push_back(w);
            }
        }
    }
    CHECK(refusals.size() == 1, "%zu refusal warnings, expected exactly 1", refusals.size());
    printf("refusal: %s", refusals[0].c_str());
    CHECK(common_kv_compress_get(ctx) == nullptr && llama_kv_plugin_n_layers(ctx) == 0, "a plugin is attached");
    CHECK(llama_n_ctx(ctx) >= 4096, "n_ctx %u", llama_n_ctx(ctx));

    // common_kv_compress_init_context recreated the context with the user's batch sizes and context
    // shift, which common_kv_compress_adjust had clamped for the budget before the attach was refused
    CHECK(p.n_batch == e.params.n_batch && p.n_ubatch == e.params.n_ubatch,
          "the refused context kept n_batch %d / n_ubatch %d (without --kv flags: %d / %d)", p.n_batch, p.n_ubatch,
          e.params.n_batch, e.params.n_ubatch);
    CHECK(p.ctx_shift == e.params.ctx_shift, "context shift was not restored");
    ctx_ptr plain = make_ctx(e, "", 4096);
    CHECK(plain, "context creation failed");
    auto prompt = prompt_tokens(e, 24);
    CHECK(decode(ctx, prompt.data(), (int) prompt.size()) && decode(plain.get(), prompt.data(), (int) prompt.size()),
          "prompt");
    const int n_gen = 8 * 64 + 37;
    for (int i = 0; i < n_gen; i++) {
        const float * la = llama_get_logits_ith(ctx, -1);
        const float * lb = llama_get_logits_ith(plain.get(), -1);
        CHECK(std::memcmp(la, lb, sizeof(float) * e.n_vocab) == 0, "logits differ from the plain context at step %d", i);
        llama_token t = argmax(la, e.n_vocab);
        CHECK(decode(ctx, &t, 1) && decode(plain.get(), &t, 1), "decode failed at step %d", i);
    }
    printf("refused: uncompressed, %d tokens bit-identical to a plain context (no plugin, full cache)\n", n_gen);
    return true;
}

}  // namespace

int main(int argc, char ** argv) {
    const ggml_log_callback log = [](ggml_log_level level, const char * text, void *) {
        if (level >= GGML_LOG_LEVEL_WARN) {
            fputs(text, stderr);
            std::lock_guard<std::mutex> lock(g_log_mutex);
            g_warnings.emplace_back(text);
        }
    };
    return bkv_test::run_main(argc, argv, log, [](bkv_test::env & e, const std::string & test) -> std::optional<bool> {
        if (test.rfind("recurrent_untouched", 0) == 0) {
            return test_recurrent_untouched(e, bkv_test::test_arg(test, "beacon"));
        } else if (test == "direct_evict") {
            return test_direct_evict(e);
        } else if (test == "rollback_rs") {
            return test_rollback(e, true);
        } else if (test == "rollback_ckpt") {
            return test_rollback(e, false);
        } else if (test == "fork:unified" || test == "fork:split") {
            return test_fork(e, test == "fork:unified");
        } else if (test == "refused") {
            return test_refused(e);
        }
        return std::nullopt;
    });
}
