/* logits_dump: greedy generation with plain llama.h (no plugin), printing every logit as hex.
 * Built against the patched and the unpatched llama.cpp by scripts/compare-unpatched.sh, whose
 * outputs must be byte-identical: the patch series changes nothing while no plugin is attached.
 *   logits_dump MODEL N_STEPS */
#include "llama.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void quiet(enum ggml_log_level level, const char * text, void * ud) {
    (void) level; (void) text; (void) ud;
}

int main(int argc, char ** argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: %s MODEL N_STEPS\n", argv[0]);
        return 2;
    }
    llama_log_set(quiet, NULL);
    llama_backend_init();
    struct llama_model * model = llama_model_load_from_file(argv[1], llama_model_default_params());
    if (!model) return 1;
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 1024;
    cp.n_threads = cp.n_threads_batch = 2;
    struct llama_context * ctx = llama_init_from_model(model, cp);
    const struct llama_vocab * vocab = llama_model_get_vocab(model);
    const char * text = "The lighthouse keeper counted the barrels of oil twice before the storm arrived.";
    llama_token toks[256];
    int n = llama_tokenize(vocab, text, (int) strlen(text), toks, 256, true, false);
    if (n <= 0 || llama_decode(ctx, llama_batch_get_one(toks, n)) != 0) return 1;
    const int n_vocab = llama_vocab_n_tokens(vocab);
    for (int step = 0; step < atoi(argv[2]); step++) {
        const float * l = llama_get_logits_ith(ctx, -1);
        llama_token best = 0;
        for (int i = 0; i < n_vocab; i++) {
            unsigned int bits;
            memcpy(&bits, &l[i], 4);
            printf("%08x", bits);
            if (l[i] > l[best]) best = i;
        }
        printf("\n");
        if (llama_decode(ctx, llama_batch_get_one(&best, 1)) != 0) return 1;
    }
    llama_free(ctx);
    llama_model_free(model);
    return 0;
}
