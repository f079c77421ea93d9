// beaconkv-eval --mode task: synthetic long-context tasks (the bench generates them); --mode count:
// the token counts of their documents.
//
// task:  {"results": [{id, question, config, policy, budget, n_doc, n_question, n_gen, stopped,
//         output, cells_doc, cells_peak, evicted, compress_events, recalled, plugin_ms, prefill_ms,
//         answer_ms}]}
// count: {"results": [{id, chars, n_doc}]}

#include "eval.h"

#include <algorithm>
#include <cstdio>

namespace bkv_eval {

namespace {

// The sequence state of a compressed context (libllama's and the plugin's), restored before
// every question but the first.
struct saved_state {
    std::vector<uint8_t> kv, plugin;

    bool save(run_ctx & r) {
        kv.resize(llama_state_seq_get_size(r.ctx, 0));
        if (llama_state_seq_get_data(r.ctx, kv.data(), kv.size(), 0) != kv.size()) {
            fprintf(stderr, "error: llama_state_seq_get_data failed for '%s'\n", r.cfg.name.c_str());
            return false;
        }
        const beaconkv_context * b = common_kv_compress_get(r.ctx);
        if (b) {
            plugin.resize(beaconkv_seq_state_size(b, 0));
            if (plugin.empty() ||
                beaconkv_seq_state_get(b, 0, plugin.data(), plugin.size()) != (int64_t) plugin.size()) {
                fprintf(stderr, "error: beaconkv_seq_state_get: %s\n", beaconkv_last_error(b));
                return false;
            }
        }
        return true;
    }

    bool restore(run_ctx & r) const {
        llama_memory_seq_rm(llama_get_memory(r.ctx), 0, -1, -1);
        if (llama_state_seq_set_data(r.ctx, kv.data(), kv.size(), 0) != kv.size()) {
            fprintf(stderr, "error: llama_state_seq_set_data failed for '%s'\n", r.cfg.name.c_str());
            return false;
        }
        beaconkv_context * b = common_kv_compress_get(r.ctx);
        if (b && !plugin.empty() && beaconkv_seq_state_set(b, 0, plugin.data(), plugin.size()) != BEACONKV_OK) {
            fprintf(stderr, "error: beaconkv_seq_state_set: %s\n", beaconkv_last_error(b));
            return false;
        }
        return true;
    }
};

}  // namespace

// Each line of --tasks is a document {"id", "doc", "questions": [{"q", "max_tokens"}, ...]}. Per
// config the document is prefilled once (in chunks, compressing as it goes), its sequence state
// saved; every question then starts from that state, is decoded and answered greedily (up to
// max_tokens or an end-of-generation token). Scoring is the bench's.
bool run_task(llama_model * model, const common_params & params, const std::vector<config> & cfgs,
              const eval_args & a, json & out) {
    const llama_vocab * vocab = llama_model_get_vocab(model);
    const std::vector<json> docs = read_jsonl(a.tasks);
    if (docs.empty()) {
        fprintf(stderr, "error: --mode task needs --tasks FILE.jsonl with at least one document\n");
        return false;
    }
    json results = json::array();
    const int total = (int) (docs.size() * cfgs.size());
    int done = 0;
    for (const json & d : docs) {
        const std::string id = d.value("id", std::to_string(done));
        std::string pre, post;
        template_split(model, d.value("doc", std::string()), pre, post);
        const std::vector<llama_token> doc_toks = common_tokenize(vocab, pre, true, true);
        std::vector<std::vector<llama_token>> q_toks;
        std::vector<int> q_max;
        int need = 0;
        for (const json & q : d.value("questions", json::array())) {
            q_toks.push_back(common_tokenize(vocab, q.value("q", std::string()) + post, false, true));
            q_max.push_back(std::max(1, q.value("max_tokens", 32)));
            need = std::max(need, (int) q_toks.back().size() + q_max.back());
        }
        if (doc_toks.empty() || q_toks.empty()) {
            fprintf(stderr, "error: --tasks document '%s' has no text or no questions\n", id.c_str());
            return false;
        }
        for (const config & c : cfgs) {
            const bool compressed = c.policy != "none";
            // Protect only the instruction: the haystack itself is what gets compressed.
            const std::string extra = compressed ? ",prefix=" + std::to_string(std::min(32, c.budget / 4)) : "";
            auto r = make_ctx(model, params, c, (uint32_t) (doc_toks.size() + need + 16), extra);
            if (!r) {
                return false;
            }
            const int chunk = compressed ? compressed_chunk(c, a.chunk) : std::max(1, params.n_ubatch);
            if (!decode_chunked(*r, doc_toks, chunk)) {
                return false;
            }
            const double prefill_ms = r->decode_ms;
            const int32_t cells_doc = bkv_tools::seq_cells(r->ctx, 0);
            saved_state state;
            if (q_toks.size() > 1 && compressed && !state.save(*r)) {
                return false;
            }
            for (size_t qi = 0; qi < q_toks.size(); qi++) {
                if (qi > 0) {
                    if (!compressed) {
                        llama_memory_seq_rm(llama_get_memory(r->ctx), 0, (llama_pos) doc_toks.size(), -1);
                    } else if (!state.restore(*r)) {
                        return false;
                    }
                }
                const double q0 = r->decode_ms;
                if (!decode_chunked(*r, q_toks[qi], chunk)) {
                    return false;
                }
                std::vector<llama_token> gen;
                bool stopped = false;
                if (!greedy_answer(*r, vocab, q_max[qi], gen, stopped)) {
                    return false;
                }
                const plugin_numbers pn = plugin_stats(r->ctx);
                results.push_back({{"id", id},
                                   {"question", (int) qi},
                                   {"config", c.name},
                                   {"policy", c.policy},
                                   {"budget", c.budget},
                                   {"n_doc", (int) doc_toks.size()},
                                   {"n_question", (int) q_toks[qi].size()},
                                   {"n_gen", (int) gen.size()},
                                   {"stopped", stopped},
                                   {"output", common_detokenize(vocab, gen, false)},
                                   {"cells_doc", cells_doc},
                                   {"cells_peak", r->cells_peak},
                                   {"evicted", pn.evicted},
                                   {"compress_events", pn.events},
                                   {"recalled", pn.recalled},
                                   {"plugin_ms", pn.ms},
                                   {"prefill_ms", prefill_ms},
                                   {"answer_ms", r->decode_ms - q0}});
            }
            progress(++done, total);
        }
    }
    out = {{"results", results}};
    return true;
}

// Token counts of the documents of a --tasks file as `--mode task` would prefill them (chat
// template included); the bench calibrates its characters-per-token from them.
bool run_count(llama_model * model, const eval_args & a, json & out) {
    const llama_vocab * vocab = llama_model_get_vocab(model);
    const std::vector<json> docs = read_jsonl(a.tasks);
    if (docs.empty()) {
        fprintf(stderr, "error: --mode count needs --tasks FILE.jsonl\n");
        return false;
    }
    json results = json::array();
    for (const json & d : docs) {
        std::string pre, post;
        const std::string doc = d.value("doc", std::string());
        template_split(model, doc, pre, post);
        results.push_back({{"id", d.value("id", std::string())},
                           {"chars", (int64_t) doc.size()},
                           {"n_doc", (int64_t) common_tokenize(vocab, pre, true, true).size()}});
    }
    out = {{"results", results}};
    return true;
}

}  // namespace bkv_eval
