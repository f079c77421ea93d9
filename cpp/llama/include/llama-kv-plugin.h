#pragma once

// Generic KV-cache plugin host interface (BeaconKV patch series).
//
// A plugin decides which cells of a sequence to drop; libllama owns the memory and performs the
// eviction. libllama knows nothing about any particular plugin: it captures each attention layer's
// queries into a per-layer query store, describes the layers, lists and evicts cells, and calls the
// hooks below from llama_decode.
//
// Only the attention cache that can be evicted by cell is exposed:
//   llama_kv_cache (plain)                -> all its layers
//   llama_kv_cache_iswa                   -> the base (non-SWA) cache only
//   llama_memory_hybrid                   -> the attention cache (the newest cell of a sequence is never evicted)
//   llama_memory_hybrid_iswa              -> the base cache of its attention part (same rule)
// anything else (recurrent only, DSA/DSv4/MSA, caches sharing cells with another context) is refused.
//
// While a plugin is attached the memory reports llama_memory_can_shift() == false (positions are the plugin's
// keys; tools then turn context shift and cache reuse off), llama_memory_seq_add/seq_div reset the plugin's state
// of that sequence (one warning), and llama_memory_seq_keep tells it the other sequences are gone.

#include "llama.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

// one attention layer of the evictable cache; same fields and meaning as beaconkv_layer (beaconkv.h)
struct llama_kv_plugin_layer {
    int32_t il;          // model layer index
    int32_t head_dim;    // K head size (n_embd_head_k)
    int32_t n_head;      // query heads
    int32_t n_head_kv;   // KV heads

    // K cache: row of cell c, stream s, kv head h starts at k_data + s*k_nb2 + c*k_nb1 + h*row_size(k_type, head_dim)
    const void * k_data;
    int32_t k_type;      // enum ggml_type
    size_t  k_nb1;       // bytes between cells
    size_t  k_nb2;       // bytes between streams
    bool    k_on_host;   // k_data is host memory (else use llama_kv_plugin_read_rows)

    // query store: F32 rows of n_head*head_dim values (post-RoPE, pre-Hadamard); row r at q_data + r*q_nb1
    const void * q_data;
    size_t  q_nb1;
    bool    q_on_host;
    int32_t q_rows;      // rows of the store, a ring: each ubatch's rows follow the previous ubatch's

    // RoPE of this layer (from the graph's ROPE node); rope_n_dims == 0: none found
    int32_t rope_n_dims;
    int32_t rope_mode;
    int32_t rope_n_ctx_orig;
    float   freq_base, freq_scale, ext_factor, attn_factor, beta_fast, beta_slow;
    const float * freq_factors; // NULL or rope_n_dims/2 floats (host copy owned by libllama)

    int32_t  hadamard_n;        // block size of the Hadamard rotation applied to stored K (0 = none)
    uint64_t kv_bytes_per_cell; // K+V bytes one cell costs in this layer

    // V cache (for llama_kv_plugin_read_kv / write_kv): element type and values per cell (n_head_kv * head_dim_v)
    int32_t v_type;      // enum ggml_type
    int32_t v_dim;
};

struct llama_kv_plugin {
    void * ud;
    int32_t q_capacity;   // queries captured per ubatch, >= 1 (the store is a ring of 2 * q_capacity rows)

    // before the tokens of a llama_decode call are placed: n_new[i] tokens go to seq_ids[i], n_outputs[i] of
    // them request logits (a prompt chunk requests at most one; a generation step or a speculative
    // verification batch requests one per token); token i of the batch has id token[i] and position pos[i] in
    // its first sequence seq_id[i] (token is NULL for a batch of embeddings)
    int32_t (*before_batch)(void * ud, int32_t n_seq, const llama_seq_id * seq_ids, const int32_t * n_new,
                            const int32_t * n_outputs, int32_t n_tokens, const llama_pos * pos,
                            const llama_seq_id * seq_id, const llama_token * token);
    // after each ubatch was submitted: token i has position pos[i] in its first sequence seq_id[i] and its
    // query in row q_row[i] of every layer's query store (-1 = not captured); call the host's synchronize
    // (llama_synchronize) before reading K or the query store
    int32_t (*after_ubatch)(void * ud, int32_t n_tokens, const llama_pos * pos, const llama_seq_id * seq_id,
                            const int32_t * q_row);
    // at the end of a successful llama_decode call
    int32_t (*after_decode)(void * ud);
    // positions [p0, p1) of seq were removed (llama_memory_seq_rm / clear; seq < 0: all sequences)
    void    (*seq_removed)(void * ud, llama_seq_id seq, llama_pos p0, llama_pos p1);
    // positions [p0, p1) of src were copied to dst (llama_memory_seq_cp)
    void    (*seq_copied)(void * ud, llama_seq_id src, llama_seq_id dst, llama_pos p0, llama_pos p1);
    // the plugin's state of seq rides inside llama_state_seq_* (whole-sequence saves, not PARTIAL_ONLY ones), so a
    // restored sequence continues exactly: state_get(ud, seq, NULL, 0) returns the bytes needed, state_get(ud, seq,
    // dst, size) writes them and returns the count; < 0 on error. state_set replaces the state of seq with such a blob
    // (size 0: reset seq to a fresh state); 0 ok, < 0 error. Either may be NULL (the sequence is then reset on restore).
    int64_t (*state_get)(void * ud, llama_seq_id seq, uint8_t * dst, size_t size);
    int32_t (*state_set)(void * ud, llama_seq_id seq, const uint8_t * src, size_t size);
    // called on detach / context free (may be NULL)
    void    (*free)(void * ud);
};

// the host side of the seam as one table of callbacks (user = the context); same layout as a plugin's host table
// (e.g. beaconkv_host), so a plugin takes it as it is. Each entry forwards to the llama_kv_plugin_* function of the
// same name below; log (level 1 info, 2 warn, 3 error) goes to llama.cpp's log.
struct llama_kv_plugin_host {
    void * user;
    int32_t (*n_layers)   (void * user);
    int32_t (*get_layer)  (void * user, int32_t i, struct llama_kv_plugin_layer * out);
    int32_t (*seq_cells)  (void * user, llama_seq_id seq, llama_pos * pos, uint32_t * cells, int32_t cap, uint32_t * stream);
    int32_t (*seq_evict)  (void * user, llama_seq_id seq, const uint32_t * cells, int32_t n);
    void    (*synchronize)(void * user);
    int32_t (*read_rows)  (void * user, int32_t layer, int32_t what, uint32_t stream, const uint32_t * rows, int32_t n, float * out);
    void    (*log)        (void * user, int32_t level, const char * msg);
    int32_t (*read_kv)    (void * user, int32_t layer, uint32_t stream, const uint32_t * cells, int32_t n, void * k_out, void * v_out);
    int32_t (*write_kv)   (void * user, int32_t layer, uint32_t stream, const uint32_t * cells, int32_t n, int32_t format, const void * k, const void * v);
    int32_t (*seq_place)  (void * user, llama_seq_id seq, const llama_pos * pos, int32_t n, uint32_t * cells);
    int32_t (*score_keys) (void * user, uint32_t stream, const uint32_t * cells, int32_t n_cells, int32_t n_layers,
                           const int32_t * layers, const int32_t * n_query, const float * queries, int32_t mode, float * out);
    void    (*transfers)  (void * user, uint64_t * n_reads, uint64_t * bytes);
};

// the host table of ctx (valid while ctx lives; the plugin need not be attached yet: n_layers is 0 until it is)
LLAMA_API struct llama_kv_plugin_host llama_kv_plugin_get_host(struct llama_context * ctx);

// ud of the plugin attached to ctx, NULL if none
LLAMA_API void * llama_kv_plugin_get_ud(const struct llama_context * ctx);

// attach a plugin (the struct is copied; any previous plugin is detached first)
// returns 0 on success; < 0 (and logs one warning naming the reason) if the memory layout is unsupported,
// in which case nothing is attached and the caller runs uncompressed
LLAMA_API int32_t llama_kv_plugin_attach(struct llama_context * ctx, const struct llama_kv_plugin * p);
LLAMA_API void    llama_kv_plugin_detach(struct llama_context * ctx);

// number of attention layers of the evictable cache (0 if no plugin is attached)
LLAMA_API int32_t llama_kv_plugin_n_layers(struct llama_context * ctx);
// physical cells per stream of the evictable cache (0 if no plugin is attached)
LLAMA_API uint32_t llama_kv_plugin_n_cells(struct llama_context * ctx);
// describe layer i; the RoPE fields are filled once a graph was built (after the first decode); 0 ok, < 0 error
LLAMA_API int32_t llama_kv_plugin_get_layer(struct llama_context * ctx, int32_t i, struct llama_kv_plugin_layer * out);

// cells of seq sorted by position: writes min(cap, total) entries to pos[] / cells[] and the stream of seq to
// *stream (may be NULL); returns the total count, < 0 on error. cap == 0 (pos and cells may be NULL) only counts:
// no sort, no allocation (the per-token path)
LLAMA_API int32_t llama_kv_plugin_seq_cells(struct llama_context * ctx, llama_seq_id seq, llama_pos * pos, uint32_t * cells, int32_t cap, uint32_t * stream);
// remove seq from the given cells of its stream (a cell is freed when no sequence holds it any more);
// returns the number of cells affected, < 0 on error
LLAMA_API int32_t llama_kv_plugin_seq_evict(struct llama_context * ctx, llama_seq_id seq, const uint32_t * cells, int32_t n);
// copy rows as F32: what = 0: K rows of cells `rows` in `stream` (n_head_kv*head_dim floats each, dequantised,
// still Hadamard-rotated); what = 1: query-store rows (n_head*head_dim floats each). returns n, < 0 on error
LLAMA_API int32_t llama_kv_plugin_read_rows(struct llama_context * ctx, int32_t layer, int32_t what, uint32_t stream, const uint32_t * rows, int32_t n, float * out);

// archive support: evicted cells can be saved and placed back later (the same placement llama.cpp's state restore does)
// copy the cache's own bytes of n cells of `stream` in layer `layer`: k_out gets n K rows of
// ggml_row_size(k_type, n_head_kv*head_dim) bytes, v_out n V rows of ggml_row_size(v_type, v_dim) bytes (a transposed
// V cache is gathered into rows; either output may be NULL). returns n, < 0 on error
LLAMA_API int32_t llama_kv_plugin_read_kv(struct llama_context * ctx, int32_t layer, uint32_t stream, const uint32_t * cells, int32_t n, void * k_out, void * v_out);
// write n K and V rows into cells of `stream` in layer `layer` (k or v may be NULL: left as they are).
// format 0: rows as read_kv gives them (the cache's types); format 1: F32 rows (n_head_kv*head_dim and v_dim values),
// converted to the cache's types. returns n, < 0 on error
LLAMA_API int32_t llama_kv_plugin_write_kv(struct llama_context * ctx, int32_t layer, uint32_t stream, const uint32_t * cells, int32_t n, int32_t format, const void * k, const void * v);
// give n free cells of seq's stream the positions pos[] for seq (their K/V rows are then written with write_kv
// before the next decode); writes the chosen cells to cells[]. returns n; < 0 if fewer than n cells are free or a
// position is negative (nothing is placed then)
LLAMA_API int32_t llama_kv_plugin_seq_place(struct llama_context * ctx, llama_seq_id seq, const llama_pos * pos, int32_t n, uint32_t * cells);

// scoring on the backend that holds K (one ggml graph for all the given layers; K never comes to the host):
// for each i < n_layers, plugin layer layers[i] with n_query[i] queries per KV head, laid out one layer after
// another in `queries` as [n_head_kv][n_query[i]][head_dim] (as the layer's attention would see them: rotated,
// Hadamard-rotated like K, scaled). Writes, layer after layer, [n_head_kv][n_cells] floats to `out`: the largest
// q.k over the group's queries (mode 0), or of q.k less that query's log-sum-exp over the cells (mode 1; -inf
// where every such probability underflows F32).
// returns n_layers, < 0 on error (nothing is evicted or changed either way)
LLAMA_API int32_t llama_kv_plugin_score_keys(struct llama_context * ctx, uint32_t stream, const uint32_t * cells, int32_t n_cells,
                                             int32_t n_layers, const int32_t * layers, const int32_t * n_query,
                                             const float * queries, int32_t mode, float * out);
// reads from backend (non-host) buffers made for the plugin since it was attached: calls and bytes (either may be NULL)
LLAMA_API void    llama_kv_plugin_transfers(struct llama_context * ctx, uint64_t * n_reads, uint64_t * bytes);

#ifdef __cplusplus
}
#endif
