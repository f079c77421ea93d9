// beaconkv-eval --mode trace: own-trace fidelity.
//
// {"n_tokens", "bucket", "chunk", "prompts": [{id, n_prompt, n_tokens, first_eog, ref_ms, text}],
//  "results": [{id, config, policy, budget, n_tokens, top1, kl, first_mismatch, diverge_free,
//  free_limit, buckets: [{from, to, n, top1, kl}], cells_peak, evicted, compress_events, plugin_ms,
//  decode_ms}]}

#include "eval.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace bkv_eval {

// Per prompt (each line of --tasks: {"id", "prompt"}): the uncompressed model
// answers greedily for --n-tokens tokens (end-of-generation tokens masked), one token at a time;
// then every config is teacher-forced on that trace in lockstep with an uncompressed reference
// (chunks of --chunk tokens, aligned so that compression runs exactly where decoding would run it),
// giving top-1 agreement with the trace and KL(reference || config) per position bucket; last,
// each compressed config runs free (greedy, one token at a time) until its first token that
// differs from the trace, at most --free-max tokens (none with --free-max -1).
bool run_trace(llama_model * model, const common_params & base_params, const std::vector<config> & cfgs,
               const eval_args & a, json & out) {
    const llama_vocab * vocab = llama_model_get_vocab(model);
    const int n_vocab = llama_vocab_n_tokens(vocab);
    // many contexts live at once: small ubatches keep their compute buffers (logits) small
    common_params params = base_params;
    params.n_ubatch = std::min(params.n_ubatch, 64);
    params.n_batch = std::max(params.n_batch, params.n_ubatch);
    // the trace never ends: end-of-generation tokens are masked in every greedy choice
    std::vector<char> is_eog(n_vocab);
    for (int v = 0; v < n_vocab; v++) {
        is_eog[v] = llama_vocab_is_eog(vocab, v);
    }
    auto pick = [&](const float * l) {
        int best = -1;
        for (int v = 0; v < n_vocab; v++) {
            if (!is_eog[v] && (best < 0 || l[v] > l[best])) {
                best = v;
            }
        }
        return best;
    };
    const std::vector<json> prompts = read_jsonl(a.tasks);
    if (prompts.empty()) {
        fprintf(stderr, "error: --mode trace needs --tasks FILE.jsonl with at least one prompt\n");
        return false;
    }
    const int n_gen = std::max(2, a.n_tokens);
    const int bucket = std::max(1, a.bucket);
    int chunk = std::max(1, a.chunk);
    for (const config & c : cfgs) {
        if (c.policy != "none") {
            chunk = std::min(chunk, compressed_chunk(c, a.chunk));
        }
    }
    std::vector<config> comp;
    for (const config & c : cfgs) {
        if (c.policy != "none") {
            comp.push_back(c);
        }
    }
    const config none_cfg = full_cache();
    const int n_buckets = (n_gen + bucket - 1) / bucket;
    // progress: per prompt, the reference (n_gen), teacher forcing (n_gen), free runs (per config)
    const int per_prompt = 2 * n_gen + (a.free_max < 0 ? 0 : (int) comp.size());
    const int total = per_prompt * (int) prompts.size();
    json prompt_info = json::array();
    json results = json::array();
    for (size_t pi = 0; pi < prompts.size(); pi++) {
        const int base = (int) pi * per_prompt;
        const std::string id = prompts[pi].value("id", std::to_string(pi));
        const std::string text = bkv_tools::apply_chat_template(model, prompts[pi].value("prompt", std::string()));
        const std::vector<llama_token> prompt = common_tokenize(vocab, text, true, true);
        if (prompt.empty()) {
            fprintf(stderr, "error: trace prompt '%s' is empty\n", id.c_str());
            return false;
        }
        const uint32_t n_ctx = (uint32_t) (prompt.size() + n_gen + 16);

        // 1. the reference trace
        std::vector<llama_token> trace;
        int first_eog = -1;
        {
            auto ref = make_ctx(model, params, none_cfg, n_ctx);
            if (!ref || !decode_tokens(*ref, prompt.data(), (int32_t) prompt.size())) {
                return false;
            }
            for (int g = 0; g < n_gen; g++) {
                const float * lp = llama_get_logits_ith(ref->ctx, -1);
                if (first_eog < 0 && is_eog[argmax(lp, n_vocab)]) {
                    first_eog = g;
                }
                llama_token t = pick(lp);
                trace.push_back(t);
                if (g + 1 < n_gen && !decode_tokens(*ref, &t, 1)) {
                    return false;
                }
                if ((g + 1) % 64 == 0) {
                    progress(base + g + 1, total);
                }
            }
            prompt_info.push_back({{"id", id},
                                   {"n_prompt", (int) prompt.size()},
                                   {"n_tokens", n_gen},
                                   {"first_eog", first_eog},
                                   {"ref_ms", ref->decode_ms},
                                   {"text", common_detokenize(vocab, trace, false)}});
        }

        // 2. teacher forcing in lockstep
        std::vector<std::unique_ptr<run_ctx>> runs;
        runs.push_back(make_ctx(model, params, none_cfg, n_ctx));
        for (const config & c : comp) {
            runs.push_back(make_ctx(model, params, c, n_ctx));
        }
        for (auto & r : runs) {
            if (!r || !decode_chunked(*r, prompt, r->cfg.policy == "none" ? std::max(1, params.n_ubatch) : chunk)) {
                return false;
            }
        }
        struct acc {
            std::vector<double> kl, agree;
            std::vector<int64_t> n;
            int first_mismatch = -1;
        };
        std::vector<acc> accs(runs.size());
        for (acc & x : accs) {
            x.kl.assign(n_buckets, 0);
            x.agree.assign(n_buckets, 0);
            x.n.assign(n_buckets, 0);
        }
        std::vector<double> lp_ref, p_ref(n_vocab), lp;
        // scores position g (the logits that predict trace[g]); row i of each context's logits
        auto score = [&](int g, int32_t row) {
            log_softmax(llama_get_logits_ith(runs[0]->ctx, row), n_vocab, lp_ref);
            for (int v = 0; v < n_vocab; v++) {
                p_ref[v] = std::exp(lp_ref[v]);
            }
            const int bk = g / bucket;
            for (size_t k = 0; k < runs.size(); k++) {
                const float * l = llama_get_logits_ith(runs[k]->ctx, row);
                double kl = 0;
                if (k > 0) {
                    log_softmax(l, n_vocab, lp);
                    for (int v = 0; v < n_vocab; v++) {
                        kl += p_ref[v] * (lp_ref[v] - lp[v]);
                    }
                }
                const bool agree = pick(l) == trace[g];
                acc & x = accs[k];
                x.kl[bk] += kl;
                x.agree[bk] += agree;
                x.n[bk]++;
                if (!agree && x.first_mismatch < 0) {
                    x.first_mismatch = g;
                }
            }
        };
        score(0, -1);
        // feed trace[0 .. n_gen-2]; the logits of trace[j] predict trace[j+1]. The first chunk
        // brings the cell count to a multiple of the chunk (budgets are multiples of it), so a
        // compressed context reaches its budget exactly where token-by-token decoding would.
        llama_batch batch = llama_batch_init(chunk, 0, 1);
        int j = 0;
        const int first = (int) ((chunk - prompt.size() % chunk) % chunk);
        while (j < n_gen - 1) {
            const int n = std::min(j == 0 && first > 0 ? first : chunk, n_gen - 1 - j);
            for (auto & r : runs) {
                bkv_tools::batch_clear(batch);
                const llama_pos p0 = llama_memory_seq_pos_max(llama_get_memory(r->ctx), 0) + 1;
                for (int i = 0; i < n; i++) {
                    bkv_tools::batch_add(batch, trace[j + i], p0 + i, {0}, true);
                }
                if (!decode_batch(*r, batch)) {
                    llama_batch_free(batch);
                    return false;
                }
            }
            for (int i = 0; i < n; i++) {
                score(j + i + 1, i);
            }
            j += n;
            progress(base + n_gen + j, total);
        }
        llama_batch_free(batch);

        // 3. free runs
        const int limit = a.free_max < 0 ? 0 : std::min(n_gen, a.free_max > 0 ? a.free_max : n_gen);
        std::vector<int> diverge(runs.size(), -1);
        for (size_t k = 1; k < runs.size() && limit > 0; k++) {
            auto r = make_ctx(model, params, runs[k]->cfg, n_ctx);
            if (!r || !decode_chunked(*r, prompt, chunk)) {
                return false;
            }
            int g = 0;
            for (; g < limit; g++) {
                llama_token t = pick(llama_get_logits_ith(r->ctx, -1));
                if (t != trace[g]) {
                    break;
                }
                if (g + 1 < limit && !decode_tokens(*r, &t, 1)) {
                    return false;
                }
            }
            diverge[k] = g;
            progress(base + 2 * n_gen + (int) k, total);
        }

        for (size_t k = 0; k < runs.size(); k++) {
            const acc & x = accs[k];
            json buckets = json::array();
            double kl = 0, agree = 0;
            int64_t n = 0;
            for (int b = 0; b < n_buckets; b++) {
                kl += x.kl[b];
                agree += x.agree[b];
                n += x.n[b];
                buckets.push_back({{"from", b * bucket},
                                   {"to", std::min(n_gen, (b + 1) * bucket)},
                                   {"n", x.n[b]},
                                   {"top1", x.n[b] ? x.agree[b] / x.n[b] : 0.0},
                                   {"kl", x.n[b] ? x.kl[b] / x.n[b] : 0.0}});
            }
            const plugin_numbers pn = plugin_stats(runs[k]->ctx);
            results.push_back({{"id", id},
                               {"config", runs[k]->cfg.name},
                               {"policy", runs[k]->cfg.policy},
                               {"budget", runs[k]->cfg.budget},
                               {"n_tokens", n},
                               {"top1", n ? agree / n : 0.0},
                               {"kl", n ? kl / n : 0.0},
                               {"first_mismatch", x.first_mismatch},
                               {"diverge_free", k == 0 || limit == 0 ? json(nullptr) : json(diverge[k])},
                               {"free_limit", limit},
                               {"buckets", buckets},
                               {"cells_peak", runs[k]->cells_peak},
                               {"evicted", pn.evicted},
                               {"compress_events", pn.events},
                               {"plugin_ms", pn.ms},
                               {"decode_ms", runs[k]->decode_ms}});
        }
    }
    progress(total, total);
    out = {{"n_tokens", n_gen}, {"bucket", bucket}, {"chunk", chunk}, {"prompts", prompt_info}, {"results", results}};
    return true;
}

}  // namespace bkv_eval
