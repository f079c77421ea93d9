#include "kv-compress.h"

#include "arg.h"
#include "common.h"
#include "log.h"
#include "llama-kv-plugin.h"
#include "speculative.h"

#include "beaconkv.h"

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <stdexcept>
#include <tuple>
#include <type_traits>

// libllama's host table and beaconkv's are one layout, and so are the plugin tables and the layer
// descriptions: the glue hands each table over as it is. Checked here, field by field: offset and type.
// The same type on both sides, where a pointer to libllama's layer description stands for one to
// beaconkv's (same layout, checked below); function pointers parameter by parameter.
template <typename A, typename B> struct kvc_compatible : std::is_same<A, B> {};
template <> struct kvc_compatible<llama_kv_plugin_layer *, beaconkv_layer *> : std::true_type {};
template <bool same_count, typename TA, typename TB> struct kvc_params_compatible : std::false_type {};
template <typename... PA, typename... PB>
struct kvc_params_compatible<true, std::tuple<PA...>, std::tuple<PB...>>
    : std::bool_constant<(kvc_compatible<PA, PB>::value && ...)> {};
template <typename RA, typename RB, typename... PA, typename... PB>
struct kvc_compatible<RA (*)(PA...), RB (*)(PB...)>
    : std::bool_constant<kvc_compatible<RA, RB>::value &&
                         kvc_params_compatible<sizeof...(PA) == sizeof...(PB), std::tuple<PA...>, std::tuple<PB...>>::value> {};
#define KVC_SAME(A, B, F)                                                                              \
    static_assert(offsetof(A, F) == offsetof(B, F) && kvc_compatible<decltype(A::F), decltype(B::F)>::value, \
                  #A "::" #F " != " #B "::" #F)
static_assert(sizeof(llama_kv_plugin_host) == sizeof(beaconkv_host), "host tables differ");
KVC_SAME(llama_kv_plugin_host, beaconkv_host, user);        KVC_SAME(llama_kv_plugin_host, beaconkv_host, n_layers);
KVC_SAME(llama_kv_plugin_host, beaconkv_host, get_layer);   KVC_SAME(llama_kv_plugin_host, beaconkv_host, seq_cells);
KVC_SAME(llama_kv_plugin_host, beaconkv_host, seq_evict);   KVC_SAME(llama_kv_plugin_host, beaconkv_host, synchronize);
KVC_SAME(llama_kv_plugin_host, beaconkv_host, read_rows);   KVC_SAME(llama_kv_plugin_host, beaconkv_host, log);
KVC_SAME(llama_kv_plugin_host, beaconkv_host, read_kv);     KVC_SAME(llama_kv_plugin_host, beaconkv_host, write_kv);
KVC_SAME(llama_kv_plugin_host, beaconkv_host, seq_place);   KVC_SAME(llama_kv_plugin_host, beaconkv_host, score_keys);
KVC_SAME(llama_kv_plugin_host, beaconkv_host, transfers);
static_assert(sizeof(llama_kv_plugin) == sizeof(beaconkv_plugin), "plugin tables differ");
KVC_SAME(llama_kv_plugin, beaconkv_plugin, ud);             KVC_SAME(llama_kv_plugin, beaconkv_plugin, q_capacity);
KVC_SAME(llama_kv_plugin, beaconkv_plugin, before_batch);   KVC_SAME(llama_kv_plugin, beaconkv_plugin, after_ubatch);
KVC_SAME(llama_kv_plugin, beaconkv_plugin, after_decode);   KVC_SAME(llama_kv_plugin, beaconkv_plugin, seq_removed);
KVC_SAME(llama_kv_plugin, beaconkv_plugin, seq_copied);     KVC_SAME(llama_kv_plugin, beaconkv_plugin, state_get);
KVC_SAME(llama_kv_plugin, beaconkv_plugin, state_set);      KVC_SAME(llama_kv_plugin, beaconkv_plugin, free);
static_assert(sizeof(llama_kv_plugin_layer) == sizeof(beaconkv_layer), "layer descriptions differ");
KVC_SAME(llama_kv_plugin_layer, beaconkv_layer, il);        KVC_SAME(llama_kv_plugin_layer, beaconkv_layer, head_dim);
KVC_SAME(llama_kv_plugin_layer, beaconkv_layer, n_head);    KVC_SAME(llama_kv_plugin_layer, beaconkv_layer, n_head_kv);
KVC_SAME(llama_kv_plugin_layer, beaconkv_layer, k_type);    KVC_SAME(llama_kv_plugin_layer, beaconkv_layer, k_nb1);
KVC_SAME(llama_kv_plugin_layer, beaconkv_layer, k_nb2);     KVC_SAME(llama_kv_plugin_layer, beaconkv_layer, q_nb1);
KVC_SAME(llama_kv_plugin_layer, beaconkv_layer, rope_mode); KVC_SAME(llama_kv_plugin_layer, beaconkv_layer, rope_n_ctx_orig);
KVC_SAME(llama_kv_plugin_layer, beaconkv_layer, freq_base); KVC_SAME(llama_kv_plugin_layer, beaconkv_layer, freq_scale);
KVC_SAME(llama_kv_plugin_layer, beaconkv_layer, ext_factor); KVC_SAME(llama_kv_plugin_layer, beaconkv_layer, attn_factor);
KVC_SAME(llama_kv_plugin_layer, beaconkv_layer, beta_fast); KVC_SAME(llama_kv_plugin_layer, beaconkv_layer, beta_slow);
KVC_SAME(llama_kv_plugin_layer, beaconkv_layer, k_data);    KVC_SAME(llama_kv_plugin_layer, beaconkv_layer, k_on_host);
KVC_SAME(llama_kv_plugin_layer, beaconkv_layer, q_data);    KVC_SAME(llama_kv_plugin_layer, beaconkv_layer, q_on_host);
KVC_SAME(llama_kv_plugin_layer, beaconkv_layer, q_rows);
KVC_SAME(llama_kv_plugin_layer, beaconkv_layer, rope_n_dims); KVC_SAME(llama_kv_plugin_layer, beaconkv_layer, freq_factors);
KVC_SAME(llama_kv_plugin_layer, beaconkv_layer, hadamard_n); KVC_SAME(llama_kv_plugin_layer, beaconkv_layer, kv_bytes_per_cell);
KVC_SAME(llama_kv_plugin_layer, beaconkv_layer, v_type);    KVC_SAME(llama_kv_plugin_layer, beaconkv_layer, v_dim);

// the effective params of the spec (validated at startup, so parsing cannot fail later)
static beaconkv_params kvc_params(const common_params & params) {
    beaconkv_params bp = beaconkv_params_default();
    if (!params.kv_compress_spec.empty()) {
        beaconkv_params_parse(params.kv_compress_spec.c_str(), &bp, nullptr, 0);
    }
    return bp;
}

void common_kv_compress_append(common_params & params, const char * flag, const std::string & kv) {
    char err[512] = { 0 };
    if (beaconkv_check_flag_value(flag, kv.c_str(), err, sizeof(err)) != BEACONKV_OK) {
        throw std::invalid_argument(err[0] ? err : flag);
    }
    params.kv_compress_spec = params.kv_compress_spec.empty() ? kv : params.kv_compress_spec + "," + kv;
}

void common_kv_compress_validate(const common_params & params) {
    char err[512] = { 0 };
    if (common_kv_compress_enabled(params) && beaconkv_spec_check(params.kv_compress_spec.c_str(), err, sizeof(err)) != BEACONKV_OK) {
        throw std::invalid_argument(std::string(err) + " (spec: " + params.kv_compress_spec + ")");
    }
}

bool common_kv_compress_enabled(const common_params & params) {
    return !params.kv_compress_spec.empty();
}

common_kv_compress_user common_kv_compress_adjust(common_params & params) {
    const common_kv_compress_user user = { params.n_batch, params.n_ubatch, params.ctx_shift };
    const beaconkv_params bp = kvc_params(params);
    int32_t max_ubatch = common_kv_compress_enabled(params) ? beaconkv_max_ubatch(&bp) : 0;
    if (max_ubatch <= 0) {
        return user; // off, or policy none: nothing is evicted
    }
    // a speculative verification batch (the sampled token + the drafts) must fit in one batch
    max_ubatch = std::max(max_ubatch, common_speculative_n_max(&params.speculative) + 1);
    if (params.ctx_shift) {
        LOG_WRN("%s: KV compression is on: disabling context shift\n", __func__);
        params.ctx_shift = false;
    }
    if (params.n_ubatch > max_ubatch) {
        LOG_WRN("%s: KV compression is on: n_ubatch %d -> %d, so a ubatch fits in the physical cache's slack\n",
                __func__, params.n_ubatch, max_ubatch);
        params.n_ubatch = max_ubatch;
    }
    if (params.n_batch > params.n_ubatch) {
        // every token of one llama_decode call is placed before any is computed
        LOG_WRN("%s: KV compression is on: n_batch %d -> %d (= n_ubatch)\n", __func__, params.n_batch, params.n_ubatch);
        params.n_batch = params.n_ubatch;
    }
    return user;
}

uint32_t common_kv_compress_cells(const common_params & params, const llama_model * model) {
    if (!common_kv_compress_enabled(params)) {
        return 0;
    }
    const beaconkv_params bp = kvc_params(params);
    const uint32_t n_ctx = params.n_ctx > 0 ? (uint32_t) params.n_ctx : (model ? llama_model_n_ctx_train(model) : 0);
    return beaconkv_physical_cells(&bp, std::max(1, params.n_parallel), params.n_ubatch, params.kv_unified, n_ctx,
                                   params.kv_cells);
}

bool common_kv_compress_attach(llama_context * ctx, const common_params & params) {
    if (!ctx || !common_kv_compress_enabled(params)) {
        return false;
    }
    const beaconkv_params bp = kvc_params(params);

    const llama_kv_plugin_host lhost = llama_kv_plugin_get_host(ctx);
    beaconkv_host host;
    std::memcpy(&host, &lhost, sizeof(host));

    char err[512] = { 0 };
    beaconkv_context * bkv = beaconkv_context_new(&bp, &host, err, sizeof(err));
    if (!bkv) {
        LOG_WRN("%s: beaconkv_context_new failed: %s\n", __func__, err[0] ? err : "unknown error");
        return false;
    }

    beaconkv_plugin bplugin;
    beaconkv_context_plugin(bkv, &bplugin);
    llama_kv_plugin plugin;
    std::memcpy(&plugin, &bplugin, sizeof(plugin));
    if (llama_kv_plugin_attach(ctx, &plugin) != 0) {
        beaconkv_context_free(bkv); // libllama logged why; it did not take ownership
        return false;
    }

    char spec[512] = { 0 };
    beaconkv_params_format(&bp, spec, sizeof(spec));
    LOG_INF("%s: KV compression on (beaconkv %s): %s\n", __func__, beaconkv_version(), spec);
    beaconkv_refresh_layers(bkv);
    LOG_INF("%s: K is scored: %s\n", __func__, common_kv_compress_scoring_path(ctx).c_str());
    // prompt=keep|window: prompt cells beyond the budget (prompt_max, 0 = the budget)
    const int32_t room = std::max(0, beaconkv_prompt_room(&bp));
    LOG_INF("%s: per sequence: logical context %u tokens, at most %d cells kept beside %d of the prompt; physical "
            "cells per stream: %u\n",
            __func__, llama_n_ctx_seq(ctx), bp.policy == BEACONKV_POLICY_NONE ? (int32_t) llama_n_ctx_seq(ctx) : bp.budget,
            bp.policy == BEACONKV_POLICY_NONE ? 0 : room, llama_kv_plugin_n_cells(ctx));
    return true;
}

beaconkv_context * common_kv_compress_get(const llama_context * ctx) {
    return (beaconkv_context *) llama_kv_plugin_get_ud(ctx);
}

int32_t common_kv_compress_reuse_point(const llama_context * ctx, llama_seq_id seq, int32_t n_past) {
    const beaconkv_context * bkv = common_kv_compress_get(ctx);
    const int32_t keep = bkv ? beaconkv_seq_reuse_point(bkv, seq, n_past) : n_past;
    return keep < 0 ? n_past : std::min(keep, n_past); // an error keeps what upstream keeps
}

bool common_kv_compress_info_get(llama_context * ctx, llama_seq_id seq, common_kv_compress_info & out) {
    beaconkv_context * bkv = common_kv_compress_get(ctx);
    if (!bkv) {
        return false;
    }
    beaconkv_stats st = {};
    beaconkv_get_stats(bkv, seq, &st);
    beaconkv_params bp = {};
    if (seq >= 0) {
        beaconkv_seq_params(bkv, seq, &bp); // the sequence's own budget and policy, if set
    } else {
        beaconkv_context_params(bkv, &bp);
    }

    out = {};
    out.policy          = beaconkv_policy_name(bp.policy);
    out.budget          = bp.budget;
    out.cells_in_use    = seq >= 0 ? llama_kv_plugin_seq_cells(ctx, seq, nullptr, nullptr, 0, nullptr) : st.cells_in_use;
    out.cells_peak      = st.cells_peak;
    out.cells_physical  = llama_kv_plugin_n_cells(ctx);
    out.evicted         = st.evicted;
    out.compress_events = st.compress_events;
    out.archived        = st.archived;
    out.recalled        = st.recalled;
    out.archive_bytes   = st.archive_bytes;
    out.plugin_ms       = st.ms_capture + st.ms_score + st.ms_evict + st.ms_recall;
    out.active          = beaconkv_is_enabled(bkv);
    out.reads_pass      = st.reads_pass;
    out.bytes_pass      = st.bytes_pass;
    out.reads_capture   = st.reads_capture;
    out.bytes_capture   = st.bytes_capture;
    out.n_tokens        = st.n_tokens;
    out.prompt_cells    = st.prefix_len;
    out.cells_allowed   = st.cells_allowed;
    out.scoring         = common_kv_compress_scoring_path(ctx);
    return true;
}

// beaconkv_seq_override_check's message without the library's "beaconkv: " ("" when allowed)
static std::string kvc_seq_check(const beaconkv_params & bp, uint32_t n_ctx_seq, int32_t budget, int32_t policy) {
    char err[512] = { 0 };
    if (beaconkv_seq_override_check(&bp, budget, policy, n_ctx_seq, err, sizeof(err)) == BEACONKV_OK) {
        return "";
    }
    static const char lib[] = "beaconkv: ";
    return std::strncmp(err, lib, sizeof(lib) - 1) == 0 ? err + sizeof(lib) - 1 : err;
}

std::string common_kv_compress_seq_check(const std::string & spec, uint32_t n_ctx_seq, int32_t budget,
                                         const std::string & policy, int32_t & policy_id) {
    beaconkv_params bp = beaconkv_params_default();
    char err[512] = { 0 };
    if (beaconkv_params_parse(spec.c_str(), &bp, err, sizeof(err)) != BEACONKV_OK) {
        return err;
    }
    policy_id = -1;
    std::string names;
    std::string allowed;
    for (int32_t id = 0; std::strcmp(beaconkv_policy_name(id), "unknown") != 0; ++id) {
        const std::string name = beaconkv_policy_name(id);
        policy_id = name == policy ? id : policy_id;
        names += (names.empty() ? "" : ", ") + name;
        if (kvc_seq_check(bp, n_ctx_seq, 0, id).empty()) {
            allowed += (allowed.empty() ? "" : ", ") + name;
        }
    }
    if (!policy.empty() && policy_id < 0) {
        return "policy: '" + policy + "' is not a policy (" + names + "); allowed here: " + allowed;
    }
    return kvc_seq_check(bp, n_ctx_seq, budget, policy_id);
}

bool common_kv_compress_seq_override(llama_context * ctx, llama_seq_id seq, int32_t budget, int32_t policy_id) {
    beaconkv_context * bkv = common_kv_compress_get(ctx);
    if (!bkv) {
        return false;
    }
    if (beaconkv_seq_override(bkv, seq, budget, policy_id, llama_n_ctx_seq(ctx)) != BEACONKV_OK) {
        char err[512] = { 0 };
        beaconkv_last_error_copy(bkv, err, sizeof(err));
        LOG_WRN("%s: %s\n", __func__, err);
        return false;
    }
    return true;
}

std::string common_kv_compress_scoring_path(llama_context * ctx) {
    beaconkv_context * bkv = common_kv_compress_get(ctx);
    char buf[128] = { 0 };
    if (!bkv || beaconkv_scoring_path(bkv, buf, sizeof(buf)) < 0) {
        return "";
    }
    return buf;
}

std::string common_kv_compress_spec(llama_context * ctx) {
    beaconkv_context * bkv = common_kv_compress_get(ctx);
    beaconkv_params bp = {};
    if (!bkv || beaconkv_context_params(bkv, &bp) != BEACONKV_OK) {
        return "";
    }
    char buf[512] = { 0 };
    beaconkv_params_format(&bp, buf, sizeof(buf));
    return buf;
}

void common_kv_compress_add_args(const std::function<void(common_arg)> & add_opt) {
    // every flag appends key=value to params.kv_compress_spec and validates it
    add_opt(common_arg(
        {"--kv-compress"}, "POLICY",
        "KV-cache compression policy: none|beacon|recent|streaming|random|rkv (default: off; any other --kv-* flag but --kv-cells turns it on with policy beacon)",
        [](common_params & params, const std::string & value) {
            common_kv_compress_append(params, "--kv-compress", "policy=" + value);
        }
    ).set_env("LLAMA_ARG_KV_COMPRESS"));
    add_opt(common_arg(
        {"--kv-budget"}, "N",
        "KV compression: max cells one sequence keeps (prefix + scored middle + window)",
        [](common_params & params, int value) {
            common_kv_compress_append(params, "--kv-budget", "budget=" + std::to_string(value));
        }
    ).set_env("LLAMA_ARG_KV_BUDGET"));
    add_opt(common_arg(
        {"--kv-beacons"}, "N",
        "KV compression: beacon queries per layer and head (policy beacon)",
        [](common_params & params, int value) {
            common_kv_compress_append(params, "--kv-beacons", "beacons=" + std::to_string(value));
        }
    ).set_env("LLAMA_ARG_KV_BEACONS"));
    add_opt(common_arg(
        {"--kv-recent"}, "N",
        "KV compression: most recent queries used for scoring",
        [](common_params & params, int value) {
            common_kv_compress_append(params, "--kv-recent", "recent=" + std::to_string(value));
        }
    ).set_env("LLAMA_ARG_KV_RECENT"));
    add_opt(common_arg(
        {"--kv-window"}, "N",
        "KV compression: newest cells always kept",
        [](common_params & params, int value) {
            common_kv_compress_append(params, "--kv-window", "window=" + std::to_string(value));
        }
    ).set_env("LLAMA_ARG_KV_WINDOW"));
    add_opt(common_arg(
        {"--kv-prefix"}, "N|prompt",
        "KV compression: protected first cells, or 'prompt' for the whole prompt",
        [](common_params & params, const std::string & value) {
            common_kv_compress_append(params, "--kv-prefix", "prefix=" + value);
        }
    ).set_env("LLAMA_ARG_KV_PREFIX"));
    add_opt(common_arg(
        {"--kv-prompt"}, "inside|keep|window",
        "KV compression: what the budget bounds of a prompt: keep (default: its first --kv-prompt-max cells are kept whole on top of the budget), inside (all of it; a long prompt is compressed while read) or window (read into budget + --kv-prompt-max cells, compressed once at its end)",
        [](common_params & params, const std::string & value) {
            common_kv_compress_append(params, "--kv-prompt", "prompt=" + value);
        }
    ).set_env("LLAMA_ARG_KV_PROMPT"));
    add_opt(common_arg(
        {"--kv-prompt-max"}, "N",
        "KV compression: prompt cells a sequence may hold beyond the budget with --kv-prompt keep|window (0 = the budget); the cache is sized for them",
        [](common_params & params, int value) {
            common_kv_compress_append(params, "--kv-prompt-max", "prompt_max=" + std::to_string(value));
        }
    ).set_env("LLAMA_ARG_KV_PROMPT_MAX"));
    add_opt(common_arg(
        {"--kv-archive"}, "N",
        "KV compression: evicted cells kept per sequence in a host-memory archive and recalled when the newest tokens repeat an earlier passage (0 = off)",
        [](common_params & params, int value) {
            common_kv_compress_append(params, "--kv-archive", "archive=" + std::to_string(value));
        }
    ).set_env("LLAMA_ARG_KV_ARCHIVE"));
    add_opt(common_arg(
        {"--kv-compress-spec"}, "SPEC",
        "KV compression: settings as \"key=value,...\" (policy, budget, min, beacons, recent, window, prefix, prefix_max, prompt, prompt_max, reduce, span, score, read, qcap, seed, archive, archive_type, page, recall_every, recall_margin, recall_match; see beaconkv.h)",
        [](common_params & params, const std::string & value) {
            common_kv_compress_append(params, "--kv-compress-spec", value);
        }
    ).set_env("LLAMA_ARG_KV_COMPRESS_SPEC"));
    add_opt(common_arg(
        {"--kv-cells"}, "N",
        "KV compression: physical KV cells to allocate (all sequences together; 0 = auto from the budget, n_ubatch, -np and --kv-unified)",
        [](common_params & params, int value) {
            if (value < 0) {
                throw std::invalid_argument("--kv-cells: must be >= 0");
            }
            params.kv_cells = value;
        }
    ).set_env("LLAMA_ARG_KV_CELLS"));
}

llama_context * common_kv_compress_init_context(llama_model * model, llama_context_params & cparams, common_params & params,
                                                const common_kv_compress_user & user) {
    // the cache holds n_ctx_cells physical cells, n_ctx stays the logical context (set only here, where the plugin
    // is attached: other contexts made from these params, e.g. draft contexts, keep a full-size cache)
    cparams.n_ctx_cells = common_kv_compress_cells(params, model); // n_ctx = 0: capped by n_ctx_train

    llama_context * lctx = llama_init_from_model(model, cparams);
    if (lctx == nullptr || !common_kv_compress_enabled(params) || common_kv_compress_attach(lctx, params)) {
        return lctx;
    }

    params.ctx_shift = user.ctx_shift;
    if (cparams.n_ctx_cells == 0) {
        LOG_WRN("%s: KV compression could not be attached: running with the uncompressed KV cache\n", __func__);
        return lctx;
    }

    // the cache was sized for the budget: without eviction it must hold the whole logical context
    LOG_WRN("%s: KV compression could not be attached: recreating the context with the full, uncompressed KV cache\n", __func__);
    llama_free(lctx);
    cparams.n_ctx_cells = 0;
    cparams.n_batch  = params.n_batch  = user.n_batch;
    cparams.n_ubatch = params.n_ubatch = user.n_ubatch;
    return llama_init_from_model(model, cparams);
}
