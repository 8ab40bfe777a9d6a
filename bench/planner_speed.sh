#!/usr/bin/env bash
# Planner speed: the published gnmt_large profile on 16 ranks (PipeDream's Python optimizer:
# about 80 s and 2.3 GB, figures from the profiles' README, not measured here), and a synthetic
# 2000-layer chain on 1024 ranks over 2 levels. Prints wall seconds and peak RSS of the whole
# command (/usr/bin/time -v), the planner's own time (choose_plan), and the process start-up
# of any pipetrain command (MPI_Init, Kokkos) measured in the same run.
# Usage: bench/planner_speed.sh   (PT_BIN overrides build/pipetrain; PT_PIPEDREAM_PROFILES the profiles)
set -u
cd "$(dirname "$0")/.."
BIN=${PT_BIN:-build/pipetrain}
PROFILES=${PT_PIPEDREAM_PROFILES:-../shared/data/pipedream-profiles}
[ -x "$BIN" ] || { echo "planner_speed: $BIN not built (make)"; exit 1; }
[ -x /usr/bin/time ] || { echo "planner_speed: /usr/bin/time is missing (apt-get install time)"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# run NAME CMD...: prints wall s, user s, peak RSS MB, the planner's time and the chosen plan
run() {
  local name=$1; shift
  /usr/bin/time -v "$@" >"$tmp/out" 2>"$tmp/time" || { echo "$name: FAILED"; cat "$tmp/out" "$tmp/time" | tail -20; return 1; }
  local wall user rss planned chosen
  wall=$(awk -F': ' '/Elapsed \(wall clock\)/ {n=split($2,a,":"); s=0; for(i=1;i<=n;i++) s=s*60+a[i]; printf "%.2f", s}' "$tmp/time")
  user=$(awk -F': ' '/User time/ {print $2}' "$tmp/time")
  rss=$(awk -F': ' '/Maximum resident set size/ {printf "%.1f", $2/1024}' "$tmp/time")
  planned=$(sed -n 's/^planned in \([0-9.]*\) s.*/\1/p' "$tmp/out")
  chosen=$(sed -n 's/^chosen plan *//p' "$tmp/out" | awk '{print $1, "M=" $2, $3}')
  printf "%-44s %8s %8s %9s %10s   %s\n" "$name" "$wall" "$user" "$rss" "${planned:--}" "$chosen"
  echo "$wall $rss ${planned:-0}" >"$tmp/$name.fig"
}

echo "planner speed ($(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg))"
printf "%-44s %8s %8s %9s %10s   %s\n" "case" "wall s" "user s" "RSS MB" "planner s" "chosen plan"
run startup "$BIN" --help
if [ -f "$PROFILES/gnmt_large.graph.txt" ]; then
  run gnmt_large_16 "$BIN" plan --profile "$PROFILES/gnmt_large.graph.txt" --ranks 16 --bandwidth 1.25e9
else
  echo "gnmt_large_16: SKIPPED: $PROFILES/gnmt_large.graph.txt not found (set PT_PIPEDREAM_PROFILES)"
fi
run synthetic_2000_layers_1024_ranks_2_levels "$BIN" plan --synthetic-chain 2000 --ranks 1024 \
  --bandwidth 1.5e11:8 --bandwidth 1.25e10 --latency 5e-6 --batch 1024 --memory 8e10

echo
read -r s_wall s_rss _ <"$tmp/startup.fig"
if [ -f "$tmp/gnmt_large_16.fig" ]; then
  read -r g_wall g_rss g_plan <"$tmp/gnmt_large_16.fig"
  awk -v w="$g_wall" -v r="$g_rss" -v p="$g_plan" -v s="$s_wall" 'BEGIN {
    printf "gnmt_large, 16 ranks: %.2f s wall for the whole command (a bare pipetrain --help: %.2f s), planner %.3f s, peak RSS %.1f MB\n", w, s, p, r
    printf "  vs PipeDream optimizer (published: ~80 s, 2.3 GB): %.0fx faster (whole command), %.0fx less memory; goals: < 1 s %s, < 100 MB %s\n",
      80 / w, 2300 / r, w < 1 ? "met" : (p < 1 ? "met by the planner (the rest is process start-up)" : "MISSED"), r < 100 ? "met" : "MISSED" }'
fi
read -r y_wall y_rss y_plan <"$tmp/synthetic_2000_layers_1024_ranks_2_levels.fig"
awk -v w="$y_wall" -v r="$y_rss" -v p="$y_plan" 'BEGIN {
  printf "synthetic chain, 2000 layers, 1024 ranks, 2 levels: %.2f s wall, planner %.2f s, peak RSS %.1f MB; goal < 5 s %s\n",
    w, p, r, w < 5 ? "met" : (p < 5 ? "met by the planner (process wall over: machine load?)" : "MISSED") }'
