# prewarm a small manifest twice: first everything compiles, then everything is a disk hit; the
# cache verifies clean and lists the same number of entries.
source "$(dirname "$0")/lib.sh"

cat >small.json <<'JSON'
{"ssmjit_manifest": 1, "entries": [
{"op": "ssu", "heads": 4, "head-dim": 8, "dstate": 16, "groups": 1, "batch": 2, "archs": ["sm_80"]},
{"op": "ssu-tokens", "heads": 4, "head-dim": 8, "dstate": 16, "groups": 2, "batch": 2, "tokens": [2, 4], "state-dtype": "bf16", "archs": ["sm_80"]},
{"op": "ssu", "form": "mamba1", "channels": 16, "dstate": 8, "batch": 2, "no-z": true, "archs": ["sm_90a"]}
]}
JSON

run first 0 "$TOOL" prewarm --jobs 2 small.json
expect_eq "first run: kernels" 4 "$(summary kernels first.out)" first.out
expect_eq "first run: compiled" 4 "$(summary compiled first.out)" first.out
expect_eq "first run: table rows 'compiled'" 4 "$(rows compiled first.out)" first.out

run second 0 "$TOOL" prewarm --jobs 2 small.json
expect_eq "second run: cached" 4 "$(summary cached second.out)" second.out
expect_eq "second run: compiled" 0 "$(summary compiled second.out)" second.out
expect_eq "second run: table rows 'cached (disk)'" 4 "$(rows 'cached (disk)' second.out)" second.out

run verify 0 "$TOOL" cache verify --dir "$SSMJIT_CACHE_DIR"
expect_eq "cache ls entries" 4 "$(cache_entries "$SSMJIT_CACHE_DIR")"
run stats 0 "$TOOL" cache stats
expect_grep "cache stats names the directory" "^directory +$SSMJIT_CACHE_DIR\$" stats.out

# The top-level help lists the knobs.
run help 0 "$TOOL" --help
for knob in SSMJIT_CACHE_DIR SSMJIT_CACHE_MAX_BYTES SSMJIT_RECORD SSMJIT_ALWAYS_COMPILE; do
  expect_grep "--help lists $knob" "^ +$knob\$" help.out
done
echo "PASS"
