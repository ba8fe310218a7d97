#!/usr/bin/env bash
# GPU readiness in one run, under 8 minutes on one H100/H200-class GPU (after `pip install -e ".[dev]"`;
# it installs nothing):
#   1. tests: tests/test_devices.py on CPU and CUDA, and the single-process tests that train,
#      checkpoint and generate on the GPU (train.device=auto picks it);
#   2. MFU: gpt-1.3b, bf16, seq 2048, 30 timed steps on one GPU (benchmarks/mfu.py --device cuda;
#      target >= 55%);
#   3. memory: that run's peak (torch.cuda.max_memory_allocated) beside `trident rehearse`'s
#      measured and planned peaks for the same config (mfu.py's GPU_CASE overrides);
#   4. kernels: the attention kernel (flash/memory-efficient, not the math fallback) and the AdamW
#      kernel (fused) of one training step (benchmarks/gpu_kernels.py);
#   5. ring: context parallelism's ring attention with its CUDA blocks (flash MHA/GQA, memory-efficient,
#      the fp32 matmuls) against SDPA under bf16 autocast, forward and backward, a cp4 ring as threads
#      of one process (NCCL takes one rank per GPU): tests/test_context_kernels.py, errors printed; and
#      its speed: one layer's forward + backward at S=16384, flash blocks and fp32 matmul blocks against
#      SDPA (benchmarks/ring_blocks.py; target for the flash blocks <= 1.2 x SDPA);
#   6. paths: timing on CUDA events (the pipeline timeline's, the bubble's and the stragglers' clock)
#      against the host clock; synchronizing calls in a decode pass; init's pinned staging, the
#      non-blocking checkpoint snapshot and on-device replica digests against the old host round trips
#      (benchmarks/gpu_paths.py); the tests step runs their device tests (test_device_copies,
#      test_replica_digests, test_device_clock, test_decode_on_device) on CUDA as well.
# Each step runs under a timeout, cut to what is left of a 570 s budget (the whole run stays under 10
# minutes); a failed step is reported and the later ones still run. Everything printed goes to stdout
# and to ${OUT:-/tmp}/gpu-report.txt. Exit status 0 only if every step passed; 1 at once on a machine
# without CUDA. --dry-run runs the steps' CPU variants at small sizes (the plumbing, on any machine:
# the tests, paths, kernels and ring-speed steps; mfu and rehearse need the GPU).
#
#     bash benchmarks/gpu.sh [--dry-run]
set -euo pipefail
cd "$(dirname "$0")/.."
REPORT="${OUT:-/tmp}/gpu-report.txt"
DRY_RUN=0
[ "${1:-}" = "--dry-run" ] && DRY_RUN=1
BUDGET=570  # seconds for all the steps: the run ends within 10 minutes of device time

if [ "$DRY_RUN" = 0 ] && ! python -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
    echo "benchmarks/gpu.sh: torch sees no CUDA GPU on this machine; run it where one is (nothing was run)" \
        | tee "$REPORT"
    exit 1
fi

WORK="$(mktemp -d)"
FAILED=()

step() {  # step NAME SECONDS COMMAND...: run COMMAND under a timeout, its output also in $WORK/NAME.log
    local name=$1 seconds=$2 rc=0 start=$SECONDS
    shift 2
    if [ $((BUDGET - SECONDS)) -lt "$seconds" ]; then
        seconds=$((BUDGET - SECONDS))
    fi
    if [ "$seconds" -lt 10 ]; then
        echo "=== $name: NOT RUN (the ${BUDGET} s budget is spent)"
        FAILED+=("$name")
        return
    fi
    echo
    echo "=== $name (timeout ${seconds}s): $*"
    set +e
    timeout "$seconds" "$@" 2>&1 | tee "$WORK/$name.log"
    rc=${PIPESTATUS[0]}
    set -e
    if [ "$rc" -eq 0 ]; then
        echo "=== $name: ok in $((SECONDS - start)) s"
    else
        echo "=== $name: FAILED (exit $rc$([ "$rc" -eq 124 ] && echo ', timed out')) after $((SECONDS - start)) s"
        FAILED+=("$name")
    fi
}

summary() {  # MFU, peak memory measured vs rehearsed, from the JSON the steps printed
    python - "$WORK" <<'EOF'
import json, sys
from pathlib import Path

work = Path(sys.argv[1])
def first_json(name, start):
    """The JSON object printed in step NAME's output at the first occurrence of START."""
    path = work / f"{name}.log"
    text = path.read_text() if path.exists() else ""
    at = text.find(start)
    return json.JSONDecoder().raw_decode(text[text.index("{", at):])[0] if at >= 0 else None

gib = lambda n: f"{n / 2**30:.2f} GiB"
mfu = first_json("mfu", 'JSON {"benchmark": "mfu"')
gpu_peak = None
if mfu:
    run = mfu["results"][0]
    gpu_peak = run["peak_memory_bytes"]
    print(f"MFU, gpt-1.3b bf16 seq {run['seq']}, {len(run['steps']['wall'])} timed steps: {run['mfu']:.1%} of "
          f"{run['peak_tflops']['wall']:.0f} TFLOP/s ({run['tflops_wall']:.0f} TFLOP/s, {run['tokens_per_s']:,.0f} "
          f"tokens/s); target >= 55%: {'met' if run['mfu'] >= 0.55 else 'MISSED'}")
    print(f"peak memory of that run (torch.cuda.max_memory_allocated): {gib(gpu_peak)}")
    print(f"FLOPs counted as {mfu.get('flops_convention', '?')}")
else:
    print("MFU: no result (see the mfu step)")
rehearsal = first_json("rehearse", "{\n")
if rehearsal and gpu_peak:
    rank = rehearsal["ranks"][0]
    rehearsed, planned = rank["measured"]["peak"], rank["plan"]["total"]
    print(f"rehearsal of the same config, rank 0: measured peak {gib(rehearsed)}, plan {gib(planned)}; "
          f"GPU / rehearsal = {gpu_peak / rehearsed:.3f}, GPU / plan = {gpu_peak / planned:.3f}")
else:
    print("peak memory vs rehearsal: no comparison (see the mfu and rehearse steps)")
paths = first_json("paths", 'JSON {"benchmark": "gpu_paths"')
for check in (paths or {}).get("results", []):
    print(f"paths {check['check']}: {'ok' if check['ok'] else 'FAILED'}",
          {k: v for k, v in check.items() if k not in ("check", "ok")})
if paths is None:
    print("paths: no result (see the paths step)")
EOF
}

main() {
    echo "benchmarks/gpu.sh on $(hostname), $(date -u +%Y-%m-%dT%H:%M:%SZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
    python -c 'import torch; c = torch.cuda.is_available(); print(f"torch {torch.__version__}, CUDA {torch.version.cuda}, {torch.cuda.get_device_name() if c else chr(45)}")'
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || true
    if [ "$DRY_RUN" = 1 ]; then
        dry_run
        return
    fi

    # TRIDENT_TEST_DEVICE=auto: the GPU stays visible (tests/conftest.py hides it otherwise) and these
    # single-process tests' tiny configs take it (the suite's mean the CPU)
    step tests 180 env TRIDENT_TEST_DEVICE=auto python -m pytest -q -p no:cacheprovider tests/test_devices.py tests/test_generate.py \
        "tests/test_checkpoint.py::test_resume_is_exact_with_dropout" "${DEVICE_TESTS[@]}"
    step mfu 180 python benchmarks/mfu.py --device cuda --steps 30
    # The same config as the MFU run: mfu.py's GPU_CASE overrides, on one GPU, rank 0.
    local overrides
    overrides=$(cd benchmarks && python -c 'from mfu import GPU_CASE; print(" ".join(GPU_CASE))')
    # shellcheck disable=SC2086  # one word per override
    step rehearse 90 python -m trident rehearse gpt-1.3b $overrides --gpus 1 --ranks 0 --json
    step kernels 60 python benchmarks/gpu_kernels.py --device cuda
    step ring 90 env TRIDENT_TEST_DEVICE=auto python -m pytest -q -p no:cacheprovider -rP tests/test_context_kernels.py
    step ring-speed 60 python benchmarks/ring_blocks.py --device cuda
    step paths 90 python benchmarks/gpu_paths.py --device cuda
    finish
}

# the device tests of issue 59 items 6, 8, 9: each runs on the CPU and, where one is, on the GPU
DEVICE_TESTS=(tests/test_device_copies.py tests/test_replica_digests.py tests/test_device_clock.py
              tests/test_decode_on_device.py tests/test_hardware_peaks.py)

dry_run() {  # the CPU variants of the steps that have one, at small sizes
    echo "--dry-run: CPU variants only; the mfu and rehearse steps need a GPU (not run)"
    step tests 300 python -m pytest -q -p no:cacheprovider "${DEVICE_TESTS[@]}" tests/test_context_kernels.py
    step kernels 120 python benchmarks/gpu_kernels.py --device cpu
    step ring-speed 120 python benchmarks/ring_blocks.py --device cpu
    step paths 120 python benchmarks/gpu_paths.py --device cpu
    finish
}

finish() {
    echo
    echo "=== summary"
    summary || echo "summary: could not read the steps' results"
    if [ ${#FAILED[@]} -eq 0 ]; then
        echo "every step passed"
    else
        echo "FAILED steps: ${FAILED[*]}"
        return 1
    fi
}

main 2>&1 | tee "$REPORT"
