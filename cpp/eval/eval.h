// beaconkv-eval: what its modes share. The tool's files (cpp/eval/):
//
//   eval.h, common.cpp   options, configs, one context per config, the decode loop, the plugin's
//                        numbers, the JSON writer and reader, chat templates
//   main.cpp             options, the model, the mode, the output
//   quality.cpp          agree, revisit, generate: teacher forcing in lockstep with the full cache
//   passkey.cpp          passkey retrieval
//   speed.cpp            decode (and prompt) speed and memory against context length
//   task.cpp             long-context tasks, and count (token counts of their documents)
//   trace.cpp            own-trace fidelity
//   reason.cpp           multi-turn conversations, several decoded together
//
// Every result is an nlohmann::ordered_json value (keys in the order they are set) written by
// dump_json: valid JSON by construction (a non-finite number is null, invalid UTF-8 is replaced).
#pragma once

#include "beaconkv.h"
#include "common.h"
#include "kv-compress.h"
#include "llama-kv-plugin.h"
#include "llama.h"
#include "tool-common.h"

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace bkv_eval {

using clock_type = std::chrono::steady_clock;
using json = nlohmann::ordered_json;

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
    int free_max = 0;   // trace: longest free run (0 = --n-tokens, -1 = no free runs)
    int prompt_len = 0; // speed: also time a prompt of this many tokens per config (0 = no)
    std::string per_token; // agree/revisit: CSV of every scored step (NLL per config, recalled so far)
};

// Removes this tool's own options from argv; the rest goes to llama.cpp's parser.
bool take_eval_args(int & argc, char ** argv, eval_args & a);

std::vector<std::string> split(const std::string & s, char sep);

struct config {
    std::string name;    // as given, e.g. "beacon:256"
    std::string policy;  // none = uncompressed; "beacon+archive", "beacon+archive_q8_0": with the archive
    int budget = 0;
    std::string spec;    // full spec for the plugin
};

// "policy:budget[/key=value...]" entries, comma-separated; each checked by the library's parser.
bool parse_configs(const std::string & list, std::vector<config> & out);

// The uncompressed reference ("none").
config full_cache();

// A context for one config; uncompressed when cfg.policy == "none".
struct run_ctx {
    config cfg;
    llama_context * ctx = nullptr;
    int32_t cells_peak = 0;  // most cells sequence 0 held after a decode call
    double decode_ms = 0;    // time in llama_decode
    ~run_ctx() { llama_free(ctx); }
};

std::unique_ptr<run_ctx> make_ctx(llama_model * model, const common_params & base, const config & cfg,
                                  uint32_t n_ctx, const std::string & extra_spec = "");

// The decode loop of every mode: one llama_decode call, timed into r.decode_ms; updates the
// peak of sequence 0's cells. false (and a message) when llama_decode fails.
bool decode_batch(run_ctx & r, const llama_batch & batch);

// n tokens of sequence 0, in pieces of at most the context's n_batch (a compressed context may
// have a small one: common_kv_compress_adjust caps it at n_ubatch).
bool decode_tokens(run_ctx & r, const llama_token * toks, int32_t n);

// toks in calls of `chunk` tokens.
bool decode_chunked(run_ctx & r, const std::vector<llama_token> & toks, int chunk);

// Chunk of tokens per decode call of a compressed context: at most `chunk`, and budget/8 (the
// default hysteresis gap, budget - min) so that compression runs at the cadence of decoding.
int compressed_chunk(const config & c, int chunk);

// Greedy decoding from the context's last logits: up to max_tokens tokens or an
// end-of-generation token (stopped = true); the last token is not decoded.
bool greedy_answer(run_ctx & r, const llama_vocab * vocab, int max_tokens, std::vector<llama_token> & gen,
                   bool & stopped);

void log_softmax(const float * logits, int n, std::vector<double> & out);
int argmax(const float * v, int n);

// The plugin's totals over all sequences (zero without a plugin).
struct plugin_numbers {
    uint64_t evicted = 0, events = 0;
    uint64_t recalled = 0, archived = 0, archive_bytes = 0;
    double ms = 0;
    double ms_capture = 0, ms_score = 0, ms_evict = 0, ms_recall = 0;
    uint64_t reads_pass = 0, bytes_pass = 0, reads_capture = 0, bytes_capture = 0, n_tokens = 0;
};

plugin_numbers plugin_stats(llama_context * ctx);

// Positions in [p0, p1) that sequence 0 holds in the cache.
int kept_in_range(llama_context * ctx, int p0, int p1);

// "progress DONE/TOTAL" on stderr (the bench reads it).
void progress(int done, int total);

std::string read_file(const std::string & path);
// One JSON value per non-empty line; empty on an error (message on stderr).
std::vector<json> read_jsonl(const std::string & path);
// One line of JSON (no newline).
std::string dump_json(const json & j);

// A user turn "doc + question" in the chat template, split into the part before the question
// and the question with the template's tail.
void template_split(const llama_model * model, const std::string & doc, std::string & pre, std::string & post);

// A conversation rendered by the model's chat template; without one, "role: text" paragraphs.
std::string render_chat(const llama_model * model, const std::vector<std::pair<std::string, std::string>> & msgs,
                        bool add_assistant);

// The modes. Each sets the keys of its result (after "mode") in `out`; false on an error, with
// its message on stderr.
bool run_quality(llama_model * model, const common_params & params, const std::vector<config> & cfgs,
                 const eval_args & a, json & out);
bool run_passkey(llama_model * model, const common_params & params, const std::vector<config> & cfgs,
                 const eval_args & a, json & out);
bool run_speed(llama_model * model, const common_params & params, const std::vector<config> & cfgs,
               const eval_args & a, json & out);
bool run_task(llama_model * model, const common_params & params, const std::vector<config> & cfgs,
              const eval_args & a, json & out);
bool run_count(llama_model * model, const eval_args & a, json & out);
bool run_trace(llama_model * model, const common_params & params, const std::vector<config> & cfgs,
               const eval_args & a, json & out);
bool run_reason(llama_model * model, const common_params & params, const std::vector<config> & cfgs,
                const eval_args & a, json & out);

}  // namespace bkv_eval
