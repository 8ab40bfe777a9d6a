#!/usr/bin/env bash
# bf16 weight versions (docs/PRECISION.md, "Weights in bf16"): compute reads bf16 copies of
# the parameters, the latest version is an fp32 master and the stashes of an asynchronous
# schedule are packed bf16. Checks, on the MLP with 2 ranks, split [3], 12 steps:
# - bf16 pipedream matches `pipetrain emulate` (within 1e-5, as async_schedules.sh) and reads
#   the same version in forward and backward;
# - its stage-0 weight_bytes follow master + compute copy + stashes at 2 bytes per parameter,
#   from the fp32 run's numbers (fp32: versions x 4 bytes per parameter): the stashes halve;
# - 1f1b bf16 on 2 ranks equals one process bitwise;
# - bf16 pipedream stopped at step 6 and resumed equals the uninterrupted run bitwise (weights
#   and step losses); the checkpoint's stash holds bf16 values exactly, its latest the master.
set -u
source "$(dirname "$0")/lib.sh"
out=$(mktemp -d /tmp/pt_stash_bf16.XXXXXX)
trap 'rm -rf "$out"' EXIT
deck=input/fashion_mlp.toml
common=(--set train.max_steps=12 --set train.log_every=1 --set run.output_dir="$out" --set parallel.microbatches=4
        --set train.eval_batch_size=2000 --set checkpoint.at_end=false --set 'parallel.split=[3]')
bf=(--set train.precision=bf16)
pd=(--set parallel.schedule=pipedream --set run.debug_versions=true)

# rank0 RUN KEY: KEY of rank 0 in summary.json's per-rank list
rank0() { python3 -c 'import json,sys; r=[x for x in json.load(open(sys.argv[1]))["per_rank"] if x["rank"]==0][0]; print(r[sys.argv[2]])' "$1/summary.json" "$2"; }

# (a) bf16 pipedream against the emulator
timeout --kill-after=5 120 "$PT_BIN" emulate $deck --ranks 2 "${common[@]}" "${bf[@]}" "${pd[@]}" --set run.name=emu_pd_bf16 \
  >"$out/emu_pd_bf16.log" 2>&1 || { echo "FAIL emulator bf16 pipedream"; tail -5 "$out/emu_pd_bf16.log"; failures=$((failures + 1)); }
train "$out" pd_bf16 2 $deck "${common[@]}" "${bf[@]}" "${pd[@]}" && compare "$out/emu_pd_bf16" "$out/pd_bf16" 1e-5
expect "pd_bf16: forward and backward read the same version" \
  bash -c "cat '$out'/pd_bf16/versions/rank*.jsonl | grep -q fwd && ! cat '$out'/pd_bf16/versions/rank*.jsonl | \
           grep -oE '\"fwd\":[0-9]+,\"bwd\":[0-9]+' | awk -F'[:,]' '\$2 != \$4 { bad = 1 } END { exit !bad }'"
expect "the bf16 emulator differs from the fp32 one (bf16 is not a no-op)" bash -c \
  "'$PT_BIN' emulate $deck --ranks 2 ${common[*]} ${pd[*]} --set run.name=emu_pd_fp32 >/dev/null 2>&1 &&
   ! '$PT_BIN' compare '$out/emu_pd_fp32' '$out/emu_pd_bf16' --rtol 1e-5 --quiet >/dev/null 2>&1"

# (b) stage-0 weight bytes: fp32 v x 4n; bf16 4n (master) + 4n (compute copy) + 4 ceil(n/2) (its packed twin)
#     + (v - 1) x 4 ceil(n/2) (stashes)
train "$out" pd_fp32 2 $deck "${common[@]}" "${pd[@]}"
w32=$(rank0 "$out/pd_fp32" weight_bytes); w16=$(rank0 "$out/pd_bf16" weight_bytes)
v32=$(rank0 "$out/pd_fp32" weight_versions); v16=$(rank0 "$out/pd_bf16" weight_versions)
echo "  stage 0 weight_bytes: fp32 $w32 ($v32 versions), bf16 $w16 ($v16 versions)"
expect "both hold 2 versions on stage 0 (a stash)" test "$v32" = 2 -a "$v16" = 2
expect "bf16 weight_bytes = master + compute copy + its twin + stashes at 2 bytes per parameter" \
  awk -v w32="$w32" -v w16="$w16" -v v="$v32" 'BEGIN { n = w32 / (4 * v); half = 4 * int((n + 1) / 2)
    exit !(n == int(n) && n > 0 && w16 == 8 * n + v * half) }'
expect "the stash part halves: (bf16 - master - copy - twin) x 2 = fp32 - master" \
  awk -v w32="$w32" -v w16="$w16" -v v="$v32" 'BEGIN { m = w32 / v; exit !(2 * (w16 - 2.5 * m) == w32 - m) }'

# (c) 1f1b bf16: 2 ranks bitwise equal to one process
train "$out" ref_bf16 1 $deck "${common[@]}" "${bf[@]}" --set 'parallel.split=[]' --set parallel.schedule=1f1b
train "$out" f1b_bf16 2 $deck "${common[@]}" "${bf[@]}" --set parallel.schedule=1f1b && compare "$out/ref_bf16" "$out/f1b_bf16" 0

# (d) bf16 pipedream: stop at step 6 with a stash in the checkpoint, resume, bitwise
ck=(--set checkpoint.every_steps=6)
train "$out" pd_cut 2 $deck "${common[@]}" "${bf[@]}" "${pd[@]}" "${ck[@]}" --stop-at-step 6 &&
  train "$out" pd_cut_resume 2 $deck "${common[@]}" "${bf[@]}" "${pd[@]}" "${ck[@]}" --set run.name=pd_cut --resume "$out/pd_cut" &&
  compare "$out/pd_bf16" "$out/pd_cut" 0 && same_losses "$out/pd_bf16" "$out/pd_cut"
f=$(ls "$out"/pd_cut/checkpoints/step_000000000006/*0.h5 2>/dev/null | head -1)
held=$(h5dump -d /stage_0/versions_held "$f" 2>/dev/null | grep -oE '\): [0-9, ]+' | tr -dc '0-9 ' | tr ' ' '\n' | grep . | sort -n | tr '\n' ' ')
echo "  checkpoint at step 6: stage 0 holds versions [$held]"
# not_bf16 FILE DATASET: how many of the dataset's floats are not bf16 values (low 16 bits set); "" if unreadable
not_bf16() {
  h5dump -d "$2" -b LE -o "$out/ds.bin" "$1" >/dev/null 2>&1 &&
    python3 -c 'import struct,sys; d=open(sys.argv[1],"rb").read(); w=struct.unpack("<%dI" % (len(d)//4), d); print(sum(1 for x in w if x & 0xFFFF) if w else "")' "$out/ds.bin"
}
expect "the checkpoint stashes version 5 beside the latest 6" test "$held" = "5 6 "
k=$(not_bf16 "$f" /stage_0/versions/5)
expect "... the stash holds bf16 values exactly (non-bf16 floats: ${k:-unreadable})" test "$k" = 0
k=$(not_bf16 "$f" /stage_0/versions/6)
expect "... the latest is the fp32 master (non-bf16 floats: ${k:-unreadable})" test "${k:-0}" -gt 0
finish
