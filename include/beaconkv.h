/*
 * beaconkv.h - C ABI of BeaconKV, a KV-cache compression plugin for llama.cpp.
 *
 * BeaconKV decides WHICH cells of a sequence's KV cache to drop; the host (a patched llama.cpp, or any
 * program that implements `beaconkv_host`) owns the memory and performs the eviction. The library
 * defines no llama_* or ggml_* symbol and links against neither: the host hands it a struct of
 * function pointers, and calls the hooks below from its decode loop.
 *
 * Conventions for every function in this header
 *  - Null-safe: a NULL handle or a NULL required pointer returns BEACONKV_ERR_NULL (or a neutral value
 *    for functions that return no status) and never crashes.
 *  - Panic-safe: a Rust panic never unwinds into C. A panic inside a hook disables compression for
 *    that context (the host keeps running uncompressed), the hook returns BEACONKV_ERR_PANIC and
 *    beaconkv_last_error() describes it.
 *  - Ownership: pointers passed IN are borrowed for the duration of the call unless stated otherwise.
 *    Handles returned by *_new are owned by the caller and released with the matching *_free.
 *    Strings returned as `const char *` are owned by the library (see each function for lifetime).
 *  - Thread safety: a context may be used from several threads; calls are serialised internally.
 *    The host callbacks are only invoked from inside a hook, on the thread that called the hook.
 */
#ifndef BEACONKV_H
#define BEACONKV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define BEACONKV_ABI_VERSION 1

/* Status codes: 0 = success, negative = error. */
typedef enum beaconkv_status {
    BEACONKV_OK           = 0,
    BEACONKV_ERR_NULL     = -1, /* a required pointer was NULL                                  */
    BEACONKV_ERR_INVALID  = -2, /* bad argument or configuration value (message names the key)  */
    BEACONKV_ERR_HOST     = -3, /* a host callback failed                                       */
    BEACONKV_ERR_PANIC    = -4, /* internal panic caught; compression is now disabled           */
    BEACONKV_ERR_DISABLED = -5, /* compression disabled for this context (after a panic/error)  */
    BEACONKV_ERR_NO_ROOM  = -6, /* the incoming tokens cannot fit even after compression        */
    BEACONKV_ERR_UNSUPPORTED = -7 /* layer/cache layout the plugin cannot handle               */
} beaconkv_status;

/* Compression policy: every policy is a scorer; selection and eviction are shared. */
typedef enum beaconkv_policy {
    BEACONKV_POLICY_NONE      = 0, /* never evict (stats only)                                   */
    BEACONKV_POLICY_BEACON    = 1, /* FPS beacons rotated to the scoring position + recent queries */
    BEACONKV_POLICY_RECENT    = 2, /* last n_recent queries only                                  */
    BEACONKV_POLICY_STREAMING = 3, /* sinks (prefix) + recent window, no scoring (StreamingLLM)   */
    BEACONKV_POLICY_RANDOM    = 4  /* keep prefix + window, evict the middle uniformly (seeded)   */
} beaconkv_policy;

/* How per-(layer, kv-head) scores become one score per cell (cells are shared by all layers). */
typedef enum beaconkv_reduce {
    BEACONKV_REDUCE_MAX   = 0, /* max over layers and heads                                      */
    BEACONKV_REDUCE_ZMEAN = 1, /* mean over layers/heads of per-head z-scored scores             */
    BEACONKV_REDUCE_RANK  = 2  /* mean over layers/heads of per-head normalised rank             */
} beaconkv_reduce;

/* Compression settings. Obtain defaults with beaconkv_params_default(); the spec-string parser
 * (beaconkv_params_parse) edits one of these. Keys of the spec form are given in brackets. */
typedef struct beaconkv_params {
    int32_t  policy;     /* [policy]  beaconkv_policy; default BEACON                                  */
    int32_t  budget;     /* [budget]  max cells one sequence may hold (prefix + middle + window);
                                      compression runs when a sequence would pass it. default 1024     */
    int32_t  budget_min; /* [min]     cells left after a compression (hysteresis); 0 = budget*7/8       */
    int32_t  n_beacons;  /* [beacons] FPS beacon queries per (layer, query head); default 16            */
    int32_t  n_recent;   /* [recent]  most recent queries per (layer, query head); default 16           */
    int32_t  window;     /* [window]  newest cells always kept; default 64                              */
    int32_t  prefix;     /* [prefix]  protected first cells; -1 = the whole prompt ("prompt", default)  */
    int32_t  reduce;     /* [reduce]  beaconkv_reduce; default MAX                                      */
    int32_t  span;       /* [span]    score pooling width in cells (1 = off, odd); default 1            */
    int32_t  q_capacity; /* [qcap]    query rows the host captures per ubatch; default 64               */
    uint64_t seed;       /* [seed]    seed of the random policy; default 42                             */
    int32_t  read_copy;  /* [read]    0 = auto (read host memory directly), 1 = copy: always go through
                                      host->read_rows, the path device/remote buffers take (testing)    */
    int32_t  score;      /* [score]   0 = logit: max of q·k/sqrt(d) (the method); 1 = prob: max of the
                                      query's attention probability (log-softmax over the cells)        */
} beaconkv_params;

/* Description of one attention layer of the evictable cache, filled by the host. */
typedef struct beaconkv_layer {
    int32_t il;          /* model layer index                                           */
    int32_t head_dim;    /* K head size (n_embd_head_k)                                 */
    int32_t n_head;      /* query heads                                                 */
    int32_t n_head_kv;   /* KV heads (GQA: query head h uses kv head h / (n_head/n_head_kv)) */

    /* K cache: row of cell c, stream s, kv head h starts at
     *   k_data + s*k_nb2 + c*k_nb1 + h*row_size(k_type, head_dim)                     */
    const void * k_data; /* borrowed; valid until the host's cache is destroyed     */
    int32_t k_type;      /* ggml_type value (F32=0, F16=1, Q4_0=2, Q4_1=3, Q5_0=6, Q5_1=7, Q8_0=8,
                            IQ4_NL=20, BF16=30)                                         */
    size_t  k_nb1;       /* bytes between cells                                         */
    size_t  k_nb2;       /* bytes between streams                                       */
    bool    k_on_host;   /* k_data is host memory; else rows are read via host->read_rows */

    /* Query store: F32 rows of n_head*head_dim values (post-RoPE, pre-Hadamard), one per captured
     * token of the last ubatch; row r starts at q_data + r*q_nb1.                           */
    const void * q_data; /* borrowed                                                    */
    size_t  q_nb1;
    bool    q_on_host;

    /* RoPE applied to this layer's queries and keys (from the graph's ROPE node).
     * rope_n_dims == 0: no RoPE found, queries are scored as captured (no re-rotation). */
    int32_t rope_n_dims;
    int32_t rope_mode;   /* 0 = NORM, 2 = NEOX; other modes (M-RoPE, vision) are scored as captured */
    int32_t rope_n_ctx_orig;
    float   freq_base, freq_scale, ext_factor, attn_factor, beta_fast, beta_slow;
    const float * freq_factors; /* NULL or rope_n_dims/2 host floats, borrowed              */

    int32_t hadamard_n;  /* block size of the Hadamard rotation applied to stored K (0 = none) */
    uint64_t kv_bytes_per_cell; /* K+V bytes one cell costs in this layer (for statistics)   */
} beaconkv_layer;

/* What BeaconKV needs from its host. Copied by value into the context; `user` must outlive it.
 * All callbacks return >= 0 on success and < 0 on failure unless stated otherwise. */
typedef struct beaconkv_host {
    void * user;
    /* Number of attention layers whose cells can be evicted. */
    int32_t (*n_layers)(void * user);
    /* Describe layer i (0 <= i < n_layers). */
    int32_t (*get_layer)(void * user, int32_t i, beaconkv_layer * out);
    /* List the cells of sequence `seq`, sorted by position: writes min(cap, count) entries to
     * pos[] / cells[] and the sequence's stream to *stream; returns the total count. */
    int32_t (*seq_cells)(void * user, int32_t seq, int32_t * pos, uint32_t * cells, int32_t cap,
                         uint32_t * stream);
    /* Remove `seq` from the given cells (a cell is freed when no sequence holds it any more).
     * Returns the number of cells affected. */
    int32_t (*seq_evict)(void * user, int32_t seq, const uint32_t * cells, int32_t n);
    /* Wait until K and the query store hold the results of every submitted ubatch. May be NULL. */
    void    (*synchronize)(void * user);
    /* Fallback for buffers that are not host memory. May be NULL (such layers are then skipped).
     * what = 0: K rows of `rows` (cells) in stream `stream`, dequantised (and still Hadamard-rotated),
     *           n_head_kv*head_dim floats each;  what = 1: query rows, n_head*head_dim floats each. */
    int32_t (*read_rows)(void * user, int32_t layer, int32_t what, uint32_t stream,
                         const uint32_t * rows, int32_t n, float * out);
    /* Log sink for warnings and errors (level: 2 = warn, 3 = error). May be NULL. */
    void    (*log)(void * user, int32_t level, const char * msg);
} beaconkv_host;

/* Per-sequence statistics (seq = -1: totals over all sequences). */
typedef struct beaconkv_stats {
    int32_t  seq;
    int32_t  cells_in_use;     /* cells the sequence holds now                                 */
    int32_t  cells_peak;       /* most cells it ever held after a decode call                  */
    int32_t  prefix_len;       /* protected prefix in cells                                    */
    int32_t  pos_max;          /* highest position seen                                        */
    uint64_t n_tokens;         /* tokens seen (prompt + generated)                             */
    uint64_t evicted;          /* cells evicted                                                */
    uint64_t compress_events;  /* compression passes                                           */
    uint64_t kv_bytes_saved;   /* bytes of K+V the evicted cells occupied (all layers)         */
    double   ms_capture;       /* time reading/un-rotating queries and FPS                     */
    double   ms_score;         /* time scoring and selecting                                   */
    double   ms_evict;         /* time in host->seq_evict                                      */
    int32_t  disabled;         /* 1 if compression was disabled after an error                 */
} beaconkv_stats;

/* Model description for KV memory accounting (the seed's calc_kv_cache_memory, generalised). */
typedef struct beaconkv_model_desc {
    int32_t n_layer;           /* layers with a KV cache                                       */
    int32_t n_head_kv;
    int32_t head_dim_k;
    int32_t head_dim_v;
    int32_t type_k;            /* ggml_type */
    int32_t type_v;            /* ggml_type */
} beaconkv_model_desc;

typedef struct beaconkv_context beaconkv_context;

/* ---- configuration ------------------------------------------------------------------------- */

/* Library version string, static storage. */
const char * beaconkv_version(void);

/* Defaults of the method (16 beacons + 16 recent queries, budget 1024, min 896, window 64,
 * prefix = prompt). */
beaconkv_params beaconkv_params_default(void);

/* Apply a spec string "key=value,key=value" (keys in brackets above; policy may also be given
 * alone, e.g. "beacon") on top of *params. On error returns BEACONKV_ERR_INVALID, leaves *params
 * unchanged and writes a message naming the key and the allowed range into err (NUL-terminated,
 * truncated to err_len; err may be NULL). */
int32_t beaconkv_params_parse(const char * spec, beaconkv_params * params, char * err, size_t err_len);

/* Check a params struct (same rules and messages as the parser). */
int32_t beaconkv_params_validate(const beaconkv_params * params, char * err, size_t err_len);

/* Write the canonical spec string of params into buf (NUL-terminated, truncated to len).
 * Returns the full length needed (excluding NUL), or < 0 on error. */
int32_t beaconkv_params_format(const beaconkv_params * params, char * buf, size_t len);

/* Name of a policy ("none", "beacon", ...), static storage; "unknown" for bad values. */
const char * beaconkv_policy_name(int32_t policy);

/* K+V bytes one token costs for the given model description (0 on bad input). */
uint64_t beaconkv_kv_bytes_per_token(const beaconkv_model_desc * desc);

/* Bytes of one row of n values of ggml type `type` (0 if the type is unknown). */
uint64_t beaconkv_row_size(int32_t type, int64_t n);

/* ---- context ------------------------------------------------------------------------------- */

/* Create a context. params and host are copied; host->user must outlive the context.
 * Returns NULL on error with a message in err (which may be NULL). */
beaconkv_context * beaconkv_context_new(const beaconkv_params * params, const beaconkv_host * host,
                                        char * err, size_t err_len);

/* Release a context (NULL is a no-op). */
void beaconkv_context_free(beaconkv_context * ctx);

/* Copy the effective params of ctx into *out. */
int32_t beaconkv_context_params(const beaconkv_context * ctx, beaconkv_params * out);

/* (Added in the engine branch.) Re-read the host's layer descriptions, e.g. after the host
 * reallocated its KV cache or query store. The context also re-reads them by itself whenever
 * host->n_layers() changes. Query state of every sequence is reset. */
int32_t beaconkv_refresh_layers(beaconkv_context * ctx);

/* ---- hooks the host calls ------------------------------------------------------------------ */

/* Before a decode call places its tokens: n_new[i] tokens will be added to sequence seq_ids[i],
 * n_outputs[i] of them requesting logits (n_outputs may be NULL when the host does not know).
 * Compresses sequences that would pass their budget, to min(budget_min, budget - n_new[i]) cells.
 * Best effort: it never evicts the protected prefix or the window, so a batch larger than
 * budget - prefix - window may still not fit; it then returns BEACONKV_OK all the same and the host
 * fails placement with its own message (BEACONKV_ERR_NO_ROOM is reserved, not returned yet).
 * A sequence's prompt phase ends at its first generation step: a call that brings it exactly one
 * token, or asks for logits of more than one (speculative verification). */
int32_t beaconkv_before_batch(beaconkv_context * ctx, int32_t n_seq, const int32_t * seq_ids,
                              const int32_t * n_new, const int32_t * n_outputs);

/* After each ubatch was computed: token i has position pos[i] in sequence seq_id[i] (its first
 * sequence) and its query sits in row q_row[i] of every layer's query store (-1 = not captured).
 * The plugin calls host->synchronize before reading. */
int32_t beaconkv_after_ubatch(beaconkv_context * ctx, int32_t n_tokens, const int32_t * pos,
                              const int32_t * seq_id, const int32_t * q_row);

/* At the end of a successful decode call: sequences above their budget are compressed. */
int32_t beaconkv_after_decode(beaconkv_context * ctx);

/* The host removed positions [p0, p1) of seq (p0 < 0: from 0; p1 < 0: to the end); seq < 0: all
 * sequences. Whole-sequence removal drops the plugin's state of that sequence. */
void beaconkv_seq_removed(beaconkv_context * ctx, int32_t seq, int32_t p0, int32_t p1);

/* The host copied positions [p0, p1) of seq_src into seq_dst: the destination inherits the
 * source's query state. */
void beaconkv_seq_copied(beaconkv_context * ctx, int32_t seq_src, int32_t seq_dst, int32_t p0, int32_t p1);

/* ---- sequence state (save / restore) ------------------------------------------------------ */

/* The plugin's state of one sequence (phase, prompt length, statistics, every layer's query store
 * with its beacons) as an opaque, versioned byte blob. Save it next to llama_state_seq_get_data and
 * restore it after llama_state_seq_set_data: the restored sequence then continues exactly like the
 * uninterrupted one. Without it a restored sequence still works; its query state starts afresh.
 * Cell indices are not part of the blob (the host re-lists cells), positions are. */

/* Bytes beaconkv_seq_state_get needs for seq; 0 for an unknown sequence or a NULL ctx. */
size_t beaconkv_seq_state_size(const beaconkv_context * ctx, int32_t seq);

/* Write the state of seq into buf (len bytes, caller-owned). Returns the bytes written, or < 0
 * (BEACONKV_ERR_INVALID: unknown sequence or buffer too small; see beaconkv_last_error). */
int64_t beaconkv_seq_state_get(const beaconkv_context * ctx, int32_t seq, uint8_t * buf, size_t len);

/* Replace the state of seq with a blob from beaconkv_seq_state_get (buf borrowed). Checks the
 * format, version and that the layer shapes match this context; on error nothing changes and
 * BEACONKV_ERR_INVALID is returned. */
int32_t beaconkv_seq_state_set(beaconkv_context * ctx, int32_t seq, const uint8_t * buf, size_t len);

/* ---- observation --------------------------------------------------------------------------- */

/* Statistics of sequence seq (-1 = totals). Unknown sequences report zeros with seq set. */
int32_t beaconkv_get_stats(const beaconkv_context * ctx, int32_t seq, beaconkv_stats * out);

/* Whether compression is active (false after a panic or host error disabled it). */
bool beaconkv_is_enabled(const beaconkv_context * ctx);

/* Last error message of ctx ("" if none). Valid until the next call on ctx. NULL ctx -> "". */
const char * beaconkv_last_error(const beaconkv_context * ctx);

#ifdef __cplusplus
}
#endif

#endif /* BEACONKV_H */
