// beaconkv-eval --mode speed: decode speed and memory against context length (greedy generation,
// ms/token over the 64 tokens before each checkpoint); with --prompt-len, prompt speed too.
//
// {"results": [{config, policy, budget, context, ms_per_token, cells, cells_physical,
//  kv_bytes_per_cell, plugin_ms, plugin_ms_capture, plugin_ms_score, plugin_ms_evict,
//  plugin_ms_recall, archived, archive_bytes, decode_ms, scoring, compress_events, reads_pass,
//  bytes_pass, reads_capture, bytes_capture, n_tokens}],
//  "prompt": [{config, policy, budget, prompt_tokens, n_ubatch, prompt_ms, plugin_ms, cells}]}
// ("prompt" with --prompt-len only)

#include "eval.h"

#include <algorithm>
#include <cstdlib>

namespace bkv_eval {

namespace {

// Prompt processing: one prompt of n tokens decoded as the application would (n_batch pieces,
// n_ubatch physical batches: a compressed context clamps n_ubatch), in a fresh context per config;
// "none:B" (a plain cache of B cells) cannot hold it and is skipped.
bool run_prompt_speed(llama_model * model, const common_params & params, const std::vector<config> & cfgs, int n,
                      json & rows) {
    const llama_vocab * vocab = llama_model_get_vocab(model);
    std::string text;
    std::vector<llama_token> toks;
    for (int i = 0; (int) toks.size() < n; i++) {
        text += "Entry " + std::to_string(i) + ": the keeper logged the wind, the tide and the oil left in the lamp. ";
        toks = common_tokenize(vocab, text, true);
    }
    toks.resize(n);
    for (const config & c : cfgs) {
        if (c.policy == "none" && c.budget > 0) {
            continue;
        }
        auto r = make_ctx(model, params, c, (uint32_t) n + 16);
        if (!r || !decode_tokens(*r, toks.data(), n)) {
            return false;
        }
        const plugin_numbers pn = plugin_stats(r->ctx);
        rows.push_back({{"config", c.name},
                        {"policy", c.policy},
                        {"budget", c.budget},
                        {"prompt_tokens", n},
                        {"n_ubatch", llama_n_ubatch(r->ctx)},
                        {"prompt_ms", r->decode_ms},
                        {"plugin_ms", pn.ms},
                        {"cells", bkv_tools::seq_cells(r->ctx, 0)}});
    }
    return true;
}

}  // namespace

bool run_speed(llama_model * model, const common_params & params, const std::vector<config> & cfgs,
               const eval_args & a, json & out) {
    const llama_vocab * vocab = llama_model_get_vocab(model);
    const int n_vocab = llama_vocab_n_tokens(vocab);
    std::vector<int> lengths;
    for (const std::string & s : split(a.lengths, ',')) {
        lengths.push_back(std::atoi(s.c_str()));
    }
    const int max_len = *std::max_element(lengths.begin(), lengths.end());
    const std::vector<llama_token> prompt = common_tokenize(vocab, "Once upon a time, in a small village,", true);
    json results = json::array();
    int done = 0;
    for (const config & c : cfgs) {
        // "none" with a budget = plain llama.cpp whose whole cache is that budget (the limit).
        const int limit = c.policy == "none" && c.budget > 0 ? c.budget : max_len + 8;
        auto r = make_ctx(model, params, c, (uint32_t) limit + 8);
        if (!r || !decode_tokens(*r, prompt.data(), (int32_t) prompt.size())) {
            return false;
        }
        int pos = (int) prompt.size();
        double window_ms = 0;
        int window_n = 0;
        for (; pos < std::min(limit, max_len); pos++) {
            llama_token t = argmax(llama_get_logits_ith(r->ctx, -1), n_vocab);
            const double before = r->decode_ms;
            if (!decode_tokens(*r, &t, 1)) {
                return false;
            }
            window_ms += r->decode_ms - before;
            window_n++;
            const bool checkpoint = std::find(lengths.begin(), lengths.end(), pos + 1) != lengths.end() ||
                                    (pos + 1 == limit - 8 && limit <= max_len);
            if (window_n > 64) {
                window_ms = window_ms * 64.0 / window_n;
                window_n = 64;
            }
            if (checkpoint) {
                const plugin_numbers pn = plugin_stats(r->ctx);
                results.push_back({{"config", c.name},
                                   {"policy", c.policy},
                                   {"budget", c.budget},
                                   {"context", pos + 1},
                                   {"ms_per_token", window_ms / window_n},
                                   {"cells", bkv_tools::seq_cells(r->ctx, 0)},
                                   {"cells_physical", bkv_tools::physical_cells(r->ctx)},
                                   {"kv_bytes_per_cell", bkv_tools::bytes_per_cell(r->ctx, model, params)},
                                   {"plugin_ms", pn.ms},
                                   {"plugin_ms_capture", pn.ms_capture},
                                   {"plugin_ms_score", pn.ms_score},
                                   {"plugin_ms_evict", pn.ms_evict},
                                   {"plugin_ms_recall", pn.ms_recall},
                                   {"archived", pn.archived},
                                   {"archive_bytes", pn.archive_bytes},
                                   {"decode_ms", r->decode_ms},
                                   {"scoring", common_kv_compress_scoring_path(r->ctx)},
                                   {"compress_events", pn.events},
                                   {"reads_pass", pn.reads_pass},
                                   {"bytes_pass", pn.bytes_pass},
                                   {"reads_capture", pn.reads_capture},
                                   {"bytes_capture", pn.bytes_capture},
                                   {"n_tokens", pn.n_tokens}});
            }
        }
        progress(++done, (int) cfgs.size());
    }
    out = {{"results", results}};
    if (a.prompt_len > 0) {
        json rows = json::array();
        if (!run_prompt_speed(model, params, cfgs, a.prompt_len, rows)) {
            return false;
        }
        out["prompt"] = rows;
    }
    return true;
}

}  // namespace bkv_eval
