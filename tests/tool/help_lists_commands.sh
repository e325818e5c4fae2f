# `ssmjit --help` names every subcommand: the summary at its top lists the same names, in the same
# order, as CLI11's "Subcommands:" section (every subcommand registered on the top-level app), each
# answers `<name> --help`, and the README names each as `ssmjit <name>` and every environment
# variable the help lists (compiler/Knobs.cpp).
README=$(realpath "$(dirname "$0")/../../README.md")
source "$(dirname "$0")/lib.sh"

run help 0 "$TOOL" --help
summary=$(sed -n '2,/^Run .ssmjit <command> --help/p' help.out | sed -nE 's/^  ([a-z][a-z-]*)  .*/\1/p')
registered=$(sed -n '/^Subcommands:/,/^$/p' help.out | sed -nE 's/^  ([a-z][a-z-]*)  .*/\1/p')
[ -n "$registered" ] || fail "no subcommands under 'Subcommands:' in ssmjit --help"
expect_eq "the summary's subcommands" "$(echo $registered)" "$(echo $summary)" help.out
for c in $registered; do
  run "help_$c" 0 "$TOOL" "$c" --help
  grep -Eq "ssmjit $c( |\$)" "$README" || fail "README.md does not name 'ssmjit $c'"
done
echo "ok: every subcommand answers --help and README.md names it"

knobs=$(sed -n '/^Environment:/,$p' help.out | sed -nE 's/^  ([A-Z][A-Z0-9_]*)$/\1/p')
[ -n "$knobs" ] || fail "no variables under 'Environment:' in ssmjit --help"
for k in $knobs; do
  grep -Eq "\`$k[\`=]" "$README" || fail "README.md does not name the environment variable $k that --help lists"
done
echo "ok: README.md names every environment variable --help lists: $(echo $knobs)"
echo "PASS"
