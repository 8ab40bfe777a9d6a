#!/usr/bin/env bash
# The simulator against measured runs for tensor parallelism (issue 25): tinygpt (the deck's
# T 128, batch 32; 1f1b with 4 microbatches, fp32) on 2 ranks, t = 1 (a pipeline of 2 stages,
# split [4]) and t = 2 (one stage split over the 2 ranks). Each round, per t: a fresh profile
# at that t under mpirun -np 2 (the layers' costs of one part, the network measured), a
# measured run of STEPS steps, and `pipetrain simulate --compare` (the profile's costs plus,
# at t = 2, each split layer's tensor sums as allreduces of their bytes). Prints each round's
# predicted and measured time per minibatch and the error, then per t the median error and
# range, PASS/FAIL at 10%. TS (default "1 2") lists the cases; "2s" is t = 2 with
# sequence_parallel = true in every transformer_block (the simulator costs its gathers and
# reduce-scatters as 3 sums of [T, D] per block each way).
#   bash bench/tensor_predicted.sh [ROUNDS=3] [STEPS=20]
#   TS="2 2s" bash bench/tensor_predicted.sh 3
# Environment: OUT (runs/bench_tensor_predicted), DECK (input/tinygpt.toml), SETS (more --set), TS.
set -u
cd "$(dirname "$0")/.."
source bench/lib.sh
ROUNDS=${1:-3} STEPS=${2:-20} TS=${TS:-1 2}
OUT=${OUT:-runs/bench_tensor_predicted}
DECK=${DECK:-input/tinygpt.toml}
mkdir -p "$OUT"
corpus="$OUT/corpus.txt"
cat $(ls -d /usr/share/games/fortunes/* | grep -v "\.") | head -c 262144 >"$corpus"
S=(--set data.path="$corpus" --set parallel.schedule=1f1b --set parallel.microbatches=4 --set train.log_every=5
   --set train.eval_batch_size=16 --set run.plots=false --set run.output_dir="$OUT" --set checkpoint.at_end=false
   --set train.max_steps="$STEPS" --set train.eval_every="$STEPS" ${SETS:-})
echo "cpu: $(cpu_bf16_case); $(grep -c ^processor /proc/cpuinfo) cores"
echo "binary: $PT_BIN ($(git rev-parse --short HEAD 2>/dev/null)); $DECK on 2 ranks, $ROUNDS rounds of $STEPS steps"
printf "%-6s %-3s %14s %14s %8s\n" round t "predicted ms" "measured ms" error
for r in $(seq 1 "$ROUNDS"); do
  for tv in $TS; do
    t=${tv%s} sp="[4]"; [ "$t" = 2 ] && sp="[]"
    g=("${S[@]}" --set parallel.tensor="$t" --set parallel.split="$sp")
    if [ "$tv" != "$t" ]; then
      for b in $(awk '/^\[\[model.layers\]\]/ {i++} /^type = "transformer_block"/ {print i - 1}' "$DECK"); do
        g+=(--set "model.layers.$b.sequence_parallel=true")
      done
    fi
    prof="$OUT/profile_t${tv}_r$r.json" run="run_t${tv}_r$r"
    timeout --kill-after=10 900 $MPIRUN $MPIRUN_FLAGS -np 2 "$PT_BIN" profile "$DECK" "${g[@]}" --out "$prof" >"$OUT/$run.profile.log" 2>&1 ||
      { echo "FAIL profile t=$tv (see $OUT/$run.profile.log)"; continue; }
    timeout --kill-after=10 900 $MPIRUN $MPIRUN_FLAGS -np 2 "$PT_BIN" train "$DECK" "${g[@]}" --set run.name="$run" >"$OUT/$run.log" 2>&1 ||
      { echo "FAIL run t=$tv (see $OUT/$run.log)"; continue; }
    "$PT_BIN" simulate "$DECK" "${g[@]}" --profile "$prof" --compare "$OUT/$run" >"$OUT/$run.sim.log" 2>&1 ||
      { echo "FAIL simulate t=$tv (see $OUT/$run.sim.log)"; continue; }
    line=$(grep '^time per minibatch' "$OUT/$run.sim.log")
    read -r pred meas err <<<"$(echo "$line" | awk '{ print $(NF-2), $(NF-1), $NF }')"
    printf "%-6s %-3s %14s %14s %8s\n" "$r" "$tv" "$pred" "$meas" "$err"
    echo "$tv ${err%\%}" >>"$OUT/errors.$$"
  done
done
for t in $TS; do
  read -r med lo hi <<<"$(awk -v t="$t" '$1 == t { e = $2; if (e < 0) e = -e; print e }' "$OUT/errors.$$" | stats)"
  verdict=$(awk -v m="$med" 'BEGIN { print (m <= 10 ? "PASS" : "FAIL") }')
  echo "t = $t: median |error| ${med}% (range ${lo}-${hi}%) against 10%: $verdict"
done
rm -f "$OUT/errors.$$"
