#!/usr/bin/env bash
# What one device call runs, inside its 10-minute limit: install tensorsmith without the
# network, run the GPU tests, run the benchmark, print its table last, copy results to $OUT.
#
#   bash bench/device_run.sh [bench/run.py flags...]
#
# Without flags it runs a quick fp16 pass (`--quick --precision fp16 --max-autotune-timeout 60`);
# whatever the flags, the benchmark gets the time left (--time-budget) and skips what would not fit.
# Environment: TOTAL_S (whole script, default 570), TEST_TIMEOUT_S (GPU tests, default 150),
# SKIP_TESTS=1 to go straight to the benchmark.
set -u
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD/src:$PWD${PYTHONPATH:+:$PYTHONPATH}"   # works even if the install below fails
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
TOTAL_S=${TOTAL_S:-570}
TEST_TIMEOUT_S=${TEST_TIMEOUT_S:-150}
CACHE=bench/.cache
PY=$(command -v python3 || command -v python)
step() { echo "== [${SECONDS} s] $*"; }

step "install (pip install --no-deps -e .)"
# --no-build-isolation: an isolated build env would try to download setuptools.
"$PY" -m pip install -q --no-deps --no-build-isolation -e . >"$OUT/pip.log" 2>&1 \
  || { echo "pip install failed (tail of pip.log below); using PYTHONPATH=src"; tail -5 "$OUT/pip.log"; }
"$PY" - <<'PYEOF'
import torch, tensorsmith
print("tensorsmith", tensorsmith.__version__, "| torch", torch.__version__, "| cuda", torch.version.cuda,
      "|", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "NO GPU")
PYEOF

if [ "${SKIP_TESTS:-0}" != 1 ]; then
  step "GPU tests (python -m pytest -q -m gpu tests, at most ${TEST_TIMEOUT_S} s)"
  timeout -k 10 "$TEST_TIMEOUT_S" "$PY" -m pytest -q -m gpu tests -p no:cacheprovider >"$OUT/pytest-gpu.log" 2>&1
  rc=$?
  tail -15 "$OUT/pytest-gpu.log"
  [ $rc = 124 ] && echo "GPU tests stopped at ${TEST_TIMEOUT_S} s"
  echo "GPU tests exit status: $rc"
fi

ARGS=("$@")
[ ${#ARGS[@]} = 0 ] && ARGS=(--quick --precision fp16 --max-autotune-timeout 60)
LEFT=$(( TOTAL_S - SECONDS - 30 ))       # 30 s kept for the report and the copies
if [ $LEFT -lt 60 ]; then
  echo "only ${LEFT} s left: no benchmark"; exit 1
fi
step "benchmark: bench/run.py ${ARGS[*]} (${LEFT} s)"
# The budget stops new work in time; the signal is the fallback if one build runs long. On
# SIGINT run.py writes what it measured; the table below is printed from that file either way.
timeout -s INT -k 20 "$LEFT" "$PY" bench/run.py "${ARGS[@]}" --cache-dir "$CACHE" \
  --time-budget $(( LEFT - 45 )) --json "$OUT/results.json" --markdown "$OUT/results.md" \
  >"$OUT/bench-progress.log" 2>&1
rc=$?
grep -v "^  " "$OUT/bench-progress.log" | grep "^\[" | tail -40
echo "benchmark exit status: $rc"

RUN=$(ls -td "$CACHE"/runs/*/ 2>/dev/null | head -1)
for f in bench.log max-autotune.log; do      # at most 8 files of 16 MiB come back from $OUT
  [ -n "$RUN" ] && [ -f "$RUN/$f" ] && tail -c 15000000 "$RUN/$f" >"$OUT/$f"
done
step "results"
if [ -f "$OUT/results.json" ]; then
  "$PY" bench/run.py --report "$OUT/results.json" --markdown "$OUT/results.md"
else
  echo "no results.json was written; see bench-progress.log"; tail -30 "$OUT/bench-progress.log"
fi
