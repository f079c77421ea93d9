/* test_capi.c - drives BeaconKV through its C ABI with a fake llama.cpp-like host.
 *
 * The host owns a cell table (position + owning sequence per cell), f16 K tensors per layer and an
 * f32 query store per layer, like the patched llama.cpp does, and answers seq_cells with cap == 0
 * by counting alone. Every policy runs a 100-token prompt in chunks and then 2000 (or argv[1])
 * single-token decode steps with budget 256, checking the invariants after each step; the
 * configuration, sizing and NULL-handling entry points are checked too.
 * Exit status 0 = all checks passed. */
#include "../../include/beaconkv.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_LAYERS 3
#define N_HEAD 4
#define N_HEAD_KV 2
#define HEAD_DIM 16
#define N_CELLS 4096
#define Q_ROWS 64
#define PROMPT 100
#define STEPS 2000 /* default; argv[1] overrides (fewer under valgrind) */
#define BUDGET 256
#define WINDOW 64
#define PREFIX_KEPT (BUDGET / 4) /* prompt=inside: prefix=prompt protects at most budget/4 cells */

static int g_failures = 0;
static int g_steps = STEPS;
#define CHECK(cond, ...)                                                              \
    do {                                                                              \
        if (!(cond)) {                                                                \
            fprintf(stderr, "%s:%d: CHECK(%s) failed: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                             \
            fprintf(stderr, "\n");                                                    \
            if (++g_failures > 20) exit(1);                                           \
        }                                                                             \
    } while (0)

/* ---- fake host --------------------------------------------------------------------------- */

typedef struct {
    int32_t  pos[N_CELLS];
    int32_t  seq[N_CELLS]; /* -1 = free */
    uint16_t k[N_LAYERS][N_CELLS][N_HEAD_KV * HEAD_DIM];
    float    q[N_LAYERS][Q_ROWS][N_HEAD * HEAD_DIM];
    int      n_warn;
    int      bad_evictions;
    int      syncs;
    int      count_calls; /* seq_cells with cap == 0 */
    int      list_calls;  /* seq_cells with cap > 0  */
    int      null_arrays; /* cap > 0 with NULL arrays, or cap == 0 with arrays: contract breaches */
} host_t;

static uint16_t f32_to_f16(float f) {
    uint32_t x;
    memcpy(&x, &f, 4);
    uint32_t sign = (x >> 16) & 0x8000u;
    int32_t  exp  = (int32_t)((x >> 23) & 0xff) - 127 + 15;
    uint32_t mant = (x >> 13) & 0x3ffu;
    if (exp <= 0) return (uint16_t)sign; /* flush tiny values to zero */
    if (exp >= 31) return (uint16_t)(sign | 0x7bffu);
    return (uint16_t)(sign | ((uint32_t)exp << 10) | mant);
}

static float synth(int layer, int pos, int i) {
    /* A few "topics" so FPS and scoring see structure. */
    int topic = (pos / 37) % 5;
    return 0.5f * sinf(0.37f * (float)(i + 1) * (float)(topic + 1) + 0.1f * (float)layer) +
           0.05f * cosf(0.01f * (float)pos * (float)(i + 1));
}

static int32_t h_n_layers(void * user) { (void)user; return N_LAYERS; }

static int32_t h_get_layer(void * user, int32_t i, beaconkv_layer * out) {
    host_t * h = (host_t *)user;
    if (i < 0 || i >= N_LAYERS) return -1;
    memset(out, 0, sizeof(*out));
    out->il = i;
    out->head_dim = HEAD_DIM;
    out->n_head = N_HEAD;
    out->n_head_kv = N_HEAD_KV;
    out->k_data = h->k[i];
    out->k_type = 1; /* F16 */
    out->k_nb1 = sizeof(h->k[i][0]);
    out->k_nb2 = sizeof(h->k[i]);
    out->k_on_host = true;
    out->q_data = h->q[i];
    out->q_nb1 = sizeof(h->q[i][0]);
    out->q_on_host = true;
    out->rope_n_dims = HEAD_DIM;
    out->rope_mode = 2; /* NEOX */
    out->rope_n_ctx_orig = 4096;
    out->freq_base = 10000.0f;
    out->freq_scale = 1.0f;
    out->attn_factor = 1.0f;
    out->beta_fast = 32.0f;
    out->beta_slow = 1.0f;
    out->kv_bytes_per_cell = 2u * N_HEAD_KV * HEAD_DIM * 2u;
    return 0;
}

static int32_t h_seq_cells(void * user, int32_t seq, int32_t * pos, uint32_t * cells, int32_t cap,
                           uint32_t * stream) {
    host_t * h = (host_t *)user;
    int32_t n = 0;
    if (cap == 0) {
        /* count only: no listing, no sorting (the plugin asks this on every decode step) */
        h->count_calls++;
        if (pos || cells) h->null_arrays++;
        for (uint32_t c = 0; c < N_CELLS; c++) n += h->seq[c] == seq;
        if (stream) *stream = 0;
        return n;
    }
    h->list_calls++;
    if (!pos || !cells) {
        h->null_arrays++;
        return -1;
    }
    /* insertion into pos order: cells are reused out of order after evictions */
    for (uint32_t c = 0; c < N_CELLS; c++) {
        if (h->seq[c] != seq) continue;
        if (n < cap) {
            int32_t j = n;
            while (j > 0 && pos[j - 1] > h->pos[c]) {
                pos[j] = pos[j - 1];
                cells[j] = cells[j - 1];
                j--;
            }
            pos[j] = h->pos[c];
            cells[j] = c;
        }
        n++;
    }
    if (stream) *stream = 0;
    return n;
}

static int32_t h_seq_evict(void * user, int32_t seq, const uint32_t * cells, int32_t n) {
    host_t * h = (host_t *)user;
    int32_t done = 0;
    for (int32_t i = 0; i < n; i++) {
        if (cells[i] >= N_CELLS || h->seq[cells[i]] != seq) {
            h->bad_evictions++;
            continue;
        }
        h->seq[cells[i]] = -1;
        done++;
    }
    return done;
}

static void h_synchronize(void * user) { ((host_t *)user)->syncs++; }

static void h_log(void * user, int32_t level, const char * msg) {
    if (level >= 2) ((host_t *)user)->n_warn++;
    fprintf(stderr, "[host log %d] %s\n", level, msg);
}

static beaconkv_host make_host(host_t * h) {
    beaconkv_host host;
    memset(&host, 0, sizeof(host));
    host.user = h;
    host.n_layers = h_n_layers;
    host.get_layer = h_get_layer;
    host.seq_cells = h_seq_cells;
    host.seq_evict = h_seq_evict;
    host.synchronize = h_synchronize;
    host.read_rows = NULL;
    host.log = h_log;
    return host;
}

/* Field by field: beaconkv_params has padding bytes that memcmp would compare. */
static int params_equal(const beaconkv_params * a, const beaconkv_params * b) {
    return a->policy == b->policy && a->budget == b->budget && a->budget_min == b->budget_min &&
           a->n_beacons == b->n_beacons && a->n_recent == b->n_recent && a->window == b->window &&
           a->prefix == b->prefix && a->reduce == b->reduce && a->span == b->span &&
           a->q_capacity == b->q_capacity && a->seed == b->seed && a->read_path == b->read_path &&
           a->score == b->score && a->prefix_max == b->prefix_max;
}

static int count_cells(const host_t * h, int32_t seq) {
    int n = 0;
    for (int c = 0; c < N_CELLS; c++) n += h->seq[c] == seq;
    return n;
}

static int has_pos(const host_t * h, int32_t seq, int32_t p) {
    for (int c = 0; c < N_CELLS; c++)
        if (h->seq[c] == seq && h->pos[c] == p) return 1;
    return 0;
}

/* Place n tokens of seq at positions p0.., write their K and queries, run the hooks. */
/* When set, decode() drives the context through its plugin table instead of the named hooks. */
static const beaconkv_plugin * g_plugin = NULL;

static void decode(beaconkv_context * ctx, host_t * h, int32_t seq, int32_t p0, int32_t n) {
    CHECK(n <= Q_ROWS, "ubatch too large");
    int32_t pos[Q_ROWS], sid[Q_ROWS], qrow[Q_ROWS];
    for (int i = 0; i < n; i++) {
        pos[i] = p0 + i;
        sid[i] = seq;
        qrow[i] = i;
    }
    /* token ids (here the positions) through the table; none (a batch of embeddings) directly */
    const int32_t before = g_plugin ? g_plugin->before_batch(g_plugin->ud, 1, &seq, &n, NULL, n, pos, sid, pos)
                                    : beaconkv_before_batch(ctx, 1, &seq, &n, NULL, n, pos, sid, NULL);
    CHECK(before == BEACONKV_OK, "before_batch: %s", beaconkv_last_error(ctx));
    int placed = 0;
    for (int c = 0; c < N_CELLS && placed < n; c++) {
        if (h->seq[c] != -1) continue;
        int32_t p = p0 + placed;
        h->seq[c] = seq;
        h->pos[c] = p;
        for (int l = 0; l < N_LAYERS; l++) {
            for (int i = 0; i < N_HEAD_KV * HEAD_DIM; i++) h->k[l][c][i] = f32_to_f16(synth(l, p, i));
            for (int i = 0; i < N_HEAD * HEAD_DIM; i++) h->q[l][placed][i] = synth(l, p, i + 3);
        }
        placed++;
    }
    CHECK(placed == n, "host cache full");
    const int32_t after = g_plugin ? g_plugin->after_ubatch(g_plugin->ud, n, pos, sid, qrow)
                                   : beaconkv_after_ubatch(ctx, n, pos, sid, qrow);
    CHECK(after == BEACONKV_OK, "after_ubatch: %s", beaconkv_last_error(ctx));
    const int32_t done = g_plugin ? g_plugin->after_decode(g_plugin->ud) : beaconkv_after_decode(ctx);
    CHECK(done == BEACONKV_OK, "after_decode: %s", beaconkv_last_error(ctx));
}

/* The plugin table (the layout llama.cpp's llama_kv_plugin shares): hooks, state and free through it. */
static void test_plugin_table(void) {
    static host_t h;
    memset(&h, 0, sizeof(h));
    for (int c = 0; c < N_CELLS; c++) h.seq[c] = -1;
    beaconkv_params params = beaconkv_params_default();
    char err[256];
    CHECK(beaconkv_params_parse("beacon,budget=256,qcap=48", &params, err, sizeof(err)) == BEACONKV_OK, "%s", err);
    beaconkv_host host = make_host(&h);
    beaconkv_context * ctx = beaconkv_context_new(&params, &host, err, sizeof(err));
    CHECK(ctx != NULL, "context_new: %s", err);
    if (!ctx) return;

    beaconkv_plugin p;
    CHECK(beaconkv_context_plugin(NULL, &p) == BEACONKV_ERR_NULL, "NULL ctx");
    CHECK(beaconkv_context_plugin(ctx, NULL) == BEACONKV_ERR_NULL, "NULL out");
    CHECK(beaconkv_context_plugin(ctx, &p) == BEACONKV_OK, "context_plugin");
    CHECK(p.ud == ctx && p.q_capacity == 48, "table: ud %p, q_capacity %d", p.ud, p.q_capacity);

    g_plugin = &p;
    const int32_t seq = 0;
    int32_t next = 0;
    for (; next < 32; next += 32) decode(ctx, &h, seq, next, 32);
    for (; next < 3 * BUDGET; next++) decode(ctx, &h, seq, next, 1);
    g_plugin = NULL;
    /* the default prompt=keep holds the 32-token prompt on top of the budget */
    CHECK(count_cells(&h, seq) <= BUDGET + 32, "table-driven run holds %d cells", count_cells(&h, seq));

    const int64_t size = p.state_get(p.ud, seq, NULL, 0);
    CHECK(size > 0 && (size_t)size == beaconkv_seq_state_size(ctx, seq), "state size %lld", (long long)size);
    uint8_t * blob = malloc((size_t)size);
    CHECK(p.state_get(p.ud, seq, blob, (size_t)size) == size, "state_get");
    CHECK(p.state_set(p.ud, seq, NULL, 0) == BEACONKV_OK, "state reset");
    CHECK(beaconkv_seq_state_size(ctx, seq) == 0, "reset left state behind");
    CHECK(p.state_set(p.ud, seq, blob, (size_t)size) == BEACONKV_OK, "state_set: %s", beaconkv_last_error(ctx));
    CHECK(beaconkv_seq_state_size(ctx, seq) == (size_t)size, "restored state size");
    free(blob);
    p.seq_removed(p.ud, seq, -1, -1);
    CHECK(beaconkv_seq_state_size(ctx, seq) == 0, "seq_removed through the table");
    p.free(p.ud); /* frees ctx */
}

static void run_policy(const char * spec) {
    static host_t h;
    memset(&h, 0, sizeof(h));
    for (int c = 0; c < N_CELLS; c++) h.seq[c] = -1;

    beaconkv_params params = beaconkv_params_default();
    char err[256];
    CHECK(beaconkv_params_parse(spec, &params, err, sizeof(err)) == BEACONKV_OK, "%s: %s", spec, err);
    beaconkv_host host = make_host(&h);
    beaconkv_context * ctx = beaconkv_context_new(&params, &host, err, sizeof(err));
    CHECK(ctx != NULL, "context_new(%s): %s", spec, err);
    if (!ctx) return;
    CHECK(beaconkv_is_enabled(ctx), "%s: not enabled", spec);
    int is_none = params.policy == BEACONKV_POLICY_NONE;
    /* prompt=keep (the default) keeps the whole 100-token prompt on top of the budget */
    const int keep = params.prompt_mode == BEACONKV_PROMPT_KEEP;
    const int limit = BUDGET + (keep ? PROMPT : 0);
    const int prefix_kept = keep ? PROMPT : PREFIX_KEPT;

    const int32_t seq = 0;
    int32_t next = 0;
    const int32_t chunks[] = {32, 32, 32, 4};
    for (int i = 0; i < 4; i++) {
        decode(ctx, &h, seq, next, chunks[i]);
        next += chunks[i];
    }
    CHECK(next == PROMPT, "prompt length");

    for (int step = 0; step < g_steps; step++) {
        decode(ctx, &h, seq, next, 1);
        next++;
        int cells = count_cells(&h, seq);
        if (!is_none) CHECK(cells <= limit, "%s step %d: %d cells > %d", spec, step, cells, limit);
        for (int32_t p = 0; p < prefix_kept; p++)
            if (!has_pos(&h, seq, p)) {
                CHECK(0, "%s step %d: prefix position %d evicted", spec, step, p);
                break;
            }
        for (int32_t p = next - WINDOW; p < next; p++)
            if (!has_pos(&h, seq, p)) {
                CHECK(0, "%s step %d: window position %d evicted", spec, step, p);
                break;
            }
        beaconkv_stats st;
        CHECK(beaconkv_get_stats(ctx, seq, &st) == BEACONKV_OK, "get_stats");
        CHECK(st.cells_in_use == cells, "%s step %d: stats cells %d vs host %d", spec, step,
              st.cells_in_use, cells);
        CHECK(st.evicted == (uint64_t)next - (uint64_t)cells, "%s step %d: evicted %llu vs %d - %d",
              spec, step, (unsigned long long)st.evicted, next, cells);
        CHECK(st.n_tokens == (uint64_t)next, "n_tokens");
        CHECK(st.pos_max == next - 1, "pos_max");
        if (g_failures) break;
    }

    beaconkv_stats st, tot;
    beaconkv_get_stats(ctx, seq, &st);
    beaconkv_get_stats(ctx, -1, &tot);
    CHECK(tot.evicted == st.evicted && tot.n_tokens == st.n_tokens, "totals");
    CHECK(st.prefix_len == prefix_kept, "%s: prefix_len %d", spec, st.prefix_len);
    CHECK(st.disabled == 0 && st.fallback == 0, "%s: disabled %d fallback %d", spec, st.disabled, st.fallback);
    CHECK(h.null_arrays == 0, "%s: %d seq_cells calls broke the cap/array contract", spec, h.null_arrays);
    CHECK(h.list_calls == (int)st.compress_events, "%s: %d listings for %llu compressions", spec, h.list_calls,
          (unsigned long long)st.compress_events);
    CHECK(h.count_calls >= (is_none ? 1 : 2) * g_steps, "%s: %d count-only calls", spec, h.count_calls);
    if (is_none) {
        CHECK(st.evicted == 0 && st.compress_events == 0, "none evicted");
    } else {
        CHECK(st.compress_events > 0 && st.kv_bytes_saved == st.evicted * N_LAYERS * 2u * N_HEAD_KV * HEAD_DIM * 2u,
              "%s: events %llu bytes %llu", spec, (unsigned long long)st.compress_events,
              (unsigned long long)st.kv_bytes_saved);
        CHECK(st.cells_peak <= limit, "peak %d", st.cells_peak);
    }
    CHECK(h.bad_evictions == 0, "%s: %d evictions of cells the sequence did not hold", spec, h.bad_evictions);
    if (params.policy == BEACONKV_POLICY_BEACON || params.policy == BEACONKV_POLICY_RECENT ||
        params.policy == BEACONKV_POLICY_RKV)
        CHECK(h.syncs > 0, "synchronize never called");
    printf("%-60s cells=%d peak=%d evicted=%llu events=%llu ms_capture=%.2f ms_score=%.2f\n", spec,
           st.cells_in_use, st.cells_peak, (unsigned long long)st.evicted,
           (unsigned long long)st.compress_events, st.ms_capture, st.ms_score);

    /* fork, then whole removal drops the state */
    beaconkv_seq_copied(ctx, seq, 1, -1, -1);
    beaconkv_stats forked;
    beaconkv_get_stats(ctx, 1, &forked);
    CHECK(forked.n_tokens == st.n_tokens, "fork inherits state");
    beaconkv_seq_removed(ctx, 1, -1, -1);
    beaconkv_get_stats(ctx, 1, &forked);
    CHECK(forked.n_tokens == 0 && forked.seq == 1, "removed sequence reports zeros");
    beaconkv_seq_copied(ctx, seq, 2, 0, 50); /* a range: the copy's state stops at position 49 */
    beaconkv_get_stats(ctx, 2, &forked);
    CHECK(forked.pos_max == 49 && forked.n_tokens == st.n_tokens, "ranged copy: pos_max %d", forked.pos_max);
    beaconkv_seq_removed(ctx, seq, next - 10, -1); /* partial: state kept */
    beaconkv_get_stats(ctx, seq, &st);
    CHECK(st.pos_max == next - 11, "partial removal moves pos_max: %d", st.pos_max);
    beaconkv_seq_removed(ctx, -1, -1, -1);
    CHECK(beaconkv_seq_state_size(ctx, 2) == 0 && beaconkv_seq_state_size(ctx, seq) == 0, "all removed");
    beaconkv_context_free(ctx);
}

/* ---- configuration and NULL handling ------------------------------------------------------- */

static void test_config(void) {
    char err[256], buf[256];
    beaconkv_params p = beaconkv_params_default();
    CHECK(p.budget == 1024 && p.n_beacons == 16 && p.n_recent == 16 && p.window == 64 && p.prefix == -1,
          "defaults");
    CHECK(beaconkv_params_validate(&p, err, sizeof(err)) == BEACONKV_OK, "defaults valid: %s", err);

    const char * bad[][2] = {
        {"budget=100,window=200", "window"}, {"foo=1", "foo"},       {"span=2", "span"},
        {"budget=x", "budget"},              {"qcap=0", "qcap"},     {"min=5000", "min"},
        {"budget=8,budget=9", "budget"},     {"policy=nope", "policy"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        beaconkv_params q = beaconkv_params_default();
        CHECK(beaconkv_params_parse(bad[i][0], &q, err, sizeof(err)) == BEACONKV_ERR_INVALID, "%s accepted",
              bad[i][0]);
        CHECK(strstr(err, bad[i][1]) != NULL, "'%s' -> '%s' does not name %s", bad[i][0], err, bad[i][1]);
        CHECK(params_equal(&q, &p), "params changed on error");
    }
    /* truncation keeps the NUL */
    char tiny[8];
    beaconkv_params q = beaconkv_params_default();
    beaconkv_params_parse("foo=1", &q, tiny, sizeof(tiny));
    CHECK(strlen(tiny) == 7, "truncated message");
    CHECK(beaconkv_params_parse("foo=1", &q, NULL, 0) == BEACONKV_ERR_INVALID, "NULL err buffer");

    CHECK(beaconkv_params_parse(" random , budget=300 ,prefix=8,reduce=rank,span=3", &q, err, sizeof(err)) ==
              BEACONKV_OK, "%s", err);
    int32_t need = beaconkv_params_format(&q, buf, sizeof(buf));
    CHECK(need > 0 && (size_t)need == strlen(buf), "format length");
    beaconkv_params r = beaconkv_params_default();
    CHECK(beaconkv_params_parse(buf, &r, err, sizeof(err)) == BEACONKV_OK, "%s", err);
    CHECK(params_equal(&q, &r), "format round trip: %s", buf);
    CHECK(beaconkv_params_format(&q, buf, 4) == need && strlen(buf) == 3, "format truncation");

    CHECK(strcmp(beaconkv_policy_name(BEACONKV_POLICY_BEACON), "beacon") == 0, "policy name");
    CHECK(strcmp(beaconkv_policy_name(99), "unknown") == 0, "unknown policy name");
    CHECK(beaconkv_row_size(1, 64) == 128 && beaconkv_row_size(8, 64) == 68 && beaconkv_row_size(99, 64) == 0,
          "row sizes");
    beaconkv_model_desc d = {30, 3, 64, 64, 1, 1};
    CHECK(beaconkv_kv_bytes_per_token(&d) == 30u * 3u * 2u * 128u, "kv bytes per token");
    CHECK(strlen(beaconkv_version()) > 0, "version");

    /* one flag's value on its own; a whole spec names the flag of the offending key */
    CHECK(beaconkv_check_flag_value("--kv-window", "window=5000", err, sizeof(err)) == BEACONKV_OK && err[0] == 0,
          "window alone: %s", err);
    CHECK(beaconkv_check_flag_value("--kv-window", "window=-1", err, sizeof(err)) == BEACONKV_ERR_INVALID &&
              strncmp(err, "--kv-window: beaconkv: window:", 30) == 0,
          "flag message: %s", err);
    CHECK(beaconkv_check_flag_value(NULL, "qcap=0", err, sizeof(err)) == BEACONKV_ERR_INVALID &&
              strncmp(err, "--kv-compress-spec qcap=:", 25) == 0,
          "flag from key: %s", err);
    CHECK(beaconkv_spec_check("budget=64,window=100", err, sizeof(err)) == BEACONKV_ERR_INVALID &&
              strncmp(err, "--kv-window: ", 13) == 0,
          "spec message: %s", err);
    CHECK(beaconkv_spec_check("beacon,budget=512,prefix_max=100", err, sizeof(err)) == BEACONKV_OK, "%s", err);
    beaconkv_params pm = beaconkv_params_default();
    CHECK(beaconkv_params_parse("budget=512,prefix_max=100", &pm, err, sizeof(err)) == BEACONKV_OK &&
              pm.prefix_max == 100 && beaconkv_params_default().prefix_max == 0,
          "prefix_max field");

    /* sizing: budget 256 -> slack and largest ubatch 32; with the default prompt=keep, room for
       a prompt of up to the budget beside it: 256 + 256 + 32 = 544 cells a stream */
    beaconkv_params b256 = beaconkv_params_default();
    CHECK(beaconkv_params_parse("budget=256", &b256, err, sizeof(err)) == BEACONKV_OK, "%s", err);
    CHECK(beaconkv_max_ubatch(&b256) == 32, "max ubatch %d", beaconkv_max_ubatch(&b256));
    CHECK(beaconkv_prompt_room(&b256) == 256, "prompt room %d", beaconkv_prompt_room(&b256));
    CHECK(beaconkv_physical_cells(&b256, 1, 32, false, 8192, 0) == 544, "cells");
    CHECK(beaconkv_physical_cells(&b256, 2, 32, false, 8192, 0) == 1088, "split cells");
    CHECK(beaconkv_physical_cells(&b256, 2, 32, true, 8192, 0) == 1056, "unified cells");
    CHECK(beaconkv_physical_cells(&b256, 1, 32, false, 256, 0) == 0, "no gain");

    beaconkv_params bad_budget = beaconkv_params_default();
    bad_budget.budget = 10;
    host_t * h = calloc(1, sizeof(host_t));
    beaconkv_host host = make_host(h);
    CHECK(beaconkv_context_new(&bad_budget, &host, err, sizeof(err)) == NULL, "invalid params accepted");
    CHECK(strstr(err, "window") != NULL, "context_new error names the key: %s", err);
    free(h);
}

static void test_nulls(void) {
    beaconkv_params p = beaconkv_params_default();
    char err[64];
    host_t * h = calloc(1, sizeof(host_t));
    for (int c = 0; c < N_CELLS; c++) h->seq[c] = -1;
    beaconkv_host host = make_host(h);
    beaconkv_context * ctx = beaconkv_context_new(&p, &host, err, sizeof(err));
    CHECK(ctx != NULL, "context_new: %s", err);
    int32_t one = 1, zero = 0;
    beaconkv_stats st;

    CHECK(beaconkv_params_parse(NULL, &p, err, sizeof(err)) == BEACONKV_ERR_NULL, "parse spec");
    CHECK(beaconkv_params_parse("beacon", NULL, err, sizeof(err)) == BEACONKV_ERR_NULL, "parse params");
    CHECK(beaconkv_params_validate(NULL, err, sizeof(err)) == BEACONKV_ERR_NULL, "validate");
    CHECK(beaconkv_params_format(NULL, err, sizeof(err)) == BEACONKV_ERR_NULL, "format");
    CHECK(beaconkv_kv_bytes_per_token(NULL) == 0, "kv bytes");
    CHECK(beaconkv_context_new(NULL, &host, err, sizeof(err)) == NULL, "new params");
    CHECK(beaconkv_context_new(&p, NULL, NULL, 0) == NULL, "new host");
    beaconkv_host no_cb = host;
    no_cb.seq_cells = NULL;
    CHECK(beaconkv_context_new(&p, &no_cb, err, sizeof(err)) == NULL, "required callback");
    beaconkv_context_free(NULL);
    CHECK(beaconkv_context_params(NULL, &p) == BEACONKV_ERR_NULL, "params ctx");
    CHECK(beaconkv_context_params(ctx, NULL) == BEACONKV_ERR_NULL, "params out");
    CHECK(beaconkv_refresh_layers(NULL) == BEACONKV_ERR_NULL, "refresh");
    CHECK(beaconkv_before_batch(NULL, 1, &zero, &one, NULL, 0, NULL, NULL, NULL) == BEACONKV_ERR_NULL, "before ctx");
    CHECK(beaconkv_before_batch(ctx, 1, NULL, &one, NULL, 0, NULL, NULL, NULL) == BEACONKV_ERR_NULL, "before ids");
    CHECK(beaconkv_before_batch(ctx, 1, &zero, NULL, NULL, 0, NULL, NULL, NULL) == BEACONKV_ERR_NULL, "before n_new");
    CHECK(beaconkv_before_batch(ctx, 1, &zero, &one, NULL, 1, NULL, &zero, &zero) == BEACONKV_ERR_NULL, "before pos");
    CHECK(beaconkv_before_batch(ctx, 1, &zero, &one, NULL, 1, &zero, NULL, &zero) == BEACONKV_ERR_NULL, "before seq_id");
    CHECK(beaconkv_before_batch(ctx, 0, NULL, NULL, NULL, 0, NULL, NULL, NULL) == BEACONKV_OK, "empty batch");
    CHECK(beaconkv_after_ubatch(NULL, 1, &zero, &zero, &zero) == BEACONKV_ERR_NULL, "ubatch ctx");
    CHECK(beaconkv_after_ubatch(ctx, 1, NULL, &zero, &zero) == BEACONKV_ERR_NULL, "ubatch pos");
    CHECK(beaconkv_after_ubatch(ctx, 1, &zero, NULL, &zero) == BEACONKV_ERR_NULL, "ubatch seq");
    CHECK(beaconkv_after_ubatch(ctx, 1, &zero, &zero, NULL) == BEACONKV_ERR_NULL, "ubatch q_row");
    CHECK(beaconkv_after_decode(NULL) == BEACONKV_ERR_NULL, "after_decode");
    beaconkv_seq_removed(NULL, 0, -1, -1);
    beaconkv_seq_copied(NULL, 0, 1, -1, -1);
    CHECK(beaconkv_get_stats(NULL, 0, &st) == BEACONKV_ERR_NULL, "stats ctx");
    CHECK(beaconkv_get_stats(ctx, 0, NULL) == BEACONKV_ERR_NULL, "stats out");
    CHECK(beaconkv_is_enabled(NULL) == false, "is_enabled");
    CHECK(beaconkv_last_error(NULL) != NULL && beaconkv_last_error(NULL)[0] == 0, "last_error");
    CHECK(beaconkv_last_error(ctx)[0] == 0, "no error yet");
    CHECK(beaconkv_last_error_copy(NULL, err, sizeof(err)) == BEACONKV_ERR_NULL, "last_error_copy ctx");
    CHECK(beaconkv_last_error_copy(ctx, NULL, 0) == 0, "last_error_copy length");
    CHECK(beaconkv_check_flag_value("--kv-budget", NULL, err, sizeof(err)) == BEACONKV_ERR_NULL, "flag value");
    CHECK(beaconkv_spec_check(NULL, err, sizeof(err)) == BEACONKV_ERR_NULL, "spec check");
    CHECK(beaconkv_max_ubatch(NULL) == BEACONKV_ERR_NULL, "max ubatch");
    CHECK(beaconkv_prompt_room(NULL) == BEACONKV_ERR_NULL, "prompt room");
    CHECK(beaconkv_physical_cells(NULL, 1, 32, false, 8192, 0) == 0, "physical cells");
    CHECK(beaconkv_seq_override_check(NULL, 0, -1, 0, err, sizeof(err)) == BEACONKV_ERR_NULL, "override check");
    CHECK(beaconkv_seq_override(NULL, 0, 0, -1, 0) == BEACONKV_ERR_NULL, "override ctx");
    CHECK(beaconkv_seq_params(NULL, 0, &p) == BEACONKV_ERR_NULL, "seq params ctx");
    CHECK(beaconkv_seq_params(ctx, 0, NULL) == BEACONKV_ERR_NULL, "seq params out");
    uint8_t blob[16] = {0};
    CHECK(beaconkv_seq_state_get(ctx, 5, blob, sizeof(blob)) == BEACONKV_ERR_INVALID, "unknown sequence");
    const char * e1 = beaconkv_last_error(ctx);
    CHECK(strstr(e1, "unknown sequence 5") != NULL, "error text: %s", e1);
    int32_t len = beaconkv_last_error_copy(ctx, err, 8);
    CHECK(len == (int32_t)strlen(e1) && strlen(err) == 7, "copy truncates: %d '%s'", len, err);
    CHECK(beaconkv_seq_state_set(ctx, 0, blob, 4) == BEACONKV_ERR_INVALID, "bad blob");
    CHECK(beaconkv_last_error(ctx) == e1 && strstr(e1, "beaconkv_seq_state_set") != NULL,
          "same buffer, new text: %s", e1);
    CHECK(beaconkv_get_stats(ctx, 42, &st) == BEACONKV_OK && st.seq == 42 && st.n_tokens == 0, "unknown seq");
    beaconkv_context_free(ctx);
    free(h);
}

int main(int argc, char ** argv) {
    if (argc > 1) g_steps = atoi(argv[1]);
    CHECK(g_steps > BUDGET, "steps %d must exceed the budget %d", g_steps, BUDGET);
    test_config();
    test_nulls();
    test_plugin_table();
    const char * specs[] = {
        "beacon,budget=256",
        "beacon,budget=256,prompt=inside",
        "beacon,budget=256,reduce=zmean,span=3",
        "beacon,budget=256,reduce=rank",
        "streaming,budget=256",
        "recent,budget=256",
        "random,budget=256,seed=7",
        "rkv,budget=256",
        "none,budget=256",
    };
    for (size_t i = 0; i < sizeof(specs) / sizeof(specs[0]); i++) run_policy(specs[i]);
    if (g_failures) {
        fprintf(stderr, "%d check(s) failed\n", g_failures);
        return 1;
    }
    printf("test_capi: all checks passed\n");
    return 0;
}
