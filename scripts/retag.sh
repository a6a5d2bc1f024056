#!/usr/bin/env bash
# Gives the guard's protocol tags their protocol's namespace: `[R1]` -> `[guard.R1]` (the guard
# core's rules), `[W1]` -> `[gate.W1]` (the writer gate's steps), `[M1]` -> `[memo.M1]`,
# `[S1]` -> `[seal.S1]`, in every file under src/guard/, in plain and in rustdoc-escaped form
# (`\[R1\]` -> `\[guard.R1\]`). The table's tags (`[stripe.W1]`, `[copy.C1]`, `[growth.G1]`) live
# under src/table/ and are never touched. Idempotent: a tag that has a namespace already does
# not match. Prints each file it changed and any tag left without a namespace.
#
# Usage, from the repository root: bash scripts/retag.sh
set -euo pipefail
cd "$(dirname "$0")/.."

files=$(find src/guard -name '*.rs' | sort)
for f in $files; do
    before=$(cksum <"$f")
    sed -E -i \
        -e 's/(\\?\[)(R[0-9]+)(\\?\])/\1guard.\2\3/g' \
        -e 's/(\\?\[)(W[0-9]+)(\\?\])/\1gate.\2\3/g' \
        -e 's/(\\?\[)(M[0-9]+)(\\?\])/\1memo.\2\3/g' \
        -e 's/(\\?\[)(S[0-9]+)(\\?\])/\1seal.\2\3/g' \
        "$f"
    if [ "$(cksum <"$f")" != "$before" ]; then
        echo "retagged: $f"
    fi
done

if left=$(grep -rnE '\\?\[[A-Z][0-9]+\\?\]' src); then
    echo "tags without a namespace (add their protocol by hand):" >&2
    echo "$left" >&2
    exit 1
fi
