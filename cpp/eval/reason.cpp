// beaconkv-eval --mode reason: multi-turn conversations, several decoded together in one context.
//
// One line {id, config, policy, budget, turns: [{n_prompt, n_gen, stopped, output}], n_prompt,
// n_gen, cells_peak, prefix_len, evicted, compress_events, recalled, seconds} on stdout per finished
// conversation, and at the end {"runs": [{config, parallel, conversations, n_gen, n_prompt,
// decode_calls, decode_ms, plugin_ms, seconds, gen_tok_s}], "results": [the lines]}.

#include "eval.h"

#include <algorithm>
#include <cstdio>

namespace bkv_eval {

namespace {

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
    std::vector<llama_token> forced;     // this turn's answer start, fed one token per call as if generated
    size_t forced_at = 0;
    llama_pos pos = 0;
    int n_prompt = 0;                    // this turn's prompt tokens
    int32_t cells_peak = 0;
    clock_type::time_point started;
    json turns = json::array();
};

}  // namespace

// Multi-turn chain-of-thought conversations (the bench generates them): each line of --tasks is
// {"id", "system" (optional), "turns": ["...", ...], "answer_starts" (optional): ["...", ...]}; an
// answer start is fed one token per call before the turn's greedy answer, counted as generated. Per config, -np conversations run at once, one
// sequence each in one context (its own stream and its own compression state, the same budget):
// every llama_decode call carries one token per answering sequence and a chunk of the prompt of
// each sequence whose turn is being prompted. A turn's prompt is what the chat template adds to
// the conversation so far (the previous answer's end, the new user turn, the assistant header);
// the answer is greedy, up to --n-tokens tokens or an end-of-generation token. A finished conversation
// prints one JSON line on stdout at once and its sequence takes the next conversation. Scoring is the
// bench's.
bool run_reason(llama_model * model, const common_params & params, const std::vector<config> & cfgs,
                const eval_args & a, json & out) {
    const llama_vocab * vocab = llama_model_get_vocab(model);
    const int n_vocab = llama_vocab_n_tokens(vocab);
    const std::vector<json> conversations = read_jsonl(a.tasks);
    if (conversations.empty()) {
        fprintf(stderr, "error: --mode reason needs --tasks FILE.jsonl with at least one conversation\n");
        return false;
    }
    if (a.n_tokens < 1) {
        fprintf(stderr, "error: --n-tokens must be at least 1, got %d\n", a.n_tokens);
        return false;
    }
    const int n_par = std::max(1, std::min<int>(params.n_parallel, (int) conversations.size()));
    // each conversation's turns as text; the most tokens one sequence can reach
    std::vector<std::string> ids, systems;
    std::vector<std::vector<std::string>> turn_text, answer_starts;
    size_t most = 0;
    for (size_t i = 0; i < conversations.size(); i++) {
        const json & s = conversations[i];
        ids.push_back(s.value("id", std::to_string(i)));
        systems.push_back(s.value("system", std::string()));
        std::vector<std::string> t;
        for (const json & x : s.value("turns", json::array())) {
            t.push_back(x.is_string() ? x.get<std::string>() : std::string());
            if (t.back().empty()) {
                fprintf(stderr, "error: --tasks conversation '%s': turn %zu is not a non-empty string\n", ids.back().c_str(),
                        t.size());
                return false;
            }
        }
        if (t.empty()) {
            fprintf(stderr, "error: --tasks conversation '%s' has no turns\n", ids.back().c_str());
            return false;
        }
        // "answer_starts": per turn, text the answer begins with (teacher-forced: fed one token per
        // decode call as if the model had generated it, so the cache treats it as answer, not prompt)
        std::vector<std::string> starts(t.size());
        const json st = s.value("answer_starts", json::array());
        if (!st.is_array() || st.size() > t.size()) {
            fprintf(stderr, "error: --tasks conversation '%s': answer_starts must be a list of at most one string per turn\n",
                    ids.back().c_str());
            return false;
        }
        for (size_t k = 0; k < st.size(); k++) {
            if (!st[k].is_string()) {
                fprintf(stderr, "error: --tasks conversation '%s': answer_starts[%zu] is not a string\n", ids.back().c_str(), k);
                return false;
            }
            starts[k] = st[k].get<std::string>();
        }
        answer_starts.push_back(std::move(starts));
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

    json results = json::array();
    json runs = json::array();
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
            return false;
        }
        llama_context * ctx = r->ctx;
        llama_memory_t mem = llama_get_memory(ctx);
        const int n_batch = std::max<int>(1, (int) llama_n_batch(ctx));
        // at least 2: a prompt is never split so that a call brings its sequence a single token
        const int chunk = std::max(2, compressed ? compressed_chunk(c, a.chunk) : a.chunk);
        if (n_batch < n_par + 2) {
            fprintf(stderr, "error: '%s': a decode call holds %d tokens, fewer than -np %d sequences + 2\n",
                    c.name.c_str(), n_batch, n_par);
            return false;
        }
        std::vector<reason_seq> seqs(n_par);
        size_t next_conversation = 0;
        uint64_t n_gen_all = 0, n_prompt_all = 0, n_calls = 0;
        const auto t_start = clock_type::now();

        auto tokenize_turn = [&](reason_seq & s, const std::string & text, bool first) {
            s.feed = common_tokenize(vocab, text, first, true);
            s.fed = 0;
            s.n_prompt = (int) s.feed.size();
            s.generating = false;
            s.gen.clear();
            const std::string & start = answer_starts[s.conversation][s.turn];
            s.forced = start.empty() ? std::vector<llama_token>() : common_tokenize(vocab, start, false, false);
            s.forced_at = 0;
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
            json row = {{"id", ids[s.conversation]}, {"config", c.name}, {"policy", c.policy},
                                  {"budget", c.budget}, {"turns", s.turns}};
            int n_prompt = 0, n_gen = 0;
            for (const json & x : s.turns) {
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
            n_calls++;
            if (!decode_batch(*r, batch)) {
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
                    const llama_token t = s.forced_at < s.forced.size() ? s.forced[s.forced_at++]
                                                                          : argmax(llama_get_logits_ith(ctx, x.i), n_vocab);
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
            return false;
        }
        const double wall = std::chrono::duration<double>(clock_type::now() - t_start).count();
        const plugin_numbers pn = plugin_stats(ctx);
        runs.push_back({{"config", c.name},
                        {"parallel", n_par},
                        {"conversations", (int) conversations.size()},
                        {"n_gen", n_gen_all},
                        {"n_prompt", n_prompt_all},
                        {"decode_calls", n_calls},
                        {"decode_ms", r->decode_ms},
                        {"plugin_ms", pn.ms},
                        {"seconds", wall},
                        {"gen_tok_s", wall > 0 ? n_gen_all / wall : 0.0}});
        fprintf(stderr, "%s: %zu conversations, -np %d: %llu tokens generated, %llu prompt tokens in %.1f s (%.1f generated tok/s)\n",
                c.name.c_str(), conversations.size(), n_par, (unsigned long long) n_gen_all,
                (unsigned long long) n_prompt_all, wall, wall > 0 ? n_gen_all / wall : 0.0);
    }
    out = {{"runs", runs}, {"results", results}};
    return true;
}

}  // namespace bkv_eval
