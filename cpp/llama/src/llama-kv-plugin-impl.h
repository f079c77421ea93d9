#pragma once

// internal side of the KV plugin host (see include/llama-kv-plugin.h), defined in llama-kv-plugin.cpp (registry,
// attach, host table), llama-kv-plugin-capture.cpp (query capture), llama-kv-plugin-hooks.cpp (decode hooks,
// sequence state), llama-kv-plugin-cells.cpp (cells and rows) and llama-kv-plugin-score.cpp (scoring)

#include "llama-kv-plugin.h"
#include "llama-cparams.h"
#include "llama-hparams.h"

#include "ggml.h"
#include "ggml-backend.h"
#include "ggml-cpp.h"

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <utility>
#include <vector>

struct llama_context;
struct llama_ubatch;
struct llm_graph_context;
struct llama_memory_i;
class  llama_kv_cache;

// the cache internals the plugin edits (a friend of llama_kv_cache)
struct llama_kv_plugin_access {
    // another cache owns the cells (shared with a second context): the plugin must not edit them
    static bool has_shared_cells(const llama_kv_cache & kv);

    static ggml_tensor * v_storage(const llama_kv_cache & kv, int32_t il);

    static bool v_trans(const llama_kv_cache & kv);

    // remove seq_id from the given cells of its stream, O(n); returns the number of cells affected
    static int32_t seq_rm_cells(llama_kv_cache & kv, llama_seq_id seq_id, const uint32_t * idxs, int32_t n);

    // give n empty cells of seq_id's stream the positions pos[] for seq_id (all or nothing); returns n or -1
    static int32_t seq_place_cells(llama_kv_cache & kv, llama_seq_id seq_id, const llama_pos * pos, int32_t n, uint32_t * idxs);
};

struct llama_kv_plugin_state {
    struct layer {
        int32_t il = -1;

        ggml_tensor * q_store = nullptr; // F32 [n_embd_head_k*n_head, q_ring + 1], last row = trash: a view of
                                         // its group's store, whose rows hold every layer of the group side by side
        int32_t q_group  = -1;           // index in q_groups
        size_t  q_offset = 0;            // first float of this layer in a row of the group's store

        // recorded from the graph (first build that contains the layer)
        bool    rope_recorded = false;
        int32_t rope_n_dims   = 0;
        int32_t rope_mode     = 0;
        int32_t rope_n_ctx_orig = 0;
        float   rope_f[6]     = { 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f }; // freq_base, freq_scale, ext_factor, attn_factor, beta_fast, beta_slow
        std::vector<float> freq_factors;
        int32_t hadamard_n    = 0;
    };

    llama_kv_plugin_state(llama_context * lctx, const llama_kv_plugin & plugin);
    ~llama_kv_plugin_state();

    llama_context  * lctx  = nullptr;
    llama_kv_plugin  plugin;

    llama_memory_i * mem = nullptr; // the context's memory (registered for seq_rm/seq_cp notifications)
    llama_kv_cache * kv  = nullptr; // the evictable attention cache
    bool protect_last    = false;   // hybrid: never evict the newest cell of a sequence

    uint64_t generation = 0;        // unique per attach (graph inputs compare it for reuse)

    std::vector<layer> layers;
    std::unordered_map<int32_t, int32_t> il_to_layer;

    std::vector<std::pair<ggml_context_ptr, ggml_backend_buffer_ptr>> ctxs_bufs;

    // query stores, one per K buffer type: row r holds row r of every layer of the group, so the rows of a
    // ubatch come to the host in one read for all layers (llama_kv_plugin_read_rows keeps them in `mirror`)
    struct q_group {
        ggml_tensor *      store = nullptr; // F32 [sum of the layers' n_embd_q, q_ring + 1]
        std::vector<float> mirror;          // rows lo..hi of store, read in ubatch `epoch`
        int64_t            lo = 0, hi = -1;
        uint64_t           epoch = 0;
    };
    std::vector<q_group> q_groups;
    uint64_t q_epoch = 1; // advanced before every after_ubatch hook: the query stores have new rows

    // the stores' rows are a ring: each ubatch's captured rows follow the previous ubatch's, so the plugin
    // can leave the rows of several decode steps unread and read them together (beaconkv_layer.q_rows)
    int32_t q_ring   = 0;           // rows in the ring (the trash row is after them)
    int32_t q_cursor = 0;           // ring row of the next captured token
    std::vector<int32_t> q_rows_ubatch; // rows of the ubatch being computed (set with the graph's inputs)
    bool q_rows_set  = false;       // q_rows_ubatch belongs to the ubatch after_ubatch reports

    // reads from backend buffers made on the plugin's behalf (ggml_backend_tensor_get calls and their bytes)
    uint64_t n_reads    = 0;
    uint64_t bytes_read = 0;

    // scoring on K's own backends (llama-kv-plugin-score.cpp); created on the first score_keys call
    struct scorer;
    std::unique_ptr<scorer, void (*)(scorer *)> score_state { nullptr, nullptr };

    bool warned_hook  = false;
    bool warned_shift = false;

    std::vector<std::pair<llama_pos, uint32_t>> list_buf; // llama_kv_plugin_seq_cells scratch
};

// token i of a ubatch of n_tokens -> its row in the query store, or -1 (not captured)
// n_tokens <= q_capacity: row i; else tokens are sampled evenly over the ubatch
void llama_kv_plugin_q_rows(int32_t n_tokens, int32_t q_capacity, int32_t * rows);

// graph side (llm_graph_context::build_attn): capture q_cur (post-RoPE, before the Hadamard rotation) of layer il
// k_rot: the Hadamard matrix input the graph applies to this layer's Q/K (nullptr if none)
void llama_kv_plugin_capture(const llm_graph_context & gctx, ggml_tensor * q_cur, const ggml_tensor * k_rot, int il);

// the memory's view of the context parameters: n_ctx_cells physical cells (when set) instead of the logical n_ctx
llama_cparams llama_kv_plugin_memory_cparams(const llama_context_params & params, const llama_cparams & cparams, const llama_hparams & hparams);

// a batch found no memory slot: with the cache sized for the budget, name the flags that give it room
void llama_kv_plugin_warn_no_slot(const llama_kv_plugin_state * st, int32_t n_tokens, uint32_t n_ctx_seq);

// a counted read of bytes [offs, offs + size) of t into dst (a memcpy for host buffers, not counted)
void llama_kv_plugin_get(llama_kv_plugin_state * st, const ggml_tensor * t, size_t offs, size_t size, void * dst);

// physical cells per stream of the evictable cache
uint32_t llama_kv_plugin_n_cells(const llama_kv_plugin_state * st);

// decode hooks (llama_context::decode)
int32_t llama_kv_plugin_before_batch(llama_kv_plugin_state * st, const llama_batch & batch);
int32_t llama_kv_plugin_after_ubatch(llama_kv_plugin_state * st, const llama_ubatch & ubatch);
int32_t llama_kv_plugin_after_decode(llama_kv_plugin_state * st);

class llama_io_write_i;
class llama_io_read_i;

// sequence state (llama_context::state_seq_*): a tagged block with the plugin's state of seq
void llama_kv_plugin_state_write(llama_kv_plugin_state * st, llama_io_write_i & io, llama_seq_id seq);
void llama_kv_plugin_state_read (llama_kv_plugin_state * st, llama_io_read_i  & io, llama_seq_id seq);

// whether a plugin is attached to mem (then positions must not be shifted)
bool llama_kv_plugin_attached(const llama_memory_i * mem);

// memory notifications from the public llama_memory_* API (no-op unless a plugin is registered for mem)
void llama_kv_plugin_notify_seq_shift(const llama_memory_i * mem, llama_seq_id seq);
void llama_kv_plugin_notify_seq_keep(const llama_memory_i * mem, llama_seq_id seq);
void llama_kv_plugin_notify_seq_rm(const llama_memory_i * mem, llama_seq_id seq, llama_pos p0, llama_pos p1);
void llama_kv_plugin_notify_seq_cp(const llama_memory_i * mem, llama_seq_id src, llama_seq_id dst, llama_pos p0, llama_pos p1);
