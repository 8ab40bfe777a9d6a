#!/usr/bin/env bash
# Pipeline efficiency on 2 ranks: the Fashion-MNIST CNN split into 2 stages, M in
# {1,2,4,8,16}, schedules gpipe, 1f1b, model-parallel and pipedream (no flush; its minibatch
# is one microbatch of 128/M so the unit of work matches). Per point, REPS runs; reported:
# median samples/s (min-max), bubble of the bottleneck stage next to (K-1)/(M+K-1), and
# efficiency = measured throughput / bound, bound = 1 / (max over stages of compute seconds
# per sample), both from the same run. Then the zero-bubble ranking: zb-h2, zb-h1 and 1f1b
# on 2 ranks at the same M, in interleaved rounds (1f1b, zb-h1, zb-h2, 1f1b, ...), with
# median samples/s, range and bubble, and the ratios zb-h1/1f1b and zb-h2/zb-h1.
# Usage: bench/pipeline_efficiency.sh [REPS] [STEPS]; PART=classic or PART=zb runs one part.
set -u
cd "$(dirname "$0")/.."
source bench/lib.sh
reps=${1:-3}; steps=${2:-60}
split=${SPLIT:-[3]}
ct=$(best_coretype); [ -n "$ct" ] && export OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-$ct}
out=${OUT:-runs/bench_pipeline_efficiency}
mkdir -p "$out"
csv="$out/pipeline_efficiency.csv"
echo "schedule,M,rep,samples_per_s,bubble_bottleneck,bubble_formula,efficiency" >"$csv"
printf "CNN, 2 ranks, split %s, %s steps per run, %s runs per point, OPENBLAS_CORETYPE=%s\n" "$split" "$steps" "$reps" "${OPENBLAS_CORETYPE:-}"
printf "%-15s %3s %22s %10s %10s %12s %10s\n" schedule M "samples/s (min-max)" bubble formula efficiency "eff goal"
part=${PART:-all}
[ "$part" = zb ] || for M in 1 2 4 8 16; do
  for sched in gpipe 1f1b model-parallel pipedream; do
    rows=()
    for rep in $(seq 1 "$reps"); do
      name="${sched}_M${M}_r$rep"
      args=(--set "parallel.schedule=$sched" --set "parallel.microbatches=$M")
      [ "$sched" = pipedream ] && args=(--set parallel.schedule=pipedream --set parallel.microbatches=1 --set "train.batch_size=$((128 / M))")
      $MPIRUN $MPIRUN_FLAGS -np 2 "$PT_BIN" train input/fashion_cnn.toml --set "parallel.split=$split" "${args[@]}" \
        --set train.max_steps=$([ "$sched" = pipedream ] && echo $((steps * M)) || echo "$steps") --set train.log_every=100000 \
        --set run.output_dir="$out" --set run.name="$name" --set train.eval_batch_size=1000 --set run.plots=false >"$out/$name.log" 2>&1 ||
        { echo "run $name failed: see $out/$name.log"; exit 1; }
      s="$out/$name/summary.json"
      sps=$(json_get "$s" samples_per_s); samples=$(awk -v t="$(json_get "$s" train_wall_s)" -v r="$sps" 'BEGIN{print t*r}')
      # per rank: compute_s, wall_s; bottleneck = the rank with the most compute
      c0=$(json_get "$s" compute_s 1); c1=$(json_get "$s" compute_s 2); w0=$(json_get "$s" wall_s 1); w1=$(json_get "$s" wall_s 2)
      read -r eff bub <<<"$(awk -v c0="$c0" -v c1="$c1" -v w0="$w0" -v w1="$w1" -v n="$samples" -v sps="$sps" 'BEGIN {
        c = c0 > c1 ? c0 : c1; w = c0 > c1 ? w0 : w1; printf "%.4f %.4f", sps * c / n, 1 - c / w }')"
      formula=$(awk -v M="$M" 'BEGIN { printf "%.4f", 1 / (M + 1) }')
      [ "$sched" = pipedream ] && formula=0
      echo "$sched,$M,$rep,$sps,$bub,$formula,$eff" >>"$csv"
      rows+=("$sps $bub $eff")
    done
    read -r med lo hi <<<"$(printf "%s\n" "${rows[@]}" | awk '{print $1}' | stats)"
    read -r bub _ _ <<<"$(printf "%s\n" "${rows[@]}" | awk '{print $2}' | stats)"
    read -r eff _ _ <<<"$(printf "%s\n" "${rows[@]}" | awk '{print $3}' | stats)"
    goal=$(awk -v M="$M" -v s="$sched" 'BEGIN { if (s == "1f1b") printf ">= %.3f", 0.9 * M / (M + 1); else if (s == "pipedream") printf ">= 0.950"; else printf "-" }')
    printf "%-15s %3s %10.0f (%.0f-%.0f) %10.3f %10.3f %12.3f %10s\n" "$sched" "$M" "$med" "$lo" "$hi" "$bub" \
      "$(awk -v M="$M" -v s="$sched" 'BEGIN { print s == "pipedream" ? 0 : 1 / (M + 1) }')" "$eff" "$goal"
  done
done
echo "raw rows: $csv"
[ "$part" = classic ] && exit 0

# ---- zero bubble: zb-h2 >= zb-h1 >= 1f1b at the same M, interleaved rounds ---------------
zdeck=${ZB_DECK:-input/fashion_cnn.toml}; zsplit=${ZB_SPLIT:-$split}
zcsv="$out/zero_bubble.csv"
echo "schedule,M,round,samples_per_s,bubble" >"$zcsv"
printf "\nzero bubble: %s, 2 ranks, split %s, %s steps per run, %s interleaved rounds; CPU %s\n" "$zdeck" "$zsplit" "$steps" "$reps" \
  "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
for M in ${ZB_MS:-4 8}; do
  for round in $(seq 1 "$reps"); do
    for sched in 1f1b zb-h1 zb-h2; do
      name="zb_${sched}_M${M}_r$round"
      $MPIRUN $MPIRUN_FLAGS -np 2 "$PT_BIN" train "$zdeck" --set "parallel.split=$zsplit" --set "parallel.schedule=$sched" \
        --set "parallel.microbatches=$M" --set train.max_steps="$steps" --set train.log_every=100000 --set run.output_dir="$out" \
        --set run.name="$name" --set train.eval_batch_size=1000 --set run.plots=false --set checkpoint.at_end=false >"$out/$name.log" 2>&1 ||
        { echo "run $name failed: see $out/$name.log"; exit 1; }
      s="$out/$name/summary.json"
      echo "$sched,$M,$round,$(json_get "$s" samples_per_s),$(json_get "$s" bubble_fraction)" >>"$zcsv"
    done
  done
  printf "%-8s %3s %24s %8s\n" schedule M "samples/s median (range)" bubble
  declare -A med=()
  for sched in 1f1b zb-h1 zb-h2; do
    read -r m lo hi <<<"$(awk -F, -v s="$sched" -v M="$M" '$1 == s && $2 == M {print $4}' "$zcsv" | stats)"
    read -r b _ _ <<<"$(awk -F, -v s="$sched" -v M="$M" '$1 == s && $2 == M {print $5}' "$zcsv" | stats)"
    med[$sched]=$m
    printf "%-8s %3s %12.0f (%.0f-%.0f) %8.3f\n" "$sched" "$M" "$m" "$lo" "$hi" "$b"
  done
  printf "M=%s: zb-h1/1f1b = %.3f, zb-h2/zb-h1 = %.3f, zb-h2/1f1b = %.3f\n" "$M" \
    "$(awk -v a="${med[zb-h1]}" -v b="${med[1f1b]}" 'BEGIN{print a/b}')" \
    "$(awk -v a="${med[zb-h2]}" -v b="${med[zb-h1]}" 'BEGIN{print a/b}')" \
    "$(awk -v a="${med[zb-h2]}" -v b="${med[1f1b]}" 'BEGIN{print a/b}')"
done
echo "raw rows: $zcsv"
