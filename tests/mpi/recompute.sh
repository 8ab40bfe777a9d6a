#!/usr/bin/env bash
# Activation recomputation (parallel.recompute) is bitwise equal to none: the weights
# (`compare --rtol 0`) and the logged losses of runs under "full" and "selective" against the
# same run under "none", on tinygpt (its head untied for the asynchronous schedules: tied
# layers across stages need a flush schedule) and the ResNet (batch-norm statistics updated
# once per unit), then checkpoint and resume with recomputation on: a pipedream run stopped
# with units in flight under full resumes bitwise, units captured under none resume into a
# fully recomputing run, and the reverse is a located error naming parallel.recompute.
# make test runs a subset (a few steps each: 1f1b and pipedream at 2 ranks, interleaved at 4,
# the ResNet under 1f1b at 2), make test-more zb-h1 and 2bw at 2 and 4 and the ResNet under
# pipedream and 2bw at 4 (tests/mpi/lib.sh: PT_TESTS); RECOMPUTE_MATRIX=1 (`make
# test-recompute`, mk/recompute.mk) runs every schedule (1f1b, zb-h1, interleaved-1f1b,
# pipedream, 2bw) on both models at 2 and 4 ranks (oversubscribed), both modes, and a resume
# per schedule.
set -u
source "$(dirname "$0")/lib.sh"
out=$(mktemp -d /tmp/pt_recompute.XXXXXX)
trap 'rm -rf "$out"' EXIT
matrix=${RECOMPUTE_MATRIX:-0}
gpt=(input/tinygpt.toml --set run.output_dir="$out" --set train.max_steps=4 --set train.log_every=1 --set data.seq_len=16
     --set model.layers.0.dim=32 --set model.layers.2.dropout=0.1
     --set train.batch_size=8 --set parallel.microbatches=4 --set train.eval_batch_size=64 --set train.eval_every=0
     --set checkpoint.at_end=false --set train.warmup_steps=2)
res=(input/fashion_resnet.toml --set run.output_dir="$out" --set train.max_steps=3 --set train.log_every=1
     --set train.batch_size=16 --set parallel.microbatches=4 --set train.eval_batch_size=2000 --set checkpoint.at_end=false)

# split for a model (gpt: layers 0-7; res: 0-8), a rank count and a placement (stages = ranks, or 2 x ranks looped)
split_for() {
  case "$2:$3" in
    2:contiguous) echo "[4]" ;;
    4:contiguous) echo "[2,4,6]" ;;
    2:looped) echo "[2,4,6]" ;;
    4:looped) echo "[1,2,3,4,5,6,7]" ;;
  esac
}

# case MODEL NP SCHEDULE MODES...: the run under none, then each mode against it
case_() {
  local model=$1 np=$2 sched=$3; shift 3
  local args=("${gpt[@]}") place=contiguous
  [ "$model" = res ] && args=("${res[@]}")
  [ "$sched" = interleaved-1f1b ] && place=looped
  case "$sched" in pipedream|2bw) [ "$model" = gpt ] && args+=(--set 'model.layers.7.tie=""') ;; esac
  args+=(--set "parallel.split=$(split_for "$model" "$np" "$place")" --set "parallel.schedule=$sched")
  local base="${model}_${sched}_${np}"
  train "$out" "${base}_none" "$np" "${args[@]}" --set parallel.recompute=none || return
  for mode in "$@"; do
    train "$out" "${base}_$mode" "$np" "${args[@]}" --set parallel.recompute="$mode" || continue
    compare "$out/${base}_none" "$out/${base}_$mode" 0
    same_losses "$out/${base}_none" "$out/${base}_$mode"
  done
}

if [ "$matrix" = 1 ]; then
  for model in gpt res; do
    for np in 2 4; do
      for sched in 1f1b zb-h1 interleaved-1f1b pipedream 2bw; do case_ "$model" "$np" "$sched" full selective; done
    done
  done
else
  in_core && for sched in 1f1b pipedream; do case_ gpt 2 "$sched" full selective; done
  in_more && for sched in zb-h1 2bw; do case_ gpt 2 "$sched" full selective; done
  in_core && case_ gpt 4 interleaved-1f1b full selective
  in_more && case_ gpt 4 zb-h1 full
  in_core && case_ res 2 1f1b full
  in_more && case_ res 4 pipedream full
  in_more && case_ res 4 2bw full
fi
if in_core; then
# the pools' accounting: under full a unit keeps the stage's input and output only
a=$(json_number "$out/gpt_1f1b_2_none/summary.json" activation_bytes_per_microbatch)
b=$(json_number "$out/gpt_1f1b_2_full/summary.json" activation_bytes_per_microbatch)
expect "full keeps less per unit in flight ($b bytes against $a under none) and reports its recompute buffers" \
  python3 -c "import json, sys; s = json.load(open('$out/gpt_1f1b_2_full/summary.json'))
sys.exit(not ($b > 0 and $a >= 5 * $b and s['recompute'] == ['full', 'full'] and all(r['recompute_bytes'] > 0 for r in s['per_rank'])))"

# checkpoint and resume: stop at step 2 with units in flight (pipedream), resume, land on the
# uninterrupted run (none) bitwise
resume_case() {  # NAME NP SCHEDULE CAPTURED RESUMED
  local name=$1 np=$2 sched=$3 from=$4 to=$5 place=contiguous
  [ "$sched" = interleaved-1f1b ] && place=looped
  local args=("${gpt[@]}" --set "parallel.split=$(split_for gpt "$np" "$place")" --set "parallel.schedule=$sched")
  case "$sched" in pipedream|2bw) args+=(--set 'model.layers.7.tie=""') ;; esac
  train "$out" "$name" "$np" "${args[@]}" --set parallel.recompute="$from" --set checkpoint.every_steps=2 --stop-at-step 2 || return
  expect "$name stopped at step 2" grep -q "stopped at step 2" "$out/$name.log"
  train "$out" "$name" "$np" "${args[@]}" --set parallel.recompute="$to" --resume "$out/$name" || return
  compare "$out/gpt_${sched}_${np}_none" "$out/$name" 0
}
resume_case gpt_pd_cut_full 2 pipedream full full
resume_case gpt_pd_cut_none_to_full 2 pipedream none full
if [ "$matrix" = 1 ]; then
  resume_case gpt_1f1b_cut 2 1f1b full full
  resume_case gpt_zbh1_cut 2 zb-h1 full full
  resume_case gpt_il_cut 4 interleaved-1f1b selective full
  resume_case gpt_2bw_cut 2 2bw selective selective
fi
# units captured under full cannot come back whole without their forwards: a located error
args=("${gpt[@]}" --set 'parallel.split=[4]' --set parallel.schedule=pipedream --set 'model.layers.7.tie=""')
train "$out" gpt_pd_cut_full_to_none 2 "${args[@]}" --set parallel.recompute=full --set checkpoint.every_steps=2 --stop-at-step 2
timeout --kill-after=5 120 mpirun $MPIRUN_FLAGS -np 2 "$PT_BIN" train "${args[@]}" --set run.name=gpt_pd_cut_full_to_none \
  --set run.plots=false --set parallel.recompute=none --resume "$out/gpt_pd_cut_full_to_none" >"$out/full_to_none.log" 2>&1
rc=$?
expect "resuming units captured under full with none: exit 2 (got $rc), a located error naming parallel.recompute" \
  bash -c "[ $rc = 2 ] && grep -q \"command line '--set parallel.recompute=none': key 'parallel.recompute': .* was taken under another recompute setting\" '$out/full_to_none.log'"
fi
finish
