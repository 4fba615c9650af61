#!/usr/bin/env bash
# tests/cli/cpu_features.sh -- a module built for CPU features this machine lacks is refused
# with a message naming them, never run into SIGILL. The features come from the machine's own
# /proc/cpuinfo (an oracle independent of kiln's cpuid table): a module compiled for the host,
# and one compiled for every checked feature /proc/cpuinfo lists, run; for each x86 feature
# kiln checks that /proc/cpuinfo does not list (fma4, sse4a,
# avx512fp16, avx512vp2intersect: at least one is missing on every x86 CPU made), a module
# compiled with -mattr=+FEATURE is refused by `kiln run` (exit 1, the feature named, no signal)
# and by the Python package's kiln.load. Skips (77) off x86 or when the machine has them all.
#   bash tests/cli/cpu_features.sh PATH_TO_KILN
set -u
KILN=${1:?usage: cpu_features.sh PATH_TO_KILN}
ROOT=$(cd "$(dirname "$0")/../.." && pwd)
case $(uname -m) in x86_64 | i?86) ;; *)
    echo "skip: not an x86 machine (kiln checks x86 features only)"
    exit 77
    ;;
esac
T=$(mktemp -d)
trap 'rm -rf "$T"' EXIT
fails=0
fail() {
    echo "FAIL: $*" >&2
    fails=$((fails + 1))
}
cat >"$T/m.kg" <<'EOF'
input  a: f32[8, 16]
weight b: f32[16, 4]
c[i, j] += a[i, k] * b[k, j]
output c
EOF

"$KILN" compile "$T/m.kg" -o "$T/host.so" --no-db --no-cache 2>"$T/err" || fail "compile for the host: $(cat "$T/err")"
"$KILN" run "$T/host.so" --check >"$T/out" 2>&1 || fail "the host's own module: $(cat "$T/out")"

# kiln's (LLVM's) feature names and /proc/cpuinfo's, for the features kiln checks
MAP="sse3:pni pclmul:pclmulqdq ssse3:ssse3 fma:fma cx16:cx16 sse4.1:sse4_1 sse4.2:sse4_2
movbe:movbe popcnt:popcnt aes:aes avx:avx f16c:f16c sse:sse sse2:sse2 bmi:bmi1 avx2:avx2
bmi2:bmi2 avx512f:avx512f avx512dq:avx512dq adx:adx avx512ifma:avx512ifma avx512cd:avx512cd
sha:sha_ni avx512bw:avx512bw avx512vl:avx512vl avx512vbmi:avx512vbmi avx512vbmi2:avx512_vbmi2
gfni:gfni vaes:vaes vpclmulqdq:vpclmulqdq avx512vnni:avx512_vnni avx512bitalg:avx512_bitalg
avx512vpopcntdq:avx512_vpopcntdq avx512vp2intersect:avx512_vp2intersect
avx512fp16:avx512_fp16 avxvnni:avx_vnni avx512bf16:avx512_bf16 lzcnt:abm sse4a:sse4a fma4:fma4"
flags=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
has() { case $flags in *" $1 "*) return 0 ;; esac; return 1; }

# every feature /proc/cpuinfo lists, named on the target at once: the module runs
present=""
for m in $MAP; do has "${m#*:}" && present="$present,+${m%%:*}"; done
if [ -n "$present" ]; then
    if "$KILN" compile "$T/m.kg" -o "$T/all.so" --no-db --no-cache \
        --target "llvm -mattr=${present#,}" 2>"$T/err"; then
        "$KILN" run "$T/all.so" --check >"$T/out" 2>&1 ||
            fail "a module for the features /proc/cpuinfo lists ($present) did not run: $(cat "$T/out")"
    else
        fail "compile with $present: $(cat "$T/err")"
    fi
fi

tried=0
for m in fma4:fma4 sse4a:sse4a avx512fp16:avx512_fp16 avx512vp2intersect:avx512_vp2intersect; do
    f=${m%%:*}
    has "${m#*:}" && continue
    tried=$((tried + 1))
    if ! "$KILN" compile "$T/m.kg" -o "$T/$f.so" --no-db --no-cache \
        --target "llvm -mattr=+$f" 2>"$T/err"; then
        fail "compile with +$f: $(cat "$T/err")"
        continue
    fi
    "$KILN" run "$T/$f.so" --check >"$T/out" 2>&1
    rc=$?
    if [ "$rc" -ne 1 ] || ! grep -q "lacks: .*$f" "$T/out"; then
        fail "kiln run of a +$f module on a CPU without it: exit $rc, $(cat "$T/out")"
    fi
    # a sanitizer build's modules need its runtime, which /usr/bin/python3 has not loaded
    if /usr/bin/python3 -c "import numpy" 2>/dev/null && ! grep -q __asan_ "$T/$f.so"; then
        PYTHONPATH="$ROOT/python" /usr/bin/python3 - "$T/$f.so" "$f" >"$T/py" 2>&1 <<'PYEOF'
import sys
import kiln
try:
    kiln.load(sys.argv[1])
except kiln.Error as e:
    assert "lacks: " in str(e) and sys.argv[2] in str(e), str(e)
    print("refused:", e)
else:
    raise SystemExit("kiln.load accepted a module for a feature this CPU lacks")
PYEOF
        [ $? -eq 0 ] || fail "kiln.load of a +$f module: $(cat "$T/py")"
    fi
done
if [ "$tried" -eq 0 ]; then
    echo "skip: this CPU has every feature the test would remove"
    exit 77
fi
echo "$tried missing feature(s) tried"
[ "$fails" -eq 0 ] || exit 1
echo ok
