# Bad input: a missing manifest, an unknown option in an entry, a corrupted blob (verify finds it,
# --remove-bad deletes it), clearing a cache that does not exist, bench-scan options out of range,
# prewarm's --tp without --model (refused before any GPU is needed) and SSMJIT_META values a scan
# kernel cannot take.
source "$(dirname "$0")/lib.sh"

rc=0
"$TOOL" prewarm missing.json >missing.out 2>missing.err || rc=$?
[ "$rc" = 1 ] || [ "$rc" = 2 ] || fail "prewarm missing.json exited $rc, expected 1 or 2"
expect_grep "the error names the missing file" "missing\.json" missing.err

cat >unknown.json <<'JSON'
{"op": "ssu", "heads": 4, "head-dim": 8, "dstate": 16, "batch": 2, "archs": ["sm_80"]}
{"op": "ssu", "heads": 4, "head-dim": 8, "dstate": 16, "batch": 2, "bogus-option": 3, "archs": ["sm_80"]}
JSON
run unknown 1 "$TOOL" prewarm --quiet unknown.json
expect_grep "the error names the file, line and option" "unknown\.json:2: .*bogus-option" unknown.err
expect_eq "the good entry still compiled" 1 "$(summary compiled unknown.out)" unknown.out
expect_eq "failed" 1 "$(summary failed unknown.out)" unknown.out

run mamba1heads 1 "$TOOL" prewarm --quiet /dev/stdin <<'JSON'
{"op": "ssu", "form": "mamba1", "heads": 4, "archs": ["sm_80"]}
JSON
expect_grep "--heads with --form mamba1 is rejected" "heads applies to --form mamba2 only" mamba1heads.err

run verify_clean 0 "$TOOL" cache verify
blob=$(find "$SSMJIT_CACHE_DIR" -name '*.sjk' | head -n 1)
[ -n "$blob" ] || fail "no blob in $SSMJIT_CACHE_DIR"
python3 - "$blob" <<'PY'
import sys
p = sys.argv[1]
b = bytearray(open(p, "rb").read())
b[len(b) // 2] ^= 0xFF
open(p, "wb").write(bytes(b))
PY
run verify_bad 1 "$TOOL" cache verify
expect_grep "verify names the corrupted blob" "BAD $blob" verify_bad.out
run remove_bad 0 "$TOOL" cache verify --remove-bad
[ ! -e "$blob" ] || fail "cache verify --remove-bad left $blob"
echo "ok: --remove-bad deleted $(basename "$blob")"
run verify_after 0 "$TOOL" cache verify

run refill 1 "$TOOL" prewarm --quiet unknown.json  # the good entry compiles again
run clear 0 "$TOOL" cache clear
expect_grep "clear removes the entry" "^removed 1 file " clear.out
expect_eq "entries after clear" 0 "$(cache_entries "$SSMJIT_CACHE_DIR")"
run clear_missing 0 "$TOOL" cache clear --dir "$WORK/does-not-exist"
expect_grep "clearing a missing directory removes nothing" "^removed 0 files" clear_missing.out
run scan_case 2 "$TOOL" bench-scan --cases packed,bogus
expect_grep "an unknown bench-scan case is named" "--cases: bogus not in \{dense,long,packed\}" scan_case.err
run scan_length 2 "$TOOL" bench-scan --packed-lengths 2048,0
expect_grep "a packed length of 0 is named" "--packed-lengths: Value 0 not in range" scan_length.err
# SSMJIT_META values that give a kernel that does not build, or change a value the op binds itself
# (the checkpoint pass' tile and spans, the backward's), are named as the user's input.
scan=(inspect --channels 512 --dstate 16 --input-dtype bf16 --packed-lengths 300,200,100 --stage resources)
SSMJIT_META=selective_scan_fwd:time_lanes=3 run meta_build 1 "$TOOL" "${scan[@]}" --op scan
expect_grep "a meta value the kernel cannot take is named" \
  "invalid argument: selective_scan_fwd: SSMJIT_META time_lanes=3 gives a kernel that does not build" meta_build.err
SSMJIT_META=selective_scan_fwd:span=512 run meta_ckpt 2 "$TOOL" "${scan[@]}" --op scan-backward --launch 1
expect_grep "a forward span other than the checkpoint pass' is refused" \
  "selective_scan_fwd: SSMJIT_META span=512 changes a value this call binds itself \\(256\\)" meta_ckpt.err
SSMJIT_META=selective_scan_fwd:BLOCK_T=64 run meta_bound 2 "$TOOL" "${scan[@]}" --op scan-backward --launch 1
expect_grep "a meta value the op binds itself is refused" \
  "selective_scan_fwd: SSMJIT_META BLOCK_T=64 changes a value this call binds itself \\(32\\)" meta_bound.err
run tp_alone 2 "$TOOL" prewarm --tp 2
expect_grep "prewarm --tp without a model is refused" "--tp 2 needs --model DIR" tp_alone.err
echo "PASS"
