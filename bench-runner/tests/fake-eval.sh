#!/usr/bin/env bash
# A stand-in for beaconkv-eval (cpp/eval/) for beaconkv-bench's tests: same options, progress
# lines on stderr, made-up numbers in the same JSON shapes (a non-finite number is null, as the
# tool writes it; a newline in a string is escaped).
# FAKE_EVAL_FAIL=MODE makes that mode fail like the real tool does (reason: after its first
# conversation's line).
set -euo pipefail

mode=agree configs="beacon:256" out="" lengths="1024,2048" depths="0.1,0.5,0.9" length=2048 text=""
n_tokens=1024 prompt_tokens=32 passage=256 gap=1024 tasks="" bucket=256 free_max=0
while [ $# -gt 0 ]; do
    case "$1" in
        --mode) mode="$2"; shift 2 ;;
        --configs) configs="$2"; shift 2 ;;
        --out) out="$2"; shift 2 ;;
        --lengths) lengths="$2"; shift 2 ;;
        --depths) depths="$2"; shift 2 ;;
        --length) length="$2"; shift 2 ;;
        --text) text="$2"; shift 2 ;;
        --n-tokens) n_tokens="$2"; shift 2 ;;
        --prompt-tokens) prompt_tokens="$2"; shift 2 ;;
        --passage) passage="$2"; shift 2 ;;
        --gap) gap="$2"; shift 2 ;;
        --tasks) tasks="$2"; shift 2 ;;
        --bucket) bucket="$2"; shift 2 ;;
        --free-max) free_max="$2"; shift 2 ;;
        *) shift ;;  # llama.cpp flags (-m, -t, ...)
    esac
done

# budget_of CONFIG: the number after ':' (0 for none)
budget_of() { local b="${1%%/*}"; b="${b#*:}"; [[ "$b" =~ ^[0-9]+$ ]] && echo "$b" || echo 0; }
policy_of() { local p="${1%%/*}"; echo "${p%%:*}"; }

if [ "$mode" = configs ]; then
    # no model: check the policy names, print each config and a spec
    IFS=',' read -r -a cfgs <<< "$configs"
    for c in "${cfgs[@]}"; do
        p=$(policy_of "$c")
        case "${p%+archive}" in
            none | beacon | recent | streaming | random | rkv) ;;
            *) echo "error: unknown policy '$p' in '$c'" >&2; exit 1 ;;
        esac
        printf '%s\tpolicy=%s,budget=%s\n' "$c" "${p%+archive}" "$(budget_of "$c")"
    done
    exit 0
fi

echo "llama_model_loader: loaded meta data (fake)" >&2
if [ "${FAKE_EVAL_FAIL:-}" = "$mode" ] && [ "$mode" != reason ]; then
    echo "error: llama_decode returned -1 for 'beacon:32'" >&2
    exit 1
fi
if { [ "$mode" = agree ] || [ "$mode" = revisit ]; } && [ ! -f "$text" ]; then
    echo "error: --mode $mode needs --text FILE" >&2
    exit 1
fi

IFS=',' read -r -a cfgs <<< "$configs"
IFS=',' read -r -a lens <<< "$lengths"
IFS=',' read -r -a deps <<< "$depths"

json="{\"mode\": \"$mode\", "
case "$mode" in
    agree | revisit)
        total=$((n_tokens - 1)); ppl_from=$prompt_tokens
        [ "$mode" = revisit ] && { total=$((2 * passage + gap - 2)); ppl_from=$((passage + gap)); }
        for ((t = 64; t < total; t += 64)); do echo "progress $t/$total" >&2; done
        echo "progress $total/$total" >&2
        json+="\"n_tokens\": $((total + 1)), \"prompt_tokens\": $prompt_tokens, \"ppl_from\": $ppl_from, \"ppl_ref\": 8.5, \"results\": ["
        sep=""
        for c in "${cfgs[@]}"; do
            p=$(policy_of "$c"); b=$(budget_of "$c")
            [ "$p" = none ] && continue
            bonus=0; [ "$p" = beacon ] && bonus=5
            top1=$((80 + bonus + b / 16)); [ $top1 -gt 99 ] && top1=99
            ppl="$((9 + 64 / b)).$((bonus * 10 + 5))"; [ "$p" = random ] && [ "$mode" = revisit ] && ppl=null
            json+="$sep{\"config\": \"$c\", \"policy\": \"$p\", \"budget\": $b, \"top1\": 0.$top1, \"kl\": 0.0$((100 - top1)), \"ppl\": $ppl, \"ppl_ref\": 8.5, \"cells_peak\": $((b + 8)), \"evicted\": $((total - b)), \"compress_events\": $((total / 8)), \"plugin_ms\": 1.25, \"decode_ms\": 50.5}"
            sep=", "
        done
        json+="]}"
        ;;
    passkey)
        json+="\"length\": $length, \"results\": ["
        sep=""; done_n=0; total=$((${#cfgs[@]} * ${#deps[@]}))
        for d in "${deps[@]}"; do
            for c in "${cfgs[@]}"; do
                p=$(policy_of "$c"); b=$(budget_of "$c")
                found=false; answer=" 1234"
                if [ "$p" = none ] || [ "$p" = beacon ]; then found=true; answer=' 14271.\nThe'; fi
                json+="$sep{\"config\": \"$c\", \"policy\": \"$p\", \"budget\": $b, \"depth\": $d, \"n_tokens\": $((length + 14)), \"found\": $found, \"answer\": \"$answer\", \"cells_peak\": $((b > 0 ? b + 32 : length + 14))}"
                sep=", "
                done_n=$((done_n + 1)); echo "progress $done_n/$total" >&2
            done
        done
        json+="]}"
        ;;
    speed)
        json+="\"results\": ["
        sep=""; done_n=0; max=0
        for l in "${lens[@]}"; do [ "$l" -gt "$max" ] && max=$l; done
        for c in "${cfgs[@]}"; do
            p=$(policy_of "$c"); b=$(budget_of "$c")
            points=()
            if [ "$p" = none ] && [ "$b" -gt 0 ]; then
                for l in "${lens[@]}"; do [ "$l" -lt "$b" ] && points+=("$l"); done
                [ "$b" -le "$max" ] && points+=($((b - 8)))
            else
                points=("${lens[@]}")
            fi
            for ctx in "${points[@]}"; do
                if [ "$p" = beacon ]; then cells=$b; phys=$((b + 16)); ms="2.$((ctx % 7))"; share=0.4
                elif [ "$b" -gt 0 ]; then cells=$ctx; phys=$((b + 8)); ms="1.$((ctx % 5))"; share=0
                else cells=$ctx; phys=$((ctx + 8)); ms="$((2 + ctx / 128)).5"; share=0; fi
                json+="$sep{\"config\": \"$c\", \"policy\": \"$p\", \"budget\": $b, \"context\": $ctx, \"ms_per_token\": $ms, \"cells\": $cells, \"cells_physical\": $phys, \"kv_bytes_per_cell\": 18432, \"plugin_ms\": $share, \"decode_ms\": 10.5}"
                sep=", "
            done
            done_n=$((done_n + 1)); echo "progress $done_n/${#cfgs[@]}" >&2
        done
        json+="]}"
        ;;
    count)
        # n_doc: a quarter of the characters
        json+="\"results\": ["; sep=""
        while IFS= read -r line; do
            id=$(grep -o '"id":"[^"]*"' <<< "$line" | head -1 | cut -d'"' -f4)
            doc=$(grep -o '"doc":"[^"]*"' <<< "$line" | cut -d'"' -f4)
            json+="$sep{\"id\": \"$id\", \"chars\": ${#doc}, \"n_doc\": $(( ${#doc} / 4 + 1 ))}"; sep=", "
        done < "$tasks"
        json+="]}"
        ;;
    task)
        # the full cache and beacon answer with the known-correct output, the others wrongly
        json+="\"results\": ["; sep=""; done_n=0
        total=$(( $(grep -c . "$tasks") * ${#cfgs[@]} ))
        while IFS= read -r line; do
            id=$(grep -o '"id":"[^"]*"' <<< "$line" | head -1 | cut -d'"' -f4)
            mapfile -t expects < <(grep -o '"expect":"[^"]*"' <<< "$line" | cut -d'"' -f4)
            for c in "${cfgs[@]}"; do
                p=$(policy_of "$c"); b=$(budget_of "$c")
                for q in "${!expects[@]}"; do
                    ans="I do not know"
                    { [ "$p" = none ] || [ "$p" = beacon ]; } && ans="${expects[$q]}"
                    json+="$sep{\"id\": \"$id\", \"question\": $q, \"config\": \"$c\", \"policy\": \"$p\", \"budget\": $b, \"n_doc\": 200, \"n_question\": 30, \"n_gen\": 6, \"stopped\": true, \"output\": \"$ans\", \"cells_doc\": $((b > 0 ? b : 200)), \"cells_peak\": $((b > 0 ? b : 236)), \"evicted\": $((b > 0 && b < 200 ? 200 - b : 0)), \"compress_events\": 3, \"plugin_ms\": 0.5, \"prefill_ms\": 40.5, \"answer_ms\": 3.25}"
                    sep=", "
                done
                done_n=$((done_n + 1)); echo "progress $done_n/$total" >&2
            done
        done < "$tasks"
        json+="]}"
        ;;
    trace)
        prompts=(); while IFS= read -r line; do prompts+=("$(grep -o '"id":"[^"]*"' <<< "$line" | cut -d'"' -f4)"); done < "$tasks"
        limit=$n_tokens; [ "$free_max" -gt 0 ] && [ "$free_max" -lt "$n_tokens" ] && limit=$free_max
        json+="\"n_tokens\": $n_tokens, \"bucket\": $bucket, \"prompts\": ["; sep=""
        for id in "${prompts[@]}"; do
            json+="$sep{\"id\": \"$id\", \"n_prompt\": 40, \"n_tokens\": $n_tokens, \"first_eog\": -1, \"ref_ms\": 12.5, \"text\": \"Step 1:\nthe answer\"}"; sep=", "
        done
        json+="], \"results\": ["; sep=""
        for id in "${prompts[@]}"; do
            for c in "${cfgs[@]}"; do
                p=$(policy_of "$c"); b=$(budget_of "$c")
                buckets=""; bsep=""
                for ((f = 0; f < n_tokens; f += bucket)); do
                    t=$((f + bucket)); [ $t -gt "$n_tokens" ] && t=$n_tokens
                    top1=0.9; [ "$p" = none ] && top1=1
                    buckets+="$bsep{\"from\": $f, \"to\": $t, \"n\": $((t - f)), \"top1\": $top1, \"kl\": 0.0$((f / bucket + 1))}"; bsep=", "
                done
                free=null; [ "$p" != none ] && free=$(( b / 4 < limit ? b / 4 : limit ))
                json+="$sep{\"id\": \"$id\", \"config\": \"$c\", \"policy\": \"$p\", \"budget\": $b, \"n_tokens\": $n_tokens, \"top1\": 0.9, \"kl\": 0.05, \"first_mismatch\": $((b / 4)), \"diverge_free\": $free, \"free_limit\": $limit, \"buckets\": [$buckets], \"cells_peak\": $((b + 8)), \"evicted\": 10, \"compress_events\": 2, \"plugin_ms\": 1.5, \"decode_ms\": 20}"
                sep=", "
            done
        done
        echo "progress 1/1" >&2
        json+="]}"
        ;;
    reason)
        # Multi-turn conversations ({"id", "system", "turns": [...]} per line): every turn's answer is
        # worked out from its wording ("has N", "as your answer to Problem j", "Then it ... N more"
        # adds, "Then it ... N" takes away). The full cache and beacon answer every turn right, the
        # others all but the last; a turn generates min(--n-tokens, 12) tokens. One JSON line per
        # conversation on stdout as it finishes.
        json+="\"runs\": [], \"results\": ["; sep=""; done_n=0
        total=$(( $(grep -c . "$tasks") * ${#cfgs[@]} ))
        n_gen=$(( n_tokens < 12 ? n_tokens : 12 ))
        for c in "${cfgs[@]}"; do
            p=$(policy_of "$c"); b=$(budget_of "$c")
            while IFS= read -r line; do
                id=$(grep -o '"id":"[^"]*"' <<< "$line" | head -1 | cut -d'"' -f4)
                mapfile -t texts < <(grep -oE '"Problem [0-9]+: [^"]*"' <<< "$line")
                answers=(); turns=""; tsep=""
                for k in "${!texts[@]}"; do
                    t="${texts[$k]}"
                    if [[ "$t" =~ "as your answer to Problem "([0-9]+) ]]; then
                        v=${answers[$((BASH_REMATCH[1] - 1))]}
                    else
                        [[ "$t" =~ " has "([0-9]+)" " ]] && v=${BASH_REMATCH[1]}
                    fi
                    while IFS= read -r op; do
                        [ -z "$op" ] && continue
                        n=$(grep -oE '[0-9]+' <<< "$op")
                        if [[ "$op" == *" more" ]]; then v=$((v + n)); else v=$((v - n)); fi
                    done < <(grep -oE 'Then it [a-z ]+ [0-9]+( more)?' <<< "$t")
                    answers+=("$v")
                    given=$v
                    { [ "$p" != none ] && [ "$p" != beacon ] && [ $((k + 1)) = ${#texts[@]} ]; } && given=$((v + 1))
                    turns+="$tsep{\"n_prompt\": 30, \"n_gen\": $n_gen, \"stopped\": true, \"output\": \"so it has $given now.\\nAnswer: $given\"}"; tsep=", "
                done
                line_out="{\"id\": \"$id\", \"config\": \"$c\", \"policy\": \"$p\", \"budget\": $b, \"turns\": [$turns], \"n_prompt\": $((30 * ${#texts[@]})), \"n_gen\": $((n_gen * ${#texts[@]})), \"cells_peak\": $((b > 0 ? b : (30 + n_gen) * ${#texts[@]})), \"prefix_len\": 20, \"evicted\": $((b > 0 ? 7 : 0)), \"compress_events\": 2, \"recalled\": 0, \"seconds\": 0.5}"
                printf '%s\n' "$line_out"
                json+="$sep$line_out"; sep=", "
                done_n=$((done_n + 1)); echo "progress $done_n/$total" >&2
                if [ "${FAKE_EVAL_FAIL:-}" = reason ]; then
                    echo "error: llama_decode returned -1 for '$c'" >&2
                    exit 1
                fi
            done < "$tasks"
        done
        json+="]}"
        ;;
    *)
        echo "error: --mode must be agree, revisit, passkey, speed, count, task, trace, reason or configs (got '$mode')" >&2
        exit 1
        ;;
esac

if [ -n "$out" ]; then printf '%s\n' "$json" > "$out"; else printf '%s\n' "$json"; fi
