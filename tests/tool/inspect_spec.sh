# inspect --spec: any kernel a workload recorded (SSMJIT_RECORD) is shown from its specialisation
# line, whatever its op; an empty file, a wrong entry number, an op-call entry or call options
# beside --spec are refused naming what came. The resources stage counts global accesses by width.
source "$(dirname "$0")/lib.sh"

SSMJIT_RECORD=$WORK/rec.jsonl run demo 0 "$TOOL" demo --no-gpu --seed 1
n=$(grep -c . rec.jsonl)
[ "$n" -ge 2 ] || fail "demo recorded $n specialisations, expected at least 2"
kernel=$(sed -n 2p rec.jsonl | python3 -c 'import json,sys; print(json.load(sys.stdin)["kernel"])')

run cuda 0 "$TOOL" inspect --spec rec.jsonl --entry 2 --stage cuda
expect_grep "the CUDA source is the recorded kernel's" "__global__ .*$kernel" cuda.out
run resources 0 "$TOOL" inspect --spec rec.jsonl --entry 2 --stage resources
expect_grep "resources name the kernel" "^kernel  *$kernel" resources.out
expect_grep "resources give registers" "^registers  *[0-9]+ per thread" resources.out
expect_grep "resources count global accesses by width" "^global  *loads [0-9]+ x [0-9]+ B" resources.out
# Mamba-2 heads: aligned rows, 16-byte loads and stores. Head dim and state size 33 (fp32 rows of
# divisibility class 1): 4-byte accesses, none of 16.
run aligned 0 "$TOOL" inspect --op ssu --stage resources
expect_grep "aligned rows move 16 bytes an instruction" "^global  *loads [0-9]+ x 16 B.*; stores [0-9]+ x 16 B" aligned.out
run odd 0 "$TOOL" inspect --op ssu --head-dim 33 --dstate 33 --stage resources
expect_grep "odd rows move 4 bytes an instruction" "^global  *loads [0-9]+ x 4 B;" odd.out
if grep -q " x 16 B" odd.out; then fail "odd rows claim 16-byte accesses: $(grep '^global' odd.out)"; fi

run past_end 2 "$TOOL" inspect --spec rec.jsonl --entry $((n + 1)) --stage cuda
expect_grep "an entry past the end names the count" "--entry $((n + 1)): 'rec.jsonl' has $n entries, expected 1..$n" past_end.err
: > empty.jsonl
run empty 2 "$TOOL" inspect --spec empty.jsonl --stage cuda
expect_grep "an empty manifest is named" "'empty.jsonl' has no entries, expected at least one specialisation" empty.err
echo '{"op": "ssu", "archs": ["sm_80"]}' > op.jsonl
run op_call 2 "$TOOL" inspect --spec op.jsonl --stage cuda
expect_grep "an op-call entry is refused" "is an op call .*expected a specialisation" op_call.err
run beside 2 "$TOOL" inspect --spec rec.jsonl --heads 4 --stage cuda
expect_grep "a call option beside --spec is refused" "^.*--heads describes an op call" beside.err
run no_spec_entry 2 "$TOOL" inspect --entry 2 --stage cuda
echo "PASS"
