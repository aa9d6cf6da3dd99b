#!/bin/sh
# Runs a ThreadSanitizer test binary. gcc 12's TSan runtime aborts at start-up
# ("unexpected memory mapping") on kernels with vm.mmap_rnd_bits > 28; on that
# failure only, run it again with address randomization off (setarch -R).
exe="$1"
shift
out=$("$exe" "$@" 2>&1)
rc=$?
printf '%s\n' "$out"
case "$out" in
*"unexpected memory mapping"*) ;;
*) exit "$rc" ;;
esac
arch=$(uname -m)
if setarch "$arch" -R true 2>/dev/null; then
    echo "tsan_run: TSan could not map its shadow memory; running again under setarch -R" >&2
    exec setarch "$arch" -R "$exe" "$@"
fi
echo "tsan_run: TSan cannot start here and setarch -R is not permitted; skipping" >&2
exit 77
