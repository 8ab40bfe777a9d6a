#!/usr/bin/env bash
# `make bench`: every benchmark in turn, each one's output in runs/bench_all/NAME.log, and a
# closing list of what passed, failed or was skipped. Takes about an hour on 2 cores
# (time_to_accuracy and pipeline_efficiency are the long ones); run a single script from
# bench/ for one figure. Results are described in bench/README.md.
set -u
cd "$(dirname "$0")/.."
out=runs/bench_all
mkdir -p "$out"
benches=(planner_speed paper_plans peer_pytorch pipeline_efficiency predicted_vs_measured ablation strong_scaling
         time_to_accuracy mfu)
status=()
t_all=$(date +%s)
for i in "${!benches[@]}"; do
  b=${benches[$i]}
  printf "[%d/%d] bench/%s.sh (log %s/%s.log; %d min so far) ... " $((i + 1)) ${#benches[@]} "$b" "$out" "$b" \
    $((($(date +%s) - t_all) / 60))
  t0=$(date +%s)
  if bash "bench/$b.sh" >"$out/$b.log" 2>&1; then r=ok; else r="FAILED (exit $?)"; fi
  [ "$r" = ok ] && grep -q "^SKIP" "$out/$b.log" && r="skipped: $(grep -m1 "^SKIP" "$out/$b.log")"
  echo "$r, $(($(date +%s) - t0)) s"
  status+=("$b: $r")
done
printf "\n%s\n" "${status[@]}"
printf "%s\n" "${status[@]}" | grep -q FAILED && exit 1
exit 0
