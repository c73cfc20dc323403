#!/bin/bash
# One session's sitting of the wsd-wide lineage on a lent GPU host (README.md beside this file).
# Each step is one device call (at most 10 minutes); the run goes on detached between calls,
# which must follow each other within the machine's idle release. From the repository root:
#   sitting.sh trunk STOP_S WAIT_S SEED    start the trunk (resumed from the last pause on this
#                                          host, else from this folder's checkpoint.pt if there
#                                          is one), sleep WAIT_S, copy its latest checkpoint to $OUT
#   sitting.sh peek SLEEP_S                sleep, copy the trunk's latest periodic checkpoint to
#                                          $OUT (a call that keeps the host while the trunk runs)
#   sitting.sh pause MAX_WAIT_S            wait for the trunk's pause, copy its final checkpoint
#                                          and log to $OUT (a sitting with no branch ends here)
#   sitting.sh branch DECAY_S MAX_WAIT_S SLEEP_S SEED
#                                          wait for the trunk's pause, copy its final checkpoint
#                                          to $OUT, start a decay branch of about DECAY_S seconds;
#                                          on a host where no trunk ran, branch from this folder's
#                                          checkpoint.pt (a sitting that only decays)
#   sitting.sh collect MAX_WAIT_S          wait for the branch, copy its model files to $OUT/branch
# The pyzmq wheel for the host's Python is expected in .whl/ (docs/model.md says how to get it).
set -u
export PYTHONPATH=/tmp/site:.
R=/tmp/rfc
HERE=benchmarks/lineage_wsd_wide
CH='{"dc_offset_db_range":[-40,6]}'
A='{"stages":[{"channels":32,"kernel":5,"dilations":[1]},{"channels":48,"kernel":5,"dilations":[1]},{"channels":64,"kernel":3,"dilations":[1,2]},{"channels":112,"kernel":3,"dilations":[1,2]},{"channels":176,"kernel":3,"dilations":[1,2]},{"channels":192,"kernel":3,"dilations":[1]}],"head_channels":192}'
COMMON=(--device cuda --schedule wsd --warmup-steps 2000 --lr 3e-3 --batch-size 1024 --workers 15 --cuda-graphs
        --channel-overrides "$CH" --val-per-bucket 2048 --log-every 500 --checkpoint-every-s 120)
TRUNK_STEPS=2000000   # the trunk's far horizon: it never decays, only branches do
EMA=(--ema-half-life-steps 5000)  # the trunk's weight average (from step 88,371 on), read off on a CPU
wait_for_line() {  # PATTERN LOG MAX_WAIT_S: until LOG has a line starting with PATTERN
  for _ in $(seq 1 $(( $3 / 2 ))); do grep -q "^$1" "$2" && break; sleep 2; done
}
wait_for_pause() {
  wait_for_line paused $R/trunk.log "$1"
  tail -3 $R/trunk.log
  rm -rf $R/trunk_final; cp -r $R/trunk $R/trunk_final
  cp $R/trunk_final/checkpoint.pt $R/trunk_final/train_log.json $R/trunk.log $OUT/
}
prepare_host() {
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
  mkdir -p $R
  nvidia-smi --query-gpu=name,memory.total --format=csv,noheader
}
case "$1" in
trunk)
  prepare_host
  if pgrep -f -- "--out $R/trunk " > /dev/null; then echo "a trunk is still running on this host"; exit 1; fi
  if [ -f $R/trunk_final/checkpoint.pt ]; then start=(--resume $R/trunk_final/checkpoint.pt)
  elif [ -f $HERE/checkpoint.pt ]; then start=(--resume $HERE/checkpoint.pt); else
    start=(--arch "$A" --normalization keep_dc); fi
  setsid nohup python3 -m rfclassify train --out $R/trunk --steps $TRUNK_STEPS "${COMMON[@]}" "${EMA[@]}" "${start[@]}" \
      --seed "$4" --stop-after-s "$2" > $R/trunk.log 2>&1 < /dev/null &
  sleep "$3"
  tail -4 $R/trunk.log; cp $R/trunk/checkpoint.pt $OUT/ 2>/dev/null; cp $R/trunk.log $OUT/ ;;
peek)
  sleep "$2"; tail -2 $R/trunk.log; cp $R/trunk/checkpoint.pt $R/trunk.log $OUT/ ;;
pause)
  wait_for_pause "$2" ;;
branch)
  if [ -f $R/trunk.log ]; then wait_for_pause "$3"; else
    prepare_host; rm -rf $R/trunk_final; mkdir -p $R/trunk_final
    cp $HERE/checkpoint.pt $HERE/train_log.json $R/trunk_final/; fi
  read -r K N < <(python3 -c "import json; g=json.load(open('$R/trunk_final/train_log.json')); h=g['history']; a,b=h[len(h)//2],h[-1]; print(g['paused_at_step'], int((b['step']-a['step'])/(b['elapsed_s']-a['elapsed_s'])*$2))")
  echo "trunk step $K, branch decay steps $N"
  setsid nohup python3 -m rfclassify train --out $R/branch --steps $((K+N)) --decay-steps $N "${COMMON[@]}" \
      --seed "$5" --resume $R/trunk_final/checkpoint.pt --ema-half-life-steps 0 > $R/branch.log 2>&1 < /dev/null &
  sleep "$4"; tail -3 $R/branch.log; cp $R/branch.log $OUT/ ;;
collect)
  wait_for_line done: $R/branch.log "$2"
  tail -4 $R/branch.log; cp $R/branch.log $OUT/
  mkdir -p $OUT/branch; cp $R/branch/model.pt $R/branch/model.json $R/branch/train_log.json $OUT/branch/ ;;
esac
