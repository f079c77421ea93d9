// beaconkv-eval: options, configs, contexts, the decode loop, the plugin's numbers, JSON and chat
// templates (eval.h).

#include "eval.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

namespace bkv_eval {

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

config full_cache() {
    config c;
    c.name = "none";
    c.policy = "none";
    return c;
}

std::unique_ptr<run_ctx> make_ctx(llama_model * model, const common_params & base, const config & cfg,
                                  uint32_t n_ctx, const std::string & extra_spec) {
    auto r = std::make_unique<run_ctx>();
    r->cfg = cfg;
    r->ctx = bkv_tools::make_context(model, base, cfg.policy == "none" ? "" : cfg.spec + extra_spec, n_ctx);
    if (!r->ctx) {
        fprintf(stderr, "error: cannot create a compressed context for '%s'\n", cfg.name.c_str());
        return nullptr;
    }
    return r;
}

bool decode_batch(run_ctx & r, const llama_batch & batch) {
    const auto t0 = clock_type::now();
    const int ret = llama_decode(r.ctx, batch);
    r.decode_ms += std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
    if (ret != 0) {
        fprintf(stderr, "error: llama_decode returned %d for '%s'\n", ret, r.cfg.name.c_str());
        return false;
    }
    r.cells_peak = std::max(r.cells_peak, bkv_tools::seq_cells(r.ctx, 0));
    return true;
}

bool decode_tokens(run_ctx & r, const llama_token * toks, int32_t n) {
    const int32_t n_batch = std::max<int32_t>(1, (int32_t) llama_n_batch(r.ctx));
    for (int32_t i = 0; i < n; i += n_batch) {
        const int32_t m = std::min(n_batch, n - i);
        if (!decode_batch(r, llama_batch_get_one(const_cast<llama_token *>(toks + i), m))) {
            return false;
        }
    }
    return true;
}

bool decode_chunked(run_ctx & r, const std::vector<llama_token> & toks, int chunk) {
    for (size_t i = 0; i < toks.size(); i += chunk) {
        if (!decode_tokens(r, &toks[i], (int32_t) std::min<size_t>(chunk, toks.size() - i))) {
            return false;
        }
    }
    return true;
}

int compressed_chunk(const config & c, int chunk) {
    return std::max(1, std::min(chunk, c.budget / 8));
}

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

// Every position of the range when no plugin is attached: an uncompressed cache has no holes.
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

void progress(int done, int total) {
    fprintf(stderr, "progress %d/%d\n", done, total);
}

std::string read_file(const std::string & path) {
    std::ifstream f(path);
    std::stringstream ss;
    ss << f.rdbuf();
    return ss.str();
}

std::vector<json> read_jsonl(const std::string & path) {
    std::vector<json> out;
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
            out.push_back(json::parse(line));
        } catch (const std::exception & e) {
            fprintf(stderr, "error: %s line %d: %s\n", path.c_str(), n, e.what());
            return {};
        }
    }
    return out;
}

std::string dump_json(const json & j) {
    // generated text can end inside a multi-byte character: replace, never throw
    return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

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

}  // namespace bkv_eval
