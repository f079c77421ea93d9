// beaconkv-eval: measurements behind the benchmark (`beaconkv-bench` drives it and plots).
//
//   beaconkv-eval --mode agree   --text FILE [--n-tokens N] [--prompt-tokens P] --configs LIST ...
//   beaconkv-eval --mode revisit --text FILE [--passage N] [--gap N] --configs LIST ...
//   beaconkv-eval --mode generate -p PROMPT [--n-tokens N] --configs LIST ...   (greedy reference)
//   beaconkv-eval --mode passkey [--length N] [--depths 0.1,0.5,0.9] [--chunk N] --configs LIST ...
//   beaconkv-eval --mode speed   [--lengths 1024,2048] [--prompt-len N] --configs LIST ...
//   beaconkv-eval --mode task    --tasks FILE.jsonl [--chunk N] --configs LIST ...   (long-context tasks)
//   beaconkv-eval --mode trace   --tasks FILE.jsonl [--n-tokens N] [--chunk N] [--bucket N] [--free-max N]
//                                --configs LIST ...   (own-trace fidelity)
//   beaconkv-eval --mode reason  --tasks FILE.jsonl [--n-tokens N] [--chunk N] [-np N] --configs LIST ...
//                                (multi-turn chain-of-thought conversations, -np of them decoded together;
//                                one JSON line per finished conversation on stdout)
//   beaconkv-eval --mode count   --tasks FILE.jsonl   (token counts of task documents)
//   beaconkv-eval --mode configs --configs LIST   (check the configs and print their specs; no model)
//   common llama.cpp flags (-m, -t, -fa, -ctk, ...) as usual; --out FILE.json for the results;
//   agree/revisit: --per-token FILE.csv writes every scored step (per config: NLL, top-1, cells recalled).
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

#include <nlohmann/json.hpp>

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
    std::string tasks;  // task/trace: JSONL input
    int bucket = 256;   // trace: position bucket of the per-bucket numbers
    int free_max = 0;   // trace: longest free run (0 = --n-tokens)
    int prompt_len = 0; // speed: also time a prompt of this many tokens per config (0 = no)
    std::string per_token; // agree/revisit: CSV of every scored step (NLL per config, recalled so far)
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
        {"--depths", &a.depths}, {"--lengths", &a.lengths}, {"--tasks", &a.tasks},
        {"--per-token", &a.per_token}};
    const std::map<std::string, int *> ints = {{"--n-tokens", &a.n_tokens}, {"--prompt-tokens", &a.prompt_tokens},
                                               {"--passage", &a.passage},   {"--gap", &a.gap},
                                               {"--length", &a.length},     {"--chunk", &a.chunk},
                                               {"--bucket", &a.bucket},     {"--free-max", &a.free_max},
                                               {"--prompt-len", &a.prompt_len}};
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
    std::string policy;  // none = uncompressed; "beacon+archive", "beacon+archive_q8_0": with the archive
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
            // "P+archive[_TYPE]": policy P with the archive (8 x budget cells unless archive= is given)
            std::string policy = c.policy, archive_type;
            const size_t plus = policy.find("+archive");
            if (plus != std::string::npos) {
                archive_type = policy.size() > plus + 8 && policy[plus + 8] == '_' ? policy.substr(plus + 9) : "same";
                policy = policy.substr(0, plus);
            }
            c.spec = "policy=" + policy + ",budget=" + std::to_string(c.budget);
            bool has_window = false, has_archive = false;
            for (size_t i = 1; i < parts.size(); i++) {
                c.spec += "," + parts[i];
                has_window |= parts[i].rfind("window=", 0) == 0;
                has_archive |= parts[i].rfind("archive=", 0) == 0;
            }
            if (!archive_type.empty()) {
                c.spec += ",archive_type=" + archive_type;
                if (!has_archive) {
                    c.spec += ",archive=" + std::to_string(8 * c.budget);
                }
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

// Decodes n tokens, in pieces of at most the context's n_batch (a compressed context may have a
// small one: common_kv_compress_adjust caps it at n_ubatch).
bool decode_tokens(run_ctx & r, const llama_token * toks, int32_t n) {
    const int32_t n_batch = std::max<int32_t>(1, (int32_t) llama_n_batch(r.ctx));
    for (int32_t i = 0; i < n; i += n_batch) {
        const int32_t m = std::min(n_batch, n - i);
        auto t0 = clock_type::now();
        const int ret = llama_decode(r.ctx, llama_batch_get_one(const_cast<llama_token *>(toks + i), m));
        r.decode_ms += std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
        if (ret != 0) {
            fprintf(stderr, "error: llama_decode returned %d for '%s'\n", ret, r.cfg.name.c_str());
            return false;
        }
        const int32_t cells = bkv_tools::seq_cells(r.ctx, 0);
        r.cells_peak = std::max(r.cells_peak, cells);
    }
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
    uint64_t recalled = 0, archived = 0, archive_bytes = 0;
    double ms = 0;
    double ms_capture = 0, ms_score = 0, ms_evict = 0, ms_recall = 0;
    uint64_t reads_pass = 0, bytes_pass = 0, reads_capture = 0, bytes_capture = 0, n_tokens = 0;
};

plugin_numbers plugin_stats(llama_context * ctx) {
    plugin_numbers p;
    const beaconkv_context * b = common_kv_compress_get(ctx);
    beaconkv_stats st{};
    if (b && beaconkv_get_stats(b, -1, &st) == BEACONKV_OK) {
        p.evicted = st.evicted;
        p.events = st.compress_events;
        p.ms = st.ms_capture + st.ms_score + st.ms_evict + st.ms_recall;
        p.ms_capture = st.ms_capture;
        p.ms_score = st.ms_score;
        p.ms_evict = st.ms_evict;
        p.ms_recall = st.ms_recall;
        p.recalled = st.recalled;
        p.archived = st.archived;
        p.archive_bytes = st.archive_bytes;
        p.reads_pass = st.reads_pass;
        p.bytes_pass = st.bytes_pass;
        p.reads_capture = st.reads_capture;
        p.bytes_capture = st.bytes_capture;
        p.n_tokens = st.n_tokens;
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
                         std::vector<llama_token> tokens, int prompt_tokens, int ppl_from, int n_generate = 0,
                         const std::string & per_token = "") {
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
    // --per-token: one line per step from ppl_from on (where a recall helps or comes too late)
    FILE * trace = nullptr;
    if (!per_token.empty()) {
        trace = fopen(per_token.c_str(), "w");
        if (!trace) {
            fprintf(stderr, "error: cannot write --per-token %s\n", per_token.c_str());
            return "";
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
           << ", \"recalled\": " << pn.recalled << ", \"archived\": " << pn.archived
           << ", \"archive_bytes\": " << pn.archive_bytes
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

// Positions in [p0, p1) that sequence 0 holds in the cache (every position of the range when no
// plugin is attached: an uncompressed cache has no holes).
int kept_in_range(llama_context * ctx, int p0, int p1) {
    const int32_t n = llama_kv_plugin_seq_cells(ctx, 0, nullptr, nullptr, 0, nullptr);
    if (n < 0) {
        return p1 - p0;
    }
    std::vector<llama_pos> pos(n);
    std::vector<uint32_t>  cells(n);
    uint32_t               stream = 0;
    const int32_t          got = llama_kv_plugin_seq_cells(ctx, 0, pos.data(), cells.data(), n, &stream);
    int                    kept = 0;
    for (int32_t i = 0; i < std::min(got, n); i++) {
        kept += pos[i] >= p0 && pos[i] < p1;
    }
    return kept;
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
        // the needle's token span (tokenising the text up to it and through it)
        const size_t at = text.find(needle);
        const int needle_begin = (int) common_tokenize(vocab, text.substr(0, at), true).size();
        const int needle_end = (int) common_tokenize(vocab, text.substr(0, at + needle.size()), true).size();
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
            js << (first ? "" : ", ") << "{\"config\": \"" << json_escape(c.name) << "\", \"policy\": \"" << c.policy
               << "\", \"budget\": " << c.budget << ", \"depth\": " << depth << ", \"n_tokens\": " << toks.size()
               << ", \"found\": " << (found ? "true" : "false") << ", \"answer\": \"" << json_escape(answer)
               << "\", \"cells_peak\": " << r->cells_peak << ", \"needle_tokens\": " << needle_end - needle_begin
               << ", \"needle_kept\": " << needle_kept << "}";
            first = false;
            progress(++done, total);
        }
    }
    js << "]}";
    return js.str();
}

// Prompt processing: one prompt of n tokens decoded as the application would (n_batch pieces,
// n_ubatch physical batches: a compressed context clamps n_ubatch), in a fresh context per config;
// "none:B" (a plain cache of B cells) cannot hold it and is skipped.
std::string run_prompt_speed(llama_model * model, const common_params & params, const std::vector<config> & cfgs,
                             int n) {
    const llama_vocab * vocab = llama_model_get_vocab(model);
    std::string text;
    std::vector<llama_token> toks;
    for (int i = 0; (int) toks.size() < n; i++) {
        text += "Entry " + std::to_string(i) + ": the keeper logged the wind, the tide and the oil left in the lamp. ";
        toks = common_tokenize(vocab, text, true);
    }
    toks.resize(n);
    std::ostringstream js;
    bool first = true;
    for (const config & c : cfgs) {
        if (c.policy == "none" && c.budget > 0) {
            continue;
        }
        auto r = make_ctx(model, params, c, (uint32_t) n + 16);
        if (!r || !decode_tokens(*r, toks.data(), n)) {
            return "";
        }
        const plugin_numbers pn = plugin_stats(r->ctx);
        js << (first ? "" : ", ") << "{\"config\": \"" << json_escape(c.name) << "\", \"policy\": \"" << c.policy
           << "\", \"budget\": " << c.budget << ", \"prompt_tokens\": " << n
           << ", \"n_ubatch\": " << llama_n_ubatch(r->ctx) << ", \"prompt_ms\": " << r->decode_ms
           << ", \"plugin_ms\": " << pn.ms << ", \"cells\": " << bkv_tools::seq_cells(r->ctx, 0) << "}";
        first = false;
    }
    return js.str();
}

// Decode speed and memory against context length: greedy generation, ms/token measured over the
// 64 tokens before each checkpoint; with --prompt-len, prompt speed too (run_prompt_speed).
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
                   << ", \"plugin_ms\": " << pn.ms << ", \"plugin_ms_capture\": " << pn.ms_capture
                   << ", \"plugin_ms_score\": " << pn.ms_score << ", \"plugin_ms_evict\": " << pn.ms_evict
                   << ", \"plugin_ms_recall\": " << pn.ms_recall << ", \"archived\": " << pn.archived
                   << ", \"archive_bytes\": " << pn.archive_bytes << ", \"decode_ms\": " << r->decode_ms
                   << ", \"scoring\": \"" << json_escape(common_kv_compress_scoring_path(r->ctx)) << "\""
                   << ", \"compress_events\": " << pn.events << ", \"reads_pass\": " << pn.reads_pass
                   << ", \"bytes_pass\": " << pn.bytes_pass << ", \"reads_capture\": " << pn.reads_capture
                   << ", \"bytes_capture\": " << pn.bytes_capture << ", \"n_tokens\": " << pn.n_tokens << "}";
                first = false;
            }
        }
        progress(++done, (int) cfgs.size());
    }
    js << "]";
    if (a.prompt_len > 0) {
        const std::string prompt = run_prompt_speed(model, params, cfgs, a.prompt_len);
        if (prompt.empty()) {
            return "";
        }
        js << ", \"prompt\": [" << prompt << "]";
    }
    js << "}";
    return js.str();
}


// ---- task and trace modes ------------------------------------------------------------------------

// A user turn "doc + question" in the chat template, split into the part before the question
// (prefilled once, then shared by every question) and the question with the template's tail.
void template_split(const llama_model * model, const std::string & doc, std::string & pre, std::string & post) {
    const std::string mark = "@@BEACONKV_QUESTION@@";
    const std::string t = bkv_tools::apply_chat_template(model, doc + mark);
    const size_t at = t.find(mark);
    if (at == std::string::npos) {
        pre = doc;
        post.clear();
        return;
    }
    pre = t.substr(0, at);
    post = t.substr(at + mark.size());
}

std::vector<nlohmann::json> read_jsonl(const std::string & path) {
    std::vector<nlohmann::json> out;
    std::ifstream f(path);
    if (!f) {
        fprintf(stderr, "error: cannot read %s\n", path.c_str());
        return out;
    }
    int n = 0;
    for (std::string line; std::getline(f, line);) {
        n++;
        if (line.find_first_not_of(" \t\r") == std::string::npos) {
            continue;
        }
        try {
            out.push_back(nlohmann::json::parse(line));
        } catch (const std::exception & e) {
            fprintf(stderr, "error: %s line %d: %s\n", path.c_str(), n, e.what());
            return {};
        }
    }
    return out;
}

std::string dump_json(const nlohmann::json & j) {
    // generated text can end inside a multi-byte character: replace, never throw
    return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

// Chunk of tokens per decode call of a compressed context: at most `chunk`, and budget/8 (the
// default hysteresis gap, budget - min) so that compression runs at the cadence of decoding.
int compressed_chunk(const config & c, int chunk) {
    return std::max(1, std::min(chunk, c.budget / 8));
}

bool decode_chunked(run_ctx & r, const std::vector<llama_token> & toks, int chunk) {
    for (size_t i = 0; i < toks.size(); i += chunk) {
        if (!decode_tokens(r, &toks[i], (int32_t) std::min<size_t>(chunk, toks.size() - i))) {
            return false;
        }
    }
    return true;
}

// Greedy decoding from the context's last logits: up to max_tokens tokens or an end-of-generation
// token (stopped = true); the last token is not decoded.
bool greedy_answer(run_ctx & r, const llama_vocab * vocab, int max_tokens, std::vector<llama_token> & gen,
                   bool & stopped) {
    const int n_vocab = llama_vocab_n_tokens(vocab);
    stopped = false;
    for (int g = 0; g < max_tokens; g++) {
        llama_token t = argmax(llama_get_logits_ith(r.ctx, -1), n_vocab);
        if (llama_vocab_is_eog(vocab, t)) {
            stopped = true;
            break;
        }
        gen.push_back(t);
        if (g + 1 < max_tokens && !decode_tokens(r, &t, 1)) {
            return false;
        }
    }
    return true;
}

// Synthetic long-context tasks (the bench generates them): each line of --tasks is a document
// {"id", "doc", "questions": [{"q", "max_tokens"}, ...]}. Per config the document is prefilled
// once (in chunks, compressing as it goes), its sequence state saved; every question then starts
// from that state, is decoded and answered greedily (up to max_tokens or an end-of-generation
// token). Scoring is the bench's.
std::string run_task(llama_model * model, const common_params & params, const std::vector<config> & cfgs,
                     const eval_args & a) {
    const llama_vocab * vocab = llama_model_get_vocab(model);
    const std::vector<nlohmann::json> docs = read_jsonl(a.tasks);
    if (docs.empty()) {
        fprintf(stderr, "error: --mode task needs --tasks FILE.jsonl with at least one document\n");
        return "";
    }
    nlohmann::json results = nlohmann::json::array();
    const int total = (int) (docs.size() * cfgs.size());
    int done = 0;
    for (const nlohmann::json & d : docs) {
        const std::string id = d.value("id", std::to_string(done));
        std::string pre, post;
        template_split(model, d.value("doc", std::string()), pre, post);
        const std::vector<llama_token> doc_toks = common_tokenize(vocab, pre, true, true);
        std::vector<std::vector<llama_token>> q_toks;
        std::vector<int> q_max;
        int need = 0;
        for (const nlohmann::json & q : d.value("questions", nlohmann::json::array())) {
            q_toks.push_back(common_tokenize(vocab, q.value("q", std::string()) + post, false, true));
            q_max.push_back(std::max(1, q.value("max_tokens", 32)));
            need = std::max(need, (int) q_toks.back().size() + q_max.back());
        }
        if (doc_toks.empty() || q_toks.empty()) {
            fprintf(stderr, "error: --tasks document '%s' has no text or no questions\n", id.c_str());
            return "";
        }
        for (const config & c : cfgs) {
            const bool compressed = c.policy != "none";
            // Protect only the instruction: the haystack itself is what gets compressed.
            const std::string extra = compressed ? ",prefix=" + std::to_string(std::min(32, c.budget / 4)) : "";
            auto r = make_ctx(model, params, c, (uint32_t) (doc_toks.size() + need + 16), extra);
            if (!r) {
                return "";
            }
            const int chunk = compressed ? compressed_chunk(c, a.chunk) : std::max(1, params.n_ubatch);
            if (!decode_chunked(*r, doc_toks, chunk)) {
                return "";
            }
            const double prefill_ms = r->decode_ms;
            const int32_t cells_doc = bkv_tools::seq_cells(r->ctx, 0);
            // the state after the document, restored before every question but the first
            std::vector<uint8_t> kv_state, plugin_state;
            if (q_toks.size() > 1 && compressed) {
                kv_state.resize(llama_state_seq_get_size(r->ctx, 0));
                if (llama_state_seq_get_data(r->ctx, kv_state.data(), kv_state.size(), 0) != kv_state.size()) {
                    fprintf(stderr, "error: llama_state_seq_get_data failed for '%s'\n", c.name.c_str());
                    return "";
                }
                const beaconkv_context * b = common_kv_compress_get(r->ctx);
                if (b) {
                    plugin_state.resize(beaconkv_seq_state_size(b, 0));
                    if (plugin_state.empty() ||
                        beaconkv_seq_state_get(b, 0, plugin_state.data(), plugin_state.size()) !=
                            (int64_t) plugin_state.size()) {
                        fprintf(stderr, "error: beaconkv_seq_state_get: %s\n", beaconkv_last_error(b));
                        return "";
                    }
                }
            }
            for (size_t qi = 0; qi < q_toks.size(); qi++) {
                llama_memory_t mem = llama_get_memory(r->ctx);
                if (qi > 0) {
                    if (!compressed) {
                        llama_memory_seq_rm(mem, 0, (llama_pos) doc_toks.size(), -1);
                    } else {
                        llama_memory_seq_rm(mem, 0, -1, -1);
                        if (llama_state_seq_set_data(r->ctx, kv_state.data(), kv_state.size(), 0) != kv_state.size()) {
                            fprintf(stderr, "error: llama_state_seq_set_data failed for '%s'\n", c.name.c_str());
                            return "";
                        }
                        beaconkv_context * b = common_kv_compress_get(r->ctx);
                        if (b && !plugin_state.empty() &&
                            beaconkv_seq_state_set(b, 0, plugin_state.data(), plugin_state.size()) != BEACONKV_OK) {
                            fprintf(stderr, "error: beaconkv_seq_state_set: %s\n", beaconkv_last_error(b));
                            return "";
                        }
                    }
                }
                const double q0 = r->decode_ms;
                if (!decode_chunked(*r, q_toks[qi], chunk)) {
                    return "";
                }
                std::vector<llama_token> gen;
                bool stopped = false;
                if (!greedy_answer(*r, vocab, q_max[qi], gen, stopped)) {
                    return "";
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
    return dump_json({{"results", results}});
}

// ---- reason mode: multi-turn conversations, decoded together ---------------------------------------

// A conversation rendered by the model's chat template; without one, "role: text" paragraphs.
std::string render_chat(const llama_model * model, const std::vector<std::pair<std::string, std::string>> & msgs,
                        bool add_assistant) {
    const char * tmpl = llama_model_chat_template(model, nullptr);
    if (!tmpl) {
        std::string out;
        for (const auto & m : msgs) {
            out += m.first + ": " + m.second + "\n\n";
        }
        return add_assistant ? out + "assistant: " : out;
    }
    std::vector<llama_chat_message> cm;
    size_t len = 512;
    for (const auto & m : msgs) {
        cm.push_back({m.first.c_str(), m.second.c_str()});
        len += 2 * (m.first.size() + m.second.size());
    }
    std::vector<char> buf(len);
    int32_t n = llama_chat_apply_template(tmpl, cm.data(), cm.size(), add_assistant, buf.data(), (int32_t) buf.size());
    if (n > (int32_t) buf.size()) {
        buf.resize(n);
        n = llama_chat_apply_template(tmpl, cm.data(), cm.size(), add_assistant, buf.data(), (int32_t) buf.size());
    }
    return n < 0 ? std::string() : std::string(buf.data(), n);
}

// One conversation of `--mode reason` in one sequence: its turns, where it is, what it produced.
struct reason_seq {
    int conversation = -1;                    // index into the conversations; -1 = the sequence is free
    size_t turn = 0;                     // the turn being prompted or answered
    std::vector<std::pair<std::string, std::string>> msgs;  // the conversation so far
    std::string rendered;                // the conversation as fed (through the assistant header)
    std::vector<llama_token> feed;       // prompt tokens of this turn not fed yet
    size_t fed = 0;
    bool generating = false;
    llama_token next = 0;                // generating: the token fed in the next call
    std::vector<llama_token> gen;        // this turn's answer
    llama_pos pos = 0;
    int n_prompt = 0;                    // this turn's prompt tokens
    int32_t cells_peak = 0;
    clock_type::time_point started;
    nlohmann::json turns = nlohmann::json::array();
};

// Multi-turn chain-of-thought conversations (the bench generates them): each line of --tasks is
// {"id", "system" (optional), "turns": ["...", ...]}. Per config, -np conversations run at once, one
// sequence each in one context (its own stream and its own compression state, the same budget):
// every llama_decode call carries one token per answering sequence and a chunk of the prompt of
// each sequence whose turn is being prompted. A turn's prompt is what the chat template adds to
// the conversation so far (the previous answer's end, the new user turn, the assistant header);
// the answer is greedy, up to --n-tokens tokens or an end-of-generation token. A finished conversation
// prints one JSON line on stdout at once and its sequence takes the next conversation. Scoring is the
// bench's.
std::string run_reason(llama_model * model, const common_params & params, const std::vector<config> & cfgs,
                       const eval_args & a) {
    const llama_vocab * vocab = llama_model_get_vocab(model);
    const int n_vocab = llama_vocab_n_tokens(vocab);
    const std::vector<nlohmann::json> conversations = read_jsonl(a.tasks);
    if (conversations.empty()) {
        fprintf(stderr, "error: --mode reason needs --tasks FILE.jsonl with at least one conversation\n");
        return "";
    }
    if (a.n_tokens < 1) {
        fprintf(stderr, "error: --n-tokens must be at least 1, got %d\n", a.n_tokens);
        return "";
    }
    const int n_par = std::max(1, std::min<int>(params.n_parallel, (int) conversations.size()));
    // each conversation's turns as text; the most tokens one sequence can reach
    std::vector<std::string> ids, systems;
    std::vector<std::vector<std::string>> turn_text;
    size_t most = 0;
    for (size_t i = 0; i < conversations.size(); i++) {
        const nlohmann::json & s = conversations[i];
        ids.push_back(s.value("id", std::to_string(i)));
        systems.push_back(s.value("system", std::string()));
        std::vector<std::string> t;
        for (const nlohmann::json & x : s.value("turns", nlohmann::json::array())) {
            t.push_back(x.is_string() ? x.get<std::string>() : std::string());
            if (t.back().empty()) {
                fprintf(stderr, "error: --tasks conversation '%s': turn %zu is not a non-empty string\n", ids.back().c_str(),
                        t.size());
                return "";
            }
        }
        if (t.empty()) {
            fprintf(stderr, "error: --tasks conversation '%s' has no turns\n", ids.back().c_str());
            return "";
        }
        // the conversation with empty answers, plus every answer at its cap and a margin per turn
        std::vector<std::pair<std::string, std::string>> conv;
        if (!systems.back().empty()) {
            conv.push_back({"system", systems.back()});
        }
        for (const std::string & x : t) {
            conv.push_back({"user", x});
            conv.push_back({"assistant", ""});
        }
        const size_t n_conv = common_tokenize(vocab, render_chat(model, conv, false), true, true).size();
        most = std::max(most, n_conv + t.size() * ((size_t) a.n_tokens + 16) + 64);
        turn_text.push_back(std::move(t));
    }
    common_params p = params;
    p.n_parallel = n_par;

    nlohmann::json results = nlohmann::json::array();
    nlohmann::json runs = nlohmann::json::array();
    // progress counts turns
    int total = 0;
    for (const auto & t : turn_text) {
        total += (int) (t.size() * cfgs.size());
    }
    int done = 0;
    for (const config & c : cfgs) {
        const bool compressed = c.policy != "none";
        auto r = make_ctx(model, p, c, (uint32_t) (n_par * (most + 16)));
        if (!r) {
            return "";
        }
        llama_context * ctx = r->ctx;
        llama_memory_t mem = llama_get_memory(ctx);
        const int n_batch = std::max<int>(1, (int) llama_n_batch(ctx));
        // at least 2: a prompt is never split so that a call brings its sequence a single token
        const int chunk = std::max(2, compressed ? compressed_chunk(c, a.chunk) : a.chunk);
        if (n_batch < n_par + 2) {
            fprintf(stderr, "error: '%s': a decode call holds %d tokens, fewer than -np %d sequences + 2\n",
                    c.name.c_str(), n_batch, n_par);
            return "";
        }
        std::vector<reason_seq> seqs(n_par);
        size_t next_conversation = 0;
        uint64_t n_gen_all = 0, n_prompt_all = 0, n_calls = 0;
        double decode_ms = 0;
        const auto t_start = clock_type::now();

        auto tokenize_turn = [&](reason_seq & s, const std::string & text, bool first) {
            s.feed = common_tokenize(vocab, text, first, true);
            s.fed = 0;
            s.n_prompt = (int) s.feed.size();
            s.generating = false;
            s.gen.clear();
        };
        // the sequence takes the next conversation, if any
        auto start = [&](int seq) {
            reason_seq & s = seqs[seq];
            s = reason_seq();
            if (next_conversation >= conversations.size()) {
                return;
            }
            s.conversation = (int) next_conversation++;
            s.started = clock_type::now();
            if (!systems[s.conversation].empty()) {
                s.msgs.push_back({"system", systems[s.conversation]});
            }
            s.msgs.push_back({"user", turn_text[s.conversation][0]});
            s.rendered = render_chat(model, s.msgs, true);
            tokenize_turn(s, s.rendered, true);
        };
        // the turn's answer is done: record it, then prompt the next turn or finish the conversation
        auto end_turn = [&](int seq, bool stopped) -> bool {
            reason_seq & s = seqs[seq];
            const std::string out = common_detokenize(vocab, s.gen, false);
            s.turns.push_back({{"n_prompt", s.n_prompt}, {"n_gen", (int) s.gen.size()}, {"stopped", stopped},
                               {"output", out}});
            n_gen_all += s.gen.size();
            s.turn++;
            progress(++done, total);
            const std::vector<std::string> & t = turn_text[s.conversation];
            if (s.turn < t.size()) {
                // what the template puts after an answer, then the next user turn and the assistant header
                const std::string before = s.rendered + out;
                s.msgs.push_back({"assistant", out});
                const std::string closed = render_chat(model, s.msgs, false);
                s.msgs.push_back({"user", t[s.turn]});
                const std::string next = render_chat(model, s.msgs, true);
                if (closed.compare(0, before.size(), before) != 0 || next.compare(0, closed.size(), closed) != 0) {
                    fprintf(stderr,
                            "error: conversation '%s' turn %zu: the model's chat template does not extend the "
                            "conversation by appending (it rewrites earlier turns)\n",
                            ids[s.conversation].c_str(), s.turn + 1);
                    return false;
                }
                s.rendered = next;
                tokenize_turn(s, closed.substr(before.size()) + next.substr(closed.size()), false);
                return true;
            }
            // the conversation is done: its line, then the sequence is cleared for the next one
            nlohmann::json row = {{"id", ids[s.conversation]}, {"config", c.name}, {"policy", c.policy},
                                  {"budget", c.budget}, {"turns", s.turns}};
            int n_prompt = 0, n_gen = 0;
            for (const nlohmann::json & x : s.turns) {
                n_prompt += x["n_prompt"].get<int>();
                n_gen += x["n_gen"].get<int>();
            }
            beaconkv_stats st{};
            const beaconkv_context * b = common_kv_compress_get(ctx);
            if (b) {
                beaconkv_get_stats(b, seq, &st);
            }
            row["n_prompt"] = n_prompt;
            row["n_gen"] = n_gen;
            row["cells_peak"] = s.cells_peak;
            row["prefix_len"] = st.prefix_len;
            row["evicted"] = st.evicted;
            row["compress_events"] = st.compress_events;
            row["recalled"] = st.recalled;
            row["seconds"] = std::chrono::duration<double>(clock_type::now() - s.started).count();
            printf("%s\n", dump_json(row).c_str());
            fflush(stdout);
            results.push_back(row);
            llama_memory_seq_rm(mem, seq, -1, -1);
            start(seq);
            return true;
        };
        for (int i = 0; i < n_par; i++) {
            llama_memory_seq_rm(mem, i, -1, -1);
            start(i);
        }
        llama_batch batch = llama_batch_init(n_batch, 0, 1);
        struct row_of { int seq; int32_t i; bool prompt_done; };
        std::vector<row_of> rows;
        bool ok = true;
        while (ok) {
            bkv_tools::batch_clear(batch);
            rows.clear();
            // one token per answering sequence first, so that every one of them fits
            int room = n_batch;
            for (int i = 0; i < n_par; i++) {
                room -= seqs[i].conversation >= 0 && seqs[i].generating;
            }
            // in sequence order (llama.cpp splits a batch of several streams by consecutive sequences)
            for (int i = 0; i < n_par; i++) {
                reason_seq & s = seqs[i];
                if (s.conversation < 0) {
                    continue;
                }
                if (s.generating) {
                    rows.push_back({i, batch.n_tokens, false});
                    bkv_tools::batch_add(batch, s.next, s.pos++, {i}, true);
                    continue;
                }
                const int left = (int) (s.feed.size() - s.fed);
                int n = std::min({chunk, left, room});
                // never leave a one-token rest: a call bringing a sequence one token ends its prompt
                if (left - n == 1) {
                    n += n + 1 <= room ? 1 : -1;
                }
                if (n <= 0 || (n == 1 && left > 1)) {
                    continue;  // no room in this call; a later one has it
                }
                for (int k = 0; k < n; k++) {
                    const bool last = s.fed + 1 == s.feed.size();
                    bkv_tools::batch_add(batch, s.feed[s.fed++], s.pos++, {i}, last);
                    if (last) {
                        rows.push_back({i, batch.n_tokens - 1, true});
                    }
                }
                n_prompt_all += n;
                room -= n;
            }
            if (batch.n_tokens == 0) {
                break;  // every conversation is done (a prompting sequence always finds room)
            }
            const auto t0 = clock_type::now();
            const int ret = llama_decode(ctx, batch);
            decode_ms += std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
            n_calls++;
            if (ret != 0) {
                fprintf(stderr, "error: llama_decode returned %d for '%s'\n", ret, c.name.c_str());
                ok = false;
                break;
            }
            for (int i = 0; i < n_par; i++) {
                if (seqs[i].conversation >= 0) {
                    seqs[i].cells_peak = std::max(seqs[i].cells_peak, bkv_tools::seq_cells(ctx, i));
                }
            }
            for (const row_of & x : rows) {
                reason_seq & s = seqs[x.seq];
                if (s.gen.size() >= (size_t) a.n_tokens) {
                    ok = end_turn(x.seq, false);
                } else {
                    const llama_token t = argmax(llama_get_logits_ith(ctx, x.i), n_vocab);
                    if (llama_vocab_is_eog(vocab, t)) {
                        ok = end_turn(x.seq, true);
                    } else {
                        s.gen.push_back(t);
                        s.next = t;
                        s.generating = true;
                    }
                }
                if (!ok) {
                    break;
                }
            }
        }
        llama_batch_free(batch);
        if (!ok) {
            return "";
        }
        const double wall = std::chrono::duration<double>(clock_type::now() - t_start).count();
        const plugin_numbers pn = plugin_stats(ctx);
        runs.push_back({{"config", c.name},
                        {"parallel", n_par},
                        {"conversations", (int) conversations.size()},
                        {"n_gen", n_gen_all},
                        {"n_prompt", n_prompt_all},
                        {"decode_calls", n_calls},
                        {"decode_ms", decode_ms},
                        {"plugin_ms", pn.ms},
                        {"seconds", wall},
                        {"gen_tok_s", wall > 0 ? n_gen_all / wall : 0.0}});
        fprintf(stderr, "%s: %zu conversations, -np %d: %llu tokens generated, %llu prompt tokens in %.1f s (%.1f generated tok/s)\n",
                c.name.c_str(), conversations.size(), n_par, (unsigned long long) n_gen_all,
                (unsigned long long) n_prompt_all, wall, wall > 0 ? n_gen_all / wall : 0.0);
    }
    return dump_json({{"runs", runs}, {"results", results}});
}

// Own-trace fidelity. Per prompt (each line of --tasks: {"id", "prompt"}): the uncompressed model
// answers greedily for --n-tokens tokens (end-of-generation tokens masked), one token at a time;
// then every config is teacher-forced on that trace in lockstep with an uncompressed reference
// (chunks of --chunk tokens, aligned so that compression runs exactly where decoding would run it),
// giving top-1 agreement with the trace and KL(reference || config) per position bucket; last,
// each compressed config runs free (greedy, one token at a time) until its first token that
// differs from the trace, at most --free-max tokens.
std::string run_trace(llama_model * model, const common_params & base_params, const std::vector<config> & cfgs,
                      const eval_args & a) {
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
    const std::vector<nlohmann::json> prompts = read_jsonl(a.tasks);
    if (prompts.empty()) {
        fprintf(stderr, "error: --mode trace needs --tasks FILE.jsonl with at least one prompt\n");
        return "";
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
    config none_cfg;
    none_cfg.name = "none";
    none_cfg.policy = "none";
    const int n_buckets = (n_gen + bucket - 1) / bucket;
    // progress: per prompt, the reference (n_gen), teacher forcing (n_gen), free runs (per config)
    const int per_prompt = 2 * n_gen + (int) comp.size();
    const int total = per_prompt * (int) prompts.size();
    nlohmann::json prompt_info = nlohmann::json::array();
    nlohmann::json results = nlohmann::json::array();
    for (size_t pi = 0; pi < prompts.size(); pi++) {
        const int base = (int) pi * per_prompt;
        const std::string id = prompts[pi].value("id", std::to_string(pi));
        const std::string text = bkv_tools::apply_chat_template(model, prompts[pi].value("prompt", std::string()));
        const std::vector<llama_token> prompt = common_tokenize(vocab, text, true, true);
        if (prompt.empty()) {
            fprintf(stderr, "error: trace prompt '%s' is empty\n", id.c_str());
            return "";
        }
        const uint32_t n_ctx = (uint32_t) (prompt.size() + n_gen + 16);

        // 1. the reference trace
        std::vector<llama_token> trace;
        int first_eog = -1;
        {
            auto ref = make_ctx(model, params, none_cfg, n_ctx);
            if (!ref || !decode_tokens(*ref, prompt.data(), (int32_t) prompt.size())) {
                return "";
            }
            for (int g = 0; g < n_gen; g++) {
                const float * lp = llama_get_logits_ith(ref->ctx, -1);
                if (first_eog < 0 && is_eog[argmax(lp, n_vocab)]) {
                    first_eog = g;
                }
                llama_token t = pick(lp);
                trace.push_back(t);
                if (g + 1 < n_gen && !decode_tokens(*ref, &t, 1)) {
                    return "";
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
                return "";
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
                auto t0 = clock_type::now();
                const int ret = llama_decode(r->ctx, batch);
                r->decode_ms += std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
                if (ret != 0) {
                    fprintf(stderr, "error: llama_decode returned %d for '%s'\n", ret, r->cfg.name.c_str());
                    llama_batch_free(batch);
                    return "";
                }
                r->cells_peak = std::max(r->cells_peak, bkv_tools::seq_cells(r->ctx, 0));
            }
            for (int i = 0; i < n; i++) {
                score(j + i + 1, i);
            }
            j += n;
            progress(base + n_gen + j, total);
        }
        llama_batch_free(batch);

        // 3. free runs
        std::vector<int> diverge(runs.size(), -1);
        for (size_t k = 1; k < runs.size(); k++) {
            auto r = make_ctx(model, params, runs[k]->cfg, n_ctx);
            if (!r || !decode_chunked(*r, prompt, chunk)) {
                return "";
            }
            const int limit = std::min(n_gen, a.free_max > 0 ? a.free_max : n_gen);
            int g = 0;
            for (; g < limit; g++) {
                llama_token t = pick(llama_get_logits_ith(r->ctx, -1));
                if (t != trace[g]) {
                    break;
                }
                if (g + 1 < limit && !decode_tokens(*r, &t, 1)) {
                    return "";
                }
            }
            diverge[k] = g;
            progress(base + 2 * n_gen + (int) k, total);
        }

        for (size_t k = 0; k < runs.size(); k++) {
            const acc & x = accs[k];
            nlohmann::json buckets = nlohmann::json::array();
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
            const int limit = std::min(n_gen, a.free_max > 0 ? a.free_max : n_gen);
            results.push_back({{"id", id},
                               {"config", runs[k]->cfg.name},
                               {"policy", runs[k]->cfg.policy},
                               {"budget", runs[k]->cfg.budget},
                               {"n_tokens", n},
                               {"top1", n ? agree / n : 0.0},
                               {"kl", n ? kl / n : 0.0},
                               {"first_mismatch", x.first_mismatch},
                               {"diverge_free", k == 0 ? nlohmann::json(nullptr) : nlohmann::json(diverge[k])},
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
    return dump_json({{"n_tokens", n_gen}, {"bucket", bucket}, {"chunk", chunk}, {"prompts", prompt_info},
                      {"results", results}});
}

// Token counts of the documents of a --tasks file as `--mode task` would prefill them (chat
// template included); the bench calibrates its characters-per-token from them.
std::string run_count(llama_model * model, const eval_args & a) {
    const llama_vocab * vocab = llama_model_get_vocab(model);
    const std::vector<nlohmann::json> docs = read_jsonl(a.tasks);
    if (docs.empty()) {
        fprintf(stderr, "error: --mode count needs --tasks FILE.jsonl\n");
        return "";
    }
    nlohmann::json results = nlohmann::json::array();
    for (const nlohmann::json & d : docs) {
        std::string pre, post;
        const std::string doc = d.value("doc", std::string());
        template_split(model, doc, pre, post);
        results.push_back({{"id", d.value("id", std::string())},
                           {"chars", (int64_t) doc.size()},
                           {"n_doc", (int64_t) common_tokenize(vocab, pre, true, true).size()}});
    }
    return dump_json({{"results", results}});
}

}  // namespace

int main(int argc, char ** argv) {
    eval_args a;
    if (!take_eval_args(argc, argv, a)) {
        return 1;
    }
    std::vector<config> cfgs;
    if (a.mode == "configs") {
        // only check the configs (no model is loaded): the plugin's spec of each
        if (!parse_configs(a.configs, cfgs)) {
            return 1;
        }
        for (const config & c : cfgs) {
            printf("%s\t%s\n", c.name.c_str(), c.policy == "none" ? "none" : c.spec.c_str());
        }
        return 0;
    }
    common_params params;
    if (!common_params_parse(argc, argv, params, LLAMA_EXAMPLE_PERPLEXITY)) {
        return 1;
    }
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
        result = run_lockstep(model, params, cfgs, prompt, (int) prompt.size(), (int) prompt.size() - 1, a.n_tokens,
                              a.per_token);
    } else if (a.mode == "agree" || a.mode == "revisit") {
        if (a.text_file.empty()) {
            fprintf(stderr, "error: --mode %s needs --text FILE\n", a.mode.c_str());
            return 1;
        }
        if (a.prompt_tokens < 1) {
            fprintf(stderr, "error: --prompt-tokens must be at least 1, got %d\n", a.prompt_tokens);
            return 1;
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
        result = run_lockstep(model, params, cfgs, toks, a.prompt_tokens, ppl_from, 0, a.per_token);
    } else if (a.mode == "passkey") {
        result = run_passkey(model, params, cfgs, a);
    } else if (a.mode == "speed") {
        result = run_speed(model, params, cfgs, a);
    } else if (a.mode == "task") {
        result = run_task(model, params, cfgs, a);
    } else if (a.mode == "trace") {
        result = run_trace(model, params, cfgs, a);
    } else if (a.mode == "reason") {
        result = run_reason(model, params, cfgs, a);
    } else if (a.mode == "count") {
        result = run_count(model, a);
    } else {
        fprintf(stderr, "error: --mode must be agree, generate, revisit, passkey, speed, task, trace, reason, count or configs (got '%s')\n",
                a.mode.c_str());
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
