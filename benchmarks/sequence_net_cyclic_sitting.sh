#!/bin/bash
# The fifty-third session's device sitting (docs/model.md, "Fifty-third session"): two sequence
# networks on the coherence_cyclic clock (two seeds: a trained network is a draw), then the
# shipped refiner's fit with the second of them on the same clock. Run from the repository
# root on the lent host with PYTHONPATH set (the package, and lightgbm for --trees).
#   sequence_net_cyclic_sitting.sh start            launch the chain in a session of its own
#                                                   (it outlives the call)
#   sequence_net_cyclic_sitting.sh wait STEP MAX_S  wait at most MAX_S seconds for STEP (seq_a,
#                                                   seq_b, refiner_b), then copy its files to $OUT
#   sequence_net_cyclic_sitting.sh examples MAX_S   wait at most MAX_S seconds for refiner_b's
#                                                   saved examples, then copy them (gzipped) to
#                                                   $OUT while its perceptrons may still fit
# Each network trains for the shipped one's 20,288 steps of 512 (--max-steps; --train-s only
# caps it) and starts once 100,000 of its 700,000 bursts are made, the rest streaming in
# (--start-bursts: not bit-reproducible, but two networks fit one session's budget). On an
# H100 host each took about 550 s; refiner_b's examples took about 300 s more (saved with
# --save-examples; `examples` brought them back), so its perceptrons were fitted on a CPU from
# them (fit-refiner --examples) when the budget ran out. The first network's refiner is the same command with seq_a.npz.
set -u
W=${SEQ_WORK:-/tmp/seq_cyclic}
SEEDS=(20261301 20261302)
# the sizes, overridable only to check the chain at toy size on a CPU
BURSTS=${SEQ_BURSTS:-700000} START=${SEQ_START:-100000} STEPS=${SEQ_STEPS:-20288} PER_CLASS=${SEQ_PER_CLASS:-6000}
DEVICE=${SEQ_DEVICE:-cuda} WORKERS=${SEQ_WORKERS:-14}

chain() {
  local i name
  for i in 0 1; do
    name=seq_$([ $i = 0 ] && echo a || echo b)
    python3 -m rfclassify fit-sequence --model-dir models --device $DEVICE --workers $WORKERS --bursts $BURSTS \
      --start-bursts $START --train-s 560 --max-steps $STEPS --eval-every 2000 --rate-rule coherence_cyclic \
      --seed "${SEEDS[$i]}" --out $W/$name.npz > $W/$name.log 2>&1
    echo $? > $W/$name.rc
  done
  rm -rf $W/arm_b && cp -r models $W/arm_b && rm -rf $W/arm_b/eval $W/arm_b/static
  python3 -m rfclassify fit-refiner --model-dir $W/arm_b --per-class $PER_CLASS --seed 20261208 \
    --sequence-net $W/seq_b.npz --blind-view --power-lines --em-channel --em-classes 5 \
    --em-gate dense_top2_snr5 --rate-rule coherence_cyclic --members 10 --trees --workers $((WORKERS + 1)) \
    --save-examples $W/examples_b.npz > $W/refiner_b.log 2>&1
  echo $? > $W/refiner_b.rc
}

copy_examples() {  # refiner_b's saved examples, gzipped (fast: the host's time is the budget's)
  [ -f $W/examples_b.npz ] && gzip -1 -c $W/examples_b.npz > $OUT/examples_b.npz.gz
  ls -la $OUT
}

case "${1:-}" in
chain) chain ;;
start)
  mkdir -p $W
  python3 -c "import lightgbm; print('lightgbm', lightgbm.__version__)" \
    || echo "no lightgbm here: refiner_b's trees will fail after its examples are saved"
  setsid nohup bash "$0" chain > $W/chain.log 2>&1 < /dev/null &
  echo "chain started in $W" ;;
wait)
  for _ in $(seq 1 $(( $3 / 5 ))); do [ -f $W/$2.rc ] && break; sleep 5; done
  if [ ! -f $W/$2.rc ]; then echo "$2 still running"; tail -3 $W/$2.log; exit 0; fi
  rc=$(cat $W/$2.rc)
  echo "$2 exit $rc"; tail -4 $W/$2.log
  cp $W/$2.log $OUT/
  if [ "$rc" != 0 ]; then
    # arm_b starts as a copy of models/: after a failed fit its refiner.npz is the shipped one
    echo "$2 failed: its files are not copied (the log is)"
    [ $2 = refiner_b ] && copy_examples
    exit 0
  fi
  case $2 in
  seq_*) cp $W/$2.npz $OUT/ ;;
  refiner_b) cp $W/arm_b/refiner.npz $W/arm_b/model.json $OUT/; copy_examples ;;
  esac ;;
examples)
  E=$W/examples_b.npz
  for _ in $(seq 1 $(( $2 / 5 ))); do
    [ -f $W/refiner_b.rc ] && break
    if [ -f $E ]; then size=$(stat -c %s $E); sleep 10; [ "$(stat -c %s $E)" = "$size" ] && break; fi
    sleep 5
  done
  [ -f $E ] || { echo "no examples yet"; tail -2 $W/refiner_b.log 2>/dev/null; exit 0; }
  cp $W/refiner_b.log $OUT/; copy_examples ;;
*) echo "usage: sequence_net_cyclic_sitting.sh start | wait STEP MAX_S | examples MAX_S" >&2; exit 2 ;;
esac
