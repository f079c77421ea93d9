// beaconkv-eval --mode passkey: a number hidden at a depth of a long filler, asked for at the end.
//
// {"length", "results": [{config, policy, budget, depth, n_tokens, found, answer, cells_peak,
//  needle_tokens, needle_kept}]}

#include "eval.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>

namespace bkv_eval {

bool run_passkey(llama_model * model, const common_params & params, const std::vector<config> & cfgs,
                 const eval_args & a, json & out) {
    const llama_vocab * vocab = llama_model_get_vocab(model);
    const std::string filler = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. ";
    const std::string head = "There is an important info hidden inside a lot of irrelevant text. Find it and memorize it. "
                             "I will quiz you about the important information there.\n";
    const int n_filler_tok = (int) common_tokenize(vocab, filler, false).size();
    const std::vector<std::string> depths = split(a.depths, ',');
    json results = json::array();
    int done = 0;
    const int total = (int) (depths.size() * cfgs.size());
    for (size_t di = 0; di < depths.size(); di++) {
        const double depth = std::atof(depths[di].c_str());
        const int key = 10000 + (int) ((di * 7919 + 4271) % 90000);
        const std::string needle = "The pass key is " + std::to_string(key) + ". Remember it. " + std::to_string(key) +
                                   " is the pass key.\n";
        const int n_rep = std::max(1, a.length / n_filler_tok);
        const int n_before = (int) (n_rep * depth);
        std::string text = head;
        for (int i = 0; i < n_rep; i++) {
            if (i == n_before) {
                text += needle;
            }
            text += filler;
        }
        text += "\nWhat is the pass key? The pass key is";
        const std::vector<llama_token> toks = common_tokenize(vocab, text, true);
        // the needle's token span (tokenising the text up to it and through it)
        const size_t at = text.find(needle);
        const int needle_begin = (int) common_tokenize(vocab, text.substr(0, at), true).size();
        const int needle_end = (int) common_tokenize(vocab, text.substr(0, at + needle.size()), true).size();
        for (const config & c : cfgs) {
            // Protect only the instruction: the haystack itself is what gets compressed.
            const std::string extra = c.policy == "none" ? "" : ",prefix=" + std::to_string(std::min(32, c.budget / 4));
            auto r = make_ctx(model, params, c, (uint32_t) toks.size() + 16, extra);
            if (!r) {
                return false;
            }
            bool ok = true;
            for (size_t i = 0; i < toks.size() && ok; i += a.chunk) {
                ok = decode_tokens(*r, &toks[i], (int32_t) std::min<size_t>(a.chunk, toks.size() - i));
            }
            // how much of the needle the cache holds when the question has been read (a number
            // cut into pieces by token-level eviction reads as a wrong answer)
            const int needle_kept = ok ? kept_in_range(r->ctx, needle_begin, needle_end) : 0;
            std::string answer;
            for (int g = 0; g < 8 && ok; g++) {
                llama_token t = argmax(llama_get_logits_ith(r->ctx, -1), llama_vocab_n_tokens(vocab));
                answer += common_token_to_piece(vocab, t);
                ok = decode_tokens(*r, &t, 1);
            }
            const bool found = ok && answer.find(std::to_string(key)) != std::string::npos;
            results.push_back({{"config", c.name},
                               {"policy", c.policy},
                               {"budget", c.budget},
                               {"depth", depth},
                               {"n_tokens", toks.size()},
                               {"found", found},
                               {"answer", answer},
                               {"cells_peak", r->cells_peak},
                               {"needle_tokens", needle_end - needle_begin},
                               {"needle_kept", needle_kept}});
            progress(++done, total);
        }
    }
    out = {{"length", a.length}, {"results", results}};
    return true;
}

}  // namespace bkv_eval
