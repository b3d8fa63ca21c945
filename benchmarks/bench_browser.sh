#!/usr/bin/env bash
# Benchmark (not a test): the Playground's latency as a person feels it, in JupyterLab in
# headless Chromium (the browser check's notebook and driver, tests/browser/).
#
#   bash benchmarks/bench_browser.sh [SAMPLES] [COMPETITORS]
#
# SAMPLES slider moves of max_new_tokens (20 <-> 21 sampled tokens), each timed from the
# key press until the final text is drawn and the panel is no longer busy; p50 / p90 are
# printed, with the first typed prompt change and the StepDebugger's Step clicks of the
# same run. COMPETITORS CPU-bound processes (python busy loops) run beside it for "under
# load". The check's own pass/fail is printed too but does not end the benchmark.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SAMPLES=${1:-11}
COMPETITORS=${2:-0}
PIDS=()
for _ in $(seq 1 "$COMPETITORS"); do
  python3 -c 'while True: pass' & PIDS+=($!)
done
trap '[ ${#PIDS[@]} -gt 0 ] && kill "${PIDS[@]}" 2>/dev/null' EXIT
GENLAB_LATENCY_SAMPLES=$SAMPLES SKIP_VOILA=1 bash "$ROOT/tests/browser/run.sh" > "$ROOT/.tmp/bench_browser.log" 2>&1
echo "browser check rc $? (log: .tmp/bench_browser.log)"
"$ROOT/.venv/bin/python" - "$ROOT/artifacts/browser/result.json" "$COMPETITORS" <<'PY'
import json, sys
res = json.load(open(sys.argv[1]))
def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(round(q * (len(v) - 1))))]
print(f"load: {sys.argv[2]} CPU-bound competitors; machine load average "
      f"{open('/proc/loadavg').read().split()[0]}")
for name, v in [("Playground slider -> final 20-token text", res.get("slider_latencies")),
                ("  ... until its first token shows", res.get("slider_first_token")),
                ("StepDebugger Step -> view", res.get("step_latencies"))]:
    if v:
        print(f"{name:<42} p50 {pct(v, .5):.3f} s  p90 {pct(v, .9):.3f} s  (n={len(v)})")
print(f"{'first typed prompt -> final text':<42} {res.get('secs_prompt_to_final_text')} s")
print(f"{'Run click -> busy shown':<42} {res.get('secs_click_to_busy')} s")
PY
