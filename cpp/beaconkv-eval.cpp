// beaconkv-eval: measurements behind the benchmark (`beaconkv-bench` drives it and plots).
//
//   beaconkv-eval --mode agree   --text FILE [--n-tokens N] [--prompt-tokens P] --configs LIST ...
//   beaconkv-eval --mode revisit --text FILE [--passage N] [--gap N] --configs LIST ...
//   beaconkv-eval --mode generate -p PROMPT [--n-tokens N] --configs LIST ...   (greedy reference)
//   beaconkv-eval --mode passkey [--length N] [--depths 0.1,0.5,0.9] [--chunk N] --configs LIST ...
//   beaconkv-eval --mode speed   [--lengths 1024,2048] --configs LIST ...
//   common llama.cpp flags (-m, -t, -fa, -ctk, ...) as usual; --out FILE.json for the results.
//
// LIST is comma-separated configs "policy:budget" (e.g. "beacon:256,recent:256"); "none" is the
// uncompressed reference. Extra spec keys go after a slash: "beacon:256/reduce=zmean/span=3".
// agree/revisit feed the same tokens to an uncompressed reference context and to one compressed
// context per config in lockstep (teacher forcing), comparing each step's distribution.

#include "arg.h"
#include "beaconkv.h"
#include "common.h"
#include "kv-compress.h"
#include "llama-kv-plugin.h"
#include "llama.h"
#include "tool-common.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

namespace {

using clock_type = std::chrono::steady_clock;

struct eval_args {
    std::string mode = "agree";
    std::string configs = "beacon:256";
    std::string text_file;
    std::string out;
    int n_tokens = 1024;
    int prompt_tokens = 32;
    int passage = 256;
    int gap = 1024;
    int length = 2048;
    int chunk = 32;
    std::string depths = "0.1,0.5,0.9";
    std::string lengths = "1024,2048";
};

std::vector<std::string> split(const std::string & s, char sep) {
    std::vector<std::string> out;
    std::stringstream ss(s);
    for (std::string item; std::getline(ss, item, sep);) {
        if (!item.empty()) {
            out.push_back(item);
        }
    }
    return out;
}

// Remove this tool's own options from argv; the rest goes to llama.cpp's parser.
bool take_eval_args(int & argc, char ** argv, eval_args & a) {
    const std::map<std::string, std::string *> strs = {
        {"--mode", &a.mode}, {"--configs", &a.configs}, {"--text", &a.text_file}, {"--out", &a.out},
        {"--depths", &a.depths}, {"--lengths", &a.lengths}};
    const std::map<std::string, int *> ints = {{"--n-tokens", &a.n_tokens}, {"--prompt-tokens", &a.prompt_tokens},
                                               {"--passage", &a.passage},   {"--gap", &a.gap},
                                               {"--length", &a.length},     {"--chunk", &a.chunk}};
    int out = 1;
    for (int i = 1; i < argc; i++) {
        const std::string k = argv[i];
        if (strs.count(k) || ints.count(k)) {
            if (i + 1 >= argc) {
                fprintf(stderr, "error: %s needs a value\n", k.c_str());
                return false;
            }
            const std::string v = argv[++i];
            if (strs.count(k)) {
                *strs.at(k) = v;
            } else {
                try {
                    *ints.at(k) = std::stoi(v);
                } catch (...) {
                    fprintf(stderr, "error: %s needs an integer, got '%s'\n", k.c_str(), v.c_str());
                    return false;
                }
            }
            continue;
        }
        argv[out++] = argv[i];
    }
    argc = out;
    return true;
}

struct config {
    std::string name;    // as given, e.g. "beacon:256"
    std::string policy;  // none = uncompressed
    int budget = 0;
    std::string spec;    // full spec for the plugin
};

bool parse_configs(const std::string & list, std::vector<config> & out) {
    for (const std::string & item : split(list, ',')) {
        std::vector<std::string> parts = split(item, '/');
        config c;
        c.name = item;
        const size_t colon = parts[0].find(':');
        c.policy = parts[0].substr(0, colon);
        c.budget = colon == std::string::npos ? 0 : std::atoi(parts[0].c_str() + colon + 1);
        if (c.policy != "none") {
            if (c.budget <= 0) {
                fprintf(stderr, "error: --configs entry '%s' needs policy:budget\n", item.c_str());
                return false;
            }
            c.spec = "policy=" + c.policy + ",budget=" + std::to_string(c.budget);
            bool has_window = false;
            for (size_t i = 1; i < parts.size(); i++) {
                c.spec += "," + parts[i];
                has_window |= parts[i].rfind("window=", 0) == 0;
            }
            if (!has_window) {
                // the default window (64) would not fit small budgets: a quarter of the budget at most
                c.spec += ",window=" + std::to_string(std::min(64, c.budget / 4));
            }
            beaconkv_params bp = beaconkv_params_default();
            char err[256];
            if (beaconkv_params_parse(c.spec.c_str(), &bp, err, sizeof(err)) != BEACONKV_OK) {
                fprintf(stderr, "error: --configs entry '%s': %s\n", item.c_str(), err);
                return false;
            }
        }
        out.push_back(c);
    }
    return !out.empty();
}

// A context for one config; uncompressed when cfg.policy == "none".
struct run_ctx {
    config cfg;
    llama_context * ctx = nullptr;
    int32_t cells_peak = 0;
    double decode_ms = 0;
    ~run_ctx() { llama_free(ctx); }
};

std::unique_ptr<run_ctx> make_ctx(llama_model * model, const common_params & base, const config & cfg,
                                  uint32_t n_ctx, const std::string & extra_spec = "") {
    auto r = std::make_unique<run_ctx>();
    r->cfg = cfg;
    r->ctx = bkv_tools::make_context(model, base, cfg.policy == "none" ? "" : cfg.spec + extra_spec, n_ctx);
    if (!r->ctx) {
        fprintf(stderr, "error: cannot create a compressed context for '%s'\n", cfg.name.c_str());
        return nullptr;
    }
    return r;
}

bool decode_tokens(run_ctx & r, const llama_token * toks, int32_t n) {
    auto t0 = clock_type::now();
    const int ret = llama_decode(r.ctx, llama_batch_get_one(const_cast<llama_token *>(toks), n));
    r.decode_ms += std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
    if (ret != 0) {
        fprintf(stderr, "error: llama_decode returned %d for '%s'\n", ret, r.cfg.name.c_str());
        return false;
    }
    const int32_t cells = bkv_tools::seq_cells(r.ctx, 0);
    r.cells_peak = std::max(r.cells_peak, cells);
    return true;
}

void log_softmax(const float * logits, int n, std::vector<double> & out) {
    out.resize(n);
    double mx = logits[0];
    for (int i = 1; i < n; i++) {
        mx = std::max(mx, (double) logits[i]);
    }
    double sum = 0;
    for (int i = 0; i < n; i++) {
        sum += std::exp(logits[i] - mx);
    }
    const double lse = mx + std::log(sum);
    for (int i = 0; i < n; i++) {
        out[i] = logits[i] - lse;
    }
}

int argmax(const float * v, int n) {
    return (int) (std::max_element(v, v + n) - v);
}

struct plugin_numbers {
    uint64_t evicted = 0, events = 0;
    double ms = 0;
};

plugin_numbers plugin_stats(llama_context * ctx) {
    plugin_numbers p;
    const beaconkv_context * b = common_kv_compress_get(ctx);
    beaconkv_stats st{};
    if (b && beaconkv_get_stats(b, -1, &st) == BEACONKV_OK) {
        p.evicted = st.evicted;
        p.events = st.compress_events;
        p.ms = st.ms_capture + st.ms_score + st.ms_evict;
    }
    return p;
}

std::string json_escape(const std::string & s) {
    std::string o;
    for (unsigned char c : s) {
        if (c == '"' || c == '\\') {
            o += '\\';
            o += (char) c;
        } else if (c < 0x20) {
            char buf[8];
            snprintf(buf, sizeof(buf), "\\u%04x", c);
            o += buf;
        } else {
            o += (char) c;
        }
    }
    return o;
}

void progress(int done, int total) {
    fprintf(stderr, "progress %d/%d\n", done, total);
}

// Teacher forcing in lockstep. Scores every step from prompt_tokens-1 on; perplexity over
// [ppl_from, tokens.size()-1).
// With n_generate > 0 the reference continues the prompt greedily for n_generate tokens and every
// compressed context is fed those tokens (agreement with the uncompressed run's own output).
std::string run_lockstep(llama_model * model, const common_params & params, const std::vector<config> & cfgs,
                         std::vector<llama_token> tokens, int prompt_tokens, int ppl_from, int n_generate = 0) {
    if (n_generate > 0) {
        tokens.resize(prompt_tokens + n_generate, 0);
    }
    const int n_vocab = llama_vocab_n_tokens(llama_model_get_vocab(model));
    const uint32_t n_ctx = (uint32_t) tokens.size() + 8;
    config ref_cfg;
    ref_cfg.name = "none";
    ref_cfg.policy = "none";
    auto ref = make_ctx(model, params, ref_cfg, n_ctx);
    std::vector<std::unique_ptr<run_ctx>> runs;
    for (const config & c : cfgs) {
        if (c.policy != "none") {
            runs.push_back(make_ctx(model, params, c, n_ctx));
            if (!runs.back()) {
                return "";
            }
        }
    }
    if (!ref) {
        return "";
    }
    struct acc { double kl = 0, nll = 0; int64_t agree = 0, n = 0, n_ppl = 0; };
    std::vector<acc> accs(runs.size());
    acc ref_acc;
    std::vector<double> lp_ref, lp;

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
        return "";
    }
    const int total = (int) tokens.size() - 1;
    for (int t = prompt_tokens - 1; t < total; t++) {
        if (t >= prompt_tokens && !step(&tokens[t], 1)) {
            return "";
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
            a.agree += argmax(l, n_vocab) == top_ref;
            a.n++;
            if (t >= ppl_from) {
                a.nll -= lp[next];
                a.n_ppl++;
            }
        }
        if ((t + 1) % 64 == 0) {
            progress(t + 1, total);
        }
    }
    progress(total, total);

    std::ostringstream js;
    const double ppl_ref = ref_acc.n_ppl ? std::exp(ref_acc.nll / ref_acc.n_ppl) : 0;
    js << "{\"n_tokens\": " << tokens.size() << ", \"prompt_tokens\": " << prompt_tokens
       << ", \"ppl_from\": " << ppl_from << ", \"ppl_ref\": " << ppl_ref << ", \"results\": [";
    for (size_t i = 0; i < runs.size(); i++) {
        const acc & a = accs[i];
        const plugin_numbers pn = plugin_stats(runs[i]->ctx);
        js << (i ? ", " : "") << "{\"config\": \"" << json_escape(runs[i]->cfg.name) << "\", \"policy\": \""
           << runs[i]->cfg.policy << "\", \"budget\": " << runs[i]->cfg.budget
           << ", \"top1\": " << (a.n ? (double) a.agree / a.n : 0) << ", \"kl\": " << (a.n ? a.kl / a.n : 0)
           << ", \"ppl\": " << (a.n_ppl ? std::exp(a.nll / a.n_ppl) : 0) << ", \"ppl_ref\": " << ppl_ref
           << ", \"cells_peak\": " << runs[i]->cells_peak << ", \"evicted\": " << pn.evicted
           << ", \"compress_events\": " << pn.events << ", \"plugin_ms\": " << pn.ms
           << ", \"decode_ms\": " << runs[i]->decode_ms << "}";
    }
    js << "]}";
    return js.str();
}

std::string read_file(const std::string & path) {
    std::ifstream f(path);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

// Passkey retrieval: a number hidden at a depth of a long filler, asked for at the end.
std::string run_passkey(llama_model * model, const common_params & params, const std::vector<config> & cfgs,
                        const eval_args & a) {
    const llama_vocab * vocab = llama_model_get_vocab(model);
    const std::string filler = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. ";
    const std::string head = "There is an important info hidden inside a lot of irrelevant text. Find it and memorize it. "
                             "I will quiz you about the important information there.\n";
    const int n_filler_tok = (int) common_tokenize(vocab, filler, false).size();
    const std::vector<std::string> depths = split(a.depths, ',');
    std::ostringstream js;
    js << "{\"length\": " << a.length << ", \"results\": [";
    int done = 0;
    const int total = (int) (depths.size() * cfgs.size());
    bool first = true;
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
        for (const config & c : cfgs) {
            // Protect only the instruction: the haystack itself is what gets compressed.
            auto r = make_ctx(model, params, c, (uint32_t) toks.size() + 16, c.policy == "none" ? "" : ",prefix=" + std::to_string(std::min(32, c.budget / 4)));
            if (!r) {
                return "";
            }
            bool ok = true;
            for (size_t i = 0; i < toks.size() && ok; i += a.chunk) {
                ok = decode_tokens(*r, &toks[i], (int32_t) std::min<size_t>(a.chunk, toks.size() - i));
            }
            std::string answer;
            for (int g = 0; g < 8 && ok; g++) {
                llama_token t = argmax(llama_get_logits_ith(r->ctx, -1), llama_vocab_n_tokens(vocab));
                answer += common_token_to_piece(vocab, t);
                ok = decode_tokens(*r, &t, 1);
            }
            const bool found = ok && answer.find(std::to_string(key)) != std::string::npos;
            js << (first ? "" : ", ") << "{\"config\": \"" << json_escape(c.name) << "\", \"policy\": \"" << c.policy
               << "\", \"budget\": " << c.budget << ", \"depth\": " << depth << ", \"n_tokens\": " << toks.size()
               << ", \"found\": " << (found ? "true" : "false") << ", \"answer\": \"" << json_escape(answer)
               << "\", \"cells_peak\": " << r->cells_peak << "}";
            first = false;
            progress(++done, total);
        }
    }
    js << "]}";
    return js.str();
}

// Decode speed and memory against context length: greedy generation, ms/token measured over the
// 64 tokens before each checkpoint.
std::string run_speed(llama_model * model, const common_params & params, const std::vector<config> & cfgs,
                      const eval_args & a) {
    const llama_vocab * vocab = llama_model_get_vocab(model);
    const int n_vocab = llama_vocab_n_tokens(vocab);
    std::vector<int> lengths;
    for (const std::string & s : split(a.lengths, ',')) {
        lengths.push_back(std::atoi(s.c_str()));
    }
    const int max_len = *std::max_element(lengths.begin(), lengths.end());
    const std::vector<llama_token> prompt = common_tokenize(vocab, "Once upon a time, in a small village,", true);
    std::ostringstream js;
    js << "{\"results\": [";
    bool first = true;
    int done = 0;
    for (const config & c : cfgs) {
        // "none" with a budget = plain llama.cpp whose whole cache is that budget (the limit).
        const int limit = c.policy == "none" && c.budget > 0 ? c.budget : max_len + 8;
        auto r = make_ctx(model, params, c, (uint32_t) limit + 8);
        if (!r || !decode_tokens(*r, prompt.data(), (int32_t) prompt.size())) {
            return "";
        }
        int pos = (int) prompt.size();
        double window_ms = 0;
        int window_n = 0;
        for (; pos < std::min(limit, max_len); pos++) {
            llama_token t = argmax(llama_get_logits_ith(r->ctx, -1), n_vocab);
            const double before = r->decode_ms;
            if (!decode_tokens(*r, &t, 1)) {
                return "";
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
                const int32_t cells = bkv_tools::seq_cells(r->ctx, 0);
                js << (first ? "" : ", ") << "{\"config\": \"" << json_escape(c.name) << "\", \"policy\": \""
                   << c.policy << "\", \"budget\": " << c.budget << ", \"context\": " << pos + 1
                   << ", \"ms_per_token\": " << window_ms / window_n << ", \"cells\": " << cells
                   << ", \"cells_physical\": " << bkv_tools::physical_cells(r->ctx)
                   << ", \"kv_bytes_per_cell\": " << bkv_tools::bytes_per_cell(r->ctx, model, params)
                   << ", \"plugin_ms\": " << pn.ms << ", \"decode_ms\": " << r->decode_ms << "}";
                first = false;
            }
        }
        progress(++done, (int) cfgs.size());
    }
    js << "]}";
    return js.str();
}

}  // namespace

int main(int argc, char ** argv) {
    eval_args a;
    if (!take_eval_args(argc, argv, a)) {
        return 1;
    }
    common_params params;
    if (!common_params_parse(argc, argv, params, LLAMA_EXAMPLE_PERPLEXITY)) {
        return 1;
    }
    std::vector<config> cfgs;
    if (!parse_configs(a.configs, cfgs)) {
        return 1;
    }
    common_init();
    llama_backend_init();
    // Load the model only: every config gets its own context.
    params.kv_compress_spec.clear();
    common_init_result_ptr init = common_init_from_params(params, /*model_only=*/true);
    llama_model * model = init->model();
    if (!model) {
        fprintf(stderr, "error: failed to load the model\n");
        return 1;
    }
    const llama_vocab * vocab = llama_model_get_vocab(model);

    std::string result;
    if (a.mode == "generate") {
        // the uncompressed run continues the prompt greedily; compressed runs are fed its tokens
        const std::string text = a.text_file.empty() ? params.prompt : read_file(a.text_file);
        std::vector<llama_token> prompt = common_tokenize(vocab, text, true, true);
        if (prompt.empty()) {
            fprintf(stderr, "error: --mode generate needs -p PROMPT or --text FILE\n");
            return 1;
        }
        result = run_lockstep(model, params, cfgs, prompt, (int) prompt.size(), (int) prompt.size(), a.n_tokens);
    } else if (a.mode == "agree" || a.mode == "revisit") {
        if (a.text_file.empty()) {
            fprintf(stderr, "error: --mode %s needs --text FILE\n", a.mode.c_str());
            return 1;
        }
        std::vector<llama_token> text = common_tokenize(vocab, read_file(a.text_file), true);
        std::vector<llama_token> toks;
        int ppl_from = 0;
        if (a.mode == "agree") {
            toks.assign(text.begin(), text.begin() + std::min<size_t>(text.size(), a.n_tokens));
            ppl_from = a.prompt_tokens;
        } else {
            // passage, then `gap` tokens of other text, then the passage again (scored).
            if ((int) text.size() < a.passage + a.gap) {
                fprintf(stderr, "error: --text has %zu tokens, revisit needs --passage + --gap = %d\n", text.size(),
                        a.passage + a.gap);
                return 1;
            }
            toks.assign(text.begin(), text.begin() + a.passage + a.gap);
            toks.insert(toks.end(), text.begin() + 1, text.begin() + a.passage);
            ppl_from = a.passage + a.gap;
        }
        if ((int) toks.size() <= a.prompt_tokens + 1) {
            fprintf(stderr, "error: text too short (%zu tokens)\n", toks.size());
            return 1;
        }
        result = run_lockstep(model, params, cfgs, toks, a.prompt_tokens, ppl_from);
    } else if (a.mode == "passkey") {
        result = run_passkey(model, params, cfgs, a);
    } else if (a.mode == "speed") {
        result = run_speed(model, params, cfgs, a);
    } else {
        fprintf(stderr, "error: --mode must be agree, generate, revisit, passkey or speed (got '%s')\n", a.mode.c_str());
        return 1;
    }
    if (result.empty()) {
        return 1;
    }
    result = "{\"mode\": \"" + a.mode + "\", " + result.substr(1);
    if (a.out.empty()) {
        printf("%s\n", result.c_str());
    } else {
        std::ofstream(a.out) << result << "\n";
    }
    return 0;
}
