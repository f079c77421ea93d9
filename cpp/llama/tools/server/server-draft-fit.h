#pragma once

// llama-server: fit the speculative drafts of one generation step into the server's batch.
//
// Each generating slot adds its sampled token plus its draft to the batch, and the drafts are sized per
// slot (up to the drafter's n_max), without looking at the other slots. The batch holds
// max(n_batch, n_parallel) tokens, and the verification reads every slot's draft from the same llama_decode
// call (post_decode throws when a draft crosses an n_batch sub-batch). When several slots draft at once with
// a small n_batch (KV compression lowers n_batch to n_ubatch, so that one decode call fits the physical
// cache's slack), the sum overflows and the server aborted on a GGML_ASSERT. A shorter draft is always valid
// for speculative decoding (an empty one is a plain decode step), so the drafts are shortened to what fits.
// Header-only, so that the server build needs no new source file.

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

// generating: the slots that add tokens in this step (each adds 1 + its draft); n_room: tokens one decode
// call of this step may hold (min(batch capacity, n_batch)). The room left after one token per slot is shared
// by water-filling: short drafts are kept whole, the longest ones are cut to an equal share, so no slot's
// draft starves the others. Slot needs spec_draft, spec_draft_q (empty, or one entry per draft token) and
// spec_is_replay. Returns the number of draft tokens cut.
template <typename Slot>
int32_t server_fit_drafts(const std::vector<Slot *> & generating, int32_t n_room) {
    int64_t room = (int64_t) n_room - (int64_t) generating.size();
    room = std::max<int64_t>(room, 0); // n_parallel > n_batch: no draft fits in the sub-batch of its slot

    std::vector<Slot *> with_draft;
    int64_t n_want = 0;
    for (Slot * slot : generating) {
        if (!slot->spec_draft.empty()) {
            with_draft.push_back(slot);
            n_want += (int64_t) slot->spec_draft.size();
        }
    }
    if (n_want <= room) {
        return 0;
    }

    std::stable_sort(with_draft.begin(), with_draft.end(), [](const Slot * a, const Slot * b) {
        return a->spec_draft.size() < b->spec_draft.size();
    });

    int32_t n_cut = 0;
    for (size_t i = 0; i < with_draft.size(); ++i) {
        Slot & slot = *with_draft[i];
        const int64_t share = room / (int64_t) (with_draft.size() - i);
        const size_t  keep  = (size_t) std::min<int64_t>((int64_t) slot.spec_draft.size(), share);
        room -= (int64_t) keep;

        n_cut += (int32_t) (slot.spec_draft.size() - keep);
        slot.spec_draft.resize(keep);
        if (!slot.spec_draft_q.empty()) {
            slot.spec_draft_q.resize(keep); // the candidates stay one per draft token
        }
        if (keep == 0) {
            // a replay (tokens accepted before a checkpoint restore) cut to nothing: the step is a plain decode,
            // and the next draft is a new one, verified as such
            slot.spec_is_replay = false;
        }
    }
    return n_cut;
}
