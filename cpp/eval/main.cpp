// beaconkv-eval: measurements behind the benchmark (`beaconkv-bench` drives it and plots).
//
//   beaconkv-eval --mode agree   --text FILE [--n-tokens N] [--prompt-tokens P] --configs LIST ...
//   beaconkv-eval --mode revisit --text FILE [--passage N] [--gap N] --configs LIST ...
//   beaconkv-eval --mode generate -p PROMPT [--n-tokens N] --configs LIST ...   (greedy reference)
//   beaconkv-eval --mode passkey [--length N] [--depths 0.1,0.5,0.9] [--chunk N] --configs LIST ...
//   beaconkv-eval --mode speed   [--lengths 1024,2048] [--prompt-len N] --configs LIST ...
//   beaconkv-eval --mode task    --tasks FILE.jsonl [--chunk N] --configs LIST ...   (long-context tasks)
//   beaconkv-eval --mode trace   --tasks FILE.jsonl [--n-tokens N] [--chunk N] [--bucket N] [--free-max N]
//                                --configs LIST ...   (own-trace fidelity)
//   beaconkv-eval --mode reason  --tasks FILE.jsonl [--n-tokens N] [--chunk N] [-np N] --configs LIST ...
//                                (multi-turn chain-of-thought conversations, -np of them decoded together;
//                                one JSON line per finished conversation on stdout)
//   beaconkv-eval --mode count   --tasks FILE.jsonl   (token counts of task documents)
//   beaconkv-eval --mode configs --configs LIST   (check the configs and print their specs; no model)
//   common llama.cpp flags (-m, -t, -fa, -ctk, ...) as usual; --out FILE.json for the results;
//   agree/revisit: --per-token FILE.csv writes every scored step (per config: NLL, top-1, cells recalled).
//
// LIST is comma-separated configs "policy:budget" (e.g. "beacon:256,recent:256"); "none" is the
// uncompressed reference. Extra spec keys go after a slash: "beacon:256/reduce=zmean/span=3".
// The result is one line of JSON, {"mode": MODE, ...} with the mode's keys (cpp/eval/*.cpp), on
// stdout or in --out.

#include "arg.h"
#include "eval.h"

#include <cstdio>
#include <fstream>

using namespace bkv_eval;

int main(int argc, char ** argv) {
    eval_args a;
    if (!take_eval_args(argc, argv, a)) {
        return 1;
    }
    std::vector<config> cfgs;
    if (a.mode == "configs") {
        // only check the configs (no model is loaded): the plugin's spec of each
        if (!parse_configs(a.configs, cfgs)) {
            return 1;
        }
        for (const config & c : cfgs) {
            printf("%s\t%s\n", c.name.c_str(), c.policy == "none" ? "none" : c.spec.c_str());
        }
        return 0;
    }
    common_params params;
    if (!common_params_parse(argc, argv, params, LLAMA_EXAMPLE_PERPLEXITY)) {
        return 1;
    }
    if (!parse_configs(a.configs, cfgs)) {
        return 1;
    }
    common_init();
    llama_backend_init();
    // Load the model only: every config gets its own context.
    params.kv_compress_spec.clear();
    common_init_result_ptr init = common_init_from_params(params, /*model_only=*/true);
    llama_model * model = init->model();
    if (!model) {
        fprintf(stderr, "error: failed to load the model\n");
        return 1;
    }

    json out = {{"mode", a.mode}};
    json result = json::object();
    bool ok = false;
    if (a.mode == "agree" || a.mode == "revisit" || a.mode == "generate") {
        ok = run_quality(model, params, cfgs, a, result);
    } else if (a.mode == "passkey") {
        ok = run_passkey(model, params, cfgs, a, result);
    } else if (a.mode == "speed") {
        ok = run_speed(model, params, cfgs, a, result);
    } else if (a.mode == "task") {
        ok = run_task(model, params, cfgs, a, result);
    } else if (a.mode == "trace") {
        ok = run_trace(model, params, cfgs, a, result);
    } else if (a.mode == "reason") {
        ok = run_reason(model, params, cfgs, a, result);
    } else if (a.mode == "count") {
        ok = run_count(model, a, result);
    } else {
        fprintf(stderr, "error: --mode must be agree, generate, revisit, passkey, speed, task, trace, reason, count or configs (got '%s')\n",
                a.mode.c_str());
        return 1;
    }
    if (!ok) {
        return 1;
    }
    out.update(result);
    const std::string text = dump_json(out);
    if (a.out.empty()) {
        printf("%s\n", text.c_str());
    } else {
        std::ofstream(a.out) << text << "\n";
    }
    return 0;
}
