#!/usr/bin/env bash
# Same-sitting before/after: run OLD_COMMIT's bench, then this work tree's, and
# put both reports and a side-by-side summary in bench/results/.
#
#   bench/compare.sh OLD_COMMIT [bench/run.py options, e.g. --quick]
#
# The old commit is checked out in a temporary git worktree with a venv of its own
# (pip install -e '.[embedded,dev]': a few minutes, ~7 at load average 15), so the
# old bench measures the old code with the old dependencies. The options go to both
# runs: use only options the old bench knows (--quick, --only with its scenarios).
# Files: <date>-compare-<old>-old.md, <date>-compare-<old>-new.md (+ the new run's
# extra files) and <date>-compare-<old>.md (summary rows side by side).
# ROUNDS=N runs old, new, old, new … N times each (files …-old-1.md, …-new-1.md, …):
# the machine's drift over a sitting then falls on both sides, and each cell shows
# every run and the median. KEEP=1 keeps the temporary worktree; PYTHON picks the
# interpreter for its venv.
set -euo pipefail

if [ $# -lt 1 ]; then
  sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
repo=$(git -C "$(dirname "$0")" rev-parse --show-toplevel)
old=$(git -C "$repo" rev-parse --short "$1^{commit}")
shift
py=${PYTHON:-python3}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/mesh-compare-$old-XXXX")
cleanup() {
  if [ "${KEEP:-0}" = 1 ]; then
    echo "compare: kept $tmp" >&2
  else
    git -C "$repo" worktree remove --force "$tmp/old" 2>/dev/null || true
    rm -rf "$tmp"
  fi
}
trap cleanup EXIT

echo "compare: worktree of $old in $tmp/old" >&2
git -C "$repo" worktree add --quiet --detach "$tmp/old" "$old"
echo "compare: venv for $old" >&2
"$py" -m venv "$tmp/old/.venv"
"$tmp/old/.venv/bin/python" -m pip install -q -e "$tmp/old[embedded,dev]"

name="compare-$old"
rounds=${ROUNDS:-1}
mkdir -p "$repo/bench/results"
olds=() news=()
for i in $(seq 1 "$rounds"); do
  suffix=$([ "$rounds" = 1 ] && echo "" || echo "-$i")
  echo "compare: bench of $old (old)$suffix ..." >&2
  (cd "$tmp/old" && .venv/bin/python bench/run.py --name "$name-old$suffix" "$@" >/dev/null)
  old_report=$(ls -t "$tmp/old/bench/results/"*"-$name-old$suffix.md" | head -1)
  cp "$old_report" "$repo/bench/results/"
  olds+=("$repo/bench/results/$(basename "$old_report")")
  echo "compare: bench of this work tree (new)$suffix ..." >&2
  (cd "$repo" && .venv/bin/python bench/run.py --name "$name-new$suffix" "$@" >/dev/null)
  news+=("$(ls -t "$repo/bench/results/"*"-$name-new$suffix.md" | head -1)")
done
out="${news[0]%-new*.md}.md"
"$repo/.venv/bin/python" "$repo/bench/compare.py" "$(IFS=,; echo "${olds[*]}")" \
  "$(IFS=,; echo "${news[*]}")" --out "$out" --same-sitting >/dev/null
echo "compare: wrote ${out#"$repo"/} (and the full reports next to it)" >&2
