// beaconkv-cli: text generation with BeaconKV KV-cache compression, with llama-cli's manners.
//
// Arguments go through llama.cpp's own common parser (-m, -p, -f, -n, -c, -b, -ub, -t, -fa, -ctk,
// -ctv, --temp, --seed, ... and the --kv-* compression flags the patch series adds), plus:
//   --stats-json PATH   write the compression summary as JSON (stable keys, see docs/flags.md)
//   --chat              wrap the prompt as one user turn with the model's chat template
// Generated text streams to stdout; the summary goes to stderr.

#include "arg.h"
#include "beaconkv.h"
#include "common.h"
#include "kv-compress.h"
#include "llama-kv-plugin.h"
#include "llama.h"
#include "log.h"
#include "sampling.h"
#include "tool-common.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace {

using clock_type = std::chrono::steady_clock;

double ms_since(clock_type::time_point t0) {
    return std::chrono::duration<double, std::milli>(clock_type::now() - t0).count();
}

// Options of this tool that llama.cpp's parser does not know; removed from argv before parsing.
struct cli_extra {
    std::string stats_json;
    bool chat = false;
};

bool take_extra_args(int & argc, char ** argv, cli_extra & extra) {
    int out = 1;
    for (int i = 1; i < argc; i++) {
        if (std::strcmp(argv[i], "--chat") == 0) {
            extra.chat = true;
            continue;
        }
        if (std::strcmp(argv[i], "--stats-json") == 0) {
            if (i + 1 >= argc) {
                fprintf(stderr, "error: --stats-json needs a PATH\n");
                return false;
            }
            extra.stats_json = argv[++i];
            continue;
        }
        argv[out++] = argv[i];
    }
    argc = out;
    return true;
}

// What the summary reports; also written as JSON.
struct run_summary {
    std::string policy = "off";
    std::string spec;           // canonical spec of the attached plugin ("" when off)
    int32_t budget = 0;
    int32_t n_prompt = 0;
    int32_t n_generated = 0;
    int32_t cells_in_use = 0;
    int32_t cells_peak = 0;     // most cells sequence 0 held after any decode call (host's count)
    uint32_t cells_physical = 0;
    uint64_t kv_bytes_per_cell = 0;
    uint64_t evicted = 0;
    uint64_t compress_events = 0;
    uint64_t archived = 0, recalled = 0, archive_bytes = 0; // the archive of evicted cells
    double prompt_ms = 0, decode_ms = 0, plugin_ms = 0;
    std::string scoring;        // where K is scored (beaconkv_scoring_path)
    uint64_t reads_pass = 0, bytes_pass = 0, reads_capture = 0, bytes_capture = 0; // reads from device/remote buffers

    uint64_t kv_bytes_physical() const { return kv_bytes_per_cell * cells_physical; }
    uint64_t kv_bytes_uncompressed() const { return kv_bytes_per_cell * (uint64_t) (n_prompt + n_generated); }
    double prompt_tok_s() const { return prompt_ms > 0 ? n_prompt * 1e3 / prompt_ms : 0; }
    double decode_tok_s() const { return decode_ms > 0 ? n_generated * 1e3 / decode_ms : 0; }
};

int32_t seq_cells_now(llama_context * ctx) {
    return bkv_tools::seq_cells(ctx, 0);
}

void print_summary(const run_summary & s) {
    const double mib = 1024.0 * 1024.0;
    fprintf(stderr, "\n\n== BeaconKV summary ==\n");
    fprintf(stderr, "policy            %s (budget %d)\n", s.policy.c_str(), s.budget);
    fprintf(stderr, "tokens            %d prompt + %d generated\n", s.n_prompt, s.n_generated);
    fprintf(stderr, "cells             %d in use, %d peak, %u physical\n", s.cells_in_use, s.cells_peak, s.cells_physical);
    fprintf(stderr, "evicted           %llu cells in %llu compression events\n",
            (unsigned long long) s.evicted, (unsigned long long) s.compress_events);
    if (s.archived + s.recalled > 0) {
        fprintf(stderr, "archive           %llu cells held (%.2f MiB host memory), %llu recalled\n",
                (unsigned long long) s.archived, s.archive_bytes / mib, (unsigned long long) s.recalled);
    }
    fprintf(stderr, "KV memory         %.2f MiB physical vs %.2f MiB uncompressed (same length)\n",
            s.kv_bytes_physical() / mib, s.kv_bytes_uncompressed() / mib);
    fprintf(stderr, "speed             prompt %.1f tok/s, decode %.1f tok/s\n", s.prompt_tok_s(), s.decode_tok_s());
    const double total = s.prompt_ms + s.decode_ms;
    fprintf(stderr, "plugin time       %.1f ms (%.1f%% of decode calls)\n", s.plugin_ms,
            total > 0 ? 100.0 * s.plugin_ms / total : 0.0);
    if (!s.scoring.empty()) {
        fprintf(stderr, "K scored          %s; reads to the host: %llu in passes (%.1f per pass, %.1f KiB), %llu in capture (%.1f KiB)\n",
                s.scoring.c_str(), (unsigned long long) s.reads_pass,
                s.compress_events ? (double) s.reads_pass / s.compress_events : 0.0, s.bytes_pass / 1024.0,
                (unsigned long long) s.reads_capture, s.bytes_capture / 1024.0);
    }
}

bool write_json(const std::string & path, const run_summary & s) {
    FILE * f = fopen(path.c_str(), "w");
    if (!f) {
        fprintf(stderr, "error: cannot write --stats-json file '%s'\n", path.c_str());
        return false;
    }
    fprintf(f,
            "{\n  \"policy\": \"%s\",\n  \"budget\": %d,\n  \"n_prompt\": %d,\n  \"n_generated\": %d,\n"
            "  \"cells_in_use\": %d,\n  \"cells_peak\": %d,\n  \"cells_physical\": %u,\n"
            "  \"kv_bytes_physical\": %llu,\n  \"kv_bytes_uncompressed\": %llu,\n  \"evicted\": %llu,\n"
            "  \"compress_events\": %llu,\n  \"archived\": %llu,\n  \"recalled\": %llu,\n  \"archive_bytes\": %llu,\n"
            "  \"prompt_tok_s\": %.3f,\n  \"decode_tok_s\": %.3f,\n"
            "  \"plugin_ms\": %.3f,\n  \"scoring\": \"%s\",\n  \"reads_pass\": %llu,\n  \"bytes_pass\": %llu,\n"
            "  \"reads_capture\": %llu,\n  \"bytes_capture\": %llu,\n  \"spec\": \"%s\"\n}\n",
            s.policy.c_str(), s.budget, s.n_prompt, s.n_generated, s.cells_in_use, s.cells_peak, s.cells_physical,
            (unsigned long long) s.kv_bytes_physical(), (unsigned long long) s.kv_bytes_uncompressed(),
            (unsigned long long) s.evicted, (unsigned long long) s.compress_events, (unsigned long long) s.archived,
            (unsigned long long) s.recalled, (unsigned long long) s.archive_bytes, s.prompt_tok_s(), s.decode_tok_s(),
            s.plugin_ms, s.scoring.c_str(), (unsigned long long) s.reads_pass, (unsigned long long) s.bytes_pass,
            (unsigned long long) s.reads_capture, (unsigned long long) s.bytes_capture, s.spec.c_str());
    fclose(f);
    return true;
}

// Fill what the plugin knows: policy, budget, evictions, time, bytes per cell.
void collect_plugin_stats(llama_context * ctx, const common_params & params, const llama_model * model,
                          run_summary & s) {
    s.kv_bytes_per_cell = bkv_tools::bytes_per_cell(ctx, model, params);
    s.cells_physical = bkv_tools::physical_cells(ctx);
    const beaconkv_context * bctx = common_kv_compress_get(ctx);
    if (!bctx) {
        return;
    }
    beaconkv_params bp{};
    beaconkv_context_params(bctx, &bp);
    s.policy = beaconkv_policy_name(bp.policy);
    s.budget = bp.policy == BEACONKV_POLICY_NONE ? 0 : bp.budget;  // none keeps every cell
    s.spec = common_kv_compress_spec(ctx);
    beaconkv_stats st{};
    if (beaconkv_get_stats(bctx, 0, &st) == BEACONKV_OK) {
        s.evicted = st.evicted;
        s.compress_events = st.compress_events;
        s.plugin_ms = st.ms_capture + st.ms_score + st.ms_evict + st.ms_recall;
        s.archived = st.archived;
        s.recalled = st.recalled;
        s.archive_bytes = st.archive_bytes;
        s.reads_pass = st.reads_pass;
        s.bytes_pass = st.bytes_pass;
        s.reads_capture = st.reads_capture;
        s.bytes_capture = st.bytes_capture;
    }
    s.scoring = common_kv_compress_scoring_path(ctx);
}

}  // namespace

int main(int argc, char ** argv) {
    cli_extra extra;
    if (!take_extra_args(argc, argv, extra)) {
        return 1;
    }
    common_params params;
    if (!common_params_parse(argc, argv, params, LLAMA_EXAMPLE_COMPLETION)) {
        return 1;
    }
    common_init();
    llama_backend_init();
    llama_numa_init(params.numa);

    common_init_result_ptr init = common_init_from_params(params);
    llama_model * model = init->model();
    llama_context * ctx = init->context();
    if (!model || !ctx) {
        fprintf(stderr, "error: failed to load the model\n");
        return 1;
    }
    const llama_vocab * vocab = llama_model_get_vocab(model);
    common_sampler * smpl = init->sampler(0);

    const std::string text = extra.chat ? bkv_tools::apply_chat_template(model, params.prompt) : params.prompt;
    std::vector<llama_token> prompt = common_tokenize(ctx, text, true, true);
    if (prompt.empty()) {
        fprintf(stderr, "error: empty prompt (give -p TEXT or -f FILE)\n");
        return 1;
    }
    run_summary sum;
    sum.n_prompt = (int32_t) prompt.size();

    // Prompt in n_batch chunks: the plugin can compress between chunks.
    auto t0 = clock_type::now();
    for (size_t i = 0; i < prompt.size(); i += params.n_batch) {
        const int32_t n = (int32_t) std::min<size_t>(params.n_batch, prompt.size() - i);
        const int ret = llama_decode(ctx, llama_batch_get_one(prompt.data() + i, n));
        if (ret != 0) {
            fprintf(stderr, "error: llama_decode failed on the prompt (%d)\n", ret);
            return 1;
        }
        sum.cells_peak = std::max(sum.cells_peak, seq_cells_now(ctx));
    }
    for (llama_token t : prompt) {
        common_sampler_accept(smpl, t, false);
    }
    sum.prompt_ms = ms_since(t0);

    fprintf(stdout, "%s", text.c_str());
    fflush(stdout);

    const int32_t n_predict = params.n_predict < 0 ? INT32_MAX : params.n_predict;
    t0 = clock_type::now();
    while (sum.n_generated < n_predict) {
        llama_token tok = common_sampler_sample(smpl, ctx, -1);
        common_sampler_accept(smpl, tok, true);
        if (llama_vocab_is_eog(vocab, tok) && !params.sampling.ignore_eos) {
            break;
        }
        fputs(common_token_to_piece(ctx, tok).c_str(), stdout);
        fflush(stdout);
        sum.n_generated++;
        const int ret = llama_decode(ctx, llama_batch_get_one(&tok, 1));
        if (ret != 0) {
            fprintf(stderr, "\nerror: llama_decode failed after %d tokens (%d)\n", sum.n_generated, ret);
            return 1;
        }
        sum.cells_peak = std::max(sum.cells_peak, seq_cells_now(ctx));
    }
    sum.decode_ms = ms_since(t0);
    sum.cells_in_use = seq_cells_now(ctx);

    collect_plugin_stats(ctx, params, model, sum);
    print_summary(sum);
    if (!extra.stats_json.empty() && !write_json(extra.stats_json, sum)) {
        return 1;
    }
    return 0;
}
