/*
 * beaconkv.h - C ABI of BeaconKV, a KV-cache compression plugin for llama.cpp.
 *
 * BeaconKV decides WHICH cells of a sequence's KV cache to drop; the host (a patched llama.cpp, or any
 * program that implements `beaconkv_host`) owns the memory and performs the eviction. The library
 * defines no llama_* or ggml_* symbol and links against neither: the host hands it a struct of
 * function pointers, and calls the hooks below from its decode loop.
 *
 * Conventions for every function in this header
 *  - Null-safe: a NULL handle or a NULL required pointer returns BEACONKV_ERR_NULL (or the neutral
 *    value each function names: 0, false, "", NULL) and never crashes.
 *  - Panic-safe: a Rust panic never unwinds into C; the call returns BEACONKV_ERR_PANIC (or its
 *    neutral value). A panic in a call on a context also records the message (beaconkv_last_error)
 *    and moves the context to FALLBACK mode (below); a hook that makes room runs once more in that
 *    mode before returning BEACONKV_ERR_PANIC, so the batch still fits.
 *  - Fallback: the host sizes its cache for the budget (beaconkv_physical_cells), so a context never
 *    stops evicting. When its policy cannot score any more (a panic, a failed host->read_rows, or
 *    no layer it can read), the context evicts by position only, like the streaming policy (the
 *    protected prefix and the newest cells stay; no K and no query is read), says so once through
 *    host->log, and keeps tracking the host's sequences. beaconkv_is_enabled() then returns false
 *    and beaconkv_stats.fallback is 1. Policy NONE never evicts, in any mode.
 *  - Ownership: pointers passed IN are borrowed for the duration of the call unless stated otherwise.
 *    Handles returned by *_new are owned by the caller and released with the matching *_free.
 *    Strings returned as `const char *` are owned by the library (see each function for lifetime).
 *  - Error buffers (`char * err, size_t err_len`): may be NULL or 0 long; otherwise always
 *    NUL-terminated, truncated to err_len, "" on success.
 *  - Thread safety: a context may be used from several threads; calls are serialised internally.
 *    The host callbacks are only invoked from inside a call on the context, on the calling thread,
 *    while the context is locked: a callback must not call a function of this header on the same
 *    context, except beaconkv_last_error and beaconkv_last_error_copy (which take no context lock).
 */
#ifndef BEACONKV_H
#define BEACONKV_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Changes whenever a struct's layout or a function's meaning changes: code compiled against another
 * version must be rebuilt against this header (structs are passed by value and by pointer). */
#define BEACONKV_ABI_VERSION 7

/* Status codes: 0 = success, negative = error. */
typedef enum beaconkv_status {
    BEACONKV_OK           = 0,
    BEACONKV_ERR_NULL     = -1, /* a required pointer was NULL                                  */
    BEACONKV_ERR_INVALID  = -2, /* bad argument or configuration value (message names the key)  */
    BEACONKV_ERR_HOST     = -3, /* a host callback failed (beaconkv_last_error says which)      */
    BEACONKV_ERR_PANIC    = -4  /* internal panic caught; the context is in fallback mode       */
} beaconkv_status;

/* Compression policy: every policy is a scorer; selection and eviction are shared. */
typedef enum beaconkv_policy {
    BEACONKV_POLICY_NONE      = 0, /* never evict (stats only)                                   */
    BEACONKV_POLICY_BEACON    = 1, /* FPS beacons rotated to the scoring position + recent queries */
    BEACONKV_POLICY_RECENT    = 2, /* last n_recent queries only                                  */
    BEACONKV_POLICY_STREAMING = 3, /* sinks (prefix) + recent window, no scoring (StreamingLLM)   */
    BEACONKV_POLICY_RANDOM    = 4, /* keep prefix + window, evict the middle uniformly (seeded)   */
    BEACONKV_POLICY_RKV       = 5  /* R-KV: recent queries' attention minus key redundancy        */
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
    int32_t  read_path;  /* [read]    beaconkv_read_path; AUTO (default): K in host memory is read in
                                      place, K elsewhere scored where it lives (host->score_keys) or,
                                      without it, copied (host->read_rows). COPY / BACKEND force one
                                      (testing, measuring)                                              */
    int32_t  score;      /* [score]   1 = prob: max of the query's attention probability (log-softmax
                                      over the cells); default. 0 = logit: max of q·k/sqrt(d) (the
                                      method as published)                                              */
    int32_t  prefix_max; /* [prefix_max] with prefix = prompt: at most this many of the prompt's first
                                      cells are protected; 0 = budget/4 (default). A value of at least
                                      min - window lifts the bound (the prefix is always capped there)  */
    int32_t  prompt_mode; /* [prompt] beaconkv_prompt_mode: what the budget bounds of a prompt; INSIDE:
                                      all of it, a long prompt is compressed while read. KEEP
                                      (default): its first prompt_max cells are kept on top of the budget.
                                      WINDOW: it is read into budget + prompt_max cells and compressed
                                      once at its end (its last queries and the beacons score it)       */
    int32_t  prompt_max; /* [prompt_max] prompt cells beyond the budget with KEEP or WINDOW; 0 = budget.
                                      The host's cache needs them: beaconkv_physical_cells counts them  */
    /* The archive: evicted cells' K and V rows kept in host memory and recalled into free cells
     * when the text returns to them: the newest recall_match tokens repeat an earlier passage, or a
     * turn quotes a phrase seen once before (recall_match = 0: when the newest queries attend to the
     * holes after a kept cell). Policies beacon and recent; needs host->read_kv, write_kv and
     * seq_place, else it stays off with one warning. */
    int32_t  archive;    /* [archive] most archived cells per sequence (--kv-archive); 0 = off (default).
                                      When full, the pages with the lowest scores are dropped for good */
    int32_t  archive_type; /* [archive_type] beaconkv_archive_type (same, q8_0, q4_0); default same      */
    int32_t  page;       /* [page]    consecutive positions per archive page (summary and recall
                                      unit); default 16                                                 */
    int32_t  recall_every; /* [recall_every] decode steps between targeted recall checks. A check
                                      finds where the text is being read from (see recall_match)
                                      and recalls the archived cells among the `page` positions
                                      after it in place of the weakest kept cells. 0 = no decode-step
                                      checks (compression passes and the end-of-turn quote check
                                      still recall); default 4                                          */
    float    recall_margin; /* [recall_margin] logits by which a check's best logit must beat the weakest
                                      kept cell's (0..1000, two decimals); default 2. Lower
                                      recalls more (a returning passage comes back sooner), higher
                                      disturbs ordinary text less (recall_match = 0 only)               */
    int32_t  recall_match; /* [recall_match] with token ids from the host (before_batch): a check
                                      recalls only when the newest recall_match tokens occurred
                                      earlier in the sequence, from the positions after that earlier
                                      occurrence, and a pass in the decode phase lets archived pages
                                      compete only after such a check; text that repeats nothing runs
                                      exactly as without the archive. The end of a prompt or user
                                      turn that quotes recall_match/2 (rounded up) tokens that
                                      occurred once before recalls them and what followed before it
                                      is computed. 0 (or no token ids) = the
                                      reading position is the kept cell the newest 4 queries attend
                                      most, which must beat the weakest kept one by recall_margin,
                                      else the archived pages with the best bounds are checked;
                                      0..1024, default 8                                                */
} beaconkv_params;

/* What the budget bounds of a prompt (params.prompt_mode). */
typedef enum beaconkv_prompt_mode {
    BEACONKV_PROMPT_INSIDE = 0, /* the prompt counts within the budget                           */
    BEACONKV_PROMPT_KEEP   = 1, /* its first prompt_max cells are kept on top of the budget      */
    BEACONKV_PROMPT_WINDOW = 2  /* read into budget + prompt_max cells, compressed at its end    */
} beaconkv_prompt_mode;

/* Where K is read and scored (params.read_path). */
typedef enum beaconkv_read_path {
    BEACONKV_READ_AUTO    = 0, /* in place where K is host memory, else on K's backend (score_keys)
                                  or, without it, copied row by row (read_rows)                   */
    BEACONKV_READ_COPY    = 1, /* K and queries always through read_rows                          */
    BEACONKV_READ_BACKEND = 2  /* K always scored on its backend (score_keys), even host memory   */
} beaconkv_read_path;

/* Element type of the archive (the cache's own K/V types are whatever the host uses). */
typedef enum beaconkv_archive_type {
    BEACONKV_ARCHIVE_SAME = 0, /* the cache's own row bytes: a recall restores them exactly */
    BEACONKV_ARCHIVE_Q8_0 = 1, /* quantised to q8_0 on the way in (about 1/2 of f16)         */
    BEACONKV_ARCHIVE_Q4_0 = 2  /* quantised to q4_0 on the way in (about 1/4 of f16)         */
} beaconkv_archive_type;

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
     * token (after_ubatch's q_row); row r starts at q_data + r*q_nb1.                       */
    const void * q_data; /* borrowed                                                    */
    size_t  q_nb1;
    bool    q_on_host;
    int32_t q_rows;      /* > 0: the store is a ring of q_rows rows (at least 2 * q_capacity lets
                            queries wait): each ubatch's rows follow the previous ubatch's, wrapping
                            at q_rows, so a row keeps its query until q_rows more are captured and
                            the plugin reads the rows of many decode steps at once.
                            0: rows start at 0 in every ubatch (read after each ubatch)        */

    /* RoPE applied to this layer's queries and keys (from the graph's ROPE node).
     * rope_n_dims == 0: no RoPE found, queries are scored as captured (no re-rotation). */
    int32_t rope_n_dims;
    int32_t rope_mode;   /* 0 = NORM, 2 = NEOX (libllama reports M-RoPE as NEOX, +inf factors on the
                            pairs text positions hold still); others are scored as captured */
    int32_t rope_n_ctx_orig;
    float   freq_base, freq_scale, ext_factor, attn_factor, beta_fast, beta_slow;
    const float * freq_factors; /* NULL or rope_n_dims/2 host floats, borrowed              */

    int32_t hadamard_n;  /* block size of the Hadamard rotation applied to stored K (0 = none) */
    uint64_t kv_bytes_per_cell; /* K+V bytes one cell costs in this layer (for statistics)   */

    /* V cache, for the archive (read_kv / write_kv): element type and values per cell. */
    int32_t v_type;      /* ggml_type value                                             */
    int32_t v_dim;       /* n_head_kv * head_dim_v                                      */
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
     * pos[] / cells[] and the sequence's stream to *stream; returns the total count.
     * cap == 0 asks for the count only (pos and cells are then NULL): the plugin asks this on every
     * decode step, so the host should answer it without listing or sorting cells. It lists
     * (cap > 0) only when it compresses. */
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
    /* Log sink (level: 1 = info, 2 = warn, 3 = error). May be NULL. */
    void    (*log)(void * user, int32_t level, const char * msg);

    /* The archive's three callbacks. Any may be NULL: params.archive then stays off (one warning).
     * read_kv: copy the cache's own bytes of n cells of `stream` in layer `layer`: k_out gets n K
     *   rows of row_size(k_type, n_head_kv*head_dim) bytes, v_out n V rows of row_size(v_type, v_dim)
     *   bytes (a transposed V is gathered into rows). Returns n.
     * write_kv: write n K and V rows into cells of `stream` in layer `layer`; format 0 = rows as
     *   read_kv gives them, 1 = F32 rows (n_head_kv*head_dim and v_dim values) that the host
     *   converts to the cache's types. Returns n.
     * seq_place: give n free cells of seq's stream the positions pos[] for seq (all or nothing);
     *   writes the cells to cells[] (caller-owned, n long). Returns n, < 0 when fewer than n cells
     *   are free. The plugin writes every layer's rows with write_kv before its hook returns. */
    int32_t (*read_kv)(void * user, int32_t layer, uint32_t stream, const uint32_t * cells, int32_t n,
                       void * k_out, void * v_out);
    int32_t (*write_kv)(void * user, int32_t layer, uint32_t stream, const uint32_t * cells, int32_t n,
                        int32_t format, const void * k, const void * v);
    int32_t (*seq_place)(void * user, int32_t seq, const int32_t * pos, int32_t n, uint32_t * cells);

    /* Scoring where K lives. May be NULL (K that is not host memory is then read with read_rows).
     * For each i < n_layers, layer layers[i] with n_query[i] queries per KV head: `queries` holds,
     * one layer after another, [n_head_kv][n_query[i]][head_dim] floats (rotated to their scoring
     * positions, Hadamard-rotated like K, scaled by 1/sqrt(head_dim)). Write, one layer after
     * another, [n_head_kv][n_cells] floats to `out` (caller-owned): per KV head and cell, the
     * largest q·k over the group's queries (mode 0), or of q·k less that query's log-sum-exp over
     * the n_cells cells (mode 1; -inf where every such probability underflows f32). Returns
     * n_layers. Must change nothing in the cache. */
    int32_t (*score_keys)(void * user, uint32_t stream, const uint32_t * cells, int32_t n_cells,
                          int32_t n_layers, const int32_t * layers, const int32_t * n_query,
                          const float * queries, int32_t mode, float * out);
    /* Reads the host made from device or remote buffers for this plugin so far (calls and bytes;
     * host memory read in place counts nothing). May be NULL (the counters then stay 0). */
    void    (*transfers)(void * user, uint64_t * n_reads, uint64_t * bytes);
} beaconkv_host;

/* The hooks below as one table of callbacks whose first argument is the context (ud), filled by
 * beaconkv_context_plugin. Its layout is that of llama.cpp's llama_kv_plugin (llama-kv-plugin.h, patch
 * series), so a host built on that interface hands it over as it is. Each entry forwards to the
 * function of the same name: before_batch, after_ubatch, after_decode, seq_removed, seq_copied;
 * state_get(ud, seq, NULL, 0) = beaconkv_seq_state_size, state_get(ud, seq, dst, size) =
 * beaconkv_seq_state_get; state_set(ud, seq, src, size) = beaconkv_seq_state_set, or with size 0
 * a reset of seq (beaconkv_seq_removed(seq, -1, -1)); free = beaconkv_context_free. */
typedef struct beaconkv_plugin {
    void *  ud;          /* the beaconkv_context *                                      */
    int32_t q_capacity;  /* query rows the host captures per ubatch (params qcap); its
                            store holds at least this many (see beaconkv_layer.q_rows) */
    int32_t (*before_batch)(void * ud, int32_t n_seq, const int32_t * seq_ids, const int32_t * n_new,
                            const int32_t * n_outputs, int32_t n_tokens, const int32_t * pos,
                            const int32_t * seq_id, const int32_t * token);
    int32_t (*after_ubatch)(void * ud, int32_t n_tokens, const int32_t * pos, const int32_t * seq_id,
                            const int32_t * q_row);
    int32_t (*after_decode)(void * ud);
    void    (*seq_removed)(void * ud, int32_t seq, int32_t p0, int32_t p1);
    void    (*seq_copied)(void * ud, int32_t seq_src, int32_t seq_dst, int32_t p0, int32_t p1);
    int64_t (*state_get)(void * ud, int32_t seq, uint8_t * dst, size_t size);
    int32_t (*state_set)(void * ud, int32_t seq, const uint8_t * src, size_t size);
    void    (*free)(void * ud);
} beaconkv_plugin;

/* Per-sequence statistics (seq = -1: totals over all sequences). */
typedef struct beaconkv_stats {
    int32_t  seq;
    int32_t  cells_in_use;     /* cells the sequence holds now                                 */
    int32_t  cells_peak;       /* most cells it ever held after a decode call                  */
    int32_t  prefix_len;       /* protected prefix in cells (prompt = keep: the kept prompt)   */
    int32_t  pos_max;          /* highest position seen                                        */
    uint64_t n_tokens;         /* tokens seen (prompt + generated)                             */
    uint64_t evicted;          /* cells evicted                                                */
    uint64_t compress_events;  /* compression passes                                           */
    uint64_t kv_bytes_saved;   /* bytes of K+V the evicted cells occupied (all layers)         */
    double   ms_capture;       /* time reading/un-rotating queries and FPS                     */
    double   ms_score;         /* time scoring and selecting                                   */
    double   ms_evict;         /* time in host->seq_evict                                      */
    int32_t  disabled;         /* 1 if the configured policy does not run (= !beaconkv_is_enabled) */
    int32_t  fallback;         /* 1 if the context evicts by position only in its place        */
    uint64_t archived;         /* evicted cells held in the archive now                        */
    uint64_t recalled;         /* archived cells placed back into the cache                    */
    uint64_t archive_dropped;  /* archived cells dropped for good (archive full)               */
    uint64_t archive_bytes;    /* host memory the archive's rows, summaries and token ids take */
    double   ms_recall;        /* time archiving, checking and recalling                       */
    uint64_t reads_pass;       /* reads from device/remote buffers in compression passes       */
    uint64_t bytes_pass;       /* bytes those reads moved to the host                          */
    uint64_t reads_capture;    /* reads of captured queries (counted on the ubatch's first
                                  sequence)                                                    */
    uint64_t bytes_capture;    /* bytes those reads moved to the host                          */
    int32_t  cells_allowed;    /* cells it may hold now: the budget plus the prompt cells that
                                  prompt = keep | window allows beyond it                      */
} beaconkv_stats;

/* Model description for KV memory accounting (the reference implementation's calc_kv_cache_memory, generalised). */
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
 * prefix = prompt, at most prefix_max = budget/4 of it). */
beaconkv_params beaconkv_params_default(void);

/* Apply a spec string "key=value,key=value" (keys in brackets above; policy may also be given
 * alone, e.g. "beacon") on top of *params. On error returns BEACONKV_ERR_INVALID, leaves *params
 * unchanged and writes a message naming the key and the allowed range into err (NUL-terminated,
 * truncated to err_len; err may be NULL). */
int32_t beaconkv_params_parse(const char * spec, beaconkv_params * params, char * err, size_t err_len);

/* Check a params struct (same rules and messages as the parser). */
int32_t beaconkv_params_validate(const beaconkv_params * params, char * err, size_t err_len);

/* Check the value of one command-line flag on its own, as the flag is read: key_value is one
 * "key=value" item (or a bare policy name, or a comma-separated list of items, as
 * --kv-compress-spec takes). Checks the syntax, that every key is known and given once, and each
 * value's own rules (integer range, budget >= 1, odd span, qcap >= 1, policy and reduce names);
 * rules between keys (window + prefix < budget, ...) are left to beaconkv_spec_check, once every
 * flag is read. On error returns BEACONKV_ERR_INVALID with a message that starts with `flag` (e.g.
 * "--kv-window: beaconkv: window: '-1' is negative; allowed range 0..=2147483647"); flag may be
 * NULL, then the flag that sets the key is named as beaconkv_spec_check does. key_value is
 * required (BEACONKV_ERR_NULL). */
int32_t beaconkv_check_flag_value(const char * flag, const char * key_value, char * err, size_t err_len);

/* Check a whole spec on top of the defaults (every rule, the rules between keys included).
 * On error returns BEACONKV_ERR_INVALID with a message that starts with the command-line flag that
 * sets the offending key: policy -> --kv-compress, budget -> --kv-budget, beacons -> --kv-beacons,
 * recent -> --kv-recent, window -> --kv-window, prefix -> --kv-prefix, prompt -> --kv-prompt,
 * prompt_max -> --kv-prompt-max, archive -> --kv-archive,
 * any other key K -> "--kv-compress-spec K=", e.g. "--kv-window: beaconkv: window: window + prefix = 80 must be <
 * budget (64); allowed range 0..=63". spec is required (BEACONKV_ERR_NULL). */
int32_t beaconkv_spec_check(const char * spec, char * err, size_t err_len);

/* Write the canonical spec string of params into buf (NUL-terminated, truncated to len).
 * Returns the full length needed (excluding NUL), or < 0 on error. */
int32_t beaconkv_params_format(const beaconkv_params * params, char * buf, size_t len);

/* Name of a policy ("none", "beacon", ...), static storage; "unknown" for bad values. */
const char * beaconkv_policy_name(int32_t policy);

/* ---- sizing the host's cache ------------------------------------------------------------- */

/* K+V bytes one token costs for the given model description (0 on bad input). */
uint64_t beaconkv_kv_bytes_per_token(const beaconkv_model_desc * desc);

/* Bytes of one row of n values of ggml type `type` (0 if the type is unknown). */
uint64_t beaconkv_row_size(int32_t type, int64_t n);

/* Largest n_ubatch the host should use with params: a ubatch must fit in the slack the physical
 * cache has beyond the budgets (every token of a decode call is placed before any is computed, and
 * beaconkv_before_batch makes room before placement). Returns max(budget/8, 32); 0 for policy NONE
 * (no limit: it evicts nothing); BEACONKV_ERR_NULL / BEACONKV_ERR_INVALID for NULL / invalid
 * params. The host clamps n_ubatch, and n_batch to n_ubatch, before sizing its cache; a host that
 * needs larger batches (speculative verification: 1 + drafts tokens in one call) may keep a larger
 * n_ubatch, and beaconkv_physical_cells gives it the matching slack. */
int32_t beaconkv_max_ubatch(const beaconkv_params * params);

/* Prompt cells a sequence may hold beside its budget under params: prompt_max (0: the budget) with
 * prompt=keep or window, 0 with prompt=inside; a sequence holds at most budget + this many cells
 * between passes (plus the ubatch being placed). BEACONKV_ERR_NULL / BEACONKV_ERR_INVALID for NULL
 * / invalid params. */
int32_t beaconkv_prompt_room(const beaconkv_params * params);

/* Physical KV cells the host should allocate, all streams together (llama.cpp's n_ctx_cells), for
 * n_seq sequences, ubatches of n_ubatch tokens (normally clamped to beaconkv_max_ubatch) and a
 * unified cache (one stream) or one stream per sequence.
 *   per stream = the budgets of the sequences it holds (n_seq * budget unified, budget otherwise)
 *                + a slack of n_ubatch cells (one ubatch is placed before it is computed),
 * rounded up to a multiple of 256 cells (what ggml's CUDA flash-attention kernels prefer) or else
 * of 32, each only while the result stays within budget(s) + max(n_ubatch, budget/8, 32);
 * otherwise exact.
 * kv_cells_override > 0 (--kv-cells) is returned as given. n_ctx_logical is the logical context
 * over all sequences (llama.cpp's n_ctx; 0 = unknown). Returns 0 = no gain, allocate the logical
 * context, when a stream would be as large as the logical one (llama.cpp pads n_ctx, and
 * n_ctx / n_seq per stream, to 256), for policy NONE, and for NULL or invalid params. This is the
 * size to allocate as it is: rounding it up further (to 256 a stream) only costs memory. */
uint32_t beaconkv_physical_cells(const beaconkv_params * params, int32_t n_seq, int32_t n_ubatch,
                                 bool unified, uint32_t n_ctx_logical, int32_t kv_cells_override);

/* ---- context ------------------------------------------------------------------------------- */

/* Create a context. params and host are copied; host->user must outlive the context.
 * Returns NULL on error with a message in err (which may be NULL). */
beaconkv_context * beaconkv_context_new(const beaconkv_params * params, const beaconkv_host * host,
                                        char * err, size_t err_len);

/* Release a context (NULL is a no-op). For an evicting policy it first logs one info line through
 * host->log: "kv compression summary: cells peak N over all sequences, E cells evicted in P passes,
 * plugin T ms". */
void beaconkv_context_free(beaconkv_context * ctx);

/* Fill *out with the plugin table of ctx (see beaconkv_plugin). ctx stays owned by the caller until
 * the caller hands out->ud to a host that calls out->free (llama_kv_plugin_attach does, once it
 * succeeded). Returns BEACONKV_OK, BEACONKV_ERR_NULL for a NULL ctx or out. */
int32_t beaconkv_context_plugin(beaconkv_context * ctx, beaconkv_plugin * out);

/* Copy the effective params of ctx into *out. */
int32_t beaconkv_context_params(const beaconkv_context * ctx, beaconkv_params * out);

/* Re-read the host's layer descriptions, e.g. after the host reallocated its KV cache or query
 * store. The context also re-reads them by itself whenever host->n_layers() changes. Query state
 * of every sequence is reset when the layer shapes change. */
int32_t beaconkv_refresh_layers(beaconkv_context * ctx);

/* ---- hooks the host calls ------------------------------------------------------------------ */

/* Before a decode call places its tokens: n_new[i] tokens will be added to sequence seq_ids[i],
 * n_outputs[i] of them requesting logits (n_outputs may be NULL when the host does not know).
 * The batch's tokens one by one: token i has id token[i] and position pos[i] in sequence
 * seq_id[i] (its first sequence). token may be NULL (a batch of embeddings, or a host that does not
 * tell; pos and seq_id are then not read): with an archive, the ids tell a passage being re-read
 * (recall_match), and the end of a prompt or user turn (several tokens asking for one output, or a
 * lone token after chunks that asked for none) that quotes a phrase that occurred once before gets
 * that phrase and the archived text after it back before it is computed. All arrays are borrowed
 * for the call.
 * Compresses sequences that would pass their budget, to min(budget_min, budget - n_new[i]) cells.
 * Best effort: it never evicts the protected prefix or the window, so a batch larger than
 * budget - prefix - window may still not fit; it then returns BEACONKV_OK all the same and the host
 * fails placement with its own message. A host callback failure for one sequence does not keep the
 * others from being served; the call then returns BEACONKV_ERR_HOST.
 * A sequence's prompt phase ends at its first generation step: a call that brings it exactly one
 * token, or asks for logits of more than one (speculative verification). */
int32_t beaconkv_before_batch(beaconkv_context * ctx, int32_t n_seq, const int32_t * seq_ids,
                              const int32_t * n_new, const int32_t * n_outputs, int32_t n_tokens,
                              const int32_t * pos, const int32_t * seq_id, const int32_t * token);

/* After each ubatch was computed: token i has position pos[i] in sequence seq_id[i] (its first
 * sequence) and its query sits in row q_row[i] of every layer's query store (-1 = not captured).
 * All arrays are borrowed for the call. The plugin calls host->synchronize before reading. A
 * failed query read moves the context to fallback mode and returns BEACONKV_ERR_HOST. */
int32_t beaconkv_after_ubatch(beaconkv_context * ctx, int32_t n_tokens, const int32_t * pos,
                              const int32_t * seq_id, const int32_t * q_row);

/* At the end of a successful decode call: sequences above their budget are compressed. */
int32_t beaconkv_after_decode(beaconkv_context * ctx);

/* The host removed positions [p0, p1) of seq (p0 < 0: from 0; p1 < 0: to the end); seq < 0: all
 * sequences. Whole-sequence removal drops the plugin's state of that sequence (with the budget and
 * policy beaconkv_seq_override set for it); a range drops the queries captured there, and a removed
 * tail lowers the sequence's pos_max and prompt length (a tail removed from a point
 * beaconkv_seq_reuse_point returned gives the state a fresh sequence has there).
 * Honoured in every mode, fallback included. */
void beaconkv_seq_removed(beaconkv_context * ctx, int32_t seq, int32_t p0, int32_t p1);

/* The host copied positions [p0, p1) of seq_src into seq_dst (p0 < 0: from 0; p1 < 0: to the end),
 * as llama_memory_seq_cp. A whole copy (p0 < 0 or 0, p1 < 0; llama-server's fork) replaces the
 * destination's state with the source's. A range copy into a sequence the context does not know
 * gives it the source's state restricted to the range (recent queries outside it are dropped;
 * beacons carry no position and are kept); a range copy into a known sequence keeps the
 * destination's query state and raises its pos_max to the copied range. Negative ids and
 * seq_src == seq_dst are ignored. Honoured in every mode, fallback included. */
void beaconkv_seq_copied(beaconkv_context * ctx, int32_t seq_src, int32_t seq_dst, int32_t p0, int32_t p1);

/* Prompt reuse. A host about to keep the first n_past positions of seq and compute the rest of a new
 * prompt (llama-server's prompt cache) keeps the returned count instead (<= n_past), then removes
 * the positions from it on (beaconkv_seq_removed): seq then continues exactly as a fresh sequence
 * given the same prompt. The count is the last point of the prompt, below every eviction, where the
 * plugin copied its query state (every 256 positions, coarser past 1024; none in a restored state),
 * or 0; it is n_past itself when that is already exact, for an unknown sequence, and when the kept
 * part reaches past the prompt into generated text (a new turn keeps the compressed history).
 * Returns BEACONKV_ERR_NULL for a NULL ctx, BEACONKV_ERR_PANIC on a caught panic: keep n_past then. */
int32_t beaconkv_seq_reuse_point(const beaconkv_context * ctx, int32_t seq, int32_t n_past);

/* ---- a sequence's own budget and policy ---------------------------------------------------- */

/* One sequence may run with a smaller budget or another policy than its context (e.g. one request
 * of a server), within what the context's cache and query capture allow. budget 0 means the
 * context's budget, policy -1 the context's policy; n_ctx_seq is the most positions the sequence
 * may reach (the host's logical context per sequence; 0 = unknown). The rules:
 *  - budget: at most the context's budget (the cache is sized for it) and at least the smallest
 *    budget the context's other settings allow: min (budget*7/8 unless the context sets min) must
 *    hold window + prefix + 1 cells. A min or prefix_max the context sets keeps its share of the
 *    budget (min * budget / the context's budget).
 *  - policy: the context's, or one that reads nothing the context's policy does not record:
 *    streaming and random read positions only; beacon (FPS beacons) and recent (a ring of the
 *    newest queries) record different queries, so each runs only on its own context. With an
 *    archive, only the context's policy.
 *  - none keeps every cell: allowed only when 0 < n_ctx_seq <= the context's budget (the sequence
 *    cannot outgrow the cells sized for it), or when the context's policy is none.
 * On error both functions return BEACONKV_ERR_INVALID with a message that starts with
 * "beaconkv: budget: " or "beaconkv: policy: " and gives the allowed range or values, e.g.
 * "beaconkv: budget: 50 is below the smallest budget these settings allow, 75 (min: 43 (budget*7/8
 * when 0) must be >= window + prefix + 1 = 65); allowed range 75..=1024". */

/* Check budget and policy for a sequence of a context made with params (borrowed; the context's
 * effective params, e.g. from beaconkv_context_params or a parsed spec), without a context.
 * Writes the message into err ("" on success). BEACONKV_ERR_NULL for NULL params;
 * BEACONKV_ERR_INVALID also when params themselves are invalid (the message names their key). */
int32_t beaconkv_seq_override_check(const beaconkv_params * params, int32_t budget, int32_t policy,
                                    uint32_t n_ctx_seq, char * err, size_t err_len);

/* Run sequence seq (>= 0) of ctx with budget and policy from the next hook on: its compression
 * passes run when it passes that budget, down to its min, with that policy's scorer. budget 0 and
 * policy -1 together return it to the context's settings. The setting is part of the sequence's
 * state: it lasts until the host removes the whole sequence (beaconkv_seq_removed with p0 <= 0 and
 * p1 < 0), or sets another; a copy (beaconkv_seq_copied) that gives the destination the source's
 * state passes it on, and beaconkv_seq_state_set keeps it (it is not saved in the blob). Checks as
 * beaconkv_seq_override_check; on error nothing changes and beaconkv_last_error says why
 * ("beaconkv_seq_override: beaconkv: budget: ..."). Returns BEACONKV_OK, BEACONKV_ERR_INVALID,
 * BEACONKV_ERR_NULL for a NULL ctx, BEACONKV_ERR_PANIC on a caught panic. */
int32_t beaconkv_seq_override(beaconkv_context * ctx, int32_t seq, int32_t budget, int32_t policy,
                              uint32_t n_ctx_seq);

/* Copy the params sequence seq runs with into *out: the context's (as beaconkv_context_params),
 * with the budget, min, prefix_max and policy beaconkv_seq_override set for it, if any. An unknown
 * sequence reports the context's. BEACONKV_ERR_NULL for a NULL ctx or out. */
int32_t beaconkv_seq_params(const beaconkv_context * ctx, int32_t seq, beaconkv_params * out);

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

/* Where the scored layers' K is read, as of the last layer description (beaconkv_refresh_layers
 * or a hook): "in place" (host memory read by the library), "backend" (scored on K's own backend
 * through host->score_keys), "copy" (rows copied through host->read_rows), each with its layer
 * count, e.g. "backend (30 layers)"; "none" when no layer is scored. Writes at most len bytes
 * (NUL-terminated) to buf (caller-owned; may be NULL with len 0); returns the full length, < 0
 * for a NULL ctx. */
int32_t beaconkv_scoring_path(const beaconkv_context * ctx, char * buf, size_t len);

/* Whether the configured policy runs: false in fallback mode (after a panic or a failed read, or
 * while no layer can be scored) and for a NULL ctx. */
bool beaconkv_is_enabled(const beaconkv_context * ctx);

/* Message of the most recent failure on ctx ("" if none; at most 1023 bytes, longer messages are
 * truncated). The pointer is owned by ctx and stays valid until beaconkv_context_free(ctx); the
 * text it points to is replaced in place when a later call on ctx fails. Read it on the thread that
 * made the failing call, with no other thread calling into ctx meanwhile; otherwise use
 * beaconkv_last_error_copy. NULL ctx -> "" (static storage). */
const char * beaconkv_last_error(const beaconkv_context * ctx);

/* Copy the message of beaconkv_last_error into buf (cap bytes, caller-owned, NUL-terminated,
 * truncated; buf may be NULL when cap is 0), consistently even while other threads use ctx.
 * Returns the message's full length in bytes (without the NUL), BEACONKV_ERR_NULL for a NULL ctx. */
int32_t beaconkv_last_error_copy(const beaconkv_context * ctx, char * buf, size_t cap);

#ifdef __cplusplus
}
#endif

#endif /* BEACONKV_H */
