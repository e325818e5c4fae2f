#!/usr/bin/env bash
# Runs on the GPU machine from an installed tree (default .gpu): the GPU test suite, the
# compute-sanitizer checks, the demo and the benchmarks. Writes logs under $OUT when set.
set -uo pipefail
PREFIX=${1:-.gpu}
OUT=${OUT:-/tmp/ssmjit-gpu}
mkdir -p "$OUT"
export PATH=/usr/local/cuda/bin:$PATH
export SSMJIT_CACHE_DIR=$(mktemp -d)
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/device.txt"
status=0
# SKIP_TESTS, SKIP_CPU_TESTS, SKIP_SANITIZER, SKIP_BENCH=1 leave those steps out, SANITIZER_TOOLS
# (default "memcheck racecheck") picks the sanitizer tools (one call to the
# device machine has a time limit; run the rest in the next call), and SANITIZER_SHARDS (default
# 4) how many compute-sanitizer processes share each tool's test list at once (racecheck's
# instrumentation is CPU-bound, so one process over the list takes many minutes);
# SANITIZER_FILTER and RANKED_FILTER replace the lists of tests sanitized on one GPU and on rank 0.
# With a GPU present, a GPU test that skips is a failure (a broken driver or NVRTC must not pass
# as skips), except those matching allowed_skips: tests whose skip depends on the machine (a
# second device, free memory), each printing why: the wrong-device test on a one-GPU machine, and
# the 64-bit-offset tests (memory_skips) only where their reason says the device lacks the memory,
# and the multi-GPU tests where their reason says the machine has too few devices.
allowed_skips='^SecondDevice\.TensorOnDeviceOneIsRejected$'
memory_skips='^WideOffsetsGpu\.'
gpu_present=$(nvidia-smi -L > /dev/null 2>&1 && echo 1)
# Each skipped test of gtest logs (run without --gtest_brief, which names no skipped test), with
# the reason it gave; sets status=1 for a skip outside allowed_skips while a GPU is present.
check_skips() {
  for t in $(grep -hE '^\[  SKIPPED \] [^0-9 ]' "$@" | awk '{print $4}' | sort -u); do
    why=$(grep -h -B3 -F "[  SKIPPED ] $t (" "$@" | grep -vE '^\[|^$|: Skipped$' | tail -1)
    if [ -z "$gpu_present" ] || { [ -n "$allowed_skips" ] && [[ $t =~ $allowed_skips ]]; } ||
       { [[ $t =~ $memory_skips ]] && [[ $why == *"the device lacks the memory"* ]]; } ||
       [[ $why == *"CUDA device(s), the test needs"* ]]; then
      echo "skipped (allowed here): $t: $why"
    else
      echo "SKIPPED with a GPU present: $t: $why"; status=1
    fi
  done
}
if [ -z "${SKIP_TESTS:-}" ]; then
# Mamba2ModelGpu compares with transformers on a random checkpoint; make one where transformers is.
if [ -z "${SSMJIT_MAMBA2_REF:-}" ] && python3 -c 'import transformers' > /dev/null 2>&1; then
  export SSMJIT_MAMBA2_REF=$(mktemp -d)
  python3 scripts/peers/mamba2_hf.py --out "$SSMJIT_MAMBA2_REF" --shape tiny > "$OUT/mamba2_hf.log" 2>&1 ||
    { echo "mamba2_hf.py failed: see mamba2_hf.log"; status=1; }
fi
echo "== GPU tests"
# The disk-cache damage tests need a process each (the cache is configured once per process).
own='Damages/DiskCacheGpu.*'
# The 64-bit-offset tests take about 4.3 GB each: one process after the shards, not 8 at once.
wide='WideOffsetsGpu.*'
# The rest in $SHARDS processes at once: the suite's time is mostly first compiles (NVRTC is
# single-threaded), and the processes share the disk cache.
SHARDS=${SHARDS:-8}
for i in $(seq 0 $((SHARDS - 1))); do
  GTEST_TOTAL_SHARDS=$SHARDS GTEST_SHARD_INDEX=$i "$PREFIX/bin/ssmjit_gpu_tests" \
    --gtest_filter="-$own:$wide" > "$OUT/gpu_tests_shard$i.log" 2>&1 &
done
for job in $(jobs -p); do wait "$job" || status=1; done
cat "$OUT"/gpu_tests_shard*.log > "$OUT/gpu_tests.log"
grep -h "FAILED\|Failure" "$OUT/gpu_tests.log" | head -40
sum() { grep -hE "^\[  $1 *\] [0-9]+ tests?" "$OUT/gpu_tests.log" | awk '{n += $4} END {print n + 0}'; }
failed=$(grep -hE "^\[  FAILED  \] [^0-9 ]" "$OUT/gpu_tests.log" | awk '{print $4}' | sort -u | wc -l)
[ "$failed" -eq 0 ] || status=1
echo "GPU tests: $(sum PASSED) passed, $failed failed, $(sum SKIPPED) skipped ($SHARDS shards)"
# The measured error of every comparison beside its bound (tools/problems/Tolerance.h): the margins.
grep -h "^\[ measured \]" "$OUT/gpu_tests.log" > "$OUT/gpu_tests_measured.log"
echo "measured errors: $(wc -l < "$OUT/gpu_tests_measured.log") lines in gpu_tests_measured.log"
for t in $("$PREFIX/bin/ssmjit_gpu_tests" --gtest_list_tests --gtest_filter="$own" | awk '/^ /{print s $1} /^[^ ]/{s=$1}'); do
  "$PREFIX/bin/ssmjit_gpu_tests" --gtest_filter="$t" >> "$OUT/gpu_tests_own_process.log" 2>&1 \
    && echo "own process: $t PASSED" || { echo "own process: $t FAILED"; status=1; }
done
"$PREFIX/bin/ssmjit_gpu_tests" --gtest_filter="$wide" > "$OUT/gpu_tests_wide.log" 2>&1 || status=1
echo "64-bit offsets: $(grep -hE '^\[  PASSED  \] [0-9]+ tests?' "$OUT/gpu_tests_wide.log" | awk '{print $4 + 0}') passed," \
  "$(grep -hE '^\[  FAILED  \] [^0-9 ]' "$OUT/gpu_tests_wide.log" | awk '{print $4}' | sort -u | wc -l) failed," \
  "$(grep -hE '^\[  SKIPPED \] [0-9]+ tests?' "$OUT/gpu_tests_wide.log" | awk '{print $4 + 0}') skipped"
grep -h "^\[ measured \]" "$OUT/gpu_tests_wide.log" >> "$OUT/gpu_tests_measured.log"
# The loader and launcher against a fake compiler (its own binary), plain and with the PTX fallback.
for ptx in 0 1; do
  log="$OUT/loader_gpu_tests_ptx$ptx.log"
  if [ $ptx = 1 ]; then SSMJIT_FORCE_PTX=1 "$PREFIX/bin/ssmjit_loader_gpu_tests" > "$log" 2>&1 || status=1
  else "$PREFIX/bin/ssmjit_loader_gpu_tests" > "$log" 2>&1 || status=1; fi
  echo "loader tests (SSMJIT_FORCE_PTX=$ptx): $(grep -hE '^\[  PASSED  \] [0-9]+' "$log" | awk '{print $4}') passed," \
    "$(grep -hE '^\[  FAILED  \] [^0-9 ]' "$log" | awk '{print $4}' | sort -u | wc -l) failed"
done
check_skips "$OUT/gpu_tests.log" "$OUT/gpu_tests_own_process.log" "$OUT/gpu_tests_wide.log" "$OUT"/loader_gpu_tests_ptx*.log
fi
if [ -z "${SKIP_TESTS:-}" ]; then
# The forward's serial length class (SelectiveScan.h) at every width: it takes the sequences of up
# to serial_seqlen tokens (0 by default); here the scan tests run again with it taking those of up
# to 600 at any D, so that most packed rows mix both classes.
echo "== scan tests, serial class forced (SSMJIT_META selective_scan_fwd:serial_len=600)"
SSMJIT_META='selective_scan_fwd:serial_len=600' "$PREFIX/bin/ssmjit_gpu_tests" \
  --gtest_filter='Shapes/ScanGpu.*:ScanGpuPacking.*' > "$OUT/gpu_tests_serial.log" 2>&1 || status=1
echo "serial class: $(grep -hE '^\[  PASSED  \] [0-9]+ tests?' "$OUT/gpu_tests_serial.log" | awk '{print $4}') passed," \
  "$(grep -hE '^\[  FAILED  \] [^0-9 ]' "$OUT/gpu_tests_serial.log" | awk '{print $4}' | sort -u | wc -l) failed"
check_skips "$OUT/gpu_tests_serial.log"
# On sm_90a the SSD kernels multiply on wgmma where their staged operands fit a swizzle; here the
# SSD tests run again with every one of them on mma.sync and ldmatrix, the form other GPUs take.
ldm='ssd_chunk_scan:wgmma=0;ssd_chunk_state:wgmma=0;ssd_bwd_dx:wgmma=0;ssd_bwd_dcb:wgmma=0;ssd_bwd_db:wgmma=0'
ldm+=';ssd_bwd_dc:wgmma=0'
echo "== SSD tests, wgmma off (SSMJIT_META ...:wgmma=0)"
SSMJIT_META="$ldm" "$PREFIX/bin/ssmjit_gpu_tests" \
  --gtest_filter='Shapes/SsdGpu.*:Shapes/SsdBackwardGpu.*:SsdGpuPacking.*:SsdBackwardGpuPacking.*' \
  > "$OUT/gpu_tests_ldmatrix.log" 2>&1 || status=1
echo "wgmma off: $(grep -hE '^\[  PASSED  \] [0-9]+ tests?' "$OUT/gpu_tests_ldmatrix.log" | awk '{print $4}') passed," \
  "$(grep -hE '^\[  FAILED  \] [^0-9 ]' "$OUT/gpu_tests_ldmatrix.log" | awk '{print $4}' | sort -u | wc -l) failed"
check_skips "$OUT/gpu_tests_ldmatrix.log"
fi
if [ -z "${SKIP_CPU_TESTS:-}" ]; then
  echo "== CPU tests (on the GPU machine)"
  "$PREFIX/bin/ssmjit_tests" --gtest_brief=1 2>&1 | tee "$OUT/cpu_tests.log" | tail -5 || status=1
fi
# One small case of each kernel family (set SANITIZER_FILTER for others).
sanitized='Shapes/SsuGpuMatrix.MatchesFloat64Reference/c0_*:DecodeStep.EqualsOneTokenKernels'
# The decode step's deferred-commit kernel: one staged chunk (rings appended and overflowing; past
# 48 KiB of shared memory with R + Lc + L = 24 tokens), and the chunked form (48 tokens).
sanitized+=':DecodeStep.DeferredCommitEqualsOneTokenKernels'
sanitized+=':Cases/DecodeStepRounds.MatchesReference/replay_verify_H8_P64_N128_G1_W4_b5_L8_Lc8_*_ring8'
sanitized+=':Cases/DecodeStepRounds.MatchesReference/replay_verify_H8_P64_N128_G1_W4_b5_L8_Lc8_*_ring32'
# Several tokens: staged through shared memory for the token loop, from memory, and the chunked
# form (tensor cores: masked rows and columns, a head over two programs, 16- and 32-row programs),
# and the DSL's dot on its own.
ssu='Shapes/SsuGpuMatrix.MatchesFloat64Reference/'
sanitized+=":${ssu}c3_*:${ssu}*_H4P8N16G2_b3_L2_*:${ssu}*_H6P17N33G3_b1_L16_stbf16_*:${ssu}*_L13_*"
sanitized+=":${ssu}*_H4P96N128G2_b3_L12_*:${ssu}*_H2P8N16G1_b1_L16_*:${ssu}*_H2P64N256G1_b2_L12_*:DslDotGpu.*"
sanitized+=':Matrix/ConvForward.MatchesFloat64Reference/cf_float32_wfloat32_W2_D67_*'
sanitized+=':Matrix/ConvBackward.MatchesFloat64Reference/bwd_cf_float32_wfloat32_W2_D67_*'
# Channel-last forward tiles (8 tokens a thread; 8 bytes of channels up to W 4, 4 beyond), and the
# forward's own cu_seqlens check.
sanitized+=':Matrix/ConvForward.MatchesFloat64Reference/cl_bfloat16_wfloat32_W4_D67_*'
sanitized+=':Matrix/ConvForward.MatchesFloat64Reference/cl_float32_wfloat32_W8_D67_*:ConvDeviceChecks.BadCuSeqlens*'
# Packed backward rows with boundary tiles past kNearStarts (bf16: held to 4 blocks an SM).
sanitized+=':Layouts/ConvBackwardPacked.*:Matrix/ConvBackward.MatchesFloat64Reference/bwd_cl_bfloat16_wfloat32_W4_D67_cu_*'
sanitized+=':Matrix/ConvUpdate.MatchesFloat64Reference/float32_statefloat32_W2_D131_b4_L1_idx'
sanitized+=':Shapes/ScanGpu.MatchesReference/*_D37_*:Shapes/ScanBackwardGpu.MatchesReference/*_D37_*'
# A packed backward row with B/C staged, its tiles realigned (PackedRuns, StagedBC) in one body.
sanitized+=':Shapes/ScanBackwardGpu.MatchesReference/*_D48_*'
# D64 G2: B/C staged through shared memory (D37's blocks span groups, so it reads them per thread).
sanitized+=':Shapes/ScanGpu.MatchesReference/*_D64_N16_G2_*'
# A packed row (D112): u, delta, z and B/C loaded aligned and shifted into place, B/C staged; and bad cu_seqlens.
sanitized+=':Shapes/ScanGpu.MatchesReference/*_D112_N16_*packed150*:ScanGpuPacking.BadCuSeqlensAreReported'
# A packed row of 1104 tokens (div 16): vector runs up to the row's end beside partial tiles.
sanitized+=':Shapes/ScanGpu.MatchesReference/*_D64_N16_G1_*packed6_*'
# A packed row ranked longest first, ties by index (the forward's order of programs).
sanitized+=':Shapes/ScanGpu.MatchesReference/*_D40_N8_*'
# D 4096: the serial length class (its tiles on a packed row's grid, its states over 2 or 4 threads
# a channel) beside the parallel one.
sanitized+=':Shapes/ScanGpu.MatchesReference/*_D4096_*:ScanGpuPacking.LengthClassesEqualEachAlone'
# Chunks of states: y and the backward's per-token sums carried across launches in the workspace.
sanitized+=':Shapes/ScanGpu.MatchesReference/*_D36_N100_*:Shapes/ScanBackwardGpu.MatchesReference/*_D24_N40_*'
# The SSD forward and backward (groups, fp32 inputs, a packed row with slots; the device checks),
# and the DSL's 16-bit shared buffers, ldmatrix dots and asynchronous copies on their own.
ssd='Shapes/SsdGpu.MatchesReference/'
sanitized+=":${ssd}G2P32N64Q64:${ssd}L7F32Q64:${ssd}PackedF32Q64:SsdDeviceChecksGpu.*:DslSharedGpu.*"
# chunk_state's chain of programs (flags in global memory) beside state_passing, and the DSL's own.
sanitized+=':SsdGpuPacking.ChunkStatePassingTheStatesEqualsStatePassing:DslChainGpu.*'
# bf16 at N 128: chunk_state's 128-state blocks, on a packed row with slots and block states.
sanitized+=":${ssd}PackedSlotsBlocksBf16"
sanitized+=':Shapes/SsdBackwardGpu.MatchesReference/L7Bf16:Shapes/SsdBackwardGpu.MatchesReference/PackedSlots'
sanitized+=':Shapes/SsdBackwardGpu.MatchesReference/PackedSlotsBf16'
# The forward keeping y (its scan's three-term staging) and the backward reading it, without z
# (the rings with dout alone, dy in one term) and packed with z.
sanitized+=':Shapes/SsdBackwardGpu.MatchesReference/NoZSavedYBf16:Shapes/SsdBackwardGpu.MatchesReference/PackedSlotsSavedY'
# RMSNorm: several rows a program with masked channels and both outputs in place; one row of five
# chunks reduced across warps; groups with the gate first.
norm='Matrix/RmsNormGpu.MatchesFloat64Reference/'
sanitized+=":${norm}rms_bfloat16_wfloat32_T7_D200_resfloat32_resout_inplace_out_inplace_padded"
sanitized+=":${norm}rms_float32_wfloat32_T7_D5120_resout"
sanitized+=':Matrix/GatedRmsNormGpu.MatchesFloat64Reference/gated_float32_wfloat32_T7_D200_g8_gatefirst'
# The gated norm's backward (several rows a program, padded; one row of the norm first with
# offset data) and the layer's backward, which runs every backward op in turn.
nbwd='Matrix/GatedRmsNormBackwardGpu.MatchesFloat64Reference/'
sanitized+=":${nbwd}gated_bfloat16_wfloat32_T33_D2560_g8_gatefirst_padded"
sanitized+=":${nbwd}gated_bfloat16_wfloat32_T33_D200_g1_normfirst_padded_offset"
sanitized+=':Layers/Mamba2LayerBackwardGpu.MatchesFloat64Adjoint/G2:LinearGpu.BackwardOfAnEmptyBatchWritesZeros'
# Embedding (bad ids reported), greedy and drawn sampling, the GEMM beside the embedding in a
# graph, and one Mamba-2 layer stack end to end (prefill, decode steps, a pad row).
sanitized+=':EmbeddingGpu.*:SampleGpu.GreedyIsTheReferenceArgMax:SampleGpu.DrawsMakeTheReferenceChoice'
sanitized+=':LinearGpu.CapturedInACudaGraphWithTheEmbedding:Tiny/Mamba2Gpu.PrefillThenDecodeMatchesReference/Groups2Fp32'
# The Mamba-1 scan's decay over a context-parallel part and its correction by the incoming state.
sanitized+=':ScanCpDecay.*:ScanCpCorrect.*'
for tool in $([ -n "${SKIP_SANITIZER:-}" ] || echo ${SANITIZER_TOOLS:-memcheck racecheck}); do
  echo "== compute-sanitizer $tool"
  filter=${SANITIZER_FILTER:-$sanitized}
  # cuBLASLt's own GEMM-with-bias kernel (nvjet_*_bias_TNT) reports shared-memory hazards under
  # racecheck; it is not ours to fix, so the bias GEMM is held to memcheck only.
  [ $tool = racecheck ] && filter=${filter//:LinearGpu.CapturedInACudaGraphWithTheEmbedding/}
  # No more shards than tests: a shard given none makes compute-sanitizer exit non-zero.
  tests=$("$PREFIX/bin/ssmjit_gpu_tests" --gtest_list_tests --gtest_filter="$filter" | grep -c '^  ')
  shards=$(( ${SANITIZER_SHARDS:-4} < tests ? ${SANITIZER_SHARDS:-4} : (tests > 0 ? tests : 1) ))
  for ((i = 0; i < shards; i++)); do
    GTEST_TOTAL_SHARDS=$shards GTEST_SHARD_INDEX=$i compute-sanitizer --tool $tool --error-exitcode 3 \
      "$PREFIX/bin/ssmjit_gpu_tests" --gtest_filter="$filter" --gtest_brief=1 > "$OUT/sanitizer_${tool}_$i.log" 2>&1 &
  done
  for ((i = 0; i < shards; i++)); do
    wait -n; rc=$?; [ $rc -eq 0 ] || { echo "$tool: a shard exited $rc"; status=1; }
  done
  for ((i = 0; i < shards; i++)); do
    echo "shard $i: $(grep -hE '(ERROR|RACECHECK) SUMMARY' "$OUT/sanitizer_${tool}_$i.log")" \
      "$(grep -hE '^\[  (PASSED|FAILED)  \]' "$OUT/sanitizer_${tool}_$i.log" | tr '\n' ' ')"
  done
done
# Rank 0 of the multi-GPU training tests under each tool, the other ranks plain
# (SSMJIT_TEST_RANK0_PREFIX, tests/support/RankProcesses.h); they skip, saying why, on one GPU.
# NCCL probes kernels it lacks for sm_90 through cudaFuncGetAttributes: no API errors reported.
ranked='ParallelMamba2.TensorParallelLayerBackward:ParallelMamba2.ContextParallelLayerBackward'
ranked+=':ParallelScan.ContextParallelScanTraining'
for tool in $([ -n "${SKIP_SANITIZER:-}" ] || echo ${SANITIZER_TOOLS:-memcheck racecheck}); do
  echo "== compute-sanitizer $tool on rank 0"
  SSMJIT_TEST_RANK0_PREFIX="compute-sanitizer --tool $tool --error-exitcode 3 --report-api-errors no" \
    "$PREFIX/bin/ssmjit_gpu_tests" --gtest_filter="${RANKED_FILTER:-$ranked}" > "$OUT/sanitizer_rank0_$tool.log" 2>&1
  rc=$?; grep -hE '(ERROR|RACECHECK) SUMMARY|^\[  (PASSED|FAILED|SKIPPED) ' "$OUT/sanitizer_rank0_$tool.log"
  echo "$tool (rank 0) exit $rc"; [ $rc -eq 0 ] || status=1
done
# The serial class forced at small D (4 threads a channel): D24 G2 reads B/C per thread (dt and dt u
# still exchanged through shared memory), D112 stages them; both packed rows mix the two classes.
for tool in $([ -n "${SKIP_SANITIZER:-}" ] || echo ${SANITIZER_TOOLS:-memcheck racecheck}); do
  echo "== compute-sanitizer $tool, serial class forced"
  SSMJIT_META='selective_scan_fwd:serial_len=600' compute-sanitizer --tool $tool --error-exitcode 3 \
    "$PREFIX/bin/ssmjit_gpu_tests" --gtest_brief=1 \
    --gtest_filter='Shapes/ScanGpu.MatchesReference/*_D24_N16_G2_*:Shapes/ScanGpu.MatchesReference/*_D112_N16_*packed150*' \
    > "$OUT/sanitizer_serial_$tool.log" 2>&1
  rc=$?; tail -4 "$OUT/sanitizer_serial_$tool.log"; echo "$tool (serial) exit $rc"; [ $rc -eq 0 ] || status=1
done
echo "== examples/host_program against the installed tree"
ex=$(mktemp -d)
{ cmake -S examples/host_program -B "$ex" -DCMAKE_PREFIX_PATH="$(realpath "$PREFIX")" > "$OUT/example.log" 2>&1 &&
  cmake --build "$ex" >> "$OUT/example.log" 2>&1 && "$ex/host_example"; } 2>&1 | tail -3 || status=1
[ -n "${SKIP_BENCH:-}" ] && exit $status
echo "== demo"
"$PREFIX/bin/ssmjit" demo 2>&1 | tee "$OUT/demo.log" | tail -15 || status=1
echo "== bench"
[ -n "${SKIP_SSU_BENCH:-}" ] || { "$PREFIX/bin/ssmjit" bench ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench.log" | tail -60 || status=1; }
echo "== bench-conv"
[ -n "${SKIP_CONV_BENCH:-}" ] || { "$PREFIX/bin/ssmjit" bench-conv ${CONV_BENCH_ARGS:-} 2>&1 | tee "$OUT/bench_conv.log" | tail -30 || status=1; }
echo "== bench-decode"
"$PREFIX/bin/ssmjit" bench-decode ${DECODE_BENCH_ARGS:-} 2>&1 | tee "$OUT/bench_decode.log" | tail -16 || status=1
echo "== bench-scan"
[ -n "${SKIP_SCAN_BENCH:-}" ] || { "$PREFIX/bin/ssmjit" bench-scan ${SCAN_BENCH_ARGS:-} 2>&1 | tee "$OUT/bench_scan.log" | tail -14 || status=1; }
echo "== bench-scan, forward, serial_seqlen 2048"
[ -n "${SKIP_SCAN_BENCH:-}" ] || { "$PREFIX/bin/ssmjit" bench-scan --passes forward --serial-seqlen 2048 ${SCAN_BENCH_ARGS:-} 2>&1 | tee "$OUT/bench_scan_serial.log" | tail -14 || status=1; }
echo "== bench-ssd"
[ -n "${SKIP_SSD_BENCH:-}" ] || { "$PREFIX/bin/ssmjit" bench-ssd ${SSD_BENCH_ARGS:-} 2>&1 | tee "$OUT/bench_ssd.log" | tail -12 || status=1; }
echo "== bench-norm"
[ -n "${SKIP_NORM_BENCH:-}" ] || { "$PREFIX/bin/ssmjit" bench-norm ${NORM_BENCH_ARGS:-} 2>&1 | tee "$OUT/bench_norm.log" | tail -12 || status=1; }
exit $status
