#!/usr/bin/env bash
# On a GPU machine, no Kiln needed: test the parity harness against fake_kiln_run.py
# (transformers behind kiln-run's command line). Expect every case to PASS, then each
# --break to FAIL the matching check (about 3 min; SELFTEST_FAMILIES=llama,mistral,...
# widens the correct run). Usage: test/Parity/selftest.sh [models dir]
set -u
here=$(cd "$(dirname "$0")" && pwd)
models=${1:-/tmp/kiln-parity-models}
out=${OUT:-/tmp/kiln-gpu-out}/parity-selftest
so=$(mktemp -d)
mkdir -p "$out"
[ -f "$models/manifest.json" ] || python3 "$here/make_models.py" --out "$models" || exit 1
# parity.py only checks that the .so's exist; the fake ignores them.
for config in "$here"/configs/*-tiny.json; do
  family=$(basename "$config" -tiny.json)
  for kind in nospec ngram draft draftmodel fp8nospec fp8ngram f16nospec f16ngram; do
    touch "$so/$family-$kind.so"
  done
done
fake() {  # a kiln-run that passes --break $1 to the fake
  printf '#!/bin/sh\nexec python3 %s "$@" %s\n' "$here/fake_kiln_run.py" "$1" > "$so/kiln-run"
  chmod +x "$so/kiln-run"
}
status=0
fake ""
python3 "$here/parity.py" --models "$models" --so-dir "$so" --kiln-run "$so/kiln-run" \
  --out "$out/good" --families "${SELFTEST_FAMILIES:-llama}" || { echo "selftest: a correct run FAILED"; status=1; }
for breakage in tokens logits memory crash graphs; do
  fake "--break $breakage"
  modes=nospec
  [ "$breakage" = graphs ] && modes=nospec,eager
  if python3 "$here/parity.py" --models "$models" --so-dir "$so" --kiln-run "$so/kiln-run" \
       --out "$out/$breakage" --families llama --modes $modes > "$out/$breakage.log" 2>&1; then
    echo "selftest: --break $breakage PASSED (should fail)"; status=1
  else
    echo "selftest: --break $breakage fails as it should: $(grep -m1 '^FAIL' "$out/$breakage.log")"
  fi
done
rm -rf "$so"
echo "selftest $([ $status = 0 ] && echo PASS || echo FAIL)"
exit $status
