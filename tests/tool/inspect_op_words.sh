# inspect and prewarm name the Mamba-1 scan's and the Mamba-2 decode step's kernels from op words.
# Scan: dense rows take 16-byte accesses at a row length of 512 tokens, and at 513 (each row's
# runs aligned on its own address); a packed row of 8 x 513 tokens too; --launch picks one of the
# backward's launches; a prewarm entry compiles every launch of its call. Decode step: the parts
# and the cache depth reach the kernel, a ring depth takes the deferred-commit kernel; the op's own
# check names a cache too shallow for the drafts. SSD: its four launches, the chunk size and the states reach the kernels; the op's own
# check names a bad group count. Options of another op are refused by name.
source "$(dirname "$0")/lib.sh"

scan=(--op scan --channels 256 --dstate 16 --input-dtype bf16 --stage resources)
run dense512 0 "$TOOL" inspect "${scan[@]}" --seqlen 512
expect_grep "the forward's main pass is shown" "^kernel  *selective_scan_fwd" dense512.out
expect_grep "the call is labelled" "^call  *scan D256 N16 G1 b=16 L=512 bfloat16 varying B/C" dense512.out
expect_grep "512-token rows take 16-byte loads" "^global  *loads [0-9]+ x 16 B" dense512.out
run dense513 0 "$TOOL" inspect "${scan[@]}" --seqlen 513
expect_grep "513-token rows take 16-byte loads" "^global  *loads [0-9]+ x 16 B" dense513.out
run packed 0 "$TOOL" inspect "${scan[@]}" --packed-lengths 513,513,513,513,513,513,513,513
expect_grep "a packed row of 8 x 513 tokens is labelled" "^call  *scan D256 N16 G1 packed 8 seqs \(4104 tokens\)" packed.out
expect_grep "a packed row of 8 x 513 tokens takes 16-byte loads" "^global  *loads [0-9]+ x 16 B" packed.out

bwd=(--op scan-backward --channels 256 --dstate 16 --input-dtype bf16 --seqlen 512 --stage resources)
run bwd1 0 "$TOOL" inspect "${bwd[@]}" --launch 1
expect_grep "the backward's first launch is the checkpoint forward" "^kernel  *selective_scan_fwd" bwd1.out
expect_grep "the launch is counted" "^launch  *1 of [0-9]+ \(--launch\)" bwd1.out
n=$(sed -nE 's/^launch  *1 of ([0-9]+).*/\1/p' bwd1.out)
run bwd_past 2 "$TOOL" inspect "${bwd[@]}" --launch $((n + 1))
expect_grep "a launch past the last is named" "--launch $((n + 1)): the call has $n launches, expected 1..$n" bwd_past.err

run heads 2 "$TOOL" inspect "${scan[@]}" --heads 4
expect_grep "a state-update option is refused for the scan" "--heads applies to --op ssu, ssu-tokens, decode-step, ssd and ssd-backward, not scan" heads.err
run seqlen 2 "$TOOL" inspect --op ssu --seqlen 7 --stage cuda
expect_grep "a scan option is refused for the state update" "--seqlen applies to --op scan, scan-backward, ssd and ssd-backward, not ssu" seqlen.err
run both 2 "$TOOL" inspect "${scan[@]}" --packed-lengths 5,6 --batch 2
expect_grep "--batch beside --packed-lengths is refused" "--batch applies to dense rows; --packed-lengths gives the packed row" both.err
run groups 2 "$TOOL" inspect "${scan[@]}" --groups 3
expect_grep "the op's own check names the argument" "the scan options give an invalid call: selective_scan: B has 3 groups" groups.err

step=(--op decode-step --heads 8 --head-dim 64 --dstate 128 --batch 4 --input-dtype bf16 --stage resources)
run fused 0 "$TOOL" inspect "${step[@]}" --tokens 4
expect_grep "the decode step's kernel is shown" "^kernel  *mamba2_decode_step" fused.out
expect_grep "the decode step is labelled" "^call  *decode-step H8 P64 N128 G1 W4 b=4 L=4 Lc=4 fused state float32 drafts bfloat16" fused.out
expect_grep "the parts are bound" "^key .*;replay=1;verify=1(;|$)" fused.out
run verify 0 "$TOOL" inspect "${step[@]}" --tokens 4 --parts verify --cache-tokens 8
expect_grep "verify only, over a deeper cache" "^key .*;Lc=8;.*;replay=0;verify=1(;|$)" verify.out
run ring 0 "$TOOL" inspect "${step[@]}" --tokens 4 --ring-depth 8
expect_grep "a ring takes the deferred-commit kernel" "^kernel  *mamba2_decode_step_deferred" ring.out
expect_grep "the ring depth is labelled" "^call  *decode-step H8 P64 N128 G1 W4 b=4 L=4 Lc=4 R=8 fused" ring.out
expect_grep "the ring depth is bound" "^key .*;R=8;" ring.out
run ring_ssu 2 "$TOOL" inspect --op ssu --ring-depth 8 --stage cuda
expect_grep "the ring depth is refused for the state update" "--ring-depth applies to --op decode-step, not ssu" ring_ssu.err
run shallow 2 "$TOOL" inspect "${step[@]}" --tokens 8 --cache-tokens 4
expect_grep "a cache shallower than the drafts is named by the op's check" "the decode-step options give an invalid call: mamba2_decode_step: xBC has 8 drafts" shallow.err
run width 2 "$TOOL" inspect --op ssu --width 3 --stage cuda
expect_grep "a decode-step option is refused for the state update" "--width applies to --op decode-step, not ssu" width.err
run channels 2 "$TOOL" inspect "${step[@]}" --channels 64
expect_grep "a scan option is refused for the decode step" "--channels applies to --op scan and scan-backward, not decode-step" channels.err

ssd=(--op ssd --heads 8 --head-dim 64 --dstate 128 --input-dtype bf16 --seqlen 512 --stage resources)
run ssd_last 0 "$TOOL" inspect "${ssd[@]}"
expect_grep "ssd's last launch is chunk_scan" "^kernel  *ssd_chunk_scan" ssd_last.out
expect_grep "ssd runs four launches" "^launch  *4 of 4 \(--launch\)" ssd_last.out
expect_grep "the ssd call is labelled" "^call  *ssd H8 P64 N128 G1 chunk 256 b=16 L=512 bfloat16$" ssd_last.out
run ssd_first 0 "$TOOL" inspect "${ssd[@]}" --launch 1 --chunk 128
expect_grep "ssd's first launch is chunk_cumsum" "^kernel  *ssd_chunk_cumsum" ssd_first.out
expect_grep "the chunk size is bound" "^key .*;meta:chunk=128(;|$)" ssd_first.out
packed=(--op ssd --heads 8 --head-dim 64 --dstate 128 --packed-lengths 100,300 --states slots --state-dtype bf16)
run ssd_packed 0 "$TOOL" inspect "${packed[@]}" --launch 3 --stage resources
expect_grep "ssd's chunk_state passes the states" "^key .*;pass_states=1(;|$)" ssd_packed.out
expect_grep "the packed ssd call is labelled" "^call  *ssd H8 P64 N128 G1 chunk 256 packed 2 seqs \(400 tokens\) float32 states slots bfloat16$" ssd_packed.out
expect_grep "slots bind initial states and their indices" "^key .*;has_init=1;has_init_idx=1;" ssd_packed.out
run ssd_groups 2 "$TOOL" inspect "${ssd[@]}" --groups 3
expect_grep "the ssd op's own check names the argument" "the ssd options give an invalid call: ssd: B has 3 groups" ssd_groups.err
run ssd_sd 2 "$TOOL" inspect "${ssd[@]}" --state-dtype bf16
expect_grep "a state dtype without states is refused" "--state-dtype applies to the SSD scan's states: give --states final or slots" ssd_sd.err
run ssd_channels 2 "$TOOL" inspect "${ssd[@]}" --channels 64
expect_grep "a scan option is refused for ssd" "--channels applies to --op scan and scan-backward, not ssd" ssd_channels.err
bwd=(--op ssd-backward --heads 8 --head-dim 64 --dstate 128 --input-dtype bf16 --seqlen 512 --stage resources)
run ssd_bwd_first 0 "$TOOL" inspect "${bwd[@]}" --launch 1
expect_grep "the backward recomputes from chunk_cumsum" "^kernel  *ssd_chunk_cumsum" ssd_bwd_first.out
expect_grep "the backward call is labelled" "^call  *ssd-backward H8 P64 N128 G1 chunk 256 b=16 L=512 bfloat16$" ssd_bwd_first.out
run ssd_bwd_last 0 "$TOOL" inspect "${bwd[@]}"
kernel=$(sed -n 's/^kernel  *\([a-z_0-9]*\).*/\1/p' ssd_bwd_last.out)
case "$kernel" in ssd_bwd_*) ;; *) fail "the backward's last launch is a gradient kernel, got '$kernel'" ;; esac
run ssd_bwd_y 0 "$TOOL" inspect "${bwd[@]}" --saved-y --launch 4
expect_grep "with a saved y the fourth launch is the first gradient kernel" "^kernel  *ssd_bwd_dstates" ssd_bwd_y.out
expect_grep "the saved-y call is labelled" "^call  *ssd-backward H8 P64 N128 G1 chunk 256 b=16 L=512 bfloat16 saved-y$" ssd_bwd_y.out
run ssd_y 0 "$TOOL" inspect "${ssd[@]}" --saved-y
expect_grep "a saved y binds y" "^key .*;has_y=1" ssd_y.out
run scan_y 2 "$TOOL" inspect "${scan[@]}" --saved-y
expect_grep "--saved-y is refused for the scan" "--saved-y applies to --op ssd and ssd-backward, not scan" scan_y.err
run ssd_bwd_slots 0 "$TOOL" inspect "${bwd[@]}" --states slots --launch 1
expect_grep "the backward's slots bind initial states" "^key .*;has_init=1;has_init_idx=1;" ssd_bwd_slots.out
run chunk_scan 2 "$TOOL" inspect "${scan[@]}" --chunk 128
expect_grep "an ssd option is refused for the scan" "--chunk applies to --op ssd and ssd-backward, not scan" chunk_scan.err

echo '{"op": "scan", "channels": 256, "dstate": 16, "seqlen": 512, "input-dtype": "bf16", "archs": ["sm_90a"]}' > scan.jsonl
run prewarm 0 "$TOOL" prewarm --quiet scan.jsonl
launches=$(grep -c "launch [0-9]/" prewarm.out || true)
expect_eq "a prewarm entry compiles every launch of its call" "$launches" "$(summary compiled prewarm.out)" prewarm.out
[ "$launches" -ge 2 ] || fail "a 512-token scan at D 256 runs a states pass and a main pass; prewarm listed $launches launches"
echo "PASS"
