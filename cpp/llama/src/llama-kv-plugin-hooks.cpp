// Decode hooks (before_batch, after_ubatch, after_decode) and the plugin's block of a sequence's saved state.

#include "llama-kv-plugin-impl.h"

#include "llama-impl.h"
#include "llama-io.h"
#include "llama-batch.h"
#include "llama-kv-cache.h"

#include <map>
#include <stdexcept>

//
// decode hooks
//

uint32_t llama_kv_plugin_n_cells(const llama_kv_plugin_state * st) {
    return st && st->kv ? st->kv->get_size() : 0;
}

static void kvp_check(llama_kv_plugin_state * st, const char * hook, int32_t rc) {
    if (rc < 0 && !st->warned_hook) {
        st->warned_hook = true;
        LLAMA_LOG_WARN("%s: KV plugin hook %s returned %d (further errors are not logged)\n", __func__, hook, rc);
    }
}

int32_t llama_kv_plugin_before_batch(llama_kv_plugin_state * st, const llama_batch & batch) {
    if (!st || !st->plugin.before_batch) {
        return 0;
    }

    // tokens and requested outputs per sequence (no logits array: only the last token has one)
    std::map<llama_seq_id, std::pair<int32_t, int32_t>> per_seq;
    for (int32_t i = 0; i < batch.n_tokens; ++i) {
        const int32_t ns  = batch.n_seq_id ? batch.n_seq_id[i] : 1;
        const bool    out = batch.logits ? batch.logits[i] != 0 : i == batch.n_tokens - 1;
        for (int32_t s = 0; s < ns; ++s) {
            auto & c = per_seq[batch.seq_id ? batch.seq_id[i][s] : 0];
            c.first++;
            c.second += out;
        }
    }

    std::vector<llama_seq_id> seqs;
    std::vector<int32_t>      cnts;
    std::vector<int32_t>      outs;
    for (const auto & [s, c] : per_seq) {
        seqs.push_back(s);
        cnts.push_back(c.first);
        outs.push_back(c.second);
    }

    // each token's first sequence (the batch allocator has filled in positions and sequences)
    std::vector<llama_seq_id> first(batch.n_tokens);
    for (int32_t i = 0; i < batch.n_tokens; ++i) {
        first[i] = batch.seq_id ? batch.seq_id[i][0] : 0;
    }

    const int32_t rc = st->plugin.before_batch(st->plugin.ud, (int32_t) seqs.size(), seqs.data(), cnts.data(), outs.data(),
                                               batch.n_tokens, batch.pos, first.data(), batch.token);
    kvp_check(st, "before_batch", rc);
    return rc;
}

int32_t llama_kv_plugin_after_ubatch(llama_kv_plugin_state * st, const llama_ubatch & ubatch) {
    if (!st || !st->plugin.after_ubatch) {
        return 0;
    }

    const int32_t n = ubatch.n_tokens;

    st->q_epoch++; // the query stores hold this ubatch's rows now

    // the rows the graph's capture wrote; none when this ubatch's graph captured nothing
    std::vector<int32_t>      rows(n, -1);
    std::vector<llama_seq_id> seq(n);

    if (st->q_rows_set && (int32_t) st->q_rows_ubatch.size() == n) {
        rows = st->q_rows_ubatch;
    }
    st->q_rows_set = false;
    for (int32_t i = 0; i < n; ++i) {
        seq[i] = ubatch.seq_id[i][0];
    }

    // ubatch.pos: the first n_tokens entries are the sequential positions (also for M-RoPE)
    const int32_t rc = st->plugin.after_ubatch(st->plugin.ud, n, ubatch.pos, seq.data(), rows.data());
    kvp_check(st, "after_ubatch", rc);
    return rc;
}

int32_t llama_kv_plugin_after_decode(llama_kv_plugin_state * st) {
    if (!st || !st->plugin.after_decode) {
        return 0;
    }
    const int32_t rc = st->plugin.after_decode(st->plugin.ud);
    kvp_check(st, "after_decode", rc);
    return rc;
}

//
// sequence state
//

// "BKVP": the block before the memory's own sequence state
static constexpr uint32_t KVP_STATE_TAG = 0x50564b42u;

void llama_kv_plugin_state_write(llama_kv_plugin_state * st, llama_io_write_i & io, llama_seq_id seq) {
    std::vector<uint8_t> buf;
    if (st->plugin.state_get) {
        const int64_t n = st->plugin.state_get(st->plugin.ud, seq, nullptr, 0);
        if (n < 0) {
            throw std::runtime_error("KV plugin: cannot size the sequence state");
        }
        buf.resize((size_t) n);
        if (n > 0 && st->plugin.state_get(st->plugin.ud, seq, buf.data(), buf.size()) != n) {
            throw std::runtime_error("KV plugin: cannot save the sequence state");
        }
    }
    const uint32_t tag  = KVP_STATE_TAG;
    const uint64_t size = buf.size();
    io.write(&tag,  sizeof(tag));
    io.write(&size, sizeof(size));
    if (size > 0) {
        io.write(buf.data(), buf.size());
    }
}

void llama_kv_plugin_state_read(llama_kv_plugin_state * st, llama_io_read_i & io, llama_seq_id seq) {
    uint32_t tag = 0;
    io.read(&tag, sizeof(tag));
    if (tag != KVP_STATE_TAG) {
        // e.g. saved by a context without the plugin: its cells were never bounded by the budget
        throw std::runtime_error("sequence state has no KV-plugin block (saved without KV compression?)");
    }
    uint64_t size = 0;
    io.read(&size, sizeof(size));
    std::vector<uint8_t> buf(size);
    if (size > 0) {
        io.read(buf.data(), buf.size());
    }
    if (st->plugin.state_set) {
        if (st->plugin.state_set(st->plugin.ud, seq, buf.data(), buf.size()) < 0) {
            throw std::runtime_error("KV plugin: the saved sequence state was refused");
        }
    }
}
