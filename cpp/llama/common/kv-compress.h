#pragma once

// BeaconKV glue: the only file of common that knows beaconkv.h (the KV-cache compression plugin).
// libllama exposes a generic plugin host (llama-kv-plugin.h); this glue connects it to libbeaconkv.

#include "llama.h"

#include <cstdint>
#include <functional>
#include <string>

struct common_params;
struct common_arg;
struct beaconkv_context;

// register the --kv-* flags through common_params_parser_init's add_opt
void common_kv_compress_add_args(const std::function<void(common_arg)> & add_opt);

// append "key=value" (or a whole "k=v,..." spec) to params.kv_compress_spec after the library checked the value on
// its own; throws std::invalid_argument with the library's message, which starts with `flag`
void common_kv_compress_append(common_params & params, const char * flag, const std::string & kv);

// check the rules between keys once all flags are read; throws std::invalid_argument naming the flag
void common_kv_compress_validate(const common_params & params);

// whether --kv-* flags were given (a spec is set)
bool common_kv_compress_enabled(const common_params & params);

// what common_kv_compress_adjust changed, as the user set it
struct common_kv_compress_user {
    int32_t n_batch;
    int32_t n_ubatch;
    bool    ctx_shift;
};

// for an evicting policy (warns for each change): context shift off, n_ubatch clamped to what the physical
// cache's slack holds (beaconkv_max_ubatch) and n_batch to n_ubatch (a decode call is placed before it is computed);
// returns the values as they were
common_kv_compress_user common_kv_compress_adjust(common_params & params);

// physical KV cells for llama_context_params.n_ctx_cells (beaconkv_physical_cells; model may be NULL when -c is
// given): 0 (= n_ctx) when compression is off, evicts nothing, or would not save cells
uint32_t common_kv_compress_cells(const common_params & params, const llama_model * model);

// create a beaconkv context for ctx and attach it as ctx's KV plugin; false (one warning) when compression is
// off or the model/memory layout is unsupported
bool common_kv_compress_attach(llama_context * ctx, const common_params & params);

// llama_init_from_model with compression: n_ctx_cells from the budget, then the plugin attached; when it cannot be
// attached (one warning), the context runs uncompressed, recreated with the full cache and the user's batch sizes
// if the cache was sized for the budget. nullptr when llama_init_from_model fails
llama_context * common_kv_compress_init_context(llama_model * model, llama_context_params & cparams, common_params & params,
                                                const common_kv_compress_user & user);

// the beaconkv context attached to ctx (nullptr if none), e.g. for printing statistics
beaconkv_context * common_kv_compress_get(const llama_context * ctx);

// what compression did for one sequence (seq >= 0) or all sequences (seq = -1), for tools that report it
struct common_kv_compress_info {
    std::string policy;                // seq >= 0: the sequence's own (common_kv_compress_seq_override), if set
    int32_t  budget          = 0;     // likewise
    int32_t  cells_in_use    = 0; // seq >= 0: counted in the cache now
    int32_t  cells_peak      = 0;
    uint32_t cells_physical  = 0; // physical cells per stream
    uint64_t evicted         = 0;
    uint64_t compress_events = 0;
    uint64_t archived        = 0; // evicted cells held in the archive now
    uint64_t recalled        = 0; // archived cells placed back into the cache
    uint64_t archive_bytes   = 0; // host memory the archive holds
    double   plugin_ms       = 0.0;
    bool     active          = true; // false once the plugin fell back after a runtime error
    uint64_t reads_pass      = 0; // reads from device/remote buffers in compression passes, and their bytes
    uint64_t bytes_pass      = 0;
    uint64_t reads_capture   = 0; // reads of captured queries, and their bytes
    uint64_t bytes_capture   = 0;
    uint64_t n_tokens        = 0; // tokens the sequence(s) saw
    int32_t  prompt_cells    = 0; // protected prompt cells (with --kv-prompt keep: the prompt kept whole)
    int32_t  cells_allowed   = 0; // cells it may hold now: the budget plus what --kv-prompt allows beyond it
    std::string scoring;          // where K is scored (beaconkv_scoring_path): "in place (30 layers)", "backend (...)"
};

// false when ctx has no compression plugin attached
bool common_kv_compress_info_get(llama_context * ctx, llama_seq_id seq, common_kv_compress_info & out);

// prompt reuse: how many of the first n_past positions of seq to keep before computing the rest of a new prompt,
// so that seq continues as a fresh sequence would (beaconkv_seq_reuse_point); n_past without compression
int32_t common_kv_compress_reuse_point(const llama_context * ctx, llama_seq_id seq, int32_t n_past);

// a sequence's own budget and policy (beaconkv_seq_override), e.g. for one llama-server request. The rules
// (beaconkv.h): budget within what the context's settings allow and at most its budget; policy the context's, or one
// reading nothing it does not record; none only when a sequence's n_ctx_seq positions fit in the budget.
// common_kv_compress_seq_check: for a context made with spec (canonical) whose sequences reach n_ctx_seq positions,
// budget (0 = the context's) and the policy named `policy` ("" = the context's); "" when allowed, with policy_id set
// (-1 = the context's), else why, starting with "budget: " or "policy: " and giving the allowed range or values
std::string common_kv_compress_seq_check(const std::string & spec, uint32_t n_ctx_seq, int32_t budget,
                                         const std::string & policy, int32_t & policy_id);
// set them on seq of ctx (policy -1 = the context's; n_ctx_seq from ctx); false (the library's message logged) when
// refused or nothing is attached
bool common_kv_compress_seq_override(llama_context * ctx, llama_seq_id seq, int32_t budget, int32_t policy_id);

// canonical spec of the plugin attached to ctx ("" if none)
std::string common_kv_compress_spec(llama_context * ctx);
// where the attached plugin reads and scores K (beaconkv_scoring_path); "" when nothing is attached
std::string common_kv_compress_scoring_path(llama_context * ctx);
