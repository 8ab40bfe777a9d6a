#!/usr/bin/env bash
# Pipeline efficiency on 2 ranks: the Fashion-MNIST CNN split into 2 stages, M in
# {1,2,4,8,16}, schedules gpipe, 1f1b, model-parallel and pipedream (no flush; its minibatch
# is one microbatch of 128/M so the unit of work matches). Per point, REPS runs; reported:
# median samples/s (min-max), bubble of the bottleneck stage next to (K-1)/(M+K-1), and
# efficiency = measured throughput / bound, bound = 1 / (max over stages of compute seconds
# per sample), both from the same run. Usage: bench/pipeline_efficiency.sh [REPS] [STEPS]
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
for M in 1 2 4 8 16; do
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
