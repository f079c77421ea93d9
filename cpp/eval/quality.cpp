// beaconkv-eval --mode agree|revisit|generate: the same tokens fed to an uncompressed reference
// context and to one compressed context per config in lockstep (teacher forcing), comparing each
// step's distribution.
//
// {"n_tokens", "prompt_tokens", "ppl_from", "ppl_ref", "results": [{config, policy, budget, top1, kl,
//  ppl, ppl_ref, cells_peak, evicted, compress_events, plugin_ms, recalled, archived, archive_bytes,
//  decode_ms}]}

#include "eval.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace bkv_eval {

namespace {

// Scores every step from prompt_tokens-1 on; perplexity over [ppl_from, tokens.size()-1).
// With n_generate > 0 the reference continues the prompt greedily for n_generate tokens and every
// compressed context is fed those tokens (agreement with the uncompressed run's own output).
bool run_lockstep(llama_model * model, const common_params & params, const std::vector<config> & cfgs,
                  std::vector<llama_token> tokens, int prompt_tokens, int ppl_from, int n_generate,
                  const std::string & per_token, json & out) {
    if (n_generate > 0) {
        tokens.resize(prompt_tokens + n_generate, 0);
    }
    const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    const uint32_t n_ctx = (uint32_t) tokens.size() + 8;
    auto ref = make_ctx(model, params, full_cache(), n_ctx);
    std::vector<std::unique_ptr<run_ctx>> runs;
    for (const config & c : cfgs) {
        if (c.policy != "none") {
            runs.push_back(make_ctx(model, params, c, n_ctx));
            if (!runs.back()) {
                return false;
            }
        }
    }
    if (!ref) {
        return false;
    }
    struct acc { double kl = 0, nll = 0; int64_t agree = 0, n = 0, n_ppl = 0; };
    std::vector<acc> accs(runs.size());
    acc ref_acc;
    std::vector<double> lp_ref, lp;
    // --per-token: one line per step from ppl_from on (where a recall helps or comes too late)
    FILE * trace = nullptr;
    if (!per_token.empty()) {
        trace = fopen(per_token.c_str(), "w");
        if (!trace) {
            fprintf(stderr, "error: cannot write --per-token %s\n", per_token.c_str());
            return false;
        }
        fprintf(trace, "t,token,ref_nll");
        for (auto & r : runs) {
            fprintf(trace, ",%s nll,%s top1,%s recalled", r->cfg.name.c_str(), r->cfg.name.c_str(),
                    r->cfg.name.c_str());
        }
        fprintf(trace, "\n");
    }

    auto step = [&](const llama_token * toks, int n) {
        if (!decode_tokens(*ref, toks, n)) {
            return false;
        }
        for (auto & r : runs) {
            if (!decode_tokens(*r, toks, n)) {
                return false;
            }
        }
        return true;
    };
    if (!step(tokens.data(), prompt_tokens)) {
        return false;
    }
    const int total = (int) tokens.size() - 1;
    for (int t = prompt_tokens - 1; t < total; t++) {
        if (t >= prompt_tokens && !step(&tokens[t], 1)) {
            return false;
        }
        const float * lr = llama_get_logits_ith(ref->ctx, -1);
        log_softmax(lr, n_vocab, lp_ref);
        const int top_ref = argmax(lr, n_vocab);
        if (n_generate > 0) {
            tokens[t + 1] = top_ref;
        }
        const llama_token next = tokens[t + 1];
        if (t >= ppl_from) {
            ref_acc.nll -= lp_ref[next];
            ref_acc.n_ppl++;
            if (trace) {
                fprintf(trace, "%d,%d,%.4f", t, next, -lp_ref[next]);
            }
        }
        for (size_t i = 0; i < runs.size(); i++) {
            const float * l = llama_get_logits_ith(runs[i]->ctx, -1);
            log_softmax(l, n_vocab, lp);
            double kl = 0;
            for (int v = 0; v < n_vocab; v++) {
                kl += std::exp(lp_ref[v]) * (lp_ref[v] - lp[v]);
            }
            acc & a = accs[i];
            a.kl += kl;
            const bool same_top = argmax(l, n_vocab) == top_ref;
            a.agree += same_top;
            a.n++;
            if (t >= ppl_from) {
                a.nll -= lp[next];
                a.n_ppl++;
                if (trace) {
                    fprintf(trace, ",%.4f,%d,%llu", -lp[next], (int) same_top,
                            (unsigned long long) plugin_stats(runs[i]->ctx).recalled);
                }
            }
        }
        if (trace && t >= ppl_from) {
            fprintf(trace, "\n");
        }
        if ((t + 1) % 64 == 0) {
            progress(t + 1, total);
        }
    }
    progress(total, total);
    if (trace) {
        fclose(trace);
    }

    const double ppl_ref = ref_acc.n_ppl ? std::exp(ref_acc.nll / ref_acc.n_ppl) : 0;
    json results = json::array();
    for (size_t i = 0; i < runs.size(); i++) {
        const acc & a = accs[i];
        const plugin_numbers pn = plugin_stats(runs[i]->ctx);
        results.push_back({{"config", runs[i]->cfg.name},
                           {"policy", runs[i]->cfg.policy},
                           {"budget", runs[i]->cfg.budget},
                           {"top1", a.n ? (double) a.agree / a.n : 0.0},
                           {"kl", a.n ? a.kl / a.n : 0.0},
                           {"ppl", a.n_ppl ? std::exp(a.nll / a.n_ppl) : 0.0},
                           {"ppl_ref", ppl_ref},
                           {"cells_peak", runs[i]->cells_peak},
                           {"evicted", pn.evicted},
                           {"compress_events", pn.events},
                           {"plugin_ms", pn.ms},
                           {"recalled", pn.recalled},
                           {"archived", pn.archived},
                           {"archive_bytes", pn.archive_bytes},
                           {"decode_ms", runs[i]->decode_ms}});
    }
    out = {{"n_tokens", tokens.size()},
           {"prompt_tokens", prompt_tokens},
           {"ppl_from", ppl_from},
           {"ppl_ref", ppl_ref},
           {"results", results}};
    return true;
}

}  // namespace

bool run_quality(llama_model * model, const common_params & params, const std::vector<config> & cfgs,
                 const eval_args & a, json & out) {
    const llama_vocab * vocab = llama_model_get_vocab(model);
    if (a.mode == "generate") {
        // the uncompressed run continues the prompt greedily; compressed runs are fed its tokens
        const std::string text = a.text_file.empty() ? params.prompt : read_file(a.text_file);
        std::vector<llama_token> prompt = common_tokenize(vocab, text, true, true);
        if (prompt.empty()) {
            fprintf(stderr, "error: --mode generate needs -p PROMPT or --text FILE\n");
            return false;
        }
        return run_lockstep(model, params, cfgs, prompt, (int) prompt.size(), (int) prompt.size() - 1, a.n_tokens,
                            a.per_token, out);
    }
    if (a.text_file.empty()) {
        fprintf(stderr, "error: --mode %s needs --text FILE\n", a.mode.c_str());
        return false;
    }
    if (a.prompt_tokens < 1) {
        fprintf(stderr, "error: --prompt-tokens must be at least 1, got %d\n", a.prompt_tokens);
        return false;
    }
    std::vector<llama_token> text = common_tokenize(vocab, read_file(a.text_file), true);
    std::vector<llama_token> toks;
    int ppl_from = 0;
    if (a.mode == "agree") {
        toks.assign(text.begin(), text.begin() + std::min<size_t>(text.size(), a.n_tokens));
        // every prediction after the prompt, the first (from the prompt's last token) too:
        // the steps top-1 agreement counts
        ppl_from = a.prompt_tokens - 1;
    } else {
        // passage, then `gap` tokens of other text, then the passage again (scored).
        if ((int) text.size() < a.passage + a.gap) {
            fprintf(stderr, "error: --text has %zu tokens, revisit needs --passage + --gap = %d\n", text.size(),
                    a.passage + a.gap);
            return false;
        }
        toks.assign(text.begin(), text.begin() + a.passage + a.gap);
        toks.insert(toks.end(), text.begin() + 1, text.begin() + a.passage);
        ppl_from = a.passage + a.gap;
    }
    if ((int) toks.size() <= a.prompt_tokens + 1) {
        fprintf(stderr, "error: text too short (%zu tokens)\n", toks.size());
        return false;
    }
    return run_lockstep(model, params, cfgs, toks, a.prompt_tokens, ppl_from, 0, a.per_token, out);
}

}  // namespace bkv_eval
