# Sourced by the GPU-machine scripts beside it: goes to the repository root,
# points the build at the carried Debian packages (.deps, docs/ARCHITECTURE.md
# §8), sets $out ($OUT, else gpu-logs) and $b (build-gpu), and defines
# gp_build [TARGET...]: configure and build everything (or the targets) into
# $b, log in $out/build.log; on failure print the errors and exit.
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
deps=$PWD/.deps/root/usr
export LD_LIBRARY_PATH=$deps/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} CMAKE_PREFIX_PATH=$deps
# libcurl's development package carries headers and a link to a runtime of
# its own distribution; the machine's own libcurl.so.4 (same soname) serves
# in its place, its dependencies being the machine's
if [[ -L $deps/lib/x86_64-linux-gnu/libcurl.so && ! -e $deps/lib/x86_64-linux-gnu/libcurl.so ]]; then
  for sys in /usr/lib/x86_64-linux-gnu/libcurl.so.4 /lib/x86_64-linux-gnu/libcurl.so.4; do
    [[ -e $sys ]] && { ln -sf "$sys" "$deps/lib/x86_64-linux-gnu/libcurl.so"; break; }
  done
fi
out=${OUT:-$PWD/gpu-logs}; mkdir -p "$out"
b=build-gpu
gp_build() {
  local t=(); [[ $# -gt 0 ]] && t=(--target "$@")
  { cmake -B "$b" -S . -DCMAKE_BUILD_TYPE=RelWithDebInfo && cmake --build "$b" -j16 "${t[@]}"; } \
    > "$out/build.log" 2>&1 || { grep -E 'error' "$out/build.log" | head; exit 1; }
}
